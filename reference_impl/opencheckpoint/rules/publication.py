"""The rule table of publication (spec §12): what a writer may replace and delete.

R-PUB-16 is a writer's refusal, reached from several moments of a save: the
target checked before writing (:mod:`opencheckpoint.container.target`), an
entry that appeared or was swapped in while the checkpoint was being written
(:mod:`opencheckpoint.container.publish`), a rotation's deletion. What makes
a path a checkpoint is decided once, by
:func:`~opencheckpoint.container.target.not_a_checkpoint_reason`; the check
here turns the finding into the refusal, so every moment reports the rule
the same way.
"""

from __future__ import annotations

from ..format.errors import TargetExists, UnsupportedLocation
from . import RuleTable

PUB = RuleTable(version=1, file=None)
rule = PUB.rule

# Object stores (spec §12.7): a URL no installed filesystem serves (remote/fspath.py), and a prefix a
# save may not publish to (remote/publish.py); the implementation's own classes, not of Table 16-1.
PUB.declare("R-PUB-20", UnsupportedLocation)
PUB.declare("R-PUB-21", TargetExists)


@rule("R-PUB-16", TargetExists)
def replaceable(refusal: str | None, outcome: str = "nothing was changed") -> str | None:
    """A writer replaces (or deletes) nothing but nothing, an empty directory or a checkpoint, and refuses
    before changing anything: ``refusal`` says why the path is none of those (None: it is one), ``outcome``
    what the writer did instead (nothing)."""
    return None if refusal is None else f"{refusal}; {outcome}"
