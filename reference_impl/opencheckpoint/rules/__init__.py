"""Rule tables: one check function per requirement ID, one table per format version.

In the spirit of python-jsonschema's one function per keyword and one table
per draft: :mod:`.v1` registers, for each requirement ID of format version 1
whose check is a test of one value, a small function that returns why the
value breaks the rule (or None). The dispatcher, :meth:`RuleTable.check`,
turns that reason into the rule's error class with the file, the JSON path
and the rule ID, so no check repeats them. A newer format version gets its
own module and table; older versions' rules stay in theirs.

>>> from opencheckpoint.format.errors import ManifestError
>>> table = RuleTable(version=0, file="manifest.json")
>>> @table.rule("R-DOC-1", ManifestError)
... def _positive(value):
...     return None if value > 0 else f"{value} is not positive"
>>> str(table.check("R-DOC-1", "$.n", -1))
'ManifestError: manifest.json: $.n: -1 is not positive [R-DOC-1]'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..format.errors import CheckpointError

#: A check: the value (and any context it needs) -> why it breaks the rule, or None.
Check = Callable[..., "str | None"]


@dataclass(frozen=True)
class Rule:
    """One requirement ID, the error class the spec assigns to it, and its one check."""

    id: str
    error: type[CheckpointError]
    check: Check


class RuleTable:
    """The checks of one format version, by requirement ID (each ID registered once)."""

    def __init__(self, *, version: int, file: str | None) -> None:
        self.version = version
        #: The document the table's rules are about (errors name it); None: the caller adds it with
        #: :meth:`CheckpointError.at <opencheckpoint.format.errors.CheckpointError.at>` (one table, many components).
        self.file = file
        self.rules: dict[str, Rule] = {}

    def rule(self, rule_id: str, error: type[CheckpointError]) -> Callable[[Check], Check]:
        """Register the check of ``rule_id``; a second check for one ID is a programming error."""

        def register(check: Check) -> Check:
            if rule_id in self.rules:
                raise ValueError(f"{rule_id} already has a check: {self.rules[rule_id].check.__name__}")
            self.rules[rule_id] = Rule(rule_id, error, check)
            return check

        return register

    def id_of(self, check: Check) -> str:
        """The requirement ID ``check`` is registered under (to recognise its errors without naming the ID)."""
        return next(rule_id for rule_id, rule in self.rules.items() if rule.check is check)

    def check(self, rule_id: str, where: str | None, *args: Any, file: str | None = None,
              reported_as: type[CheckpointError] | None = None, **facts: Any) -> CheckpointError | None:
        """The dispatcher: run the rule's check; on a violation, its error with file, field and rule ID.

        ``file`` names the file for a table about many files (``file=None`` at construction): a ZIP
        member, a checkpoint path, a component's data file. ``reported_as``: the class a writer's
        refusal under the same rule is reported with (the rule's own class is the reader's).
        """
        rule = self.rules[rule_id]
        why = rule.check(*args, **facts)
        if why is None:
            return None
        return (reported_as or rule.error)(why, file=file if file is not None else self.file, field=where,
                                           rule=rule_id)

    def first(self, where: str, *checks: tuple[str, tuple[Any, ...]]) -> CheckpointError | None:
        """The error of the first of several rules on one value (e.g. R-MAN-7 before a range rule)."""
        for rule_id, args in checks:
            error = self.check(rule_id, where, *args)
            if error is not None:
                return error
        return None


def required(error: CheckpointError | None) -> CheckpointError:
    """The error of a check given facts that break its rule (a failure the caller already saw)."""
    assert error is not None, "the facts given break the rule"
    return error


def raise_if(error: CheckpointError | None) -> None:
    """Raise a check's error, if the facts broke its rule."""
    if error is not None:
        raise error
