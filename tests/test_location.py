"""A URL that no installed fsspec serves is refused by every entry point with UnsupportedLocation (spec R-PUB-20)
naming the extra to install, and nothing is written where pathlib would have put it (``s3://bucket/ckpt`` -> a
local ``s3:/bucket/ckpt``). With the extra, URLs are remote locations: tests/remote."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, UnsupportedLocation, open_checkpoint, read_component, validate
from opencheckpoint.cli.main import main
from opencheckpoint.run.checkpointer import Rotation, RunCheckpointer, resolve_checkpoint_path
from opencheckpoint.tools.inspect import describe

URLS = ["s3://bucket/ckpt", "gs://bucket/run/checkpoint-000000000010", "file:///tmp/ckpt", "hf+https://x/y"]


@pytest.fixture
def no_fsspec(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """fsspec as if not installed: importing it raises ImportError (None in sys.modules)."""
    monkeypatch.setitem(sys.modules, "fsspec", None)
    yield

ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "save": lambda url: Checkpoint(w=np.zeros(2)).save(url),
    "save-archive": lambda url: Checkpoint(w=np.zeros(2), format="archive").save(url),
    "load": lambda url: Checkpoint(w={"a": np.zeros(2)}).load(url),
    "read_component": lambda url: read_component(url, "w"),
    "open_checkpoint": lambda url: open_checkpoint(url),
    "inspect": lambda url: describe(url),
    "rotation": lambda url: Rotation(url).save(Checkpoint(w=[1]), 1),
    "resume": lambda url: RunCheckpointer(Checkpoint(w=[1]), "local-run", interval=1, resume_path=url).restore(),
    "resolve_checkpoint_path": lambda url: resolve_checkpoint_path(url),
}


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_url_without_fsspec_is_refused_naming_the_extra_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_fsspec: None, entry: str, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedLocation) as caught:
        ENTRY_POINTS[entry](url)
    assert caught.value.file == url and "opencheckpoint[remote]" in str(caught.value)
    assert caught.value.rule == "R-PUB-20"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("url", ["hf+https://x/y", "nosuchprotocol://bucket/ckpt"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_url_of_a_protocol_no_fsspec_implementation_serves_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, url: str
) -> None:
    pytest.importorskip("fsspec")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedLocation) as caught:
        ENTRY_POINTS[entry](url)
    assert caught.value.file == url and "no fsspec filesystem" in caught.value.message
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("url", URLS)
def test_validate_reports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_fsspec: None, url: str) -> None:
    monkeypatch.chdir(tmp_path)
    report = validate(url)
    assert not report.ok and report.errors[0].error == "UnsupportedLocation"


@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_cli_exits_1_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_fsspec: None, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([command, "s3://bucket/ckpt"]) == 1
    captured = capsys.readouterr()
    assert "UnsupportedLocation" in captured.out + captured.err and "s3://" in captured.out + captured.err


@pytest.mark.parametrize("path", ["s3:bucket", "C:/data/ckpt", "runs/s3:/x", "my-dir"])
def test_only_a_scheme_followed_by_two_slashes_is_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_fsspec: None, path: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Checkpoint(w=[1]).save(path)  # a colon alone does not make a URL
    assert read_component(path, "w") == [1]
    with pytest.raises(UnsupportedLocation):
        Checkpoint(w=[1]).save(f"s3://{path}")
    assert sorted(os.listdir(tmp_path)) == sorted({path.split("/")[0]})


PATH_ENTRY_POINTS: dict[str, Callable[[Path], Any]] = {
    "Checkpoint.save": lambda out: Checkpoint(w=np.zeros(2)).save(out / "step-100"),
    "Rotation.save": lambda out: Rotation(out).save(Checkpoint(w=[1]), 1),
    "RunCheckpointer.save": lambda out: RunCheckpointer(Checkpoint(w=[1]), out, interval=1).save(2),
}


@pytest.mark.parametrize("url", [*URLS, "memory://x", "https://host/run", "az://container/run", "hf://org/repo"])
@pytest.mark.parametrize("entry", sorted(PATH_ENTRY_POINTS))
def test_a_url_collapsed_by_pathlib_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, url: str
) -> None:
    """``Path("s3://b/run")`` is ``s3:/b/run``: a relative path whose first segment is ``scheme:`` (R-PUB-20)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedLocation) as caught:
        PATH_ENTRY_POINTS[entry](Path(url))
    assert caught.value.file is not None and caught.value.file.startswith(str(Path(url)))
    assert "collapsed by pathlib" in caught.value.message
    assert os.listdir(tmp_path) == []


def test_a_local_folder_named_like_a_scheme_is_reached_with_dot_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedLocation):
        Checkpoint(w=[1]).save(Path("./s3:/ckpt"))  # pathlib drops the "./": the same as Path("s3://ckpt")
    Checkpoint(w=[1]).save("./s3:/ckpt")
    assert read_component("./s3:/ckpt", "w") == [1]
    saved = RunCheckpointer(Checkpoint(w=[1]), "./s3:/run", interval=1).save(1)  # passed on as a Path inside
    assert saved is not None and saved.parent == tmp_path / "s3:" / "run"
    assert os.listdir(tmp_path) == ["s3:"]
