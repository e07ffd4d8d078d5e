"""Names of stages and sections: any text a config table and a log line can hold as it is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core import Section, Stage, StageOutcome
from nanobot_core.kernel.records import name_problem


def _stage(name: object) -> Stage:
    return Stage(name, lambda messages, ctx: StageOutcome.unchanged(messages))  # type: ignore[arg-type]


def _section(name: object) -> Section:
    return Section(name, 10, lambda ctx: "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["redact\n", "a\tb", "bell\x07", "nul\x00", "del\x7f", "c1\x85"])
@pytest.mark.parametrize(("what", "make"), [("stage", _stage), ("section", _section)])
def test_a_name_with_a_control_character_is_refused(what: str, make: object, name: str) -> None:
    """A stage or section named with a control character (a line break too) is refused."""
    expected = f"a {what} name must be a non-empty string without control characters"
    with pytest.raises(ValueError, match=expected):
        make(name)  # type: ignore[operator]


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_an_empty_blank_or_non_text_name_is_refused(name: object) -> None:
    """An empty or blank name, or one that is no text, is refused as before."""
    assert name_problem("stage", name) is not None
    with pytest.raises(ValueError, match="a stage name must be a non-empty string"):
        _stage(name)


@given(st.text(min_size=1).filter(lambda t: t.strip()))
def test_a_name_is_refused_exactly_when_it_holds_a_control_character(name: str) -> None:
    """Spaces, punctuation and any script are fine; only control characters are refused."""
    has_control = any(0x00 <= ord(c) <= 0x1F or 0x7F <= ord(c) <= 0x9F for c in name)
    assert (name_problem("section", name) is not None) == has_control
