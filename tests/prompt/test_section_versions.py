"""What is said about a prompt section names its plugin with the distribution and version."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import Config
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import PluginInfo, core_version
from nanobot_core.prompt import (
    PromptBuilder,
    Section,
    SectionContext,
    SectionReport,
    build_default_prompt_builder,
)
from tests.helpers import install_plugin, plugin_env, run_cli

NOTES = "plugin 'notes' from nanobot-notes 2.1.0"


def _raises(ctx: SectionContext) -> str:
    raise RuntimeError("disk on fire")


def _exits(ctx: SectionContext) -> str:
    raise SystemExit(3)


def _prints(ctx: SectionContext) -> str:
    print("rendering now")
    return "text"


class _Sections:
    def __init__(self, *sections: Section) -> None:
        self.sections = list(sections)

    @hookimpl
    def nanobot_prompt_sections(self, ctx: object) -> list[Section]:
        return self.sections


def _built(tmp_path: Path, *sections: Section) -> tuple[list[SectionReport], list[dict[str, Any]]]:
    """The reports and log entries of a prompt with `sections` from plugin notes 2.1.0."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    manager.register(_Sections(*sections), "notes", distribution="nanobot-notes", version="2.1.0")
    with capture_logs() as logs:
        built = manager.prompt_builder().build(SectionContext(workspace=tmp_path))
    return [r for r in built.sections if r.plugin == "notes"], logs


def test_a_section_that_raises_is_logged_naming_its_plugin_version(tmp_path: Path) -> None:
    """The error logged for a raising render names the plugin, its distribution and version."""
    (report,), logs = _built(tmp_path, Section("notes", 250, _raises))
    (logged,) = [e for e in logs if e["event"] == "prompt section raised; left out"]
    assert (logged["section"], logged["plugin"]) == ("notes", NOTES)
    assert logged["error"] == "raised RuntimeError: disk on fire"
    assert (report.plugin, report.version, report.skipped) == ("notes", "2.1.0", True)


def test_a_section_that_exits_is_logged_naming_its_plugin_version(tmp_path: Path) -> None:
    """A render raising SystemExit is reported under its plugin's name and version."""
    (report,), logs = _built(tmp_path, Section("notes", 250, _exits))
    (logged,) = [e for e in logs if e["event"] == "prompt section raised; left out"]
    assert logged["plugin"] == NOTES
    assert (report.version, report.reason) == ("2.1.0", "raised SystemExit(3)")


def test_a_section_returning_a_non_string_is_logged_naming_its_plugin_version(
    tmp_path: Path,
) -> None:
    """The error logged for a render that returns a number names the plugin's version."""
    (report,), logs = _built(tmp_path, Section("notes", 250, lambda ctx: 42))
    (logged,) = [e for e in logs if e["event"] == "prompt section returned a non-string; left out"]
    assert logged["plugin"] == NOTES
    assert logged["returned"] == "returned int, expected str or None"
    assert report.version == "2.1.0"


def test_what_a_section_prints_is_logged_naming_its_plugin_version(tmp_path: Path) -> None:
    """The warning about a render's print names the section and its plugin with the version."""
    (report,), logs = _built(tmp_path, Section("notes", 250, _prints))
    (logged,) = [e for e in logs if e["event"] == "plugin wrote to stdout"]
    assert logged["plugin"] == f"prompt section 'notes' of {NOTES}"
    assert (report.chars, report.version) == (4, "2.1.0")


def test_a_repeated_name_is_reported_naming_the_first_plugin_version() -> None:
    """The section left out for its name gives the plugin that kept the name, with its version."""
    one = PluginInfo("one", "nanobot.plugins", distribution="nanobot-one", version="1.0")
    two = PluginInfo("two", "nanobot.plugins", distribution="nanobot-two", version="3.2")
    pairs = [(Section("s", 1, lambda c: "first"), one), (Section("s", 1, lambda c: "second"), two)]
    built = PromptBuilder(pairs, config=Config()).build(SectionContext(workspace=Path("/ws")))
    assert built.sections == [
        SectionReport("s", "one", 5, False, None, "1.0"),
        SectionReport(
            "s", "two", 0, True, "name already taken by plugin 'one' from nanobot-one 1.0", "3.2"
        ),
    ]


def test_the_builtin_sections_carry_the_core_version() -> None:
    """The default builder's sections are the built-in plugin's, at nanobot-core's version."""
    built = build_default_prompt_builder(Config()).build(SectionContext(workspace=Path("/ws")))
    assert {(r.plugin, r.version) for r in built.sections} == {("builtin:prompt", core_version())}


_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)


@given(name=_TEXT, distribution=st.none() | _TEXT, version=st.none() | _TEXT)
def test_any_plugin_metadata_is_named_as_describe_names_it(
    name: str, distribution: str | None, version: str | None
) -> None:
    """Whatever name, distribution and version a plugin has, the log names it as `describe` does."""
    info = PluginInfo(name, "nanobot.plugins", distribution=distribution, version=version)
    builder = PromptBuilder([(Section("s", 1, _raises), info)], config=Config())
    with capture_logs() as logs:
        (report,) = builder.build(SectionContext(workspace=Path("/ws"))).sections
    (logged,) = [e for e in logs if e["event"] == "prompt section raised; left out"]
    assert logged["plugin"] == info.describe()
    assert (report.plugin, report.version) == (name, version)
    assert report.to_json()["version"] == version


def test_a_section_named_by_its_plugin_name_alone_has_no_version() -> None:
    """A pair giving only a plugin name reports no version and names the plugin alone."""
    builder = PromptBuilder([(Section("s", 1, _raises), "bare")], config=Config())
    with capture_logs() as logs:
        (report,) = builder.build(SectionContext(workspace=Path("/ws"))).sections
    assert [e["plugin"] for e in logs if e["log_level"] == "error"] == ["plugin 'bare'"]
    assert report.to_json()["version"] is None


# An installed plugin (distribution "rules", version 0.1) with a section that raises.
RULES = """
from nanobot_core import Section, hookimpl

def broken(ctx):
    raise RuntimeError("disk on fire")

@hookimpl
def nanobot_prompt_sections(ctx):
    return [Section(name="house_rules", order=250, render=broken)]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rules plugin, installed in a folder put on PYTHONPATH."""
    return install_plugin(tmp_path_factory.mktemp("sections") / "site", "rules", RULES)


def _prompt_json(site: Path, workspace: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("prompt", "--json", cwd=workspace, env=plugin_env(site, "rules"), timeout=60)


def test_prompt_json_gives_each_section_its_plugin_version(site: Path, tmp_path: Path) -> None:
    """`prompt --json` adds `version` beside `plugin`; the broken section's error names both."""
    done = _prompt_json(site, tmp_path)
    assert done.returncode == 0, done.stderr
    sections = json.loads(done.stdout)["sections"]
    assert all(
        set(s) == {"name", "plugin", "version", "chars", "skipped", "reason"} for s in sections
    )
    rules = next(s for s in sections if s["name"] == "house_rules")
    assert (rules["plugin"], rules["version"], rules["skipped"]) == ("rules", "0.1", True)
    identity = next(s for s in sections if s["name"] == "identity")
    assert (identity["plugin"], identity["version"]) == ("builtin:prompt", core_version())
    assert "plugin 'rules' from rules 0.1" in done.stderr
    assert "Traceback" not in done.stderr
