"""``nanobot-core new-plugin``: a ready-to-install plugin project from a template."""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path

import attrs

__all__ = ["KINDS", "PluginProject", "render_project", "write_project"]

KINDS = ("tool", "stage", "section")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*$")


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
        """A CamelCase class name for the tool."""
        return "".join(part.capitalize() for part in re.split(r"[-_]", self.distribution)) + "Tool"

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
    if not _NAME.match(name):
        return (
            "must start with a letter and contain only letters, digits, and single '-' or '_' "
            "between them"
        )
    if len(name) > 64:
        return "must be at most 64 characters"
    return None


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
    """Write the project into `directory`, which must not exist yet; return the files written."""
    directory.mkdir(parents=True, exist_ok=False)
    written: list[Path] = []
    for relative, content in render_project(project).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
