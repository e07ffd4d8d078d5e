"""The defaults docs/headless.md gives for the provider and runner settings are the code's."""

from __future__ import annotations

import re
from typing import Any

from nanobot_core import Config
from tests.helpers import REPO_ROOT


def _stated_defaults() -> dict[str, str]:
    """Each config key of the settings table and the default it states in parentheses."""
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    section = text.split("## Pointing it at a model", 1)[1].split("**OpenAI**", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    return dict(re.findall(r"`([a-z_]+\.[a-z_]+)` \((?:default )?`?([^`,)]+)`?[,)]", table))


def test_the_settings_table_states_the_code_defaults() -> None:
    """Every default in the table of settings equals the `Config` default of its key."""
    stated = _stated_defaults()
    assert {"provider.name", "provider.timeout", "runner.max_iterations"} <= set(stated)
    config = Config()
    for key, text in stated.items():
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part)
        assert text == (value if isinstance(value, str) else f"{value:.15g}"), key
