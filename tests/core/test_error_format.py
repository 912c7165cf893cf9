"""One error formatter: exceptions, ``validate`` issues and the protocol's ``error:`` line print alike (issue 9 §3)."""

from __future__ import annotations

from opencheckpoint.conformance.impl import error_line
from opencheckpoint.format.errors import IncompatibleComponent, IntegrityError, UnsupportedValue, format_error
from opencheckpoint.read.validate import ValidationIssue


def test_exception_issue_and_protocol_line_are_one_format() -> None:
    exc = IntegrityError("file crc32c mismatch", file="c/data.bin", field="$.components.c", rule="R-CHK-7")
    expected = "IntegrityError: c/data.bin: $.components.c: file crc32c mismatch [R-CHK-7]"
    assert str(exc) == expected
    assert str(ValidationIssue.of(exc)) == expected
    assert error_line(exc) == "error: " + expected
    assert format_error("IntegrityError", None, None, "x", None) == "IntegrityError: x"


def test_a_message_made_from_another_error_does_not_repeat_the_class_name() -> None:
    inner = IncompatibleComponent("shape [2] does not fit [3]", field="$.w")
    outer = IncompatibleComponent(str(inner))
    assert str(outer) == "IncompatibleComponent: $.w: shape [2] does not fit [3]"
    wrapped = UnsupportedValue(str(IncompatibleComponent("IncompatibleComponent: nested twice")))
    assert str(wrapped) == "UnsupportedValue: nested twice"


def test_a_message_that_merely_starts_like_a_word_and_colon_is_kept() -> None:
    assert IntegrityError("Note: stored 00000000").message == "Note: stored 00000000"
