"""Counting the HTTP requests an s3fs filesystem sends: botocore's ``before-send`` event (each GET on the
wire, with its ``Range`` header; a retry is a second one) and ``after-call`` (the bytes each answer held)."""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


def _key(url: str) -> str:
    """``bucket/key`` of a path-style request URL (what moto's endpoint gets)."""
    return unquote(urlsplit(url).path.lstrip("/"))


class RequestLog:
    """Every GetObject request ``fs`` sends from :meth:`attach` on (s3fs runs them on its own event loop thread):
    ``gets`` holds (``bucket/key``, [start, end) asked for or None for the whole object), ``answers``
    (``bucket/key``, bytes received)."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, tuple[int, int] | None]] = []
        self.answers: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def attach(self, fs: Any) -> RequestLog:
        fs.connect()  # the aiobotocore client exists from here on
        events = fs.s3.meta.events
        events.register("before-send.s3.GetObject", self._sent)
        events.register("after-call.s3.GetObject", self._answered)
        return self

    def _sent(self, request: Any, **_: Any) -> None:
        header = request.headers.get("Range")
        if isinstance(header, bytes):
            header = header.decode()
        match = _RANGE.fullmatch(header or "")
        with self._lock:
            self.gets.append((_key(request.url), (int(match[1]), int(match[2]) + 1) if match else None))

    def _answered(self, http_response: Any, parsed: Any, **_: Any) -> None:
        with self._lock:
            self.answers.append((_key(str(http_response.url)), int(parsed.get("ContentLength") or 0)))

    def ranges(self, suffix: str = "") -> list[tuple[int, int] | None]:
        """The ranges of the GETs of objects whose key ends with ``suffix``, in the order sent."""
        return [asked for key, asked in self.gets if key.endswith(suffix)]

    def count(self, suffix: str = "") -> int:
        """GETs sent for objects whose key ends with ``suffix``."""
        return len(self.ranges(suffix))

    def fetched(self, suffix: str = "") -> int:
        """Bytes received from objects whose key ends with ``suffix``."""
        return sum(n for key, n in self.answers if key.endswith(suffix))
