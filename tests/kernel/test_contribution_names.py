"""Names of stages and sections: any text a config table and a log line can hold as it is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core import Section, Stage, StageOutcome
from nanobot_core.kernel.records import MAX_NAME_CHARS, name_problem


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


@pytest.mark.parametrize(("what", "make"), [("stage", _stage), ("section", _section)])
def test_a_name_longer_than_the_bound_is_refused_and_quoted_cut(what: str, make: object) -> None:
    """A name of a million characters is refused, and the error quotes its two ends only."""
    name = "n" * 1_000_000
    with pytest.raises(ValueError, match=f"at most {MAX_NAME_CHARS} characters long") as caught:
        make(name)  # type: ignore[operator]
    assert len(str(caught.value)) < 400
    assert "characters omitted" in str(caught.value)


def test_a_name_of_exactly_the_bound_is_taken() -> None:
    """The bound itself is a valid length: only a longer name is refused."""
    assert _stage("s" * MAX_NAME_CHARS).name == "s" * MAX_NAME_CHARS
    assert name_problem("section", "s" * (MAX_NAME_CHARS + 1)) is not None


@given(st.text(min_size=1, max_size=2 * MAX_NAME_CHARS).filter(lambda t: t.strip()))
def test_a_name_is_refused_exactly_when_it_holds_a_control_character_or_is_long(
    name: str,
) -> None:
    """Spaces, punctuation and any script are fine; control characters and length are not."""
    has_control = any(0x00 <= ord(c) <= 0x1F or 0x7F <= ord(c) <= 0x9F for c in name)
    too_long = len(name) > MAX_NAME_CHARS
    assert (name_problem("section", name) is not None) == (has_control or too_long)
