"""The governance budget measured in real tokens once the plugin is installed.

Expected figures are derived by hand: the core charges 4 tokens per message
(and for the system prompt) plus the tokens of every string in it; in
cl100k_base "user" and "assistant" are one token each, and the other strings
have the published counts used in test_tokenizer_counts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nanobot_core import Governor, PluginManager
from nanobot_core.testing import builtin_governor, make_config

from nanobot_tokenizer import ENCODING_ENV, BpeTokenCounter

SYSTEM = "tiktoken is great!"  # 6 tokens
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "お誕生日おめでとう"},  # 9 tokens
    {"role": "assistant", "content": "2 + 2 = 4"},  # 7 tokens
    {"role": "user", "content": "antidisestablishmentarianism"},  # 6 tokens
]
# (4 + 6) + (4 + 1 + 9) + (4 + 1 + 7) + (4 + 1 + 6)
REAL_TOKENS = 47
# The same request under the built-in estimate (4 UTF-8 bytes a token, rounded up):
# (4 + 5) + (4 + 1 + 7) + (4 + 3 + 3) + (4 + 1 + 7)
ESTIMATED_TOKENS = 43


def governor(counter: Any, input_limit: int | None = None) -> Governor:
    config = make_config({"governance": {"input_limit": input_limit}})
    return builtin_governor(config, counter=counter)


def test_the_governor_reports_real_token_counts() -> None:
    """With the BPE counter, the request size is the exact cl100k count."""
    result = governor(BpeTokenCounter("cl100k_base")).govern(HISTORY, system=SYSTEM)
    assert result.tokens == REAL_TOKENS
    assert result.messages is HISTORY


def test_a_small_window_is_enforced_in_real_tokens() -> None:
    """A budget the estimate would meet but the real count exceeds makes the governor trim."""
    limit = 45
    estimated = governor(None, limit).govern(HISTORY, system=SYSTEM)
    assert (estimated.tokens, estimated.changed) == (ESTIMATED_TOKENS, False)

    result = governor(BpeTokenCounter("cl100k_base"), limit).govern(HISTORY, system=SYSTEM)
    assert result.changed
    assert result.messages == [HISTORY[-1]]
    assert result.tokens == (4 + 6) + (4 + 1 + 6)
    assert result.fits


def test_the_installed_plugin_supplies_the_governors_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the plugin manager, the governor counts with this plugin, in the model's encoding."""

    monkeypatch.delenv(ENCODING_ENV, raising=False)
    config = make_config({"provider": {"model": "gpt-4"}, "governance": {"input_limit": 45}})
    manager = PluginManager(config, workspace=tmp_path).load()
    counter = manager.token_counter().counter  # the core checks every count of a plugin's
    assert isinstance(counter, BpeTokenCounter)
    assert counter.encoding == "cl100k_base"
    result = manager.governor().govern(HISTORY, system=SYSTEM)
    assert result.messages == [HISTORY[-1]]
    assert result.tokens == 21
