"""The tools tell the same story and never mislead (issue 24, item 5), through the CLI or the public API.

Each test fails on the code before the fix: ``inspect`` cut piped output at 50 arrays, ``ls`` printed an
empty table with exit 0, ``manifest()`` said format version 2 of a version 1 file, ``inspect`` and
``validate`` counted a tied array differently, ``diff`` wrote ``$.0.weight`` where ``inspect`` wrote
``$['0.weight']``, Ctrl-C printed a traceback, a ``.pt`` file got "no member manifest.json", a missing
component named nothing that was there, ``strict="warn"`` left no trace in ``LoadResult``, and
``convert`` could not repack an OpenCheckpoint checkpoint.
"""

from __future__ import annotations

import glob
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_in_process import run_cli

import opencheckpoint
from opencheckpoint import (
    Checkpoint,
    CheckpointError,
    IncompatibleComponent,
    manifest,
    open_checkpoint,
    read_component,
    validate,
)
from opencheckpoint.run import Rotation


def test_inspect_piped_lists_every_array(tmp_path: Path) -> None:
    path = Checkpoint(m={f"w{i:03d}": np.zeros(1, np.float32) for i in range(70)}).save(tmp_path / "c")
    done = run_cli("inspect", str(path))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("$.w")]
    assert len(rows) == 70 and "more" not in done.stdout
    limited = run_cli("inspect", str(path), "--max-arrays", "5")  # an explicit limit still applies
    assert len([line for line in limited.stdout.splitlines() if line.startswith("$.w")]) == 5
    assert "65 more" in limited.stdout


def test_ls_of_a_checkpoint_exits_1_and_points_to_inspect(tmp_path: Path) -> None:
    path = Checkpoint(x={"a": 1}).save(tmp_path / "ckpt")
    done = run_cli("ls", str(path))
    assert done.returncode == 1 and done.stdout == ""
    assert "a checkpoint, not a run directory" in done.stderr and "opencheckpoint inspect" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_ls_of_step_directories_exits_1_naming_them_and_prefix_lists_them(tmp_path: Path) -> None:
    for step in (100, 200):
        Checkpoint(x={"a": step}).save(tmp_path / f"step_{step}", metadata={"loss": step / 1000})
    done = run_cli("ls", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert "no checkpoint-<step> checkpoint" in done.stderr and "step_100, step_200" in done.stderr
    assert "--prefix NAME" in done.stderr
    listed = run_cli("ls", str(tmp_path), "--prefix", "step", "--metric", "loss", "--json")
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert [c["step"] for c in report["checkpoints"]] == [100, 200]
    assert Path(report["best"]).name == "step_100"


def test_ls_of_an_empty_directory_exits_1(tmp_path: Path) -> None:
    done = run_cli("ls", str(tmp_path))
    assert done.returncode == 1 and "the directory is empty" in done.stderr


def test_ls_unknown_metric_exits_1_and_lists_the_recorded_keys(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=3)
    for step in (1, 2):
        rotation.save(Checkpoint(x={"a": step}), step, metadata={"loss": 0.5, "reward": 1.0})
    done = run_cli("ls", str(tmp_path), "--metric", "los")
    assert done.returncode == 1 and done.stdout == ""
    assert "'los'" in done.stderr and "loss, reward" in done.stderr
    assert run_cli("ls", str(tmp_path), "--metric", "loss").returncode == 0


def test_ls_without_metric_shows_the_one_metric_a_run_recorded_unranked(tmp_path: Path) -> None:
    """A run saved with ``metadata={"loss": ...}`` (no keep_best) lists its losses by default, the final save's
    too (issue 24, item 1: ``ls`` showed ``-`` for every checkpoint unless ``--metric`` was given)."""
    from opencheckpoint.run import RunCheckpointer

    state = {"w": np.zeros(2)}
    with RunCheckpointer(Checkpoint(state=state), tmp_path / "run", interval=10, keep_last=2) as checkpointer:
        for step in range(1, 26):
            checkpointer.save(step, metadata={"loss": step / 100})
    done = run_cli("ls", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()[:3]
    assert header.split("\t")[4] == "loss"
    assert [(r.split("\t")[1], r.split("\t")[4], r.split("\t")[6]) for r in rows] == [
        ("20", "0.2", ""), ("25", "0.25", "latest")]  # the final save's loss; no best: min or max is not said
    assert "--metric loss" in done.stdout
    two = Rotation(tmp_path / "two", keep_last=3)  # two numbers recorded: which one is the metric is not guessed
    two.save(Checkpoint(x={"a": 1}), 1, metadata={"loss": 0.5, "reward": 1.0})
    assert run_cli("ls", str(tmp_path / "two")).stdout.splitlines()[1].split("\t")[4] == "-"


def test_every_view_of_the_manifest_says_the_files_format_version(tmp_path: Path) -> None:
    path = Checkpoint(model={"w": np.ones(2)}).save(tmp_path / "c")
    written = json.loads((path / "manifest.json").read_text())["format_version"]
    assert written == 1
    result = Checkpoint(model={"w": np.zeros(2)}).load(path)
    with open_checkpoint(path) as reader:
        opened = reader.manifest["format_version"]
    inspected = json.loads(run_cli("inspect", "--json", str(path)).stdout)["format_version"]
    assert manifest(path)["format_version"] == result.manifest["format_version"] == opened == inspected == written


def test_inspect_and_validate_count_a_tied_array_alike(tmp_path: Path) -> None:
    shared = np.arange(4.0)
    path = Checkpoint(m={"embed": shared, "head": shared, "bias": np.zeros(2)}).save(tmp_path / "c")
    inspected = json.loads(run_cli("inspect", "--json", str(path)).stdout)["components"]["m"]
    validated = json.loads(run_cli("validate", "--json", str(path)).stdout)
    assert len(inspected["arrays"]) == validated["checked_arrays"] == 3
    assert inspected["shared_arrays"] == validated["shared_arrays"] == 1
    assert [a.get("shares") for a in inspected["arrays"]] == [None, "$.embed", None]
    human_inspect, human_validate = run_cli("inspect", str(path)).stdout, run_cli("validate", str(path)).stdout
    assert "3 (1 shared)" in human_inspect and "3 arrays (1 sharing storage with another)" in human_validate


def test_diff_inspect_and_errors_write_tree_paths_alike(tmp_path: Path) -> None:
    a = Checkpoint(m={"0.weight": np.zeros(2, np.float32), "w": np.zeros(2, np.float32)}).save(tmp_path / "a")
    b = Checkpoint(m={"0.weight": np.ones(2, np.float32), "w": np.zeros(2, np.float32)}).save(tmp_path / "b")
    inspected = [row["path"] for row in json.loads(run_cli("inspect", "--json", str(a)).stdout)["components"]["m"]
                 ["arrays"]]
    diffed = [change["path"] for change in json.loads(run_cli("diff", "--json", str(a), str(b)).stdout)["changes"]]
    assert inspected == ["$['0.weight']", "$.w"]
    assert diffed == ["m/$['0.weight']"]


def _children(pid: int) -> str:
    return "".join(Path(name).read_text() for name in glob.glob(f"/proc/{pid}/task/*/children"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to see the child process")
def test_ctrl_c_prints_one_line_and_exits_130() -> None:
    # `conformance run` waits on its reader command: a fixed point at which the CLI is busy in `main`.
    reader = f"{sys.executable} -c 'import time; time.sleep(120)'"
    cases = Path(__file__).resolve().parents[2] / "conformance" / "cases" / "v1"
    process = subprocess.Popen([sys.executable, "-m", "opencheckpoint", "conformance", "run", "--reader", reader,
                                "--cases", str(cases)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not _children(process.pid).strip():
            assert process.poll() is None and time.monotonic() < deadline, "the reader never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err == "interrupted\n"


def _foreign(tmp_path: Path, kind: str) -> Path:
    if kind == "torch":
        torch = pytest.importorskip("torch")
        torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt")
        return tmp_path / "model.pt"
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    return tmp_path / "model.safetensors"


@pytest.mark.parametrize(("kind", "said"), [("torch", "a torch.save file"), ("safetensors", "a safetensors file")])
def test_a_foreign_file_says_what_it_is_and_points_to_convert(tmp_path: Path, kind: str, said: str) -> None:
    path = _foreign(tmp_path, kind)
    inspected = run_cli("inspect", str(path))
    assert inspected.returncode == 1 and said in inspected.stderr and "opencheckpoint convert" in inspected.stderr
    validated = run_cli("validate", str(path))
    assert validated.returncode == 1 and said in validated.stdout and "opencheckpoint convert" in validated.stdout
    with pytest.raises(CheckpointError, match=f"this is {said}: `opencheckpoint convert") as raised:
        Checkpoint(model={"w": np.zeros(2)}).load(path)
    # The Python function the hint names exists (it once named a module that did not).
    assert "(or opencheckpoint.convert(SRC, DST))" in str(raised.value) and callable(opencheckpoint.convert)


def test_a_zip_whose_manifest_member_is_cut_short_is_a_checkpoint_error_not_a_crash(tmp_path: Path) -> None:
    """Recognising another tool's ZIP (to name it in the error) is best effort: a member whose recorded size
    runs past the end of the file ends in the reader's CheckpointError, never an exception of zipfile's."""
    import zipfile

    path = tmp_path / "cut.zip"
    with zipfile.ZipFile(path, "w") as archive:  # a stored member: its size says where its data ends
        archive.writestr("manifest.json", json.dumps({"format": "x", "pad": list(range(2000))}))
    data = bytearray(path.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central + 20 : central + 24] = (1 << 20).to_bytes(4, "little")  # compressed size past the end of the file
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        Checkpoint(model={"w": np.zeros(2)}).load(path)
    inspected = run_cli("inspect", str(path))
    assert inspected.returncode == 1 and "Traceback" not in inspected.stderr


def test_a_missing_component_error_lists_the_stored_names(tmp_path: Path) -> None:
    path = Checkpoint(model={"w": np.ones(2)}, optimizer={"lr": 0.1}).save(tmp_path / "c")
    with pytest.raises(IncompatibleComponent, match=r"modle: missing from the checkpoint \(it has: model, optimizer\)"):
        Checkpoint(modle={"w": np.zeros(2)}).load(path)


def test_a_strict_warn_partial_restore_is_in_the_load_result(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = Checkpoint(model=torch.nn.Linear(2, 3)).save(tmp_path / "c")
    target = torch.nn.Linear(2, 3, bias=False)
    with pytest.warns(UserWarning, match="loaded 1 of 1 entries"):
        result = Checkpoint(model=target, strict="warn").load(path)
    assert result.loaded == {"model"} and result.partial == {"model": ["unexpected: bias"]}
    complete = Checkpoint(model=torch.nn.Linear(2, 3)).load(path)
    assert complete.partial == {}


def test_convert_repacks_a_directory_as_an_archive_and_back(tmp_path: Path) -> None:
    source = Checkpoint(model={"w": np.arange(6.0).reshape(2, 3)}, config={"lr": 0.1}).save(
        tmp_path / "ckpt", metadata={"step": 7})
    done = run_cli("convert", str(source), str(tmp_path / "ckpt.zip"))
    assert done.returncode == 0, done.stderr
    packed = tmp_path / "ckpt.zip"
    assert packed.is_file() and validate(packed).ok
    back = run_cli("convert", str(packed), str(tmp_path / "again"))
    assert back.returncode == 0, back.stderr
    again = tmp_path / "again"
    assert again.is_dir() and validate(again).ok
    for other in (packed, again):  # the same checkpoint in another container: files and manifest unchanged
        assert {k: v for k, v in manifest(other).items() if k != "manifest_crc32c"} == \
            {k: v for k, v in manifest(source).items() if k != "manifest_crc32c"}
        np.testing.assert_array_equal(read_component(other, "model")["w"], np.arange(6.0).reshape(2, 3))
    assert (again / "components" / "model" / "data.bin").read_bytes() == \
        (source / "components" / "model" / "data.bin").read_bytes()
    refused = run_cli("convert", str(source), str(packed))  # an existing target is never replaced
    assert refused.returncode == 1 and packed.is_file()
