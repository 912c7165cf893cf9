"""The reference implementation's protocol command (spec §17.2).

``opencheckpoint conformance impl read CHECKPOINT`` prints the canonical
rendering (Appendix B); ``... impl write EXPECTED_JSON OUT_PATH`` writes a
checkpoint with that content; ``... impl capabilities`` prints the
capabilities object. Failures print ``error: <ErrorClass>: <message>`` as the
first stderr line and exit with status 1.

>>> from opencheckpoint.format.errors import TreeError, UnsupportedValue
>>> error_line(TreeError("bad\\nnode", file="a/tree.msgpack", field="/x"))
'error: TreeError: a/tree.msgpack: /x: bad node'
>>> error_line(UnsupportedValue("cannot store"))
'error: CheckpointError: cannot store'
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..format.errors import CheckpointError, ManifestError, format_error

IMPLEMENTATION = "opencheckpoint-python"


def error_line(exc: CheckpointError) -> str:
    """The one-line protocol error report: class, file, field and message (R-RDR-12, R-ERR-2)."""
    from .models import ERROR_CLASS_NAMES

    # R-WTR-7: a class of Table 16-1, or the root class for failures the table does not name
    name = type(exc).error_class if type(exc).error_class in ERROR_CLASS_NAMES else "CheckpointError"
    return "error: " + " ".join(format_error(name, exc.file, exc.field, exc.message, exc.rule).split())


def capabilities() -> dict[str, Any]:
    """The capabilities object (R-RDR-9): the reference implementation skips nothing and implements the
    opt-in capability ``sharding`` (format version 2, spec §S.8)."""
    from .. import __version__

    return {"implementation": IMPLEMENTATION, "version": __version__, "modes": ["read", "write"], "skip": {},
            "implements": ["sharding"]}


def dumps(document: Any) -> str:
    """How renderings are printed and stored (Appendix B.1): two-space indent, UTF-8."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def cmd_read(path: str, out: TextIO) -> None:
    """Print the rendering: byte for byte ``dumps(render_checkpoint(path))``, written as it is made."""
    from .json_text import write_checkpoint_rendering

    write_checkpoint_rendering(path, out)


def cmd_write(expected: str, out_path: str) -> None:
    from .. import __version__
    from .models import ExpectedModel
    from .writer import write_rendering

    try:
        document = json.loads(Path(expected).read_text(encoding="utf-8"))
        # python mode (JSON arrays as tuples need strict=False): pydantic's JSON parser stops at depth 200
        ExpectedModel.model_validate(document, strict=False)
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the stack
        raise _not_a_rendering(exc, expected) from None
    try:
        # The command line's save rule: an existing OUT_PATH is refused (TargetExists), never replaced.
        write_rendering(document, out_path, producer={"name": IMPLEMENTATION, "version": __version__},
                        overwrite=False)
    except (ValueError, RecursionError) as exc:
        # A RenderingError, or an int of more digits than Python converts (the writer refuses those).
        raise _not_a_rendering(exc, expected) from None


def _not_a_rendering(exc: BaseException, expected: str) -> ManifestError:
    return ManifestError(f"not a canonical rendering: {' '.join(str(exc).split())[:500]}", file=expected)


def run(mode: str, args: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run one protocol sub-command; return its exit status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        if mode == "read":
            cmd_read(args[0], stdout)
        elif mode == "write":
            cmd_write(args[0], args[1])
        elif mode == "capabilities":
            stdout.write(json.dumps(capabilities()) + "\n")
        else:
            raise ValueError(f"unknown mode {mode!r}")
    except CheckpointError as exc:
        stderr.write(error_line(exc) + "\n")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m opencheckpoint.conformance.impl MODE ARGS...`` (the same as the CLI sub-command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: impl read CHECKPOINT | write EXPECTED_JSON OUT_PATH | capabilities\n")
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
