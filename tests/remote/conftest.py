"""Fixtures of the remote tests: a fresh prefix of fsspec's in-memory filesystem, and a real S3-compatible
server (moto in server mode) on loopback with an s3fs client.

Both skip only where the ``remote`` extra (fsspec, s3fs) or moto is genuinely absent; ``make test``
installs them, so these tests run there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def memfs() -> Any:
    """fsspec's in-memory filesystem (process-wide: each test works below its own prefix)."""
    return fsspec.filesystem("memory")


@pytest.fixture
def mem_url(memfs: Any) -> Iterator[str]:
    """A fresh ``memory://`` prefix, removed after the test."""
    root = f"/oc-test-{uuid.uuid4().hex[:12]}"
    yield f"memory://{root}"
    if memfs.exists(root):
        memfs.rm(root, recursive=True)


class S3Server:
    """A moto S3 server on loopback, its endpoint and a bucket for each test."""

    def __init__(self) -> None:
        moto_server = pytest.importorskip("moto.server")
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def options(self) -> dict[str, Any]:
        """s3fs ``storage_options`` for the server: dummy keys, never anonymous, this endpoint only."""
        return {"key": "testing", "secret": "testing", "anon": False,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "eu-west-1"}}

    def filesystem(self) -> Any:
        s3fs = pytest.importorskip("s3fs")
        return s3fs.S3FileSystem(skip_instance_cache=True, **self.options())


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    pytest.importorskip("s3fs")
    server = S3Server()
    yield server
    server.server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An s3fs filesystem on the loopback server, with a fresh bucket (its name: ``s3.test_bucket``)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    fs = s3_server.filesystem()
    bucket = f"oc-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)  # in the client's region (eu-west-1: us-east-1 takes no LocationConstraint)
    fs.test_bucket = bucket
    return fs


class FetchCounter:
    """Wraps a filesystem's ``cat_file`` to record every byte range fetched: (path, start, end, bytes)."""

    def __init__(self, fs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int | None, int | None, int]] = []
        original = fs.cat_file

        def counted(path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
            data: bytes = original(path, start=start, end=end, **kwargs)
            self.calls.append((str(path), start, end, len(data)))
            return data

        monkeypatch.setattr(fs, "cat_file", counted)

    def fetched(self, suffix: str) -> int:
        """Bytes fetched from files whose path ends with ``suffix``."""
        return sum(n for path, _, _, n in self.calls if path.endswith(suffix))


@pytest.fixture
def count_fetches(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``count_fetches(fs)``: a :class:`FetchCounter` recording what ``fs.cat_file`` fetches from now on."""
    return lambda fs: FetchCounter(fs, monkeypatch)
