"""The README's configuration block names every config key, with a value the key takes."""

from __future__ import annotations

import re
import tomllib
import typing
from typing import Any

import attrs
import pytest

from nanobot_core import config as config_module
from nanobot_core.config import Config, structure_config
from nanobot_core.errors import ConfigError
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


def _refusal_sentence() -> str:
    """The README sentence that lists the numbers a config refuses, up to its NaN clause."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    start = section.index("A number no use can work with")
    return " ".join(section[start : section.index("NaN", start)].split())


def _keys_in(clause: str) -> list[str]:
    return re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", clause)


def _table_of(key: str, value: object) -> dict[str, Any]:
    """The config tree that sets dotted `key` to `value`."""
    tree: dict[str, Any] = {}
    node = tree
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return tree


def _positive_keys() -> list[str]:
    sentence = _refusal_sentence()
    return _keys_in(sentence.split("of 0 or less", 1)[0])


def _non_negative_keys() -> list[str]:
    sentence = _refusal_sentence()
    return _keys_in(sentence.split("of 0 or less", 1)[1].split("a negative", 1)[1].split(";")[0])


def test_the_readme_names_every_bounded_number() -> None:
    """Each number the config checks against a bound of 0 is in the README's list for its bound."""
    expected = {">": set(_positive_keys()), ">=": set(_non_negative_keys())}
    missing = [
        (path, relation)
        for path, relation, bound in config_module._BOUNDS
        if bound == 0 and path not in expected[relation]
    ]
    assert missing == []


@pytest.mark.parametrize("key", _positive_keys())
def test_a_key_the_readme_says_must_be_positive_refuses_0(key: str) -> None:
    """A key listed as refused at 0 or less is refused at 0, naming the key."""
    with pytest.raises(ConfigError, match=re.escape(key)):
        structure_config(_table_of(key, 0), source="README.md")


@pytest.mark.parametrize("key", _non_negative_keys())
def test_a_key_the_readme_says_must_not_be_negative_takes_0_and_refuses_minus_1(key: str) -> None:
    """A key listed as refused when negative takes 0 and refuses -1, naming the key."""
    assert isinstance(structure_config(_table_of(key, 0), source="README.md"), Config)
    with pytest.raises(ConfigError, match=re.escape(key)):
        structure_config(_table_of(key, -1), source="README.md")
