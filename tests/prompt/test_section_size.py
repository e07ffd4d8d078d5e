"""`prompt.max_section_chars`: no section, a built-in's or a plugin's, puts more than that in."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import DEFAULT_PROMPT_SECTION_CHARS, Config, PromptConfig, load_config
from nanobot_core.errors import ConfigError
from nanobot_core.kernel.records import PluginInfo
from nanobot_core.prompt import PromptBuilder, Section, SectionContext, build_default_prompt_builder

_NOTES = PluginInfo("notes", "nanobot.plugins", "nanobot-notes", "2.1.0")


def _built(text: str, limit: int, tmp_path: Path) -> tuple[str, dict[str, object]]:
    """The prompt and the report of one plugin section rendering `text`, cut at `limit`."""
    config = Config(prompt=PromptConfig(max_section_chars=limit))
    section = Section("notes", 10, lambda ctx: text)
    built = PromptBuilder([(section, _NOTES)], config=config).build(
        SectionContext(tmp_path, config=config)
    )
    [report] = built.sections
    return built.text, report.to_json()


def test_a_plugin_section_over_the_limit_keeps_its_head_and_says_so(tmp_path: Path) -> None:
    """A section of 10,000 characters at a limit of 100: its first 100, a notice, a warning."""
    text = "".join(f"note {n:04d}\n" for n in range(1000))  # 10,000 characters
    with capture_logs() as logs:
        prompt, report = _built(text, 100, tmp_path)
    reason = "cut to its first 100 of 9,999 characters (prompt.max_section_chars)"
    assert prompt == text[:100].rstrip() + f"\n\n[The notes section was {reason}.]"
    assert report["skipped"] is False and report["reason"] == reason
    assert report["chars"] == len(prompt)
    [warning] = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["plugin"] == "plugin 'notes' from nanobot-notes 2.1.0"
    assert (warning["section"], warning["chars"], warning["max_section_chars"]) == (
        "notes",
        9999,
        100,
    )
    assert warning["key"] == "prompt.max_section_chars"


def test_a_section_of_exactly_the_limit_goes_in_whole(tmp_path: Path) -> None:
    """The limit is inclusive: a section of that many characters has no notice and no reason."""
    prompt, report = _built("s" * 64, 64, tmp_path)
    assert prompt == "s" * 64 and report["reason"] is None
    prompt, report = _built("s" * 65, 64, tmp_path)
    assert prompt.startswith("s" * 64 + "\n\n[The notes section was cut") and "s" * 65 not in prompt


def test_a_built_in_section_is_bound_the_same_way_through_the_config(tmp_path: Path) -> None:
    """The workspace files section, a built-in, is cut by the key from nanobot.toml as any is."""
    (tmp_path / "nanobot.toml").write_text("[prompt]\nmax_section_chars = 3000\n", "utf-8")
    (tmp_path / "AGENTS.md").write_text("rule\n" * 1000, encoding="utf-8")
    config = load_config(cwd=tmp_path, environ={})
    built = build_default_prompt_builder(config).build(SectionContext(tmp_path, config=config))
    cut = [report for report in built.sections if report.reason and "cut to" in report.reason]
    assert [report.name for report in cut] == ["bootstrap"]
    assert cut[0].chars < 3100 and "rule\n" * 600 not in built.text


def test_the_default_holds_three_workspace_files_of_the_default_file_limit(
    tmp_path: Path,
) -> None:
    """At the defaults, AGENTS.md, SOUL.md and USER.md at the file limit each go in uncut."""
    config = Config()
    limit = config.prompt.max_file_bytes
    for name in ("AGENTS.md", "SOUL.md", "USER.md"):
        (tmp_path / name).write_text(("x" * 63 + "\n") * (limit // 64), encoding="utf-8")
    built = build_default_prompt_builder(config).build(SectionContext(tmp_path, config=config))
    [bootstrap] = [report for report in built.sections if report.name == "bootstrap"]
    assert bootstrap.reason is None and bootstrap.chars > 3 * limit - 100
    assert config.prompt.max_section_chars == DEFAULT_PROMPT_SECTION_CHARS


@given(st.text(max_size=300), st.integers(min_value=1, max_value=200))
def test_what_a_section_brings_never_passes_the_limit_before_its_notice(
    text: str, limit: int
) -> None:
    """Any text at any limit: the part before the notice is at most the limit, a prefix of it."""
    config = Config(prompt=PromptConfig(max_section_chars=limit))
    section = Section("notes", 10, lambda ctx: text)
    built = PromptBuilder([(section, _NOTES)], config=config).build(
        SectionContext(Path("."), config=config)
    )
    head, _, _ = built.text.partition("\n\n[The notes section was cut")
    assert len(head) <= limit
    assert text.strip().startswith(head) or built.text == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "prompt.max_section_chars: must be more than 0, got 0"),
        ("-1", "prompt.max_section_chars: must be more than 0, got -1"),
        ('"4M"', "prompt.max_section_chars: expected an integer (int), got str '4M'"),
    ],
)
def test_a_bad_section_limit_is_a_config_error_naming_the_key(
    tmp_path: Path, value: str, message: str
) -> None:
    """A limit that is not a positive integer is refused at load, naming the file and the key."""
    (tmp_path / "nanobot.toml").write_text(f"[prompt]\nmax_section_chars = {value}\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    assert str(info.value) == f"{tmp_path / 'nanobot.toml'}: {message}"
