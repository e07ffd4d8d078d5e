"""The redact_secrets stage over whole histories: what it changes, reports and keeps."""

from __future__ import annotations

import base64
import copy
import json
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot_core import Config, ConfigError, Governor, PluginContext, PluginManager
from nanobot_core.testing import govern_and_check, make_config

import nanobot_redact
from nanobot_redact import (
    DEFAULT_PATTERNS,
    STAGE_NAME,
    nanobot_governance_stages,
    redact_message,
    redact_messages,
    scanner_for,
)

OPENAI_KEY = "sk-" + "Zx9" * 16
GITHUB_TOKEN = "gh" + "p_" + "a1B2c3" * 6
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def history() -> list[dict[str, Any]]:
    """A conversation with secrets in string content, content parts and tool-call arguments."""
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": f"my key is {OPENAI_KEY}, keep it safe"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "thinking",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {
                        "name": "write_file",
                        "arguments": json.dumps({"path": "id_ed25519", "content": PEM}),
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "nothing secret here"},
        {"role": "tool", "tool_call_id": "c2", "content": "written"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this one"},
                {"type": "text", "text": f"GITHUB_TOKEN={GITHUB_TOKEN}"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
    ]


def test_secrets_leave_the_model_copy_with_kind_and_place_reported() -> None:
    """Each secret becomes a marker, and each finding names message index, field and kind."""
    messages, findings = redact_messages(history())
    assert messages[1]["content"] == "my key is [REDACTED:openai_api_key], keep it safe"
    arguments = json.loads(messages[2]["tool_calls"][1]["function"]["arguments"])
    assert arguments == {"path": "id_ed25519", "content": "[REDACTED:private_key]"}
    assert messages[5]["content"][1] == {
        "type": "text",
        "text": "GITHUB_TOKEN=[REDACTED:github_token]",
    }
    assert findings == [
        (1, "content", "openai_api_key", 1),
        (2, "tool_calls[1].function.arguments", "private_key", 1),
        (5, "content[1].text", "github_token", 1),
    ]


def test_the_input_history_is_never_modified() -> None:
    """The persisted history (the input list and every dict in it) stays deep-equal."""
    original = history()
    snapshot = copy.deepcopy(original)
    redact_messages(original)
    assert original == snapshot


def test_untouched_messages_and_parts_are_passed_through_as_is() -> None:
    """Messages without secrets are the same objects; unknown keys of changed ones survive."""
    original = history()
    messages, _ = redact_messages(original)
    for index in (0, 3, 4):
        assert messages[index] is original[index]
    assert messages[2]["reasoning_content"] == "thinking"
    assert messages[2]["tool_calls"][0] is original[2]["tool_calls"][0]
    assert messages[5]["content"][2] is original[5]["content"][2]


def test_arguments_that_are_not_json_are_redacted_as_text() -> None:
    """Broken JSON arguments still lose their secrets, as plain text."""
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "shell", "arguments": f"{{oops {OPENAI_KEY}"},
    }
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == (
        "{oops [REDACTED:openai_api_key]"
    )
    assert findings == [(0, "tool_calls[0].function.arguments", "openai_api_key", 1)]


def test_arguments_without_secrets_keep_their_exact_text() -> None:
    """JSON arguments are re-encoded only when a secret was removed, so formatting survives."""
    arguments = '{ "path" :  "a.txt" }'
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    assert findings == []
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == arguments


def test_object_arguments_are_redacted_in_place_of_a_copy() -> None:
    """Arguments given as a dict (not yet encoded) are redacted into a new dict."""
    args = {"headers": {"Authorization": "Bearer abcdefghijklmnop"}}
    call = {"id": "c", "type": "function", "function": {"name": "http", "arguments": args}}
    messages, _ = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    new_args = messages[0]["tool_calls"][0]["function"]["arguments"]
    assert new_args == {"headers": {"Authorization": "Bearer [REDACTED:bearer_token]"}}
    assert args == {"headers": {"Authorization": "Bearer abcdefghijklmnop"}}


def test_the_hook_places_the_stage_in_transform_before_offloading(tmp_path: Path) -> None:
    """The plugin contributes redact_secrets in phase transform, before offload_results."""
    (stage,) = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    assert stage.name == STAGE_NAME
    assert stage.phase == "transform"
    assert tuple(stage.before) == ("offload_results",)
    assert stage.per_message


def test_the_stage_reports_what_it_removed(tmp_path: Path) -> None:
    """Run as a stage, it returns the redacted copy, changed=True and one line per finding."""
    (stage,) = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    original = history()
    outcome = stage.func(original, None)
    assert outcome.changed
    assert outcome.messages[1]["content"].startswith("my key is [REDACTED:openai_api_key]")
    assert list(outcome.details) == [
        "messages[1] content: openai_api_key redacted",
        "messages[2] tool_calls[1].function.arguments: private_key redacted",
        "messages[5] content[1].text: github_token redacted",
    ]
    again = stage.func(outcome.messages, None)
    assert not again.changed
    assert again.messages == outcome.messages


def test_config_options_reach_the_stage(tmp_path: Path) -> None:
    """[governance.stages.redact_secrets] disabled_kinds is honoured by the contributed stage."""
    defaults = Config()
    governance = attrs.evolve(
        defaults.governance, stages={STAGE_NAME: {"disabled_kinds": ["openai_api_key"]}}
    )
    config = attrs.evolve(defaults, governance=governance)
    (stage,) = nanobot_governance_stages(PluginContext(workspace=tmp_path, config=config))
    outcome = stage.func([{"role": "user", "content": OPENAI_KEY}], None)
    assert not outcome.changed


def _governor_with(tmp_path: Path, options: dict[str, Any]) -> Governor:
    """The governor of a plugin manager with this plugin registered and these options."""
    config = make_config({"governance": {"stages": {STAGE_NAME: options}}})
    manager = PluginManager(config, workspace=tmp_path, autoload=False)
    manager.register(nanobot_redact, "redact", distribution="nanobot-redact", version="0.1.0")
    return manager.governor()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"disabled_kind": ["jwt"]}, r"\.disabled_kind: unknown option of stage 'redact_secrets'"),
        ({"disabled_kinds": "jwt"}, r"\.disabled_kinds: expected a list of strings"),
        ({"disabled_kinds": ["no_such_kind"]}, r"\.disabled_kinds: unknown kind\(s\)"),
        ({"extra_patterns": {"bad": "("}}, r"\.extra_patterns: entry 'bad': invalid regex"),
        ({"extra_patterns": {"Bad Kind": "x"}}, r"\.extra_patterns: entry 'Bad Kind': need"),
    ],
)
def test_bad_options_stop_the_governor_naming_the_key_and_the_plugin(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    """Options the stage cannot use are a ConfigError once the governor is built, naming them."""
    with pytest.raises(
        ConfigError, match=rf"^governance\.stages\.redact_secrets{message}"
    ) as caught:
        _governor_with(tmp_path, options)
    assert "(plugin 'redact' from nanobot-redact 0.1.0)" in str(caught.value)


def test_good_options_build_a_governor_that_redacts(tmp_path: Path) -> None:
    """Declared options that pass the checks reach the stage through the governor."""
    governor = _governor_with(tmp_path, {"extra_patterns": {"internal_token": "itk=[0-9]{4}"}})
    result = governor.govern([{"role": "user", "content": "token itk=1234 here"}])
    assert result.messages[0]["content"] == "token [REDACTED:internal_token] here"


def test_a_stage_made_from_bad_options_never_runs_with_them(tmp_path: Path) -> None:
    """The hook returns a stage that raises the options' error rather than redacting otherwise."""
    config = make_config({"governance": {"stages": {STAGE_NAME: {"disabled_kinds": ["nope"]}}}})
    (stage,) = nanobot_governance_stages(PluginContext(workspace=tmp_path, config=config))
    assert stage.options == nanobot_redact.OPTIONS
    with pytest.raises(ConfigError, match=r"redact_secrets: disabled_kinds: unknown kind"):
        stage.func([{"role": "user", "content": OPENAI_KEY}], None)


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [OPENAI_KEY, GITHUB_TOKEN, PEM, "https://u:pw@h/", "Authorization: Bearer x" * 3]
    ),
)
image_urls = st.one_of(
    texts.map(lambda t: "https://example.com/a.png?q=" + t),
    st.sampled_from(
        ["https://u:pw@h/i.png", "data:text/plain,sk-" + "a" * 24, "data:image/png;base64,AAAA"]
    ),
)
messages_strategy = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"])},
        optional={
            "content": st.one_of(
                texts,
                st.lists(
                    st.one_of(
                        st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
                        st.fixed_dictionaries(
                            {
                                "type": st.just("image_url"),
                                "image_url": st.fixed_dictionaries({"url": image_urls}),
                            }
                        ),
                        json_scalars,
                    ),
                    max_size=3,
                ),
                json_scalars,
            ),
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.text(max_size=5),
                        "function": st.fixed_dictionaries(
                            {
                                "name": st.just("f"),
                                "arguments": st.one_of(
                                    texts, texts.map(lambda t: json.dumps({"a": t}))
                                ),
                            }
                        ),
                    }
                ),
                max_size=2,
            ),
        },
    ),
    max_size=5,
)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(messages_strategy)
def test_any_history_is_left_intact_and_redaction_is_idempotent(
    messages: list[dict[str, Any]],
) -> None:
    """Whatever the history, the input is unchanged and a second pass finds nothing."""
    snapshot = copy.deepcopy(messages)
    once, _ = redact_messages(messages)
    assert messages == snapshot
    twice, findings = redact_messages(once)
    assert findings == []
    assert twice == once


def test_the_governed_request_carries_no_secret_and_stays_legal(tmp_path: Path) -> None:
    """Through the governor: secrets gone from the model copy, history intact, invariants kept."""
    stages = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    original = history()
    snapshot = copy.deepcopy(original)
    result = govern_and_check(original, stages=stages, workspace=tmp_path)
    sent = json.dumps(result.messages)
    for secret in (OPENAI_KEY, GITHUB_TOKEN, "b3BlbnNzaC1rZXktdjEAAAAA"):
        assert secret not in sent
    assert original == snapshot
    entry = result.report.entry(STAGE_NAME)
    assert entry is not None
    assert entry.changed
    assert entry.details[0] == "messages[1] content: openai_api_key redacted"


def test_a_governor_hands_the_stage_each_message_once_across_calls(tmp_path: Path) -> None:
    """Declared per-message, the stage sees one message at a time, and only new ones next call."""
    (stage,) = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    seen: list[int] = []

    def counting(messages: list[Any], ctx: Any) -> Any:
        seen.append(len(messages))
        return stage.func(messages, ctx)

    governor = Governor([attrs.evolve(stage, func=counting)], config=Config().governance)
    first = history()[:2]
    result = governor.govern(first)
    assert result.messages[1]["content"] == "my key is [REDACTED:openai_api_key], keep it safe"
    # The system prompt holds nothing a rule could match: the prefilter spares it the call.
    assert seen == [1]
    grown = [*first, {"role": "assistant", "content": f"use {GITHUB_TOKEN}"}]
    result = governor.govern(grown)
    assert seen == [1, 1]
    assert result.messages[2]["content"] == "use [REDACTED:github_token]"
    assert result.report.entry(STAGE_NAME).details == [
        "messages[1] content: openai_api_key redacted",
        "messages[2] content: github_token redacted",
    ]


def test_the_stage_runs_before_results_are_offloaded(tmp_path: Path) -> None:
    """In the pipeline, redact_secrets comes after the repair stages and before offload_results."""
    stages = nanobot_governance_stages(PluginContext(workspace=tmp_path))
    result = govern_and_check(history(), stages=stages, workspace=tmp_path)
    names = [entry.stage for entry in result.report]
    assert names.index("sanitize_content") < names.index(STAGE_NAME)
    assert names.index(STAGE_NAME) < names.index("offload_results")


PRESIGNED = (
    "https://bucket.s3.amazonaws.com/cat.png?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIA" + "IOSFODNN7EXAMPLE%2F20261201%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
)


def _image(url: str, *, nested: bool = True) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "low"} if nested else url}


def test_an_image_whose_url_holds_a_credential_becomes_a_text_marker() -> None:
    """A presigned or credentialed image URL is replaced whole by a text part naming image_url."""
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            _image(PRESIGNED),
            _image("https://admin:hunter2@cams.local/snap.jpg", nested=False),
        ],
    }
    redacted, found = redact_message(message, scanner_for(DEFAULT_PATTERNS))
    assert redacted["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "text", "text": "[REDACTED:image_url]"},
        {"type": "text", "text": "[REDACTED:image_url]"},
    ]
    assert [(field, dict(kinds)) for field, kinds in found] == [
        ("content[1].image_url.url", {"url_token": 2}),
        ("content[2].image_url", {"url_password": 1}),
    ]
    assert redacted["content"][0] is message["content"][0]


def test_text_data_urls_are_decoded_and_raster_images_left_alone() -> None:
    """A data: URL with a text payload is scanned decoded; a PNG payload is never scanned."""
    env = base64.b64encode(b"OPENAI_API_KEY=" + OPENAI_KEY.encode()).decode()
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + OPENAI_KEY.encode()).decode()
    plain = "data:," + urllib.parse.quote(f"token {GITHUB_TOKEN}")
    parts = [_image(f"data:text/plain;base64,{env}"), _image(png), _image(plain)]
    redacted, found = redact_message(
        {"role": "user", "content": parts}, scanner_for(DEFAULT_PATTERNS)
    )
    assert redacted["content"][0] == {"type": "text", "text": "[REDACTED:image_url]"}
    assert redacted["content"][1] is parts[1]
    assert redacted["content"][2] == {"type": "text", "text": "[REDACTED:image_url]"}
    assert [field for field, _ in found] == ["content[0].image_url.url", "content[2].image_url.url"]


def test_image_parts_are_kept_when_image_url_is_disabled(tmp_path: Path) -> None:
    """disabled_kinds = ["image_url"] sends image parts as they are; text is still redacted."""
    defaults = Config()
    governance = attrs.evolve(
        defaults.governance, stages={STAGE_NAME: {"disabled_kinds": ["image_url"]}}
    )
    context = PluginContext(
        workspace=tmp_path, config=attrs.evolve(defaults, governance=governance)
    )
    (stage,) = nanobot_governance_stages(context)
    message = {"role": "user", "content": [_image(PRESIGNED), {"type": "text", "text": OPENAI_KEY}]}
    outcome = stage.func([message], None)
    assert outcome.messages[0]["content"][0] is message["content"][0]
    assert outcome.messages[0]["content"][1] == {
        "type": "text",
        "text": "[REDACTED:openai_api_key]",
    }


def test_images_without_secrets_are_passed_through_as_is() -> None:
    """Ordinary image URLs (with harmless query strings) keep their part object."""
    message = {
        "role": "user",
        "content": [
            _image("https://example.com/a.png?w=200&h=100"),
            _image("data:image/jpeg;base64,/9j/"),
        ],
    }
    redacted, found = redact_message(message, scanner_for(DEFAULT_PATTERNS))
    assert redacted is message
    assert found == []


def test_a_jwt_in_a_tool_result_and_a_pgp_key_in_arguments_are_removed() -> None:
    """The new shapes are found in tool results and in JSON-encoded tool arguments alike."""
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJib3QifQ.c2lnbmF0dXJlLWJ5dGVz"
    pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF8\n-----END PGP PRIVATE KEY BLOCK-----"
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "write_file", "arguments": json.dumps({"content": pgp})},
    }
    messages, findings = redact_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": f"cookie: session={jwt}"},
        ]
    )
    assert json.loads(messages[0]["tool_calls"][0]["function"]["arguments"]) == {
        "content": "[REDACTED:private_key]"
    }
    assert messages[1]["content"] == "cookie: session=[REDACTED:jwt]"
    assert findings == [
        (0, "tool_calls[0].function.arguments", "private_key", 1),
        (1, "content", "jwt", 1),
    ]


def test_secrets_hidden_behind_json_escapes_are_still_found() -> None:
    """Arguments that spell a key or a URL with JSON escapes are decoded before the scan."""
    escaped_key = OPENAI_KEY.replace("-", "\\u002d", 1)
    arguments = '{"key": "' + escaped_key + '", "url": "https:\\/\\/app:pw@db\\/x"}'
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    assert json.loads(messages[0]["tool_calls"][0]["function"]["arguments"]) == {
        "key": "[REDACTED:openai_api_key]",
        "url": "https://app:[REDACTED:url_password]@db/x",
    }
    assert findings == [
        (0, "tool_calls[0].function.arguments", "openai_api_key", 1),
        (0, "tool_calls[0].function.arguments", "url_password", 1),
    ]


def test_arguments_nested_too_deep_to_walk_are_redacted_as_text() -> None:
    """JSON nested past the recursion limit is still scanned, as plain text."""
    arguments = "[" * 100_000 + json.dumps(OPENAI_KEY) + "]" * 100_000
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    assert OPENAI_KEY not in messages[0]["tool_calls"][0]["function"]["arguments"]
    assert findings == [(0, "tool_calls[0].function.arguments", "openai_api_key", 1)]


@settings(derandomize=True, deadline=None, max_examples=100)
@given(messages_strategy)
def test_each_message_is_redacted_on_its_own(messages: list[dict[str, Any]]) -> None:
    """The stage is per-message: its output for a message is what that message alone gives."""
    scanner = scanner_for(DEFAULT_PATTERNS)
    together, _ = redact_messages(messages)
    assert together == [redact_message(message, scanner)[0] for message in messages]


@settings(derandomize=True, deadline=None, max_examples=150)
@given(messages_strategy)
def test_the_prefilter_changes_nothing_but_which_messages_are_handed(
    messages: list[dict[str, Any]],
) -> None:
    """With the stage's prefilter or without it, the request and the report are the same."""
    (stage,) = nanobot_governance_stages(PluginContext(workspace=Path.cwd()))
    assert stage.prefilter is not None
    config = Config().governance
    filtered = Governor([stage], config=config).govern(messages)
    plain = Governor([attrs.evolve(stage, prefilter=None)], config=config).govern(messages)
    assert filtered.messages == plain.messages
    assert filtered.report.entry(STAGE_NAME) == plain.report.entry(STAGE_NAME)


def test_the_prefilter_passes_what_is_decoded_before_it_is_scanned() -> None:
    """Escaped JSON and text data: URLs can hide a secret from the raw text; they pass."""
    scanner = scanner_for(DEFAULT_PATTERNS)
    hidden = json.dumps({"key": "-----BEGIN RSA PRIVATE KEY-----\nAAAA"})
    payload = base64.b64encode(OPENAI_KEY.encode()).decode()
    assert scanner.could_change(hidden)
    assert scanner.could_change("DATA:text/plain;base64," + payload)
    assert not scanner.could_change("nothing to see in this plain sentence")


def _long_results_session(secret: str) -> list[dict[str, Any]]:
    """Thirty steps of one call each; the first result is long and holds the secret."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read the logs"}]
    for index in range(30):
        text = f"export OPENAI_API_KEY={secret}\n" * 120 if index == 0 else "log line " * 200
        function = {"name": "exec", "arguments": "{}"}
        call = {"id": f"c{index}", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "name": "exec", "content": text},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"next {index}"},
        ]
    return messages


def test_an_offloaded_result_compacted_on_a_later_call_never_reaches_the_store_unredacted(
    tmp_path: Path,
) -> None:
    """Across calls of one session, the offload cache and the request hold the result redacted."""
    config = make_config({"governance": {"input_limit": 6_000, "max_tool_result_chars": 1_000}})
    manager = PluginManager(config, workspace=tmp_path, autoload=False)
    manager.register(nanobot_redact, STAGE_NAME, distribution="nanobot-redact")
    governor = Governor.from_plugins(manager)
    session = _long_results_session(OPENAI_KEY)
    first = governor.govern(session)
    assert "read_file(path=" in first.messages[2]["content"]  # offloaded, then compacted
    session += [{"role": "assistant", "content": "more"}, {"role": "user", "content": "go on"}]
    second = governor.govern(session)
    assert second.prefix.kept
    assert OPENAI_KEY not in json.dumps(second.messages)
    saved = [p.read_text() for p in tmp_path.rglob("*.txt")]
    assert saved and all(OPENAI_KEY not in text for text in saved)


def test_a_secret_in_a_json_key_of_the_arguments_is_removed() -> None:
    """Decoded arguments are scanned in their object keys too, not only in their values."""
    arguments = json.dumps({"tokens": {GITHUB_TOKEN: "ci", "other": 1}})
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    assert json.loads(messages[0]["tool_calls"][0]["function"]["arguments"]) == {
        "tokens": {"[REDACTED:github_token]": "ci", "other": 1}
    }
    assert findings == [(0, "tool_calls[0].function.arguments", "github_token", 1)]


def test_keys_redacted_alike_keep_every_entry() -> None:
    """Two keys that become the same marker both stay, so no entry of the arguments is lost."""
    other = "gh" + "p_" + "z9Y8x7" * 6
    arguments = {GITHUB_TOKEN: 1, other: 2}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages, findings = redact_messages([{"role": "assistant", "tool_calls": [call]}])
    redacted = messages[0]["tool_calls"][0]["function"]["arguments"]
    assert sorted(redacted.values()) == [1, 2]
    assert all(key.startswith("[REDACTED:github_token]") for key in redacted)
    assert findings == [(0, "tool_calls[0].function.arguments", "github_token", 2)]


_JSON_KEYS = st.one_of(st.text(max_size=12), st.sampled_from([GITHUB_TOKEN, OPENAI_KEY, PEM]))
_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(max_size=12), st.just(OPENAI_KEY)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_JSON_KEYS, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.dictionaries(_JSON_KEYS, _JSON_VALUES, max_size=4))
def test_no_secret_in_json_arguments_reaches_the_model(arguments: dict[str, Any]) -> None:
    """Whatever JSON the model sent as arguments, no secret is left in keys or values."""
    for sent in (json.dumps(arguments), arguments):
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": sent}}
        messages, _ = redact_messages([{"role": "assistant", "tool_calls": [call]}])
        text = json.dumps(messages[0]["tool_calls"][0]["function"]["arguments"])
        for secret in (GITHUB_TOKEN, OPENAI_KEY, "b3BlbnNzaC1rZXktdjEAAAAA"):
            assert secret not in text
        if isinstance(sent, dict):
            decoded = messages[0]["tool_calls"][0]["function"]["arguments"]
        else:
            decoded = json.loads(messages[0]["tool_calls"][0]["function"]["arguments"])
        assert _entry_count(decoded) == _entry_count(arguments)


def _entry_count(value: Any) -> int:
    """How many entries a JSON value holds, nested ones included."""
    if isinstance(value, dict):
        return len(value) + sum(_entry_count(item) for item in value.values())
    if isinstance(value, list):
        return len(value) + sum(_entry_count(item) for item in value)
    return 0
