"""What the remote tests share: counting the bytes a filesystem's ``cat_file`` fetches (byte-range reads)."""

from __future__ import annotations

from typing import Any

import pytest


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
