"""``nanobot-core new-plugin``: a ready-to-install plugin project from a template."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import keyword
import re
import string
import sys
from importlib import resources
from pathlib import Path

import attrs

__all__ = [
    "KINDS",
    "PluginProject",
    "name_taken",
    "render_project",
    "shadowed_builtin",
    "shadowed_tool",
    "validate_name",
    "write_project",
]

KINDS = ("tool", "stage", "section")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*$")
#: Folders hatchling leaves out of every build, whatever `packages` says (its output folder).
_EXCLUDED_BY_HATCHLING = frozenset({"dist"})
#: Last words of a distribution name that the tool class's own ``Tool`` suffix says already
#: (compared lower-cased: ``weather-TOOL`` says it too).
_SAID_BY_SUFFIX = frozenset({"tool", "tools", "plugin"})
#: The words of one ``-``/``_``-separated part as its case shows them: ``myHTTPTool`` is
#: ``my``, ``HTTP``, ``Tool``. Only where the user wrote a boundary: ``weathertool`` is one.
_CASE_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


@attrs.frozen
class PluginProject:
    """The names a new plugin project is built from."""

    distribution: str
    kind: str

    @property
    def package(self) -> str:
        """The import package: the distribution name in snake case."""
        return self.distribution.lower().replace("-", "_")

    @property
    def class_name(self) -> str:
        """A CamelCase class name for the tool, keeping the case written inside each word.

        ``weather-tool`` (``weather-tools``, ``weatherTool``, ``weather-plugin``)
        gives ``WeatherTool``, not ``WeatherToolTool``; ``myHTTP-tool`` gives
        ``MyHTTPTool``. A word ending in "tool" with no boundary written before it
        (``weathertool``) is kept whole and gets no second suffix: ``Weathertool``.
        """
        words = [
            word[:1].upper() + word[1:]
            for part in re.split(r"[-_]", self.distribution)
            for word in _CASE_WORD.findall(part)
        ]
        # The class is a tool already: words saying so again, at the end, are a stutter.
        # What is left must still name something ("tool" alone stays "ToolTool").
        while len(words) > 1 and words[-1].lower() in _SAID_BY_SUFFIX:
            words.pop()
        last = words[-1].lower()
        # "weathertool" may be "weather tool", but "stool" or "footstool" are no such
        # pair: cutting the word would change what the user wrote, so it stays whole,
        # and already ends in "tool" (only "tool" or "tools" alone still need the suffix).
        if last.endswith(("tool", "tools")) and last not in _SAID_BY_SUFFIX:
            return "".join(words)
        return "".join(words) + "Tool"

    def substitutions(self) -> dict[str, str]:
        """The ``$names`` the templates use."""
        return {
            "distribution": self.distribution,
            "package": self.package,
            "class_name": self.class_name,
            "kind": self.kind,
        }


def validate_name(name: str) -> str | None:
    """Return why `name` cannot be a distribution name, or None when it can."""
    if not _NAME.fullmatch(name):  # `$` alone also matches before a final line break
        return (
            "must start with a letter and contain only letters, digits, and single '-' or '_' "
            "between them"
        )
    if len(name) > 64:
        return "must be at most 64 characters"
    package = PluginProject(distribution=name, kind="tool").package
    if keyword.iskeyword(package):
        return f"is a Python keyword: its package {package!r} could not be imported"
    return None


def name_taken(name: str) -> str | None:
    """Why `name` would clash with something installed, or None when it is free.

    A new project installed under the core's name, an installed distribution's
    name, or an importable module's name would replace or shadow it; so would
    a standard-library module of another platform (``winreg``). A package
    named ``dist`` would be left out of the wheel by hatchling.
    """
    canonical = re.sub(r"[-_.]+", "-", name).lower()
    package = PluginProject(distribution=name, kind="tool").package
    if canonical == "nanobot-core":
        return "is nanobot-core's own name; installing it would replace the core"
    try:
        found = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        return f"is the name of the installed distribution {found.metadata['Name']}"
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        return f"would install the package {package!r}, which is already importable"
    if package in sys.stdlib_module_names:
        return f"is the name of the standard library module {package!r}"
    if package in _EXCLUDED_BY_HATCHLING:
        return f"would install the package {package!r}, a folder hatchling leaves out of the wheel"
    return None


def shadowed_tool(project: PluginProject) -> str | None:
    """The built-in tool whose name a tool project's tool would take (the built-in wins)."""
    from nanobot_core.tools.builtin import BUILTIN_TOOLS

    if project.kind != "tool":
        return None
    # The built-ins set `name` as a class attribute (a string), not the base class's property.
    builtin: set[object] = {tool_class.name for tool_class in BUILTIN_TOOLS}
    return project.package if project.package in builtin else None


def shadowed_builtin(project: PluginProject) -> str | None:
    """The built-in tool, stage or section whose name the project's contribution would take."""
    if project.kind == "tool":
        return shadowed_tool(project)
    if project.kind == "stage":
        from nanobot_core.governance.stages import builtin_stages

        names = {stage.name for stage in builtin_stages()}
    else:
        from nanobot_core.prompt import builtin_sections

        names = {section.name for section in builtin_sections()}
    return project.package if project.package in names else None


def render_project(project: PluginProject) -> dict[str, str]:
    """Every file of the project, as relative path -> content."""
    root = resources.files("nanobot_core.scaffold") / "templates"
    files: dict[str, str] = {}
    for folder in ("common", project.kind):
        for entry in sorted((root / folder).iterdir(), key=lambda e: e.name):
            relative = (
                entry.name.removesuffix(".tmpl")
                .replace("~", "/")
                .replace("PACKAGE", project.package)
            )
            template = string.Template(entry.read_text(encoding="utf-8"))
            files[relative] = template.substitute(project.substitutions())
    return files


def write_project(project: PluginProject, directory: Path) -> list[Path]:
    """Write the project into `directory`, which must not exist yet; return the files written.

    An ``OSError`` part of the way (a full disk, a quota, a name too long) takes back
    what was written, the files this call wrote and the folders it made (a folder
    only when it is empty), so that the same command can be run again once the
    cause is gone; nothing else is touched. No file is written over.
    """
    made = _missing_folders(directory)  # outermost first
    written: list[Path] = []
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            directory.mkdir()
        except FileExistsError:  # made meanwhile by someone else: theirs, not taken back
            made = [folder for folder in made if folder != directory]
            raise
        for relative, content in render_project(project).items():
            path = directory / relative
            missing = _missing_folders(path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            made.extend(missing)
            # "x": a file that appeared meanwhile (another program's) is not written over.
            with path.open("x", encoding="utf-8") as handle:
                written.append(path)
                handle.write(content)
    except OSError:
        _take_back(written, made)
        raise
    return written


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that are not there yet, outermost first."""
    return [path for path in (*reversed(folder.parents), folder) if not path.exists()]


def _take_back(written: list[Path], made: list[Path]) -> None:
    """Remove the files `write_project` wrote and the folders it made, innermost first."""
    for path in reversed(written):
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in reversed(made):
        with contextlib.suppress(OSError):  # not empty (something else is in it): kept
            folder.rmdir()
