"""The README's configuration block names every config key, with a value the key takes."""

from __future__ import annotations

import re
import tomllib
import typing
from typing import Any

import attrs

from nanobot_core.config import Config, structure_config
from tests.helpers import REPO_ROOT


def _block() -> dict[str, Any]:
    """The TOML block of README's "Configuration" section, its commented-out keys included."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    # A key shown commented out (`# input_limit = 100000`) is documented all the same.
    return tomllib.loads(re.sub(r"(?m)^# (?=[a-z_]+ = )", "", block))


def _keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted config key of `cls`, tables left out (their keys are listed)."""
    hints = typing.get_type_hints(cls)
    found: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:  # kept by the loader (where each key was set), not a key
            continue
        tp = hints[field.name]
        if attrs.has(tp):
            found += _keys(tp, f"{prefix}{field.name}.")
        else:
            found.append(f"{prefix}{field.name}")
    return found


def _has(table: dict[str, Any], key: str) -> bool:
    node: Any = table
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_the_readme_config_block_lists_every_key() -> None:
    """Each key of `Config` appears in the README's block (a new key must be documented there)."""
    block = _block()
    assert [key for key in _keys(Config) if not _has(block, key)] == []


def test_the_readme_config_block_is_a_valid_config() -> None:
    """Every value the block shows is one its key accepts."""
    assert isinstance(structure_config(_block(), source="README.md"), Config)
