"""Checkpoints on a real S3-compatible server (moto in server mode on loopback) through s3fs: round trip,
ranged reads of one array, rotation, and a writer killed (SIGKILL) before its manifest (spec §12.7)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from remote_fetches import FetchCounter

from opencheckpoint import Checkpoint, NotACheckpoint, open_checkpoint, read_component, validate
from opencheckpoint.remote import FsPath
from opencheckpoint.run.checkpointer import Rotation, RunCheckpointer

pytest.importorskip("s3fs")
pytest.importorskip("moto")


@pytest.fixture
def count_fetches(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], FetchCounter]:
    """``count_fetches(fs)``: a :class:`FetchCounter` recording what ``fs.cat_file`` fetches from now on."""
    return lambda fs: FetchCounter(fs, monkeypatch)


def _state() -> dict[str, Any]:
    return {"w": np.arange(1 << 16, dtype=np.float32), "bias": np.ones(7, np.float64), "step": 12}


def test_a_save_to_s3_runs_the_save_pipelines_stages(s3: Any, s3_server: Any, monkeypatch: pytest.MonkeyPatch,
                                                     ) -> None:
    from stage_spy import StageSpy

    spy = StageSpy().install(monkeypatch.setattr)
    where = FsPath.from_url(f"s3://{s3.test_bucket}/run/ckpt", **s3_server.options())
    saved = Checkpoint(model=_state()).save(where)
    assert spy.stages_for(saved) == ["plan", "write", "commit"]
    assert validate(saved).ok


def test_round_trip_through_a_url_with_storage_options(s3: Any, s3_server: Any) -> None:
    where = FsPath.from_url(f"s3://{s3.test_bucket}/run/ckpt", **s3_server.options())
    saved = Checkpoint(model=_state(), config={"lr": 3e-4}).save(where, metadata={"step": 12})
    assert str(saved) == f"s3://{s3.test_bucket}/run/ckpt"
    assert s3.exists(f"{s3.test_bucket}/run/ckpt/manifest.json")
    live = {"w": np.zeros(1 << 16, np.float32), "bias": np.zeros(7), "step": 0}
    result = Checkpoint(model=live, config={}).load(FsPath(s3, f"{s3.test_bucket}/run/ckpt"))
    assert result.loaded == {"model", "config"} and live["w"][-1] == (1 << 16) - 1
    assert result.values.get("config", {"lr": 3e-4}) == {"lr": 3e-4}
    assert validate(saved).ok


def test_a_lazy_read_of_one_array_fetches_its_byte_range(s3: Any, count_fetches: Callable[[Any], Any]) -> None:
    saved = Checkpoint(model=_state()).save(FsPath(s3, f"{s3.test_bucket}/ckpt"))
    counter = count_fetches(s3)
    with open_checkpoint(saved) as reader:
        bias = reader.tree("model")["bias"]
        assert bias.read().tolist() == [1.0] * 7
    assert counter.fetched("data.bin") == bias.nbytes == 56  # not the 256 KiB of "w"
    ranged = [(start, end) for path, start, end, _ in counter.calls if path.endswith("data.bin")]
    assert ranged == [(bias.ref.offset, bias.ref.offset + 56)]


def test_validate_and_a_load_into_live_arrays_each_get_data_bin_once(
    s3: Any, count_fetches: Callable[[Any], Any]
) -> None:
    saved = Checkpoint(model=_state()).save(FsPath(s3, f"{s3.test_bucket}/ckpt"))
    size = int(s3.info(saved.key("components/model/data.bin"))["size"])
    counter = count_fetches(s3)
    assert validate(saved).ok
    assert counter.fetched("data.bin") == size  # was two whole-object GETs
    live = {"w": np.zeros(1 << 16, np.float32), "bias": np.zeros(7), "step": 0}
    assert Checkpoint(model=live).load(saved).loaded == {"model"} and live["w"][-1] == (1 << 16) - 1
    assert counter.fetched("data.bin") == 2 * size  # the load's verify and fill phases: one GET of the bytes


def test_rotation_and_resume_on_s3(s3: Any) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    run = RunCheckpointer(Checkpoint(model=_state()), directory, interval=10, keep_last=2)
    for step in (10, 20, 30):
        assert run.save(step) == directory / f"checkpoint-{step:012d}"
    rotation = Rotation(directory)
    assert [p.name for p in rotation.checkpoints()] == ["checkpoint-000000000020", "checkpoint-000000000030"]
    assert not s3.exists(f"{s3.test_bucket}/run/checkpoint-000000000010/components/model/data.bin")
    live = {"w": np.zeros(1 << 16, np.float32), "bias": np.zeros(7), "step": 0}
    assert RunCheckpointer(Checkpoint(model=live), directory, interval=10).restore() == 30
    assert live["bias"].tolist() == [1.0] * 7


_KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import s3fs
    from opencheckpoint import Checkpoint
    from opencheckpoint.container import publish
    from opencheckpoint.remote import FsPath
    from opencheckpoint.run import Rotation

    endpoint, bucket = sys.argv[1], sys.argv[2]
    fs = s3fs.S3FileSystem(key="testing", secret="testing", anon=False,
                           client_kwargs={"endpoint_url": endpoint, "region_name": "eu-west-1"})

    def hook(operation):
        if operation == "upload:manifest.json":  # every data object is uploaded, the manifest is next
            os.kill(os.getpid(), signal.SIGKILL)

    publish.FAULT_HOOK = hook
    Rotation(FsPath(fs, bucket + "/run")).save(Checkpoint(model={"w": np.arange(1000.0)}), 2)
""")


def test_a_writer_killed_before_the_manifest_publishes_nothing(
    s3: Any, s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    rotation = Rotation(directory)
    first = rotation.save(Checkpoint(model={"w": np.zeros(3)}), 1)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    child = subprocess.run([sys.executable, "-c", _KILLED_WRITER, s3_server.endpoint, s3.test_bucket],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    killed = rotation.path_for(2)
    s3.invalidate_cache()
    assert s3.exists(killed.key("components/model/data.bin")), "the data objects were uploaded"
    assert not s3.exists(killed.key("manifest.json"))
    with pytest.raises(NotACheckpoint):
        read_component(killed, "model")
    assert rotation.checkpoints() == [first] and rotation.latest() == first and validate(first).ok
    saved = rotation.save(Checkpoint(model={"w": np.ones(3)}), 2)  # the killed writer's debris is cleaned
    assert saved == killed and validate(saved).ok
    assert [p.rsplit("/", 1)[-1] for p in s3.ls(directory.path, detail=False) if "oc-staging" in p] == []


def test_the_cli_validates_an_s3_url_configured_by_environment(s3: Any, s3_server: Any) -> None:
    saved = Checkpoint(model=_state()).save(FsPath(s3, f"{s3.test_bucket}/ckpt"))
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true",
           "FSSPEC_S3_ENDPOINT_URL": s3_server.endpoint, "FSSPEC_S3_KEY": "testing", "FSSPEC_S3_SECRET": "testing"}
    done = subprocess.run([sys.executable, "-m", "opencheckpoint", "validate", "--json", str(saved)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"ok": true' in done.stdout and f"s3://{s3.test_bucket}/ckpt" in done.stdout
