"""The public API: `__all__` is complete, sorted, importable, and documented."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nanobot_core
from tests.helpers import REPO_ROOT, run_python


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff keeps ``__all__`` in: constants, then classes, then everything else."""
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def test_all_is_sorted_and_unique() -> None:
    """`__all__` is sorted (as ruff sorts it) and has no duplicates."""
    assert nanobot_core.__all__ == sorted(set(nanobot_core.__all__), key=_isort_key)


def test_every_name_in_all_resolves() -> None:
    """Every name in `__all__` can be imported from the top-level package."""
    for name in nanobot_core.__all__:
        assert getattr(nanobot_core, name) is not None, name


def test_api_page_lists_exactly_all() -> None:
    """docs/api.md lists exactly the names in `__all__`."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### `([A-Za-z_]+)`", text, flags=re.MULTILINE))
    assert documented == set(nanobot_core.__all__)


def _other_public_modules() -> dict[str, list[str]]:
    """Each module of docs/api.md's "Other public modules" and the names listed for it."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## Other public modules", 1)[1]
    listed: dict[str, list[str]] = {}
    for line in section.splitlines():
        found = re.match(r"^- `([^`]+)`[^:]*: (.*)$", line)
        if found:
            listed[found.group(1)] = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", found.group(2))
    return listed


def test_api_page_lists_the_other_public_modules_exactly() -> None:
    """Each other public module on docs/api.md is listed with exactly its `__all__`, in order."""
    listed = _other_public_modules()
    assert "nanobot_core.sessions" in listed and "nanobot_core.testing" in listed
    for module, names in listed.items():
        assert names == list(importlib.import_module(module).__all__), module


def test_import_is_lazy() -> None:
    """Importing the package loads none of the heavy subsystems."""
    code = (
        "import sys, nanobot_core; "
        "heavy = [m for m in ('httpx', 'jsonschema_rs', 'json_repair', 'click', 'cattrs', "
        "'nanobot_core.governance', 'nanobot_core.tools', 'nanobot_core.kernel', "
        "'nanobot_core.schema') "
        "if m in sys.modules]; print(heavy)"
    )
    result = run_python(code, check=True)
    assert result.stdout.strip() == "[]"


def test_errors_share_one_root() -> None:
    """Every exported error class derives from NanobotError."""
    errors = [getattr(nanobot_core, n) for n in nanobot_core.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, nanobot_core.NanobotError) for e in errors)


def _public_modules() -> list[str]:
    """`nanobot_core` and each of its modules with no private (``_``) part in its name."""
    import pkgutil

    names = [
        found.name
        for found in pkgutil.walk_packages(nanobot_core.__path__, "nanobot_core.")
        if not any(part.startswith("_") for part in found.name.split("."))
    ]
    return ["nanobot_core", *names]


def _public_errors() -> dict[str, type[BaseException]]:
    """Each exception class named in the `__all__` of a public module of nanobot-core."""
    found: dict[str, type[BaseException]] = {}
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert found.setdefault(name, value) is value, name
    return found


def _error_tree() -> dict[str, str | None]:
    """Each public exception class of nanobot-core and the name of its base in the tree."""
    from nanobot_core import errors

    tree: dict[str, str | None] = {}
    for name, cls in _public_errors().items():
        assert issubclass(cls, errors.NanobotError), name
        bases = [b for b in cls.__bases__ if issubclass(b, errors.NanobotError)]
        tree[name] = None if cls is errors.NanobotError else bases[0].__name__
    return tree


def test_every_public_error_is_in_the_tree() -> None:
    """Every exception class in a public `__all__` of nanobot-core derives from NanobotError."""
    errors = _public_errors()
    assert {"NanobotError", "HistoryFormatError", "Retryable"} <= set(errors)
    root = nanobot_core.NanobotError
    outside = [name for name, cls in errors.items() if not issubclass(cls, root)]
    assert outside == []


def test_every_public_error_of_the_plugins_is_in_the_tree() -> None:
    """Every exception class in a public `__all__` of a first-party plugin is a NanobotError,
    named on docs/api.md and raised by its plugin's code."""
    folders = sorted(
        folder
        for group in ("plugins", "contrib")
        for folder in (REPO_ROOT / group).iterdir()
        if any(child.name.startswith("nanobot_") for child in folder.iterdir())
    )
    code = (
        "import importlib, json, pkgutil, sys\n"
        "from nanobot_core import NanobotError\n"
        "seen, outside = [], []\n"
        "for folder in sys.argv[1:]:\n"
        "    for package in pkgutil.iter_modules([folder]):\n"
        "        if not package.name.startswith('nanobot_'):\n"
        "            continue\n"
        "        top = importlib.import_module(package.name)\n"
        "        inside = pkgutil.walk_packages(top.__path__, package.name + '.')\n"
        "        for found in [package, *inside]:\n"
        "            if any(p.startswith('_') for p in found.name.split('.')):\n"
        "                continue\n"
        "            module = importlib.import_module(found.name)\n"
        "            for name in getattr(module, '__all__', ()):\n"
        "                value = getattr(module, name)\n"
        "                if isinstance(value, type) and issubclass(value, BaseException):\n"
        "                    seen.append(name)\n"
        "                    if not issubclass(value, NanobotError):\n"
        "                        outside.append(found.name + '.' + name)\n"
        "print(json.dumps([sorted(set(seen)), sorted(set(outside))]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *map(str, folders)])}
    result = run_python(code, *map(str, folders), env=env, check=True)
    seen, outside = json.loads(result.stdout)
    assert {"McpServerError", "TokenizerUnavailable"} <= set(seen)
    assert outside == []
    prose = _errors_section().split("The first-party plugins' errors", 1)[1].split(".\n", 1)[0]
    named = set(re.findall(r"`(?:[a-z_.]+\.)?([A-Z][A-Za-z]*)`", prose))
    assert named - {"PluginError", "ToolError"} == set(seen)  # docs/api.md names each
    sources = [
        path.read_text(encoding="utf-8")
        for folder in folders
        for path in folder.glob("nanobot_*/**/*.py")
    ]
    never_raised = [name for name in seen if not any(f"raise {name}(" in s for s in sources)]
    assert never_raised == []


def test_the_escape_of_plugin_code_is_in_the_tree() -> None:
    """What `plugin_code` and `run_in_daemon_thread` raise is the tree's `PluginEscapeError`."""
    from nanobot_core import _containment, errors

    assert _containment.PluginEscapeError is errors.PluginEscapeError
    assert _error_tree()["PluginEscapeError"] == "PluginError"


def test_api_page_draws_the_error_tree() -> None:
    """The tree on docs/api.md is exactly the public exception classes and their bases."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    drawing = text.split("## Errors", 1)[1].split("```", 2)[1]
    drawn: dict[str, str | None] = {}
    parents: list[str] = []
    for line in drawing.strip().splitlines():
        found = re.match(r"^([│├└─ ]*)([A-Za-z]+)", line)
        assert found, line
        depth = len(found.group(1)) // 4
        del parents[depth:]
        drawn[found.group(2)] = parents[-1] if parents else None
        parents.append(found.group(2))
    assert drawn == _error_tree()


def test_every_error_of_the_tree_is_raised_somewhere() -> None:
    """Each class of the tree is made by nanobot-core's code, or is the base of one that is."""
    sources = [
        path.read_text(encoding="utf-8")
        for path in (REPO_ROOT / "nanobot_core").rglob("*.py")
        if path.name != "errors.py"
    ]
    tree = _error_tree()
    made = {name for name in tree if any(re.search(rf"(?<!class )\b{name}\(", s) for s in sources)}
    covered = set(made)
    for name in made:
        base = tree[name]
        while base is not None:
            covered.add(base)
            base = tree[base]
    assert covered == set(tree)


def test_listing_tools_loads_no_event_loop(tmp_path: Path) -> None:
    """``nanobot-core tools --json`` runs no tool, so it loads neither asyncio nor ssl."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nanobot_core", "tools", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "nanobot_core.tools.registry" in imported  # the listing did run
    assert imported.isdisjoint({"asyncio", "ssl"})


def _api_sections() -> dict[str, str]:
    """Each ``### `name` `` section of docs/api.md (up to the next heading) by its name."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    names = text.split("## Other public modules", 1)[0]
    parts = re.split(r"^### `([A-Za-z_]+)`\n", names, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].split("\n#", 1)[0] for i in range(1, len(parts), 2)}


def _arguments(text: str) -> list[str]:
    """The comma-separated pieces of an argument list, commas inside brackets kept."""
    pieces, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            pieces.append(current.strip())
            current = ""
        else:
            current += char
    return [piece for piece in [*pieces, current.strip()] if piece]


def _documented_calls() -> list[tuple[str, str, object, list[str]]]:
    """(section, call as written, what it calls, its arguments) for each call form on api.md."""
    import inspect

    found = []
    for section, body in _api_sections().items():
        owner = getattr(nanobot_core, section)
        for call in re.finditer(r"`(?:@|async |await )?([A-Za-z_][\w.]*)\(([^`]*)\)", body):
            path, arguments = call.group(1).split("."), call.group(2)
            if path[0] == "pluggy":
                continue  # `hookimpl` is pluggy's marker
            if path[0] in nanobot_core.__all__:
                target: object = getattr(nanobot_core, path[0])
                path = path[1:]
            else:
                target = owner
            for attribute in path:
                target = inspect.getattr_static(target, attribute)
                target = getattr(target, "__func__", target)
            found.append((section, call.group(0), target, _arguments(arguments)))
    return found


def test_the_calls_on_the_api_page_name_real_parameters() -> None:
    """Each argument a call on docs/api.md names is a parameter of what it calls, in its kind."""
    import inspect

    checked, wrong = 0, []
    for section, written, target, arguments in _documented_calls():
        parameters = inspect.signature(target).parameters  # type: ignore[arg-type]
        for argument in arguments:
            name = argument.split("=", 1)[0].strip()
            if not name.isidentifier():
                continue  # ``**kwargs``, ``...`` or a value
            checked += 1
            parameter = parameters.get(name)
            keyword = "=" in argument
            if parameter is None:
                wrong.append(f"{section}: {written} names no parameter {name!r}")
            elif not keyword and parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                wrong.append(f"{section}: {written} passes keyword-only {name!r} by position")
    assert checked > 20
    assert wrong == []


def test_the_call_that_opens_a_section_names_every_parameter() -> None:
    """A section that opens with its name's call form (`clip(text, limit=200)`) gives every
    parameter there, so a new one cannot be left out of the page."""
    import inspect

    opened, missing = 0, []
    for section, body in _api_sections().items():
        call = re.match(rf"`(?:await )?{section}\(([^`]*)\)(?: -> [^`]*)?`", body.strip())
        if call is None:
            continue
        opened += 1
        named = {piece.split("=", 1)[0].strip().lstrip("*") for piece in _arguments(call[1])}
        target = getattr(nanobot_core, section)
        parameters = inspect.signature(target).parameters
        missing += [f"{section}: {name}" for name in parameters if name not in named]
    assert opened > 8
    assert missing == []


def test_the_api_page_names_the_fields_of_a_tool_call_event() -> None:
    """docs/api.md names exactly the attributes a `ToolCallEvent` has."""
    import attrs

    body = _api_sections()["ToolCallEvent"]
    named = [name for name in re.findall(r"`([a-z_]+)`", body) if not name.startswith("nanobot_")]
    assert named == [field.name for field in attrs.fields(nanobot_core.ToolCallEvent)]


def _errors_section() -> str:
    """The prose of docs/api.md's "Errors" section, after the tree and before its names."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return text.split("## Errors", 1)[1].split("```", 2)[2].split("\n### ", 1)[0]


def _named_outside() -> set[str]:
    """The exception classes docs/api.md names as outside the tree, on purpose."""
    prose = _errors_section().split("outside the tree on purpose", 1)[1]
    import builtins

    return set(re.findall(r"`([A-Z][A-Za-z]*Error)`", prose)) - set(vars(builtins))


def test_every_exception_class_of_the_core_is_in_the_tree_or_named_outside_it() -> None:
    """An exception class anywhere in nanobot-core, private modules included, is a
    NanobotError or one that docs/api.md names as outside the tree (or a `_`-named one)."""
    import pkgutil

    root = nanobot_core.NanobotError
    outside: set[str] = set()
    for found in pkgutil.walk_packages(nanobot_core.__path__, "nanobot_core."):
        if found.name == "nanobot_core.__main__":
            continue
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and not issubclass(value, root)
            ):
                outside.add(name)
    assert "NetworkBlockedError" in outside
    assert outside == _named_outside()
