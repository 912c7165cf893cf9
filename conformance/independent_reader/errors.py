from __future__ import annotations


class CheckpointError(Exception):
    """Root of all reader errors (R-ERR-3).  `cls` is the class name of Table 16-1."""

    def __init__(self, cls: str, file: str, field: str, message: str, req: str = ""):
        self.cls = cls
        self.file = file
        self.field = field
        self.message = message
        self.req = req
        super().__init__(self.line())

    def line(self) -> str:
        parts = [self.file or "<checkpoint>", self.field or "-", self.message]
        s = ": ".join(parts)
        if self.req:
            s += f" ({self.req})"
        return " ".join(s.split("\n")).replace("\r", " ")
