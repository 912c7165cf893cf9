"""Rule tables: one check function per requirement ID, one table per format version.

In the spirit of python-jsonschema's one function per keyword and one table
per draft: :mod:`.v1` registers, for each requirement ID of format version 1
whose check is a test of one value, a small function that returns why the
value breaks the rule (or None). The dispatcher, :meth:`RuleTable.check`,
turns that reason into the rule's error class with the file, the JSON path
and the rule ID, so no check repeats them. A newer format version gets its
own module and table; older versions' rules stay in theirs.

Part of the format core layer (with ``format/``): the rule tables of the
manifest (``v1``, ``v2``), containers, archives, publication, the tree payload
and sharded arrays (``sharded``, with ``tiling``). They may import only
``format/`` (errors, limits, models, paths); every other layer may import them.

>>> from opencheckpoint.format.errors import ManifestError
>>> table = RuleTable(version=0, file="manifest.json", shared=False)
>>> @table.rule("R-DOC-1", ManifestError)
... def _positive(value):
...     return None if value > 0 else f"{value} is not positive"
>>> str(table.check("R-DOC-1", "$.n", -1))
'ManifestError: manifest.json: $.n: -1 is not positive [R-DOC-1]'

A rule whose facts only its raise site has (a byte the exact parser is
looking at, a ZIP record being read) is *declared* with its error class, and
the site reports it through the table with its reason (:meth:`RuleTable.error`),
so the class of every requirement ID is written once, in one table, and no
module outside ``rules/`` constructs an error with a rule ID
(``tests/spec/test_rule_tables.py`` checks both, and the classes against the
spec's Table 16-1):

>>> table.declare("R-DOC-2", ManifestError)
>>> str(table.error("R-DOC-2", "trailing comma", field="$.n"))
'ManifestError: manifest.json: $.n: trailing comma [R-DOC-2]'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..format.errors import CheckpointError, out_of_descriptors

#: A check: the value (and any context it needs) -> why it breaks the rule, or None.
Check = Callable[..., "str | None"]


@dataclass(frozen=True)
class Rule:
    """One requirement ID, the error class the spec assigns to it, and its one check (None: declared only)."""

    id: str
    error: type[CheckpointError]
    #: None for a declared rule: its raise site tests the facts and gives the reason (:meth:`RuleTable.error`).
    check: Check | None


#: Every requirement ID of the package's rule tables -> the one table that binds it to its error class.
_TABLE_OF: dict[str, RuleTable] = {}


class RuleTable:
    """The rules of one format version or topic, by requirement ID (each ID registered once, in one table)."""

    def __init__(self, *, version: int, file: str | None, shared: bool = True) -> None:
        self.version = version
        #: The document the table's rules are about (errors name it); None: the caller adds it with
        #: :meth:`CheckpointError.at <opencheckpoint.format.errors.CheckpointError.at>` (one table, many components).
        self.file = file
        #: Whether the table's IDs join the package's registry (:func:`table_of`); False for an example's table.
        self.shared = shared
        self.rules: dict[str, Rule] = {}

    def _register(self, rule: Rule) -> None:
        if rule.id in self.rules:
            what = self.rules[rule.id].check
            raise ValueError(f"{rule.id} already has a check: {what.__name__ if what else 'declared'}")
        if self.shared:
            other = _TABLE_OF.setdefault(rule.id, self)
            if other is not self:
                raise ValueError(f"{rule.id} is already bound to {other.rules[rule.id].error.__name__} by another "
                                 "rule table: one table binds each requirement ID")
        self.rules[rule.id] = rule

    def rule(self, rule_id: str, error: type[CheckpointError]) -> Callable[[Check], Check]:
        """Register the check of ``rule_id``; a second check for one ID is a programming error."""

        def register(check: Check) -> Check:
            self._register(Rule(rule_id, error, check))
            return check

        return register

    def declare(self, rule_id: str, error: type[CheckpointError]) -> None:
        """Bind ``rule_id`` to its error class; its raise site tests the facts and reports with :meth:`error`."""
        self._register(Rule(rule_id, error, None))

    def id_of(self, check: Check) -> str:
        """The requirement ID ``check`` is registered under (to recognise its errors without naming the ID)."""
        return next(rule_id for rule_id, rule in self.rules.items() if rule.check is check)

    def error(self, rule_id: str, why: str, *, file: str | None = None, field: str | None = None,
              reported_as: type[CheckpointError] | None = None) -> CheckpointError:
        """The error of ``rule_id`` for the reason ``why``: the rule's class (or ``reported_as``, a writer's
        refusal class), the file (the table's, unless given), the field and the rule ID."""
        return (reported_as or self.rules[rule_id].error)(why, file=file if file is not None else self.file,
                                                          field=field, rule=rule_id)

    def check(self, rule_id: str, where: str | None, *args: Any, file: str | None = None,
              reported_as: type[CheckpointError] | None = None, **facts: Any) -> CheckpointError | None:
        """The dispatcher: run the rule's check; on a violation, its error with file, field and rule ID.

        ``file`` names the file for a table about many files (``file=None`` at construction): a ZIP
        member, a checkpoint path, a component's data file. ``reported_as``: the class a writer's
        refusal under the same rule is reported with (the rule's own class is the reader's).
        """
        check = self.rules[rule_id].check
        assert check is not None, f"{rule_id} is declared only: its site reports it with RuleTable.error"
        why = check(*args, **facts)
        if why is None:
            return None
        for fact in (*args, *facts.values()):  # an OS failure handed over as a fact: no descriptor left is
            exhausted = out_of_descriptors(fact, file if file is not None else self.file)  # not the file's fault
            if exhausted is not None:  # (looked for only on a violation: checks on valid data pay nothing)
                return exhausted
        return self.error(rule_id, why, file=file, field=where, reported_as=reported_as)

    def first(self, where: str, *checks: tuple[str, tuple[Any, ...]]) -> CheckpointError | None:
        """The error of the first of several rules on one value (e.g. R-MAN-7 before a range rule)."""
        for rule_id, args in checks:
            error = self.check(rule_id, where, *args)
            if error is not None:
                return error
        return None


def table_of(rule_id: str) -> RuleTable:
    """The rule table that binds ``rule_id`` (for a site handed the ID by its caller, e.g. the exact parser's
    ``fail``); a KeyError for an ID no imported table registers."""
    return _TABLE_OF[rule_id]


def restated(error: CheckpointError, as_class: type[CheckpointError], message: str, *, file: str | None = None,
             field: str | None = None) -> CheckpointError:
    """A failure that is not a file defect, reported under the rule of the table's ``error`` that revealed it.

    For a writer refusing a value a reader's rule would reject, or bytes that changed after they were
    verified: ``as_class`` is the implementation's own class (spec §16: never one of Table 16-1), the rule
    ID stays the one a table gave ``error``.
    """
    return as_class(message, file=file, field=field, rule=error.rule)


def required(error: CheckpointError | None) -> CheckpointError:
    """The error of a check given facts that break its rule (a failure the caller already saw)."""
    assert error is not None, "the facts given break the rule"
    return error


def raise_if(error: CheckpointError | None) -> None:
    """Raise a check's error, if the facts broke its rule."""
    if error is not None:
        raise error
