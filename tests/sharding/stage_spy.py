"""Spying on the save pipeline's three stages (:mod:`opencheckpoint.write.stages`): which ran, for which target.

Shared by the pipeline tests (``tests/publish``, ``tests/remote``) and the gloo worker (``tests/sharding``).
Only the stages' public signatures are relied on: ``plan(target, request, ...)`` returns a plan whose
``target.location`` is where the save publishes; ``write(plan, ...)`` and ``commit(plan, ...)`` take it first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from opencheckpoint.write import stages

STAGES = ("plan", "write", "commit")


class StageSpy:
    """Wraps each stage; records ``(stage, str(location))`` for every call, from any thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.originals = {name: getattr(stages, name) for name in STAGES}

    def _wrap(self, name: str) -> Callable[..., Any]:
        original = self.originals[name]

        def spied(*args: Any, **kwargs: Any) -> Any:
            location = args[0].location if name == "plan" else args[0].target.location
            with self._lock:
                self.calls.append((name, str(location)))
            return original(*args, **kwargs)

        return spied

    def install(self, setattr_: Callable[[Any, str, Any], None] = setattr) -> StageSpy:
        """Replace the stages (``setattr_``: a ``monkeypatch.setattr`` to have them put back after a test)."""
        for name in STAGES:
            setattr_(stages, name, self._wrap(name))
        return self

    def stages_for(self, location: object) -> list[str]:
        """The stages that ran for a save to ``location``, in call order."""
        with self._lock:
            return [name for name, where in self.calls if where == str(location)]

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
