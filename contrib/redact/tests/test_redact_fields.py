"""Where in a message secrets are looked for: every text, at any depth, but names, ids and proofs.

Fake secrets are assembled at run time so that no secret scanner mistakes this
file for a leak.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot_core import STRUCTURAL_KEYS, Config, Governor, PluginContext
from nanobot_core.testing import govern_and_check

from nanobot_redact import (
    DEFAULT_PATTERNS,
    STAGE_NAME,
    marker,
    nanobot_governance_stages,
    redact_message,
    scanner_for,
)

SCANNER = scanner_for(DEFAULT_PATTERNS)
OPENAI_KEY = "sk-" + "Zx9" * 16
GITLAB_TOKEN = "glpat-" + "a1B2c3D4e5" * 2
# One secret of each kind, as a text would hold it.
SECRETS = [
    OPENAI_KEY,
    "sk-ant-" + "api03-" + "Zx9Yw8" * 6,
    "AKIA" + "IOSFODNN7EXAMPLE",
    "gh" + "p_" + "a1B2c3" * 6,
    "xo" + "xb-" + "1234-5678-abcdefghij",
    "AI" + "za" + "Sy" + "B" * 33,
    "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxIn0" + ".c2lnbmF0dXJl",
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----",
    GITLAB_TOKEN,
    "hf_" + "aBcDeFgHiJ" * 3 + "kLmN",
    "npm_" + "a1B2c3" * 6,
    "https://hooks.slack.com/services/" + "T0A1B2C3D/B0A1B2C3D/" + "Xy9" * 8,
]
# The part of each that must not reach the model (the rest is what the marker keeps).
CORES = [s.removeprefix("https://hooks.slack.com/services/") for s in SECRETS]


def test_reasoning_and_refusals_lose_their_secrets() -> None:
    """``reasoning_content`` and ``refusal`` are scanned like the content, and reported by name."""
    message = {
        "role": "assistant",
        "content": "done",
        "reasoning_content": f"the user's key is {OPENAI_KEY}, I will use it",
        "refusal": f"I will not print {GITLAB_TOKEN}",
    }
    redacted, found = redact_message(message, SCANNER)
    assert redacted == {
        "role": "assistant",
        "content": "done",
        "reasoning_content": f"the user's key is {marker('openai_api_key')}, I will use it",
        "refusal": f"I will not print {marker('gitlab_token')}",
    }
    assert [field for field, _ in found] == ["reasoning_content", "refusal"]


def test_texts_nested_in_blocks_and_unknown_keys_are_scanned() -> None:
    """Tool results, tool inputs and keys the pipeline does not know are scanned at any depth."""
    message = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": f"token: {OPENAI_KEY}"}],
            },
            {"type": "tool_use", "id": "t2", "name": "run", "input": {"env": [GITLAB_TOKEN]}},
        ],
        "provider_extra": {"notes": [f"saw {OPENAI_KEY}"]},
    }
    redacted, found = redact_message(message, SCANNER)
    assert OPENAI_KEY not in json.dumps(redacted)
    assert GITLAB_TOKEN not in json.dumps(redacted)
    assert [field for field, _ in found] == [
        "content[0].content[0].text",
        "content[1].input.env[0]",
        "provider_extra.notes[0]",
    ]
    assert redacted["content"][0]["tool_use_id"] == "toolu_1"


def test_names_ids_and_roles_are_never_touched() -> None:
    """The keys the pipeline pairs and names messages by keep their value, whatever it holds."""
    message: dict[str, Any] = {key: OPENAI_KEY for key in STRUCTURAL_KEYS}
    assert redact_message(message, SCANNER) == (message, [])


def test_a_thinking_block_that_held_a_secret_loses_its_signature() -> None:
    """Its text is redacted, and the signature that no longer matches it goes (the block is
    then left out of an Anthropic request, which would refuse it)."""
    block = {"type": "thinking", "thinking": f"use {OPENAI_KEY}", "signature": "c2lnbmVk"}
    clean = {"type": "thinking", "thinking": "plan the next step", "signature": "c2lnbmVk"}
    message = {"role": "assistant", "content": "ok", "thinking_blocks": [clean, block]}
    redacted, found = redact_message(message, SCANNER)
    assert redacted["thinking_blocks"] == [
        clean,
        {"type": "thinking", "thinking": f"use {marker('openai_api_key')}"},
    ]
    assert redacted["thinking_blocks"][0] is clean
    assert found[0][0] == "thinking_blocks[1].thinking"


def test_proofs_and_encoded_payloads_are_sent_as_they_came() -> None:
    """Signatures, encrypted reasoning and base64 payloads are not text: never rewritten."""
    look_alike = "AKIA" + "IOSFODNN7EXAMPLE" + "/" + OPENAI_KEY
    message = {
        "role": "assistant",
        "content": [
            {"type": "image", "source": {"type": "base64", "data": look_alike}},
            {"type": "input_audio", "input_audio": {"data": look_alike, "format": "wav"}},
            {"type": "file", "file": {"file_data": look_alike}},
            {"type": "reasoning", "encrypted_content": look_alike},
        ],
        "thinking_blocks": [
            {"type": "thinking", "thinking": "fine", "signature": look_alike},
            {"type": "redacted_thinking", "data": look_alike},
        ],
    }
    assert redact_message(message, SCANNER) == (message, [])


def test_a_plain_text_document_source_is_scanned() -> None:
    """A ``source`` of type text is text the model reads: its ``data`` is scanned."""
    part = {"type": "document", "source": {"type": "text", "data": f"key {OPENAI_KEY}"}}
    redacted, _ = redact_message({"role": "user", "content": [part]}, SCANNER)
    assert redacted["content"][0]["source"]["data"] == f"key {marker('openai_api_key')}"


def test_the_governed_request_carries_no_reasoning_secret(tmp_path: Path) -> None:
    """Through the governor (prefilter included), reasoning and refusals reach the model clean."""
    stages = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok", "reasoning_content": f"key {OPENAI_KEY}"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "", "refusal": f"not {GITLAB_TOKEN}"},
        {"role": "user", "content": "go on"},
    ]
    snapshot = copy.deepcopy(history)
    result = govern_and_check(history, stages=stages, workspace=tmp_path)
    sent = json.dumps(result.messages)
    assert OPENAI_KEY not in sent
    assert GITLAB_TOKEN not in sent
    assert history == snapshot
    entry = result.report.entry(STAGE_NAME)
    assert entry is not None
    assert entry.details == [
        "messages[1] reasoning_content: openai_api_key redacted",
        "messages[3] refusal: gitlab_token redacted",
    ]


# Key names a text may sit under: any but the structural ones and the opaque ones.
_TEXT_KEYS = st.sampled_from(
    ["content", "reasoning_content", "refusal", "text", "thinking", "input", "notes", "x"]
)
_FILLER = st.text(alphabet=" abc.,:\n", max_size=12)


def _nest(depth_keys: list[tuple[str, bool]], text: str) -> Any:
    """`text` under the given keys (True: inside a one-element list there)."""
    value: Any = text
    for key, in_list in reversed(depth_keys):
        value = {key: [value] if in_list else value}
    return value


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.lists(st.tuples(_TEXT_KEYS, st.booleans()), min_size=1, max_size=4),
    st.sampled_from(range(len(SECRETS))),
    _FILLER,
    _FILLER,
)
def test_a_secret_of_any_kind_in_any_text_never_reaches_the_model(
    keys: list[tuple[str, bool]], which: int, before: str, after: str
) -> None:
    """A secret of each kind, in random text under any text-bearing key at any depth, is gone,
    and a second pass changes nothing."""
    message = {"role": "assistant", **_nest(keys, before + " " + SECRETS[which] + " " + after)}
    snapshot = copy.deepcopy(message)
    once, found = redact_message(message, SCANNER)
    assert CORES[which] not in json.dumps(once)
    assert found
    assert message == snapshot
    twice, again = redact_message(once, SCANNER)
    assert again == []
    assert twice is once


@settings(derandomize=True, deadline=None, max_examples=150)
@given(
    st.lists(st.tuples(_TEXT_KEYS, st.booleans()), min_size=1, max_size=4),
    st.one_of(st.sampled_from(SECRETS), _FILLER),
)
def test_the_prefilter_still_changes_nothing_but_which_messages_are_handed(
    keys: list[tuple[str, bool]], text: str
) -> None:
    """With texts under any key, the prefilter never hides one the stage would redact."""
    messages = [{"role": "user", **_nest(keys, text)}]
    (stage,) = nanobot_governance_stages(PluginContext(workspace=Path.cwd()))
    config = Config().governance
    filtered = Governor([stage], config=config).govern(messages)
    plain = Governor([attrs.evolve(stage, prefilter=None)], config=config).govern(messages)
    assert filtered.messages == plain.messages
    assert filtered.report.entry(STAGE_NAME) == plain.report.entry(STAGE_NAME)


def test_a_value_nested_too_deep_to_walk_is_kept_and_the_rest_redacted() -> None:
    """A key whose value nests past the recursion limit is sent as it is; the others are scanned."""
    deep: Any = OPENAI_KEY
    for _ in range(100_000):
        deep = {"x": deep}
    message = {"role": "user", "content": [f"key {OPENAI_KEY}"], "extra": deep}
    redacted, found = redact_message(message, SCANNER)
    assert redacted["content"] == [f"key {marker('openai_api_key')}"]
    assert redacted["extra"] is deep
    assert [field for field, _ in found] == ["content[0]"]
