"""The plugin side: which encoding the hook picks, and discovery through the entry point."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot_core import Config, ConfigError, PluginContext
from nanobot_core.testing import builtin_governor, make_config, run_cli

from nanobot_tokenizer import ENCODING_ENV, encoding_for_model, nanobot_token_counter
from nanobot_tokenizer.encodings import _MODELS, ENCODINGS


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-oss-120b", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("text-embedding-ada-002", "cl100k_base"),
        ("openrouter/openai/gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4", "o200k_base"),
        ("llama-3.1-70b", "o200k_base"),
        ("ft:gpt-3.5-turbo-0125:acme::8abcDEF", "cl100k_base"),
        ("ft:gpt-4-0613:acme:custom-suffix:9xyz", "cl100k_base"),
        ("openai/ft:gpt-3.5-turbo:acme::id", "cl100k_base"),
        ("FT:GPT-4O-MINI-2024-07-18:acme::id", "o200k_base"),
        ("davinci-002", "cl100k_base"),
        ("babbage-002", "cl100k_base"),
        ("ft:davinci-002:acme::8abc", "cl100k_base"),
        ("openai/ft:babbage-002:acme:custom:9xyz", "cl100k_base"),
        ("text-davinci-003", "p50k_base"),
        ("code-davinci-002", "p50k_base"),
        ("code-cushman-001", "p50k_base"),
        ("text-davinci-edit-001", "p50k_edit"),
        ("text-davinci-001", "r50k_base"),
        ("davinci", "r50k_base"),
        ("ada:ft-acme-2022-03-01", "r50k_base"),
        ("adamant-7b", "o200k_base"),
        ("curie-local", "o200k_base"),
        ("text-search-ada-doc-001", "r50k_base"),
        ("gpt2", "gpt2"),
        ("gpt2-medium", "o200k_base"),
    ],
)
def test_models_map_to_their_encodings(model: str, encoding: str) -> None:
    """OpenAI models get tiktoken's encoding, fine-tuned ones their base's; others o200k_base."""
    assert encoding_for_model(model) == encoding


@settings(derandomize=True, deadline=None, max_examples=200)
@given(
    st.sampled_from([entry.rstrip("*") for entry, _ in _MODELS] + ["claude-3", "qwen3:8b"]),
    st.text(st.characters(blacklist_characters="/"), max_size=30),
    st.from_regex(r"[a-z0-9-]{0,12}:[a-z0-9-]{0,12}:[A-Za-z0-9]{0,12}", fullmatch=True),
)
def test_a_fine_tuned_model_counts_as_its_base_model(base: str, rest: str, suffix: str) -> None:
    """Whatever the base model, OpenAI's ``ft:BASE:ORG:NAME:ID`` has the encoding of BASE."""
    model = f"{base}{rest}"
    assert encoding_for_model(f"ft:{model}:{suffix}") == encoding_for_model(f"{model}:{suffix}")


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


def test_the_plugins_command_lists_the_plugin_and_its_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nanobot-core plugins`` shows the plugin loaded; ``--json`` names its hook."""
    monkeypatch.delenv(ENCODING_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    listed = run_cli("--strict", "plugins")
    assert listed.returncode == 0, listed.stderr
    version = metadata.version("nanobot-tokenizer")
    assert f"tokenizer (nanobot-tokenizer {version}) [nanobot.plugins] loaded" in listed.stdout
    rows = json.loads(run_cli("plugins", "--json").stdout)
    (row,) = [r for r in rows if r["distribution"] == "nanobot-tokenizer"]
    assert row["hooks"] == ["nanobot_token_counter"]


def test_a_bad_encoding_name_fails_the_plugin_and_leaves_the_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name other than the two makes the plugin fail (--strict: exit 1); the estimate counts."""
    from nanobot_core import PluginManager

    monkeypatch.setenv(ENCODING_ENV, "gpt2")
    monkeypatch.chdir(tmp_path)
    manager = PluginManager(make_config({}), workspace=tmp_path).load()
    assert manager.token_counter() == builtin_governor(make_config({})).counter
    listed = run_cli("plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    version = metadata.version("nanobot-tokenizer")
    at = lines.index(f"tokenizer (nanobot-tokenizer {version}) [nanobot.plugins] failed")
    assert lines[at + 1].endswith(
        f"ConfigError: environment variable {ENCODING_ENV}: 'gpt2' is not an encoding this "
        "plugin ships (choose one of o200k_base, cl100k_base)"
    )
    strict = run_cli("--strict", "plugins")
    assert strict.returncode == 1


def _readme_section() -> str:
    """The README's "Which encoding" section, its whitespace runs made single spaces."""
    readme = Path(__file__).resolve().parents[1] / "README.md"
    section = readme.read_text("utf-8").split("## Which encoding", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())


def _readme_models() -> dict[str, set[str]]:
    """The model names and prefixes the README's "Which encoding" section gives each encoding."""
    text = _readme_section()
    sentence = text.split("Chosen from `provider.model`: ", 1)[1].split("; router", 1)[0]
    found: dict[str, set[str]] = {}
    for clause in sentence.split(";"):
        encoding = re.findall(r"use `(\w+)`", clause)[-1]
        found[encoding] = {f"{p}*" for p in re.findall(r"`([\w.-]+)\*`", clause)}
    retired = text.split("whose encodings bpe-openai does not ship are refused: ", 1)[1]
    retired = retired.split("; a name with no", 1)[0]
    for encoding, names in re.findall(r"`(\w+)` \(([^)]*)\)", retired):
        found[encoding] = set(re.findall(r"`([\w.*-]+)`", names))
    return found


def test_the_readme_gives_every_model_its_encoding() -> None:
    """Each model the README lists maps to its encoding, and the README lists every one."""
    listed = _readme_models()
    for encoding, entries in listed.items():
        for entry in entries:
            model = f"{entry[:-1].upper()}-test" if entry.endswith("*") else entry.upper()
            assert encoding_for_model(model) == encoding, entry
    expected: dict[str, set[str]] = {}
    for entry, encoding in _MODELS:
        expected.setdefault(encoding, set()).add(entry)
    assert listed == expected


@pytest.mark.parametrize(
    ("model", "encoding"),
    [("text-davinci-003", "p50k_base"), ("openai/davinci", "r50k_base"), ("gpt-2", "gpt2")],
)
def test_a_retired_model_with_an_encoding_not_shipped_fails_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, encoding: str
) -> None:
    """The plugin refuses such a model, naming it, its encoding, its source and the way out."""
    monkeypatch.delenv(ENCODING_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nanobot.toml").write_text(f'[provider]\nmodel = "{model}"\n', "utf-8")
    listed = run_cli("plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    version = metadata.version("nanobot-tokenizer")
    at = lines.index(f"tokenizer (nanobot-tokenizer {version}) [nanobot.plugins] failed")
    assert lines[at + 1].endswith(
        f"ConfigError: {tmp_path / 'nanobot.toml'}: model {model!r} is tokenized with "
        f"{encoding}, which this plugin does not ship (it ships {', '.join(ENCODINGS)}); "
        f"to count with one of those anyway, which gives fewer tokens than {encoding} does, "
        f"set {ENCODING_ENV}"
    )
    assert run_cli("--strict", "plugins").returncode == 1
    monkeypatch.setenv(ENCODING_ENV, "cl100k_base")
    assert nanobot_token_counter(context(tmp_path, model)).encoding == "cl100k_base"
