"""The plugin distributions in plugins/ and contrib/ use only nanobot_core's public names."""

from __future__ import annotations

import ast
from pathlib import Path

import nanobot_core
from tests.helpers import REPO_ROOT

ALLOWED_MODULES = frozenset({"nanobot_core", "nanobot_core.testing"})
TEST_KITS = frozenset(
    {"nanobot_core.testing", "nanobot_core.testing_http", "nanobot_core.testing_sessions"}
)

# nanobot-postgres and nanobot-anthropic arrived using the session-store and provider
# APIs before those had public names.
# Until those names are exported, exactly these internal modules are tolerated there;
# any other internal import, there or anywhere else, fails.
PENDING: dict[str, frozenset[str]] = {
    "plugins/postgres/": frozenset(
        {
            "nanobot_core.config",
            "nanobot_core.errors",
            "nanobot_core.governance.invariants",
            "nanobot_core.governance.store",
            "nanobot_core.jsonl_store",
            "nanobot_core.providers.openai",
            "nanobot_core.sessions",
        }
    ),
    "plugins/anthropic/": frozenset(
        {"nanobot_core.config", "nanobot_core.governance", "nanobot_core.providers"}
    ),
}


def offending_imports(source: str, filename: str) -> list[str]:
    """``file:line: what`` for each import of a nanobot_core submodule or non-public name."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("nanobot_core") and alias.name not in ALLOWED_MODULES:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if not (module == "nanobot_core" or module.startswith("nanobot_core.")):
                continue
            if module in TEST_KITS:
                continue
            pending = [m for prefix, m in PENDING.items() if filename.startswith(prefix)]
            if any(module in tolerated for tolerated in pending):
                continue
            if module != "nanobot_core":
                found.append(f"{filename}:{node.lineno}: from {module} import ...")
                continue
            for alias in node.names:
                if alias.name not in nanobot_core.__all__ and alias.name != "testing":
                    found.append(f"{filename}:{node.lineno}: {alias.name} is not public")
    return found


def spelled_sources(source: str, filename: str) -> list[str]:
    """``file:line`` of each string of code (docstrings left out) that spells how the core
    names a config source itself (``environment variable ...``), instead of asking the core
    (`variable_source`, `source_prefix`): a second copy of its wording."""
    tree = ast.parse(source, filename=filename)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{filename}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and "environment variable " in node.value
    ]


def _distribution_sources() -> list[Path]:
    roots = [
        p.parent for g in ("plugins", "contrib") for p in (REPO_ROOT / g).glob("*/pyproject.toml")
    ]
    return sorted(path for root in roots for path in root.rglob("*.py"))


def test_pending_exceptions_are_narrow() -> None:
    """A tolerated internal import is tolerated only in its own distribution."""
    source = "from nanobot_core.sessions import open_session"
    assert offending_imports(source, "plugins/postgres/x.py") == []
    assert offending_imports(source, "plugins/other/x.py") == [
        "plugins/other/x.py:1: from nanobot_core.sessions import ..."
    ]
    assert offending_imports("from nanobot_core.kernel import manager", "plugins/postgres/x.py")


def test_plugin_distributions_import_only_public_names() -> None:
    """No module or test of a first-party plugin imports a nanobot_core internal."""
    sources = _distribution_sources()
    assert sources, "no plugin distributions found"
    offenders = [
        hit
        for path in sources
        for hit in offending_imports(
            path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT))
        )
    ]
    assert offenders == []


def test_the_checker_catches_internal_imports() -> None:
    """Submodule imports and non-public names are caught; public names and the kit are not."""
    source = "\n".join(
        [
            "import nanobot_core",
            "import nanobot_core.kernel.manager",
            "from nanobot_core import Tool, PluginContext",
            "from nanobot_core import builtin_stages",
            "from nanobot_core.errors import ConfigError",
            "from nanobot_core.testing import make_config",
            "from nanobot_core.testing_sessions import contract",
            "from nanobot_core import testing",
            "from .local import thing",
        ]
    )
    assert offending_imports(source, "x.py") == [
        "x.py:2: import nanobot_core.kernel.manager",
        "x.py:4: builtin_stages is not public",
        "x.py:5: from nanobot_core.errors import ...",
    ]


def test_plugin_packages_name_config_sources_through_the_core() -> None:
    """No plugin package spells a config source (``environment variable X``) itself: each
    gets it from the core, which owns the wording."""
    packages = [path for path in _distribution_sources() if "tests" not in path.parts]
    assert packages, "no plugin packages found"
    spelled = [
        hit
        for path in packages
        for hit in spelled_sources(
            path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT))
        )
    ]
    assert spelled == []


def test_the_source_checker_catches_strings_and_f_strings_but_not_docstrings() -> None:
    """A plain or formatted string spelling a source is caught; a docstring saying it is not."""
    source = "\n".join(
        [
            '"""Named as the environment variable X."""',
            'A = "environment variable ANTHROPIC_API_KEY"',
            'B = f"environment variable {A}: "',
            "def f() -> None:",
            '    """The environment variable A."""',
        ]
    )
    assert spelled_sources(source, "x.py") == ["x.py:2", "x.py:3"]
