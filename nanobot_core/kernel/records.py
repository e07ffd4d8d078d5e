"""What the kernel knows about a plugin: where it comes from, its state, what it contributed."""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any, Literal

import attrs

from nanobot_core._clip import quoted

__all__ = [
    "BUILTIN_PLUGINS",
    "MAX_NAME_CHARS",
    "Contribution",
    "Kind",
    "PluginInfo",
    "PluginRecord",
    "Source",
    "Status",
    "builtin_info",
    "canonical_name",
    "core_version",
    "name_problem",
]

Source = Literal["builtin", "nanobot.tools", "nanobot.plugins"]
Status = Literal["loaded", "failed", "blocked"]
Kind = Literal["tool", "stage", "section", "provider", "store"]

# Built-in plugin names start with "builtin:" so that no distribution can claim them.
BUILTIN_PLUGINS: dict[str, str] = {
    "builtin:tools": "nanobot_core.builtins.workspace_tools",
    "builtin:governance": "nanobot_core.builtins.governance",
    "builtin:prompt": "nanobot_core.builtins.prompt",
    "builtin:providers": "nanobot_core.builtins.providers",
    "builtin:sessions": "nanobot_core.builtins.sessions",
}


def canonical_name(name: str) -> str:
    """Normalise a distribution name the way packaging does (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: The longest stage or section name: far more than a name that says what a thing is
#: needs, and short enough for a config key, a log line and every report that repeats it.
MAX_NAME_CHARS = 128


def name_problem(what: str, value: object) -> str | None:
    """Why `value` cannot name a `what` (a stage, a section), or None when it can.

    Any text but an empty or blank one, one holding a control character, or one
    longer than `MAX_NAME_CHARS`: such a name cannot be written in a config table
    (``[governance.stages.NAME]``) or a log line as it is, a line break in it would
    split a report in two, and every report, warning and ``--json`` line repeats it.
    """
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_NAME_CHARS
        or any(unicodedata.category(char) == "Cc" for char in value)
    ):
        return (
            f"a {what} name must be a non-empty string without control characters, "
            f"at most {MAX_NAME_CHARS} characters long, got {quoted(value)}"
        )
    return None


@functools.cache
def core_version() -> str:
    """The installed version of nanobot-core (``0+unknown`` when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nanobot-core")
    except PackageNotFoundError:
        return "0+unknown"


@attrs.frozen
class PluginInfo:
    """Where a plugin comes from."""

    name: str
    source: Source
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None

    @property
    def builtin(self) -> bool:
        """Whether this is one of the core's own plugins."""
        return self.source == "builtin"

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """The canonical order: built-ins first, then by distribution, then by entry-point name."""
        if self.builtin:
            rank = list(BUILTIN_PLUGINS).index(self.name) if self.name in BUILTIN_PLUGINS else 99
            return (0, f"{rank:03d}", self.name)
        return (1, canonical_name(self.distribution or ""), self.name)

    def describe(self) -> str:
        """The plugin, its distribution and version, as every message names a plugin.

        ``plugin 'redact' from nanobot-redact 0.1.0``, ``built-in plugin
        'builtin:governance' from nanobot-core 0.1.0``; what is not known is
        left out (``plugin 'notes' version 2.1.0``, ``plugin 'notes'``).
        """
        kind = "built-in plugin" if self.builtin else "plugin"
        if self.distribution:
            where = " ".join(part for part in ("from", self.distribution, self.version) if part)
        else:
            where = f"version {self.version}" if self.version else ""
        return f"{kind} {self.name!r}" + (f" {where}" if where else "")


def builtin_info(name: str) -> PluginInfo:
    """The `PluginInfo` of the built-in plugin `name`: part of nanobot-core, at its version."""
    return PluginInfo(
        name=name, source="builtin", distribution="nanobot-core", version=core_version()
    )


@attrs.frozen
class Contribution:
    """One item (tool, stage, section, provider, session store) contributed by one plugin."""

    kind: Kind
    name: str
    item: Any
    plugin: PluginInfo
    shadowed_by: str | None = None
    #: For a tool: what the core read of it as it was collected, once (a
    #: `nanobot_core.tools.registry.LoadedTool`, not imported here: the kernel's records
    #: come before the tools), which the tool registry is built from without reading the
    #: tool again. None for other kinds.
    loaded: Any = attrs.field(default=None, eq=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The ``{kind, name[, shadowed_by]}`` object of ``nanobot-core plugins --json``."""
        data: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.shadowed_by is not None:
            data["shadowed_by"] = self.shadowed_by
        return data


@attrs.define
class PluginRecord:
    """The state of one plugin: loaded, failed or blocked, with what it contributed."""

    info: PluginInfo
    status: Status
    error: str | None = None
    hooks: list[str] = attrs.field(factory=list)
    contributions: list[Contribution] = attrs.field(factory=list)
    obj: Any = attrs.field(default=None, repr=False)
    #: What was left out of a loaded plugin, one line each: a tool the core refused (an
    #: invalid schema), or what the plugin reported with `nanobot_core.report_problem`.
    problems: list[str] = attrs.field(factory=list)

    def to_json(self) -> dict[str, Any]:
        """The object printed by ``nanobot-core plugins --json``."""
        return {
            "name": self.info.name,
            "distribution": self.info.distribution,
            "version": self.info.version,
            "source": self.info.source,
            "entry_point": self.info.entry_point,
            "status": self.status,
            "error": self.error,
            "hooks": sorted(self.hooks),
            "contributions": [c.to_json() for c in self.contributions],
            "problems": list(self.problems),
        }

    def add_problem(self, problem: str) -> bool:
        """Add `problem` to `problems` unless it is listed already; whether it was new."""
        if problem in self.problems:
            return False
        self.problems.append(problem)
        return True
