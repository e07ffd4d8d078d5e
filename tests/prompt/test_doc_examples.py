"""docs/prompt.md's examples run as written, and its `prompt` command does what it says."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from nanobot_core import Section, SectionContext
from nanobot_core.prompt import PromptBuilder, builtin_sections
from tests.helpers import REPO_ROOT, install_plugin, plugin_env, run_cli

PAGE = (REPO_ROOT / "docs" / "prompt.md").read_text(encoding="utf-8")


def _block(language: str, marker: str) -> str:
    """The page's one `language` block holding `marker`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", PAGE, re.DOTALL)
    (block,) = [b for b in blocks if marker in b]
    return str(block)


def _run(block: str, **names: Any) -> dict[str, Any]:
    """Run a Python block with `names` defined, and return what it defined."""
    namespace: dict[str, Any] = dict(names)
    exec(compile(block, "docs/prompt.md", "exec"), namespace)
    return namespace


def _distribution(site: Path, name: str, version: str, package: str, code: str, eps: str) -> None:
    """Install package `package` holding `code` in `site` as distribution `name` with `eps`."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(code, encoding="utf-8")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(eps, encoding="utf-8")


def test_the_section_example_is_placed_between_bootstrap_and_tool_contract(
    tmp_path: Path,
) -> None:
    """The page's first example builds a section that lands at order 250 with its text."""
    tree = ast.parse(_block("python", "house_rules"))
    *setup, last = tree.body
    assert isinstance(last, ast.Expr)
    namespace = _run(ast.unparse(setup))
    section = eval(compile(ast.Expression(last.value), "docs/prompt.md", "eval"), namespace)
    assert isinstance(section, Section)
    pairs = [(s, "builtin:prompt") for s in builtin_sections()] + [(section, "rules")]
    ctx = SectionContext(workspace=tmp_path)
    built = PromptBuilder(pairs, config=ctx.config).build(ctx)
    names = [r.name for r in built.sections]
    assert names.index("bootstrap") < names.index("house_rules") < names.index("tool_contract")
    assert "\n\n---\n\nAlways answer in haiku.\n\n---\n\n" in built.text


def test_the_section_plugin_example_installed_shows_in_prompt_json(tmp_path: Path) -> None:
    """Installed as written, the repo_rules plugin renders CONTRIBUTING.md after bootstrap,
    named by its entry point and its distribution's version."""
    site = tmp_path / "site"
    eps = tomllib.loads(_block("toml", '"nanobot.plugins"'))["project"]["entry-points"]
    lines = "".join(f"{k} = {v}\n" for k, v in eps["nanobot.plugins"].items())
    _distribution(
        site,
        "nanobot-repo-rules",
        "1.4.2",
        "my_plugin",
        _block("python", "def _repo_rules"),
        "[nanobot.plugins]\n" + lines,
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "CONTRIBUTING.md").write_text("Sign your commits.", encoding="utf-8")
    result = run_cli(
        "prompt", "--json", cwd=workspace, env=plugin_env(site, "repo_rules"), timeout=60
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = [s["name"] for s in data["sections"]]
    assert names.index("bootstrap") < names.index("repo_rules") < names.index("tool_contract")
    (rules,) = [s for s in data["sections"] if s["name"] == "repo_rules"]
    assert (rules["plugin"], rules["version"], rules["skipped"]) == ("repo_rules", "1.4.2", False)
    assert "# Contribution rules\n\nSign your commits." in data["prompt"]
    assert set(rules) == {"name", "plugin", "version", "chars", "skipped", "reason"}


PROBE = """
from nanobot_core import Section, hookimpl


@hookimpl
def nanobot_prompt_sections(ctx):
    return [Section("probe", 250, lambda c: f"channel={c.channel} session={c.session}")]
"""


@pytest.fixture(scope="module")
def probe_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plugin whose section shows the channel and session it is handed."""
    return install_plugin(tmp_path_factory.mktemp("probe") / "site", "nbprobe", PROBE)


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        ((), {}, "channel=None session=default"),
        (("--channel", "telegram"), {}, "channel=telegram session=default"),
        ((), {"NANOBOT_RUNNER__SESSION": "ops"}, "channel=None session=ops"),
        (("--session", "s1"), {"NANOBOT_RUNNER__SESSION": "ops"}, "channel=None session=s1"),
    ],
)
def test_prompt_hands_the_channel_and_session_to_the_sections(
    probe_site: Path, tmp_path: Path, args: tuple[str, ...], env: dict[str, str], shown: str
) -> None:
    """`prompt --channel/--session` reach each section; the session defaults to runner.session."""
    result = run_cli(
        "prompt", *args, cwd=tmp_path, env=plugin_env(probe_site, "nbprobe", **env), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert shown in result.stdout.split("\n---\n")[1]


def test_the_runtime_block_example_gives_the_text_shown(tmp_path: Path) -> None:
    """The runtime-block example, run at the time shown, appends exactly the block on the page."""
    now = datetime(2025, 1, 31, 9, 30, 5, tzinfo=timezone(timedelta(hours=1)))
    user_text = "What changed since yesterday?"
    done = _run(_block("python", "build_runtime_block("), now=now, user_text=user_text)
    shown = _block("text", "[Runtime Context").rstrip("\n")
    assert done["content"] == shown.replace("<user text, unchanged>", user_text)


def test_the_page_example_needs_no_unused_import() -> None:
    """The section-plugin example imports only what it uses (it is copied into real plugins)."""
    code = _block("python", "def _repo_rules")
    for line in code.splitlines():
        if line.startswith("import "):
            module = line.split()[1]
            assert re.search(rf"\b{module}\.", code), f"{line!r} is unused"
