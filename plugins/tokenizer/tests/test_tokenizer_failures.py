"""A backend that cannot load or cannot count: a clear error naming the plugin, or the estimate."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot_core import PluginContext, PluginManager
from nanobot_core.testing import builtin_governor, make_config
from structlog.testing import capture_logs

import nanobot_tokenizer
import nanobot_tokenizer.counter as counter_module
from nanobot_tokenizer import BpeTokenCounter, TokenizerUnavailable, nanobot_token_counter

HISTORY = [{"role": "user", "content": "How many tokens is this?"}]


@pytest.fixture
def unloadable_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make `import bpe_openai` fail, as a missing or broken install does."""
    counter_module.load_encoding.cache_clear()
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    yield
    counter_module.load_encoding.cache_clear()


class _BrokenEncoder:
    def encode_ordinary(self, text: str) -> list[int]:
        raise RuntimeError("backend fault")


@pytest.fixture
def failing_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoding that loads but raises on every count."""
    monkeypatch.setattr(counter_module, "load_encoding", lambda name: _BrokenEncoder())


@pytest.mark.usefixtures("unloadable_backend")
def test_a_backend_that_cannot_load_fails_the_hook(tmp_path: Path) -> None:
    """The hook loads the encoding, so a backend that cannot load fails it, naming why."""
    ctx = PluginContext(workspace=tmp_path, config=make_config({}))
    expected = r"bpe-openai .*o200k_base encoding: ModuleNotFoundError"
    with pytest.raises(TokenizerUnavailable, match=expected):
        nanobot_token_counter(ctx)


@pytest.mark.usefixtures("unloadable_backend")
def test_a_backend_that_cannot_load_leaves_the_estimate(tmp_path: Path) -> None:
    """Installed but unloadable, the plugin is listed as failed; the governor uses the estimate."""
    manager = PluginManager(make_config({}), workspace=tmp_path).load()
    assert manager.token_counter() == builtin_governor(make_config({})).counter  # the estimate
    mine = [r for r in manager.records() if r.info.distribution == "nanobot-tokenizer"]
    assert [r.status for r in mine] == ["failed"]
    assert "bpe-openai cannot load the o200k_base encoding" in (mine[0].error or "")
    result = manager.governor().govern(HISTORY)
    assert result.messages is HISTORY


@pytest.mark.usefixtures("failing_backend")
def test_a_count_that_fails_falls_back_to_the_estimate(tmp_path: Path) -> None:
    """A backend raising while counting gives the estimate, logged once naming the plugin."""
    manager = PluginManager(make_config({}), workspace=tmp_path).load()
    with capture_logs() as logs:
        result = manager.governor().govern(HISTORY, system="hi")
    assert result.tokens == builtin_governor(make_config({})).govern(HISTORY, system="hi").tokens
    warned = [e for e in logs if e["event"].startswith("token counter failed")]
    assert len(warned) == 1
    assert f"nanobot-tokenizer {metadata.version('nanobot-tokenizer')}" in warned[0]["plugin"]
    assert warned[0]["why"] == "raised RuntimeError: backend fault"


@pytest.mark.usefixtures("failing_backend")
@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.text(max_size=200))
def test_a_failing_count_is_always_the_estimate(text: str) -> None:
    """Whatever the text, lone surrogates included, a failing backend yields the estimate.

    The plugin is registered here, not discovered: were it not installed, the
    built-in estimate would answer and the test would pass whatever the core did.
    """
    manager = PluginManager(make_config({}), workspace=Path.cwd(), autoload=False)
    record = manager.register(nanobot_tokenizer, "tokenizer")
    counter = manager.token_counter()
    assert record.status == "loaded"
    assert isinstance(counter.counter, BpeTokenCounter)  # the plugin's, checked by the core
    counted = counter.count_text(text)
    assert counted == builtin_governor(make_config({})).counter.count_text(text)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=200))
def test_any_text_counts_without_raising(text: str) -> None:
    """Any text (NUL, lone surrogates, markers) counts to a whole number, 1 or more unless empty."""
    for encoding in ("o200k_base", "cl100k_base"):
        count = BpeTokenCounter(encoding).count_text(text)
        assert isinstance(count, int)
        assert count >= (1 if text else 0)
