"""convert, export, diff, ls and the output plumbing of the ``opencheckpoint`` command line: in the test process
(``cli_in_process``), except the help and the piped-output tests, which run a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_in_process import run_cli

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.run.checkpointer import Rotation


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    # stdout is a pipe here: the command must behave as for `| grep` / `> file`.
    return subprocess.run([sys.executable, "-m", "opencheckpoint", *args], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("command", [["convert"], ["export"], ["diff"], ["ls"]])
def test_new_commands_have_help_with_exit_codes(command: list[str]) -> None:
    done = run_process(*command, "--help")
    assert done.returncode == 0
    assert "exit codes" in done.stdout


def test_convert_and_export_safetensors_round_trip(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    tensors = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "a.bias": np.ones(3, np.float16)}
    save_file(tensors, str(tmp_path / "in.safetensors"), metadata={"origin": "test"})
    done = run_cli("convert", str(tmp_path / "in.safetensors"), str(tmp_path / "ckpt"))
    assert done.returncode == 0, done.stderr
    assert validate(tmp_path / "ckpt").ok
    done = run_cli("export", str(tmp_path / "ckpt"), str(tmp_path / "out.safetensors"), "--component", "model")
    assert done.returncode == 0, done.stderr
    back = load_file(str(tmp_path / "out.safetensors"))
    assert set(back) == set(tensors)
    for key, value in tensors.items():
        assert back[key].tobytes() == value.tobytes() and back[key].dtype == value.dtype
    with safe_open(str(tmp_path / "out.safetensors"), "np") as handle:
        assert handle.metadata()["origin"] == "test"


def test_export_torch_loads_weights_only_and_lists_what_does_not_fit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    state = {"w": np.arange(4, dtype=np.float32), "step": 3, "blob": b"\x00\x01", "name": "run-1"}
    Checkpoint(state=state).save(tmp_path / "ckpt")
    done = run_cli("export", str(tmp_path / "ckpt"), str(tmp_path / "out.pt"), "--to", "torch", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["skipped"] == {"state.blob": "a bytes has no torch equivalent"}
    loaded = torch.load(tmp_path / "out.pt", weights_only=True)
    assert torch.equal(loaded["state.w"], torch.arange(4, dtype=torch.float32))
    assert loaded["state.step"] == 3 and loaded["state.name"] == "run-1"


def test_export_safetensors_keeps_scalars_as_json_metadata(tmp_path: Path) -> None:
    from safetensors import safe_open

    Checkpoint(state={"w": np.zeros(2, np.float32), "lr": 0.5}).save(tmp_path / "ckpt", metadata={"step": 9})
    assert run_cli("export", str(tmp_path / "ckpt"), str(tmp_path / "o.safetensors")).returncode == 0
    with safe_open(str(tmp_path / "o.safetensors"), "np") as handle:
        assert list(handle.keys()) == ["state.w"]
        assert json.loads(handle.metadata()["state.lr"]) == 0.5
        assert json.loads(handle.metadata()["opencheckpoint.metadata"]) == {"step": 9}


def test_convert_refuses_pickle_only_torch_file_exit_1(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    done = run_cli("convert", str(tmp_path / "module.pt"), str(tmp_path / "ckpt"), "--from", "torch")
    assert done.returncode == 1
    assert "ConversionError" in done.stderr and "weights_only" in done.stderr
    assert run_cli("convert", "a", "b", "--from", "pickle").returncode == 2


def test_diff_exit_codes_and_json(tmp_path: Path) -> None:
    a = Checkpoint(m={"w": np.zeros(3, np.float32), "n": np.arange(3)}, c={"lr": 0.1}).save(tmp_path / "a")
    same = Checkpoint(m={"w": np.zeros(3, np.float32), "n": np.arange(3)}, c={"lr": 0.1}).save(tmp_path / "same")
    b = Checkpoint(m={"w": np.array([0, 2, -1], np.float32), "n": np.array([0, 1, 5]), "x": np.ones(1)},
                   extra={"k": 1}).save(tmp_path / "b", metadata={"step": 2})
    assert run_cli("diff", str(a), str(same)).returncode == 0
    done = run_cli("diff", "--json", str(a), str(b))
    assert done.returncode == 1
    changes = {c["path"]: c for c in json.loads(done.stdout)["changes"]}
    assert changes["m/$.w"]["max_abs_diff"] == 2.0 and changes["m/$.w"]["max_rel_diff"] == 1.0
    assert changes["m/$.n"]["detail"] == "1 of 3 elements differ"
    assert changes["m/$.x"]["change"] == "added"
    assert changes["c"]["change"] == "removed" and changes["extra"]["change"] == "added"
    assert changes["metadata.step"]["change"] == "added"
    assert run_cli("diff", str(a)).returncode == 2
    assert run_cli("diff", str(a), str(tmp_path / "missing")).returncode == 2


def test_diff_reports_dtype_and_shape_changes(tmp_path: Path) -> None:
    a = Checkpoint(m={"w": np.zeros(3, np.float32), "v": np.zeros(2)}).save(tmp_path / "a")
    b = Checkpoint(m={"w": np.zeros(3, np.float16), "v": np.zeros(3)}).save(tmp_path / "b")
    changes = {c["path"]: c["detail"] for c in json.loads(run_cli("diff", "--json", str(a), str(b)).stdout)["changes"]}
    assert changes == {"m/$.w": "float32[3] -> float16[3]", "m/$.v": "float64[2] -> float64[3]"}


def test_ls_lists_steps_metric_validity_latest_and_best(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=5)
    for step, loss in [(10, 0.5), (20, 0.1), (30, 0.9)]:
        rotation.save(Checkpoint(w=np.arange(3)), step, metadata={"loss": loss})
    (tmp_path / "checkpoint-000000000030" / "manifest.json").write_text("{")  # the newest is broken
    done = run_cli("ls", str(tmp_path), "--metric", "loss", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [(c["step"], c["valid"], c["metric"]) for c in listing["checkpoints"]] == [
        (10, True, 0.5), (20, True, 0.1), (30, False, None)]
    assert listing["latest"].endswith("checkpoint-000000000020")
    assert listing["best"].endswith("checkpoint-000000000020")
    assert "ManifestError" in listing["checkpoints"][2]["error"]
    text = run_cli("ls", str(tmp_path), "--metric", "loss").stdout
    assert "latest: " in text and "best (loss, min): " in text
    assert run_cli("ls", str(tmp_path / "nothing")).returncode == 1
    resolved = run_cli("ls", str(tmp_path), "--resolve", "latest")
    assert resolved.returncode == 0 and resolved.stdout.strip().endswith("checkpoint-000000000020")
    best = run_cli("ls", str(tmp_path), "--resolve", "best", "--metric", "loss", "--mode", "max")
    assert best.stdout.strip().endswith("checkpoint-000000000010")
    assert run_cli("ls", str(tmp_path), "--resolve", "best").returncode == 1  # best needs a metric


def test_piped_output_is_not_wrapped_or_truncated(tmp_path: Path) -> None:
    long_name = "layer_" + "x" * 150 + ".weight"
    Checkpoint(model={long_name: np.zeros(2, np.float32)}).save(tmp_path / "ckpt")
    done = run_process("inspect", str(tmp_path / "ckpt"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row = [line for line in lines if long_name in line]
    assert row, done.stdout  # the full name, on one line
    assert row[0].split("\t")[:2] == [f"$['{long_name}']", "float32"]  # a tab-separated row, not a drawn table
    assert not any(ch in done.stdout for ch in "┃│━─")
    assert "\x1b[" not in done.stdout


def test_validate_reports_crc_error_behind_an_extra_file(tmp_path: Path) -> None:
    path = Checkpoint(m={"w": np.arange(4.0)}).save(tmp_path / "ckpt")
    (path / "stray.txt").write_text("x")
    with open(path / "components" / "m" / "data.bin", "r+b") as handle:
        handle.write(b"\xff")
    done = run_cli("validate", "--json", str(path))
    assert done.returncode == 1
    found = [(e["error"], e["rule"]) for e in json.loads(done.stdout)["errors"]]
    assert found[0] == ("ExtraFile", "R-CON-2")
    assert ("IntegrityError", "R-ARR-14") in found


def test_conformance_run_with_no_cases_fails(tmp_path: Path) -> None:
    done = run_cli("conformance", "run", "--reader", "true", "--cases", str(tmp_path / "nonexistent"))
    assert done.returncode == 2 and "PASS" not in done.stdout
    assert "--cases" in done.stderr
    done = run_cli("conformance", "run", "--reader", "true", "--cases", str(tmp_path))  # exists, holds no case
    assert done.returncode == 2 and "no conformance case in" in done.stderr


def test_conformance_cases_found_through_the_environment(tmp_path: Path) -> None:
    import os

    from opencheckpoint.conformance.runner import CASES_ENV, default_cases_dir

    os.environ[CASES_ENV] = str(tmp_path)
    try:
        assert default_cases_dir() == tmp_path
    finally:
        del os.environ[CASES_ENV]


def test_wrong_component_names_list_the_available_ones(tmp_path: Path) -> None:
    path = Checkpoint(model={"w": np.zeros(1)}, config={"a": 1}).save(tmp_path / "ckpt")
    with pytest.raises(KeyError, match=r"registered: \['config', 'model'\]"):
        Checkpoint(model={"w": np.zeros(1)}, config={"a": 1}).load(path, components=["modle"])
    done = run_cli("export", str(path), str(tmp_path / "o.safetensors"), "--component", "modle")
    assert done.returncode == 1 and "has: ['config', 'model']" in done.stderr
    assert read_component(path, "model")["w"].shape == (1,)
