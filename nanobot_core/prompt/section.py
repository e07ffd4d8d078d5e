"""The section: one named, ordered piece of the system prompt."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from nanobot_core.config import Config
from nanobot_core.kernel.context import as_path
from nanobot_core.kernel.records import name_problem

__all__ = ["RenderFunction", "Section", "SectionContext"]


@attrs.frozen
class SectionContext:
    """What a section renders from: the workspace, the channel and session, and the config.

    Everything here must be stable for the life of a session, because the system
    prompt has to stay byte-identical from turn to turn (provider prompt caches
    depend on it). Per-turn facts such as the time go in the runtime block instead.
    """

    # A str is taken as the path it names: every built-in section joins paths onto it.
    workspace: Path = attrs.field(converter=as_path)
    channel: str | None = None
    session: str | None = None
    config: Config = attrs.field(factory=Config)

    @config.validator
    def _check_config(self, _attribute: Any, value: Any) -> None:
        # Every built-in section reads it: anything else would fail in each of them, and a
        # failing section is only logged (the prompt goes out without it).
        if not isinstance(value, Config):
            raise TypeError(
                f"SectionContext: config must be a Config (or left out), got {type(value).__name__}"
            )


RenderFunction = Callable[[SectionContext], str | None]


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    problem = name_problem("section", value)
    if problem is not None:
        raise ValueError(problem)


def _check_order(_instance: Any, _attribute: Any, value: Any) -> None:
    # bool is an int, but `order=True` is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"a section order must be a finite number, got {value!r}")


def _check_render(_instance: Any, _attribute: Any, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"a section's render must be callable, got {type(value).__name__}")


@attrs.frozen
class Section:
    """A named piece of the system prompt, placed by its order key (ties broken by name).

    `render` turns a :class:`SectionContext` into text; returning ``None`` or an
    empty string leaves the section out. The built-in sections use the keys 100
    (``identity``) to 500 (``skills``) in steps of 100.
    """

    name: str = attrs.field(validator=_check_name)
    order: float = attrs.field(validator=_check_order)
    render: RenderFunction = attrs.field(validator=_check_render)
