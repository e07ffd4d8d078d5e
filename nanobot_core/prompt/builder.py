"""The prompt builder: renders sections in order and joins them into the system prompt."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._containment import PluginEscapeError, describe, plugin_code
from nanobot_core._json_boundary import without_lone_surrogates
from nanobot_core._logging import get_logger
from nanobot_core.config import Config, source_of
from nanobot_core.kernel.records import PluginInfo
from nanobot_core.prompt.section import Section, SectionContext

if TYPE_CHECKING:
    from nanobot_core.kernel.manager import PluginManager

__all__ = ["SEPARATOR", "BuiltPrompt", "PromptBuilder", "SectionReport"]

log = get_logger("nanobot_core.prompt")

# A horizontal rule on a line of its own, with a blank line either side.
SEPARATOR = "\n\n---\n\n"


@attrs.frozen
class SectionReport:
    """What became of one section: its size in the prompt, or why it was left out.

    `plugin` is the name of the plugin that contributed the section, `version`
    that plugin's version (None when not known).
    """

    name: str
    plugin: str
    chars: int
    skipped: bool
    reason: str | None = None
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The object printed by ``nanobot-core prompt --json``."""
        return {
            "name": self.name,
            "plugin": self.plugin,
            "version": self.version,
            "chars": self.chars,
            "skipped": self.skipped,
            "reason": self.reason,
        }


@attrs.frozen
class BuiltPrompt:
    """The system prompt text, with a report per section in prompt order."""

    text: str
    sections: list[SectionReport]


@attrs.frozen
class _Placed:
    section: Section
    plugin: PluginInfo
    order: float
    taken_by: str | None = None  # the label of the plugin whose section has the same name


class PromptBuilder:
    """Builds the system prompt from sections, each paired with its plugin.

    The plugin is a `PluginInfo` (what the plugin manager passes: messages and
    reports then give its version) or just its name.

    Sections are ordered by their order key (``config.prompt.order`` overrides
    it by name), ties broken by name; those named in ``config.prompt.disabled``
    are left out. A section that raises or returns something other than text is
    left out and reported; it never breaks the prompt.
    """

    def __init__(
        self, sections: Iterable[tuple[Section, str | PluginInfo]], *, config: Config
    ) -> None:
        self.config = config
        self._placed = _place(sections, config)
        known = {p.section.name for p in self._placed}
        disabled, order = config.prompt.disabled, config.prompt.order
        for name in sorted(set(disabled) - known):
            log.warning(
                "unknown section name in prompt config",
                name=name,
                key="prompt.disabled",
                **source_of(disabled),
            )
        for name in sorted(set(order) - known):
            log.warning(
                "unknown section name in prompt config",
                name=name,
                key=f"prompt.order.{name}",
                **source_of(order, name),
            )

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> PromptBuilder:
        """The builder over every plugin's sections, each labelled with its plugin."""
        return cls([(c.item, c.plugin) for c in pm.contributions("section")], config=pm.config)

    def section_names(self) -> list[str]:
        """The names of the sections in prompt order, disabled ones included."""
        return [p.section.name for p in self._placed if p.taken_by is None]

    def build(self, ctx: SectionContext) -> BuiltPrompt:
        """Render every section for `ctx` and join the non-empty ones with `SEPARATOR`."""
        disabled = set(self.config.prompt.disabled)
        parts: list[str] = []
        reports: list[SectionReport] = []
        for placed in self._placed:
            if placed.taken_by is not None:
                reports.append(_skipped(placed, f"name already taken by {placed.taken_by}"))
                continue
            if placed.section.name in disabled:
                reports.append(_skipped(placed, "disabled in config"))
                continue
            text, reason = _render(placed, ctx)
            if text is None:
                reports.append(_skipped(placed, reason))
                continue
            text, cut = _bounded(placed, text, self.config.prompt.max_section_chars)
            parts.append(text)
            owner = placed.plugin
            reports.append(
                SectionReport(placed.section.name, owner.name, len(text), False, cut, owner.version)
            )
        return BuiltPrompt(SEPARATOR.join(parts), reports)


def _place(sections: Iterable[tuple[Section, str | PluginInfo]], config: Config) -> list[_Placed]:
    """Order the sections; a repeated name keeps its first owner, and the rest are marked."""
    owners: dict[str, str] = {}
    placed: list[_Placed] = []
    for pair in sections:
        if isinstance(pair, Section):
            raise TypeError("PromptBuilder takes (Section, plugin) pairs, not bare Sections")
        section, plugin = pair
        # A bare name says nothing of where the plugin comes from: it is named alone.
        owner = plugin if isinstance(plugin, PluginInfo) else PluginInfo(plugin, "nanobot.plugins")
        order = float(config.prompt.order.get(section.name, section.order))
        placed.append(_Placed(section, owner, order, owners.get(section.name)))
        owners.setdefault(section.name, owner.describe())
    # sort() is stable, so a repeated name is reported right after the section that kept it.
    placed.sort(key=lambda p: (p.order, p.section.name, p.taken_by is not None))
    return placed


def _render(placed: _Placed, ctx: SectionContext) -> tuple[str | None, str]:
    """The section's text with surrounding whitespace removed, or None and the reason why not."""
    try:
        # Plugin code: what it prints goes to the log, and SystemExit is stopped here.
        with plugin_code(f"prompt section {placed.section.name!r} of {placed.plugin.describe()}"):
            value = placed.section.render(ctx)
    except Exception as exc:  # a broken section must not break the prompt
        escaped = isinstance(exc, PluginEscapeError)
        reason = str(exc) if escaped else f"raised {describe(exc)}"  # its message is its code
        log.error(
            "prompt section raised; left out",
            section=placed.section.name,
            plugin=placed.plugin.describe(),
            error=reason,
        )
        return None, reason
    if value is None:
        return None, "rendered nothing"
    if not isinstance(value, str):
        reason = f"returned {type(value).__name__}, expected str or None"
        log.error(
            "prompt section returned a non-string; left out",
            section=placed.section.name,
            plugin=placed.plugin.describe(),
            returned=reason,
        )
        return None, reason
    # A str subclass is text, but its methods are the plugin's code, run outside the guard
    # above: its characters are taken as a plain str (str.__str__ copies them) first.
    plain = str.__str__(value)
    # A lone surrogate (a file name that is not UTF-8, half of an emoji) cannot be
    # encoded: it becomes U+FFFD here, as the request would carry it.
    text = without_lone_surrogates(plain.strip())
    return (text, "") if text else (None, "rendered nothing")


def _bounded(placed: _Placed, text: str, limit: int) -> tuple[str, str | None]:
    """`text` within `limit` characters (its head, then a notice), and what its report says.

    One section of fifty million characters would go into every request, past any
    model's window: the head is kept, as a workspace file over its limit keeps it.
    """
    if len(text) <= limit:
        return text, None
    name = placed.section.name
    reason = f"cut to its first {limit:,} of {len(text):,} characters (prompt.max_section_chars)"
    log.warning(
        "prompt section longer than prompt.max_section_chars; only its start goes in",
        section=name,
        plugin=placed.plugin.describe(),
        chars=len(text),
        max_section_chars=limit,
        key="prompt.max_section_chars",
    )
    # The head is taken whole before the notice is added, so the limit bounds what the
    # section brings, and the notice (a name of at most 128 characters) stays short.
    notice = f"\n\n[The {name} section was {reason}.]"
    return text[:limit].rstrip() + notice, reason


def _skipped(placed: _Placed, reason: str) -> SectionReport:
    owner = placed.plugin
    return SectionReport(placed.section.name, owner.name, 0, True, reason, owner.version)
