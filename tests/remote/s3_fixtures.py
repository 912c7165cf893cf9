"""The moto S3 server the remote tests share (a pytest plugin: the repository's ``conftest.py`` loads it).

One server per test session, in moto's server mode on loopback (real HTTP, real ``Range`` headers); each
test gets an s3fs filesystem on it with a fresh bucket. :class:`~s3_requests.RequestLog` counts the GETs
that filesystem sends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


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
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs = s3_server.filesystem()
    bucket = f"oc-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)  # in the client's region (eu-west-1: us-east-1 takes no LocationConstraint)
    fs.test_bucket = bucket
    return fs
