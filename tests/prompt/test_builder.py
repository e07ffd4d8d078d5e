"""PromptBuilder: ordering, config switches, isolation of broken sections, the report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import Config, PromptConfig
from nanobot_core.prompt import PromptBuilder, Section, SectionContext, SectionReport


def _const(text: str | None) -> Callable[[SectionContext], str | None]:
    return lambda ctx: text


def _build(
    sections: list[Section], config: Config | None = None, plugin: str = "p"
) -> tuple[str, list[SectionReport]]:
    builder = PromptBuilder([(s, plugin) for s in sections], config=config or Config())
    built = builder.build(SectionContext(workspace=Path("/ws")))
    return built.text, built.sections


def test_sections_are_joined_in_order_key_order_with_the_separator() -> None:
    """Sections render by ascending order key, joined by a blank-line-framed '---' line."""
    text, _ = _build([Section("b", 20, _const("B")), Section("a", 10, _const("A"))])
    assert text == "A\n\n---\n\nB"


def test_equal_order_keys_are_broken_by_name() -> None:
    """Two sections with the same key appear in name order, whatever the input order."""
    text, reports = _build([Section("zeta", 5, _const("Z")), Section("alpha", 5, _const("A"))])
    assert text == "A\n\n---\n\nZ"
    assert [r.name for r in reports] == ["alpha", "zeta"]


def test_surrounding_whitespace_of_a_section_is_removed() -> None:
    """Leading and trailing blank lines of a rendered section do not reach the prompt."""
    text, reports = _build(
        [Section("a", 1, _const("\n\n  hello\n\n")), Section("b", 2, _const("x"))]
    )
    assert text == "hello\n\n---\n\nx"
    assert reports[0].chars == len("hello")


def test_empty_renders_are_left_out_and_reported() -> None:
    """None, '' and whitespace-only renders are skipped with a reason, not joined as blanks."""
    sections = [
        Section("none", 1, _const(None)),
        Section("blank", 2, _const("")),
        Section("spaces", 3, _const(" \n\t")),
        Section("real", 4, _const("R")),
    ]
    text, reports = _build(sections)
    assert text == "R"
    assert [(r.name, r.skipped, r.chars) for r in reports] == [
        ("none", True, 0),
        ("blank", True, 0),
        ("spaces", True, 0),
        ("real", False, 1),
    ]
    assert all(r.reason == "rendered nothing" for r in reports[:3])
    assert reports[3].reason is None


def test_a_raising_section_is_skipped_with_its_error_and_the_rest_still_render() -> None:
    """An exception in render costs only that section; the report names the error."""

    def broken(ctx: SectionContext) -> str:
        raise RuntimeError("disk on fire")

    text, reports = _build(
        [Section("a", 1, _const("A")), Section("bad", 2, broken), Section("c", 3, _const("C"))]
    )
    assert text == "A\n\n---\n\nC"
    bad = reports[1]
    assert (bad.name, bad.skipped, bad.chars) == ("bad", True, 0)
    assert bad.reason is not None
    assert "RuntimeError" in bad.reason and "disk on fire" in bad.reason


def test_a_section_that_exits_is_skipped_and_the_process_goes_on() -> None:
    """SystemExit in render costs only that section; the report says what it raised."""

    def leaving(ctx: SectionContext) -> str:
        raise SystemExit(3)

    text, reports = _build([Section("bye", 1, leaving), Section("c", 2, _const("C"))])
    assert text == "C"
    assert (reports[0].skipped, reports[0].reason) == (True, "raised SystemExit(3)")


def test_what_a_section_prints_stays_off_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """A render that prints does not write to stdout (where --json output goes)."""

    def chatty(ctx: SectionContext) -> str:
        print("rendering now")
        return "text"

    with capture_logs() as logs:  # where the record goes is the logging set-up's business
        text, _ = _build([Section("chatty", 1, chatty)])
    assert text == "text"
    assert capsys.readouterr().out == ""
    printed = [entry["text"] for entry in logs if entry["event"] == "plugin wrote to stdout"]
    assert printed == ["rendering now"]


_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)


@given(st.text(st.characters(codec=None, exclude_categories=()) | _SURROGATES, max_size=20))
def test_the_prompt_is_always_text_that_encodes_as_utf8(rendered: str) -> None:
    """Whatever text a section returns, lone surrogates included, the prompt encodes as UTF-8."""
    text, reports = _build([Section("any", 1, _const(rendered))])
    assert text.encode("utf-8").decode("utf-8") == text
    assert reports[0].chars == len(text)


def test_a_lone_surrogate_becomes_a_replacement_character() -> None:
    """A section listing a file name that is not UTF-8 shows U+FFFD where the bad byte was."""
    text, _ = _build([Section("files", 1, _const("- caf\udce9.txt\n- \ud83d\ude00"))])
    assert text == "- caf\ufffd.txt\n- \U0001f600"


def test_a_section_returning_a_non_string_is_skipped() -> None:
    """A render that returns a number or a list is reported, not str()-ed into the prompt."""
    sections = [Section("num", 1, lambda ctx: 42), Section("ok", 2, _const("fine"))]  # type: ignore[arg-type,return-value]
    text, reports = _build(sections)
    assert text == "fine"
    assert reports[0].skipped and reports[0].reason is not None and "int" in reports[0].reason


class _TrappedText(str):
    """Text whose own methods are plugin code that raises (a str subclass of a careless plugin)."""

    def strip(self, chars: str | None = None) -> str:
        raise RuntimeError("strip of the plugin's text type")

    def __str__(self) -> str:
        raise RuntimeError("__str__ of the plugin's text type")

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        raise RuntimeError("encode of the plugin's text type")


def test_text_of_a_str_subclass_goes_in_as_its_characters() -> None:
    """A render returning a str subclass whose methods raise still gives its text, as plain str."""
    sections = [
        Section("sub", 1, _const(_TrappedText("  from a subclass  "))),
        Section("ok", 2, _const("fine")),
    ]
    text, reports = _build(sections)
    assert text == "from a subclass\n\n---\n\nfine"
    assert type(text) is str
    assert [(r.name, r.skipped, r.chars) for r in reports] == [("sub", False, 15), ("ok", False, 4)]


def test_config_disables_a_section_by_name() -> None:
    """A name in prompt.disabled is left out and reported as disabled in config."""
    config = Config(prompt=PromptConfig(disabled=["b"]))
    text, reports = _build(
        [Section("a", 1, _const("A")), Section("b", 2, _const("B"))], config=config
    )
    assert text == "A"
    assert reports[1] == SectionReport("b", "p", 0, True, "disabled in config")


def test_config_reorders_sections_by_name() -> None:
    """prompt.order gives a section a new order key, moving it in the prompt and the report."""
    config = Config(prompt=PromptConfig(order={"a": 30}))
    text, reports = _build(
        [Section("a", 1, _const("A")), Section("b", 2, _const("B"))], config=config
    )
    assert text == "B\n\n---\n\nA"
    assert [r.name for r in reports] == ["b", "a"]


def test_unknown_names_in_config_do_not_break_the_build() -> None:
    """Config naming sections that do not exist still builds the prompt."""
    config = Config(prompt=PromptConfig(disabled=["ghost"], order={"phantom": 1}))
    text, _ = _build([Section("a", 1, _const("A"))], config=config)
    assert text == "A"


def test_a_repeated_name_keeps_the_first_owner() -> None:
    """When two pairs carry the same section name, the first renders and the second is reported."""
    builder = PromptBuilder(
        [(Section("s", 1, _const("first")), "one"), (Section("s", 1, _const("second")), "two")],
        config=Config(),
    )
    built = builder.build(SectionContext(workspace=Path("/ws")))
    assert built.text == "first"
    assert built.sections == [
        SectionReport("s", "one", 5, False, None),
        SectionReport("s", "two", 0, True, "name already taken by plugin 'one'"),
    ]
    assert builder.section_names() == ["s"]


def test_reports_carry_the_plugin_of_each_section() -> None:
    """Each report names the plugin paired with its section."""
    builder = PromptBuilder(
        [(Section("a", 1, _const("A")), "builtin:prompt"), (Section("b", 2, _const("B")), "x")],
        config=Config(),
    )
    reports = builder.build(SectionContext(workspace=Path("/ws"))).sections
    assert [(r.name, r.plugin) for r in reports] == [("a", "builtin:prompt"), ("b", "x")]
    assert reports[0].to_json() == {
        "name": "a",
        "plugin": "builtin:prompt",
        "version": None,
        "chars": 1,
        "skipped": False,
        "reason": None,
    }


def test_sections_see_the_context() -> None:
    """A section renders from the workspace, channel and session it is given."""
    section = Section("ctx", 1, lambda ctx: f"{ctx.workspace}|{ctx.channel}|{ctx.session}")
    builder = PromptBuilder([(section, "p")], config=Config())
    built = builder.build(SectionContext(workspace=Path("/w"), channel="cli", session="main"))
    assert built.text == "/w|cli|main"


def test_bare_sections_are_refused_with_a_clear_message() -> None:
    """Passing a Section without its plugin name fails at construction, saying what is expected."""
    with pytest.raises(TypeError, match="pairs"):
        PromptBuilder([Section("a", 1, _const("A"))], config=Config())  # type: ignore[list-item]
