"""The plugin side: which encoding the hook picks, and discovery through the entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from nanobot_core import Config, ConfigError, PluginContext
from nanobot_core.testing import make_config

from nanobot_tokenizer import ENCODING_ENV, encoding_for_model, nanobot_token_counter


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("llama-3.1-70b", "o200k_base"),
    ],
)
def test_models_map_to_their_encodings(model: str, encoding: str) -> None:
    """OpenAI models get their own encoding; unknown models get o200k_base."""
    assert encoding_for_model(model) == encoding


def context(tmp_path: Path, model: str) -> PluginContext:
    return PluginContext(workspace=tmp_path, config=make_config({"provider": {"model": model}}))


def test_the_hook_follows_the_configured_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an override, the counter uses the encoding of provider.model."""
    monkeypatch.delenv(ENCODING_ENV, raising=False)
    assert nanobot_token_counter(context(tmp_path, "gpt-4")).encoding == "cl100k_base"
    assert nanobot_token_counter(context(tmp_path, "gpt-4o")).encoding == "o200k_base"


def test_the_environment_can_name_the_encoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NANOBOT_TOKENIZER_ENCODING wins over the model; a bad name is a config error."""
    monkeypatch.setenv(ENCODING_ENV, "cl100k_base")
    assert nanobot_token_counter(context(tmp_path, "gpt-4o")).encoding == "cl100k_base"
    monkeypatch.setenv(ENCODING_ENV, "gpt2")
    with pytest.raises(ConfigError, match=ENCODING_ENV):
        nanobot_token_counter(context(tmp_path, "gpt-4o"))


def test_the_installed_plugin_is_discovered(tmp_path: Path) -> None:
    """Installed, nanobot-tokenizer loads through nanobot.plugins and implements the hook."""
    from nanobot_core import PluginManager

    manager = PluginManager(Config(), workspace=tmp_path).load()
    mine = [r for r in manager.records() if r.info.distribution == "nanobot-tokenizer"]
    assert [r.status for r in mine] == ["loaded"]
    assert "nanobot_token_counter" in mine[0].hooks
