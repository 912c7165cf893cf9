"""Async saves to object stores (issue 22 item 2): ``save_async`` and ``RunCheckpointer(async_save=True)`` to
``s3://`` (moto on loopback) and ``memory://`` publish data objects first and ``manifest.json`` last, and a writer
process killed (SIGKILL) at any point of its background save leaves the previous checkpoint whole: it validates,
it is the rotation's latest, and a resume restores its values."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, NotACheckpoint, read_component, validate
from opencheckpoint.remote import FsPath
from opencheckpoint.run import Rotation, RunCheckpointer

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def _state(fill: float) -> dict[str, Any]:
    return {"w": np.full(200_000, fill, np.float32), "b": np.arange(7.0) + fill}


class _WireOrder:
    """The keys of the objects ``fs`` writes, in the order their upload completes (PutObject, or the completion
    of a multipart upload), seen on the wire through botocore's ``before-send`` event."""

    def __init__(self, fs: Any) -> None:
        self.keys: list[str] = []
        fs.connect()
        for operation in ("PutObject", "CompleteMultipartUpload"):
            fs.s3.meta.events.register(f"before-send.s3.{operation}", self._sent)

    def _sent(self, request: Any, **_: Any) -> None:
        self.keys.append(request.url.split("?", 1)[0].split("/", 4)[-1])


def test_save_async_to_s3_uploads_every_data_object_before_the_manifest(s3: Any) -> None:
    where = FsPath(s3, f"{s3.test_bucket}/ckpt")
    order = _WireOrder(s3)
    handle = Checkpoint(model=_state(1.0), config={"lr": 0.5}).save_async(where)
    assert handle.result(timeout=60) == where
    mine = [key for key in order.keys if key.startswith("ckpt/")]
    assert mine[-1] == "ckpt/manifest.json"
    assert set(mine) == {"ckpt/manifest.json", "ckpt/components/model/data.bin", "ckpt/components/model/tree.msgpack",
                         "ckpt/components/config/value.json"}
    assert validate(where).ok and read_component(where, "model")["w"][0] == 1.0


def test_save_async_to_memory_uploads_the_manifest_last(mem_url: str, memfs: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    for method, where in (("put_file", 1), ("pipe_file", 0)):  # put_file(local, remote), pipe_file(remote, data)
        original = getattr(memfs, method)

        def recorded(*args: Any, _original: Any = original, _where: int = where, **kwargs: Any) -> Any:
            written.append(str(args[_where]))
            return _original(*args, **kwargs)

        monkeypatch.setattr(memfs, method, recorded)
    handle = Checkpoint(model=_state(2.0)).save_async(f"{mem_url}/ckpt")
    saved = handle.result(timeout=60)
    mine = [path.split("/ckpt/", 1)[1] for path in written if "/ckpt/" in path]
    assert mine[-1] == "manifest.json" and "components/model/data.bin" in mine[:-1]
    assert validate(saved).ok


def test_run_checkpointer_async_on_s3_publishes_and_resumes(s3: Any) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    run = RunCheckpointer(Checkpoint(model=_state(0.0)), directory, interval=1, keep_last=2, async_save=True)
    for step in (1, 2, 3):
        run.checkpoint = Checkpoint(model=_state(float(step)))
        run.save(step)
    assert run.wait() == directory / "checkpoint-000000000003"
    assert [p.name for p in Rotation(directory).checkpoints()] == ["checkpoint-000000000002",
                                                                   "checkpoint-000000000003"]
    live = _state(-1.0)
    assert RunCheckpointer(Checkpoint(model=live), directory, interval=1).restore() == 3
    assert live["w"][0] == 3.0 and live["b"][-1] == 9.0


_KILLED = textwrap.dedent("""
    import os, signal, sys, threading
    import numpy as np
    import s3fs
    from opencheckpoint import Checkpoint
    from opencheckpoint.container import publish
    from opencheckpoint.remote import FsPath
    from opencheckpoint.run import RunCheckpointer

    endpoint, bucket, point, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    fs = s3fs.S3FileSystem(key="testing", secret="testing", anon=False, skip_instance_cache=True,
                           client_kwargs={"endpoint_url": endpoint, "region_name": "eu-west-1"})

    def kill():
        os.kill(os.getpid(), signal.SIGKILL)

    armed = threading.Event()

    def hook(operation):  # in the writer thread
        if operation == point and delay == 0:
            kill()
        elif operation == point:  # a moment later: inside the upload that follows
            armed.set()
            threading.Timer(delay, kill).start()
        elif operation == "upload:manifest.json" and armed.is_set():
            threading.Event().wait(60)  # an upload done before the delay is up waits here for the kill

    publish.FAULT_HOOK = hook
    state = {"w": np.full(1 << 21, 2.0, np.float32), "b": np.arange(7.0) + 2.0}  # 8 MiB: a multipart upload
    run = RunCheckpointer(Checkpoint(model=state), FsPath(fs, bucket + "/run"), interval=1, keep_last=2,
                          async_save=True)
    run.save(2)
    run.wait()
    sys.exit(3)  # the kill point was never reached
""")

#: Where the writer thread is killed: writing the local scratch copy, after its marker, before (and, 0.05 s
#: later, inside) the upload of data.bin, and right before the manifest.
POINTS = [("write-component:model", 0.0), ("write-marker:staging", 0.0), ("upload:components/model/data.bin", 0.0),
          ("upload:components/model/data.bin", 0.05), ("upload:manifest.json", 0.0)]
QUICK = {("upload:components/model/data.bin", 0.05), ("upload:manifest.json", 0.0)}


@pytest.mark.parametrize("point, delay", [pytest.param(*p, marks=() if p in QUICK else pytest.mark.long)
                                          for p in POINTS])
def test_a_writer_killed_during_its_async_save_leaves_the_previous_checkpoint_whole(
    s3: Any, s3_server: Any, point: str, delay: float
) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    first = RunCheckpointer(Checkpoint(model=_state(1.0)), directory, interval=1, keep_last=2).save(1)
    child = subprocess.run([sys.executable, "-c", _KILLED, s3_server.endpoint, s3.test_bucket, point, str(delay)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    s3.invalidate_cache()
    rotation = Rotation(directory)
    assert rotation.checkpoints() == [first] and rotation.latest() == first
    assert validate(first).ok
    with pytest.raises(NotACheckpoint):
        read_component(rotation.path_for(2), "model")
    live = _state(-1.0)
    assert RunCheckpointer(Checkpoint(model=live), directory, interval=1).restore() == 1
    assert live["w"].tolist() == [1.0] * 200_000 and live["b"].tolist() == (np.arange(7.0) + 1.0).tolist()
