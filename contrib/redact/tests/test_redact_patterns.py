"""Which texts count as secrets, what replaces them, and what is left alone.

Fake secrets are assembled at run time (prefix + filler) so that no secret
scanner mistakes this file for a leak.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_redact import DEFAULT_PATTERNS, patterns_from_options, redact_text


def fake(prefix: str, length: int, alphabet: str = "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7") -> str:
    """A token-shaped string: `prefix` followed by `length` filler characters."""
    return prefix + (alphabet * (length // len(alphabet) + 1))[:length]


PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n"


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        (fake("sk-", 48), "openai_api_key"),
        (fake("sk-proj-", 60, "Ab_c-D9"), "openai_api_key"),
        (fake("sk-ant-api03-", 80), "anthropic_api_key"),
        ("AKIA" + "IOSFODNN7EXAMPLE", "aws_access_key_id"),
        (fake("gh" + "p_", 36), "github_token"),
        (fake("github_" + "pat_", 60, "a1_B2"), "github_token"),
        (fake("xo" + "xb-", 40, "12345-abc"), "slack_token"),
        (fake("AI" + "za", 35), "google_api_key"),
        (fake("sk_" + "live_", 24), "stripe_api_key"),
        (fake("sk_" + "test_", 99), "stripe_api_key"),
        (fake("rk_" + "live_", 24), "stripe_api_key"),
        (fake("rk_" + "test_", 34), "stripe_api_key"),
    ],
)
def test_api_keys_are_replaced_by_a_marker_naming_the_kind(secret: str, kind: str) -> None:
    """Each known key shape is replaced whole, and the words around it stay."""
    text, found = redact_text(f"use {secret} for this", DEFAULT_PATTERNS)
    assert text == f"use [REDACTED:{kind}] for this"
    assert found == {kind: 1}


def test_bearer_tokens_keep_the_header_name() -> None:
    """Only the token after "Authorization: Bearer" goes; the header stays readable."""
    token = fake("eyJhbGciOi.", 30)
    text, found = redact_text(f"curl -H 'Authorization: Bearer {token}' x", DEFAULT_PATTERNS)
    assert text == "curl -H 'Authorization: Bearer [REDACTED:bearer_token]' x"
    assert found == {"bearer_token": 1}
    as_json, _ = redact_text(f'{{"authorization": "bearer {token}"}}', DEFAULT_PATTERNS)
    assert as_json == '{"authorization": "bearer [REDACTED:bearer_token]"}'


def test_a_bare_bearer_header_value_is_redacted() -> None:
    """A string that is just "Bearer <token>" (a header value on its own) loses the token."""
    text, found = redact_text("Bearer abcdefghijklmnop", DEFAULT_PATTERNS)
    assert text == "Bearer [REDACTED:bearer_token]"
    assert found == {"bearer_token": 1}
    prose = "Bearer instruments are explained below."
    assert redact_text(prose, DEFAULT_PATTERNS) == (prose, {})


def test_private_key_blocks_go_whole() -> None:
    """A PEM private key block, BEGIN to END, becomes one marker."""
    block = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----"
    text, found = redact_text(f"key:\n{block}\ndone", DEFAULT_PATTERNS)
    assert text == "key:\n[REDACTED:private_key]\ndone"
    assert found == {"private_key": 1}


def test_a_cut_off_private_key_is_redacted_to_the_end() -> None:
    """A private key block without its END line (a truncated paste) is removed to the end."""
    text, _ = redact_text(f"oops -----BEGIN PRIVATE KEY-----\n{PEM_BODY}", DEFAULT_PATTERNS)
    assert text == "oops [REDACTED:private_key]"


PGP_BODY = "lQOYBF8xQ2kBCAC3vGf8\n=Zx9q\n"


def test_pgp_private_key_blocks_go_whole() -> None:
    """An armored PGP private key block, BEGIN to END, becomes one marker."""
    block = (
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}-----END PGP PRIVATE KEY BLOCK-----"
    )
    text, found = redact_text(f"exported:\n{block}\nbye", DEFAULT_PATTERNS)
    assert text == "exported:\n[REDACTED:private_key]\nbye"
    assert found == {"private_key": 1}


def test_old_pgp_secret_key_blocks_go_whole() -> None:
    """PGP 2's SECRET KEY BLOCK armor is a private key too."""
    block = f"-----BEGIN PGP SECRET KEY BLOCK-----\n{PGP_BODY}-----END PGP SECRET KEY BLOCK-----"
    assert redact_text(f"{block} tail", DEFAULT_PATTERNS) == (
        "[REDACTED:private_key] tail",
        {"private_key": 1},
    )


def test_pgp_public_key_blocks_are_kept() -> None:
    """An armored PGP public key block is not a secret and stays."""
    block = f"-----BEGIN PGP PUBLIC KEY BLOCK-----\n{PGP_BODY}-----END PGP PUBLIC KEY BLOCK-----"
    assert redact_text(block, DEFAULT_PATTERNS) == (block, {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' https://x",
            "curl -H 'Authorization: Basic [REDACTED:basic_auth]' https://x",
        ),
        (
            '{"headers": {"AUTHORIZATION": "basic YWRtaW46czNjcjN0IQ=="}}',
            '{"headers": {"AUTHORIZATION": "basic [REDACTED:basic_auth]"}}',
        ),
        ("Basic dXNlcjpodW50ZXIy", "Basic [REDACTED:basic_auth]"),
        (
            "curl -u admin:hunter2 https://api.example.com/v1",
            "curl -u admin:[REDACTED:basic_auth] https://api.example.com/v1",
        ),
        (
            "curl --user=deploy:'s3cr3t' -X POST",
            "curl --user=deploy:'[REDACTED:basic_auth]' -X POST",
        ),
    ],
)
def test_http_basic_credentials_lose_the_password(text: str, expected: str) -> None:
    """Basic credentials in a header, a bare header value or curl's -u lose the secret part."""
    assert redact_text(text, DEFAULT_PATTERNS) == (expected, {"basic_auth": 1})


def test_basic_without_credentials_is_left_alone() -> None:
    """The word Basic in prose, and -u options outside a curl command, are not credentials."""
    for text in ("Basic usage is explained below.", "sort -u a.txt", "git push -u origin main"):
        assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def test_json_web_tokens_are_replaced() -> None:
    """A JWT anywhere in text (a cookie, a log line) is replaced whole, unsigned ones too."""
    text, found = redact_text(f"session={JWT}; Path=/", DEFAULT_PATTERNS)
    assert text == "session=[REDACTED:jwt]; Path=/"
    assert found == {"jwt": 1}
    unsigned = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9."
    assert redact_text(f"token {unsigned} end", DEFAULT_PATTERNS) == (
        "token [REDACTED:jwt] end",
        {"jwt": 1},
    )


def test_a_jwt_after_bearer_counts_as_a_bearer_token() -> None:
    """In an Authorization header the bearer rule starts first, so the kind is bearer_token."""
    text, found = redact_text(f"Authorization: Bearer {JWT}", DEFAULT_PATTERNS)
    assert text == "Authorization: Bearer [REDACTED:bearer_token]"
    assert found == {"bearer_token": 1}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "https://bucket.s3.amazonaws.com/a.png?X-Amz-Credential=abc%2F20261201"
            "&X-Amz-Signature=9f2c4e&X-Amz-Expires=300",
            "https://bucket.s3.amazonaws.com/a.png?X-Amz-Credential=[REDACTED:url_token]"
            "&X-Amz-Signature=[REDACTED:url_token]&X-Amz-Expires=300",
        ),
        (
            "GET /callback?code=ok&access_token=ya29.a0AfH6SM HTTP/1.1",
            "GET /callback?code=ok&access_token=[REDACTED:url_token] HTTP/1.1",
        ),
        (
            "see [docs](https://x.io/?api_key=k3y)",
            "see [docs](https://x.io/?api_key=[REDACTED:url_token])",
        ),
    ],
)
def test_credentials_in_query_strings_are_replaced(text: str, expected: str) -> None:
    """Values of query parameters named for credentials go; other parameters stay."""
    redacted, found = redact_text(text, DEFAULT_PATTERNS)
    assert redacted == expected
    assert set(found) == {"url_token"}


def test_an_empty_user_before_the_password_is_handled() -> None:
    """redis://:password@host loses the password."""
    text, _ = redact_text("redis://:p4ssw0rd@cache:6379/0", DEFAULT_PATTERNS)
    assert text == "redis://:[REDACTED:url_password]@cache:6379/0"


@pytest.mark.parametrize("name", ["Authorization", "authorization", "AUTHORIZATION"])
def test_the_header_name_is_found_in_its_usual_spellings(name: str) -> None:
    """Capitalised, lower-case and upper-case header names are all recognised."""
    text, _ = redact_text(f"{name}: Bearer abcdefghijklmnop", DEFAULT_PATTERNS)
    assert text == f"{name}: Bearer [REDACTED:bearer_token]"


def test_public_keys_and_certificates_are_kept() -> None:
    """PUBLIC KEY and CERTIFICATE blocks are not secrets and stay."""
    block = f"-----BEGIN PUBLIC KEY-----\n{PEM_BODY}-----END PUBLIC KEY-----"
    assert redact_text(block, DEFAULT_PATTERNS) == (block, {})


def test_passwords_in_urls_keep_user_and_host() -> None:
    """In scheme://user:pass@host only the password is replaced."""
    text, found = redact_text("postgres://app:s3cr%40t@db.internal:5432/main", DEFAULT_PATTERNS)
    assert text == "postgres://app:[REDACTED:url_password]@db.internal:5432/main"
    assert found == {"url_password": 1}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://app:p@ss@db:5432/main", "postgres://app:{}@db:5432/main"),
        ("redis://:a@b@c@cache", "redis://:{}@cache"),
        ('"mysql://root:Xy7@k9:Lm@db/x"', '"mysql://root:{}@db/x"'),
    ],
)
def test_a_password_holding_at_signs_goes_whole(url: str, expected: str) -> None:
    """An unencoded @ in a password ends it only at the last @ before the host, as URLs read."""
    text, found = redact_text(url, DEFAULT_PATTERNS)
    assert text == expected.format("[REDACTED:url_password]")
    assert found == {"url_password": 1}


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.text(alphabet="ab1@:%!-_.~", min_size=1, max_size=20).filter(lambda p: p[0] != "@"),
    st.sampled_from(["/x", ":5432/db", "", " next", '"', "?a=1"]),
)
def test_no_part_of_a_url_password_is_left(password: str, rest: str) -> None:
    """Whatever characters a URL password holds, none of it is left, and user and host stay."""
    text, found = redact_text(f"see postgres://app:{password}@db.internal{rest}", DEFAULT_PATTERNS)
    assert text == f"see postgres://app:[REDACTED:url_password]@db.internal{rest}"
    assert found == {"url_password": 1}


def test_a_url_password_in_json_with_escaped_slashes_is_replaced() -> None:
    """JSON text that escapes its slashes (``https:\\/\\/``), as some encoders do, loses it too."""
    text, found = redact_text('{"dsn": "postgres:\\/\\/app:s3cret@db\\/x"}', DEFAULT_PATTERNS)
    assert text == '{"dsn": "postgres:\\/\\/app:[REDACTED:url_password]@db\\/x"}'
    assert found == {"url_password": 1}


@settings(derandomize=True, deadline=None, max_examples=200)
@given(
    st.text(alphabet="ab1@:%!-_.~", min_size=1, max_size=20).filter(lambda p: p[0] != "@"),
    st.sampled_from(["/x", ":5432/db", "", "?a=1"]),
)
def test_a_url_password_is_gone_from_any_json_encoding(password: str, rest: str) -> None:
    """Whether JSON escapes the slashes or not, no part of a URL password is left in the text."""
    encoded = json.dumps({"dsn": f"postgres://app:{password}@db.internal{rest}"})
    for text in (encoded, encoded.replace("/", "\\/")):
        redacted, found = redact_text(text, DEFAULT_PATTERNS)
        assert found == {"url_password": 1}
        decoded = json.loads(redacted)["dsn"]
        assert decoded == f"postgres://app:[REDACTED:url_password]@db.internal{rest}"


def test_aws_secret_keys_are_found_by_their_label() -> None:
    """A 40-character AWS secret is redacted when it is labelled as one."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    text, _ = redact_text(f"aws_secret_access_key = {secret}", DEFAULT_PATTERNS)
    assert text == "aws_secret_access_key = [REDACTED:aws_secret_access_key]"


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn; import sklearn; task-1234567890123456789012",
        "see https://example.com:8080/path@v2 and http://user@example.com/",
        "AKIA is a prefix, AKIASHORT is too short",
        "the ghp_ prefix alone, and xoxb- alone",
        "Authorization: Bearer",
        "my-sk-" + "a" * 30,
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    """Look-alikes (short prefixes, ports, user-only URLs, words ending in sk-) are not secrets."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


def test_redacting_twice_changes_nothing_more() -> None:
    """The markers themselves never match, so a second pass finds nothing."""
    once, found = redact_text(
        f"{fake('sk-', 40)} https://u:p4ss@h/ Authorization: Bearer {fake('t', 20)}",
        DEFAULT_PATTERNS,
    )
    assert sum(found.values()) == 3
    assert redact_text(once, DEFAULT_PATTERNS) == (once, {})


def test_several_secrets_are_counted_per_kind() -> None:
    """Two keys of one kind are both replaced and counted."""
    text, found = redact_text(f"{fake('sk-', 30)} and {fake('sk-', 31)}", DEFAULT_PATTERNS)
    assert text == "[REDACTED:openai_api_key] and [REDACTED:openai_api_key]"
    assert found == {"openai_api_key": 2}


def test_options_disable_kinds_and_add_patterns() -> None:
    """disabled_kinds drops a built-in kind; extra_patterns adds one, with a secret group."""
    patterns = patterns_from_options(
        {
            "disabled_kinds": ["url_password"],
            "extra_patterns": {"internal_token": r"itk=(?P<secret>[0-9a-f]{16})"},
        }
    )
    text, found = redact_text("https://u:pw@h/?itk=0123456789abcdef", patterns)
    assert text == "https://u:pw@h/?itk=[REDACTED:internal_token]"
    assert found == {"internal_token": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"disabled": ["x"]}, "unknown option"),
        ({"disabled_kinds": ["no_such_kind"]}, "unknown kind"),
        ({"disabled_kinds": "url_password"}, "list"),
        ({"extra_patterns": {"bad": "("}}, "invalid regex"),
        ({"extra_patterns": {"Bad Kind": "x"}}, "lower_snake"),
    ],
)
def test_bad_options_are_refused(options: dict[str, object], message: str) -> None:
    """Every malformed option is a ValueError that says what is wrong."""
    with pytest.raises(ValueError, match=message):
        patterns_from_options(options)


@pytest.mark.parametrize(
    "text",
    [
        "the task_live_status and disk_test_run flags",
        "pk_" + "live_" + "aB3dE6gH9jK2mN5pQ8sT1vW4",  # a publishable key: meant to be public
        "mask_" + "live_" + "aB3dE6gH9jK2mN5pQ8sT1vW4",  # glued to a longer word
        "sk_" + "live_" + "short",
    ],
)
def test_stripe_look_alikes_are_kept(text: str) -> None:
    """Words that merely contain sk_live_, publishable keys and short tails are not secrets."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


SLACK_HOOK_PATH = "T0A1B2C3D/" + "B0A1B2C3D4E/" + "Xy9aB3dE6gH9jK2mN5pQ8sT1"


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        (fake("glpat-", 20, "aB3dE6gH9jK2_-"), "gitlab_token"),
        (fake("glpat-", 27) + ".01.0" + "a1b2c3d4", "gitlab_token"),  # the routable form
        (fake("hf_", 34, "aBcDeFgHiJkLmN"), "huggingface_token"),
        (fake("npm_", 36), "npm_token"),
    ],
)
def test_gitlab_hugging_face_and_npm_tokens_are_replaced(secret: str, kind: str) -> None:
    """GitLab personal access tokens, Hugging Face and npm tokens go whole, by their prefix."""
    text, found = redact_text(f"use {secret} for this", DEFAULT_PATTERNS)
    assert text == f"use [REDACTED:{kind}] for this"
    assert found == {kind: 1}


@pytest.mark.parametrize(
    "line",
    [
        "//registry.npmjs.org/:_authToken={}",
        '"//npm.pkg.github.com/:_authToken" = "{}"',
        "//gitlab.example.com/api/v4/projects/7/packages/npm/:_authToken = {}",
    ],
)
def test_an_npmrc_auth_token_is_replaced(line: str) -> None:
    """The value of an .npmrc ``_authToken=`` goes, whatever its shape (old tokens are UUIDs)."""
    token = "3f1c2b9a-5d4e-4f6a-9b8c-7d6e5f4a3b2c"
    text, found = redact_text(line.format(token), DEFAULT_PATTERNS)
    assert text == line.format("[REDACTED:npm_token]")
    assert found == {"npm_token": 1}


def test_a_slack_webhook_url_keeps_its_host() -> None:
    """An incoming-webhook URL loses its path, which is the credential; the host stays."""
    url = "https://hooks.slack.com/services/" + SLACK_HOOK_PATH
    text, found = redact_text(f'curl -X POST -d "{{}}" {url}', DEFAULT_PATTERNS)
    assert text == 'curl -X POST -d "{}" https://hooks.slack.com/services/[REDACTED:slack_webhook]'
    assert found == {"slack_webhook": 1}
    escaped = json.dumps({"url": url}).replace("/", "\\/")
    redacted, found = redact_text(escaped, DEFAULT_PATTERNS)
    assert SLACK_HOOK_PATH.split("/")[2] not in redacted
    assert found == {"slack_webhook": 1}


#: A workspace (team) ID, an app ID, a trigger ID and a secret, shaped as Slack issues them.
SLACK_TEAM, SLACK_APP, SLACK_TRIGGER = (
    "T0" + "16M3G1GHZ",
    "A0" + "4J3BAF7AA",
    "44266023" + "1806210747",
)


@pytest.mark.parametrize(
    "path",
    [
        f"workflows/{SLACK_TEAM}/{SLACK_APP}/{SLACK_TRIGGER}/" + fake("", 24),
        f"triggers/{SLACK_TEAM}/{SLACK_TRIGGER[:13]}/" + fake("", 32, "0123456789abcdef"),
    ],
)
@pytest.mark.parametrize("scheme", ["https://", "http://"])
def test_a_slack_workflow_webhook_url_keeps_its_host(scheme: str, path: str) -> None:
    """Workflow Builder webhooks (workflows/ and triggers/) lose their path; the host stays."""
    kind, _ = path.split("/", 1)
    url = f"{scheme}hooks.slack.com/{path}"
    text, found = redact_text(f"SLACK_WEBHOOK_URL={url} # alerts", DEFAULT_PATTERNS)
    assert (
        text
        == f"SLACK_WEBHOOK_URL={scheme}hooks.slack.com/{kind}/[REDACTED:slack_webhook] # alerts"
    )
    assert found == {"slack_webhook": 1}
    escaped = json.dumps({"url": url}).replace("/", "\\/")  # JSON that escapes its slashes
    redacted, found = redact_text(escaped, DEFAULT_PATTERNS)
    assert json.loads(redacted) == {
        "url": f"{scheme}hooks.slack.com/{kind}/[REDACTED:slack_webhook]"
    }
    assert found == {"slack_webhook": 1}


@pytest.mark.parametrize(
    "text",
    [
        "Set SLACK_WEBHOOK_URL=https://hooks.slack.com/triggers/T.../... in .env",
        "https://hooks.slack.com/workflows/{team}/{app}/{id}/{secret} is the shape",
        f"https://hooks.slack.com/triggers/{SLACK_TEAM}/{SLACK_TRIGGER[:13]}/short",
        f"https://api.slack.com/triggers/{SLACK_TEAM}/{SLACK_TRIGGER}/" + fake("", 32),
        f"https://hooks.slack.com/workflows/{SLACK_TEAM.lower()}/{SLACK_TRIGGER}/" + fake("", 24),
        "https://slack.com/help/articles/360041352714-Build-a-workflow and /triggers/",
    ],
)
def test_slack_workflow_look_alikes_are_kept(text: str) -> None:
    """Placeholders, other Slack hosts, short tails and a lower-case team ID are not webhooks."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


@pytest.mark.parametrize(
    "path",
    [
        f"workflows/{SLACK_TEAM}/{SLACK_APP}/{SLACK_TRIGGER}/" + fake("", 24),
        f"triggers/{SLACK_TEAM}/{SLACK_TRIGGER[:13]}/" + fake("", 32, "0123456789abcdef"),
        "services/" + SLACK_HOOK_PATH,
    ],
)
@pytest.mark.parametrize(
    "line",
    [
        "SLACK_WEBHOOK_URL={}",
        "webhook: {} # alerts",
        'curl -X POST -d "{{}}" {}',
        '{{"url": "{}"}}',
        "post to {}.",
    ],
)
def test_a_slack_webhook_without_its_scheme_loses_its_path(path: str, line: str) -> None:
    """hooks.slack.com/{workflows,triggers,services}/... written without https:// is found."""
    kind = path.split("/", 1)[0]
    text, found = redact_text(line.format(f"hooks.slack.com/{path}"), DEFAULT_PATTERNS)
    assert text == line.format(f"hooks.slack.com/{kind}/[REDACTED:slack_webhook]")
    assert found == {"slack_webhook": 1}
    escaped = json.dumps({"url": f"hooks.slack.com/{path}"}).replace("/", "\\/")
    redacted, found = redact_text(escaped, DEFAULT_PATTERNS)
    assert json.loads(redacted) == {"url": f"hooks.slack.com/{kind}/[REDACTED:slack_webhook]"}
    assert found == {"slack_webhook": 1}


@pytest.mark.parametrize(
    "text",
    [
        "Set SLACK_WEBHOOK_URL=hooks.slack.com/triggers/T.../... in .env",
        "hooks.slack.com/workflows/{team}/{app}/{id}/{secret} is the shape",
        f"hooks.slack.com/triggers/{SLACK_TEAM}/{SLACK_TRIGGER[:13]}/short",
        f"hooks.slack.com/triggers/{SLACK_TEAM}/" + fake("", 32),  # no trigger ID
        f"hooks.slack.com/workflows/{SLACK_TEAM.lower()}/{SLACK_TRIGGER}/" + fake("", 24),
        f"hooks.slack.org/triggers/{SLACK_TEAM}/{SLACK_TRIGGER}/" + fake("", 32),
        f"hooks-slack.com/triggers/{SLACK_TEAM}/{SLACK_TRIGGER}/" + fake("", 32),
        f"hooks.slack.com/shortcuts/{SLACK_TEAM}/{SLACK_TRIGGER}/" + fake("", 32),
        f"api.slack.com/triggers/{SLACK_TEAM}/{SLACK_TRIGGER}/" + fake("", 32),
    ],
)
def test_scheme_less_slack_workflow_look_alikes_are_kept(text: str) -> None:
    """Without a scheme, placeholders, other hosts and paths and short tails are still kept."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


#: A GitLab session ID as the cookie carries it: 32 hex digits.
GITLAB_SESSION = "8f1b" + "0c2d9e3a4b5c6d7e8f9a0b1c" + "2d3e"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"Cookie: _gitlab_session={GITLAB_SESSION}",
            "Cookie: _gitlab_session=[REDACTED:gitlab_session]",
        ),
        (
            f"Set-Cookie: _gitlab_session={GITLAB_SESSION}; path=/; HttpOnly",
            "Set-Cookie: _gitlab_session=[REDACTED:gitlab_session]; path=/; HttpOnly",
        ),
        (
            f"curl -b '_gitlab_session={GITLAB_SESSION * 2}' https://gitlab.example.com/api/v4",
            "curl -b '_gitlab_session=[REDACTED:gitlab_session]' https://gitlab.example.com/api/v4",
        ),
        (
            f'{{"Cookie": "known_sign_in=x; _gitlab_session={GITLAB_SESSION.upper()}"}}',
            '{"Cookie": "known_sign_in=x; _gitlab_session=[REDACTED:gitlab_session]"}',
        ),
        (
            f"event_filter=all;_gitlab_session={GITLAB_SESSION}\n",
            "event_filter=all;_gitlab_session=[REDACTED:gitlab_session]\n",
        ),
    ],
)
def test_a_gitlab_session_cookie_loses_its_value(text: str, expected: str) -> None:
    """The value of ``_gitlab_session=`` (32 or more hex digits) goes; the cookie name stays."""
    assert redact_text(text, DEFAULT_PATTERNS) == (expected, {"gitlab_session": 1})


@pytest.mark.parametrize(
    "text",
    [
        f"_gitlab_session={GITLAB_SESSION[:31]}",  # one digit short
        f"_gitlab_session={GITLAB_SESSION[:20]}g{GITLAB_SESSION[21:]}",  # not hex
        f"_gitlab_session={GITLAB_SESSION}g",  # glued to a longer word
        f"_gitlab_session={GITLAB_SESSION}-x",
        f"my_gitlab_session={GITLAB_SESSION}",  # another cookie's name
        f"x-_gitlab_session={GITLAB_SESSION}",
        f"_gitlab_session_id={GITLAB_SESSION}",
        f"_gitlab_session: {GITLAB_SESSION}",  # not a cookie assignment
        f"_GITLAB_SESSION={GITLAB_SESSION}",  # cookie names are case-sensitive
        "_gitlab_session=${GITLAB_SESSION} and _gitlab_session=",
        "the _gitlab_session cookie holds the session ID",
    ],
)
def test_gitlab_session_look_alikes_are_kept(text: str) -> None:
    """Short or non-hex values, other cookie names and placeholders are not a session."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


@settings(deadline=None, max_examples=200)
@given(
    st.text("0123456789abcdefABCDEF", min_size=32, max_size=80),
    st.sampled_from(["", " ", "; ", "\n", '"', "'", "&"]),
    st.sampled_from(["", "Cookie: ", "a=b; ", '"', "\t"]),
)
def test_any_gitlab_session_value_goes_whole(value: str, after: str, before: str) -> None:
    """Whatever the hex value and what surrounds it, none of it is left."""
    text = f"{before}_gitlab_session={value}{after}"
    redacted, found = redact_text(text, DEFAULT_PATTERNS)
    assert redacted == f"{before}_gitlab_session=[REDACTED:gitlab_session]{after}"
    assert found == {"gitlab_session": 1}


#: GitLab's token prefixes (its token overview) with a body of the length each is issued with.
GITLAB_TOKENS = [
    fake("glpat-", 20, "aB3dE6gH9jK2_-"),
    fake("gloas-", 64),
    fake("gldt-", 20),
    fake("glrt-", 20),
    fake("glrt-" + "t1_", 27) + ".01.0" + "a1b2c3d4",  # a runner token in the routable form
    fake("glrtr-", 20),
    fake("glcbt-" + "64_", 20),
    fake("glptt-", 40, "0123456789abcdef"),
    fake("glft-", 20),
    fake("glimt-", 25),
    fake("glagent-", 50),
    fake("glwt-", 20),
    fake("glsoat-", 20),
    fake("glffct-", 20),
]


@pytest.mark.parametrize("token", GITLAB_TOKENS, ids=lambda t: t.split("-")[0])
def test_every_kind_of_gitlab_token_is_replaced(token: str) -> None:
    """Each prefix GitLab documents (deploy, runner, trigger, feed, SCIM ...) goes whole."""
    for text, expected in (
        (f"use {token} for this", "use [REDACTED:gitlab_token] for this"),
        (f'{{"token": "{token}"}}', '{"token": "[REDACTED:gitlab_token]"}'),
        (f"GITLAB_TOKEN={token}\n", "GITLAB_TOKEN=[REDACTED:gitlab_token]\n"),
    ):
        assert redact_text(text, DEFAULT_PATTERNS) == (expected, {"gitlab_token": 1})


@pytest.mark.parametrize(
    "text",
    [
        "the gldt- prefix alone, glrt-short, glsoat-" + "a" * 19,  # too short
        "my_gldt-" + "a" * 24 + " and x-glft-" + "a" * 24,  # glued to a longer word
        "glob-" + "a" * 30 + " glad-" + "a" * 30 + " glrtx-" + "a" * 30,  # not a prefix
        "English-speaking, single-threaded, ugly-looking, glpat_" + "a" * 24,
        "GLDT-" + "A" * 24,  # prefixes are lower case
    ],
)
def test_gitlab_look_alikes_are_kept(text: str) -> None:
    """Words that start like GitLab prefixes, short tails and glued words are not tokens."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


@pytest.mark.parametrize(
    "name", ["AUTHORIZATION", "authorization", "AuthoriZation", "aUTHORIZATION", "AuThOrIzAtIoN"]
)
def test_the_header_name_is_found_in_any_case(name: str) -> None:
    """HTTP header names are case-insensitive, and so is the rule: any spelling is found."""
    for scheme, kind in (
        ("Bearer abcdefghijklmnop", "bearer_token"),
        ("Basic dXNlcjpwYXNz", "basic_auth"),
    ):
        text, found = redact_text(f"-H '{name}: {scheme}'", DEFAULT_PATTERNS)
        assert text == f"-H '{name}: {scheme.split()[0]} [REDACTED:{kind}]'"
        assert found == {kind: 1}


@pytest.mark.parametrize("label", ["SecretAccessKey", "AWSSecretAccessKey", "secret_access_key"])
def test_aws_secret_keys_are_found_under_camel_case_and_bare_labels(label: str) -> None:
    """An STS reply's ``"SecretAccessKey"`` (with or without AWS before it) is a label too."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    text, found = redact_text(json.dumps({label: secret, "Expiration": "x"}), DEFAULT_PATTERNS)
    assert json.loads(text)[label] == "[REDACTED:aws_secret_access_key]"
    assert found == {"aws_secret_access_key": 1}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://app:ab/cd@db:5432/main", "postgres://app:{}@db:5432/main"),
        ("mysql://root:@bc1@db/x", "mysql://root:{}@db/x"),
        ("redis://:@pw/1@cache:6379", "redis://:{}@cache:6379"),
        ("https://u:pa/ss@w@rd@host/x", "https://u:{}@host/x"),
        ('{"dsn": "postgres:\\/\\/app:ab\\/cd@db\\/x"}', '{"dsn": "postgres:\\/\\/app:{}@db\\/x"}'),
    ],
)
def test_a_url_password_holding_a_slash_or_starting_with_an_at_sign_goes_whole(
    url: str, expected: str
) -> None:
    """Passwords with a / (as lenient DSN parsers read them) or a leading @ go whole."""
    text, found = redact_text(url, DEFAULT_PATTERNS)
    assert text == expected.replace("{}", "[REDACTED:url_password]")
    assert found == {"url_password": 1}


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.text(alphabet="ab1@:%!-_.~/", min_size=1, max_size=20).filter(
        lambda p: "://" not in p and not p.lstrip("0123456789").startswith("/")
    ),
    st.sampled_from([":5432/db", "", " next", '"', "?a=1"]),
)
def test_no_part_of_a_url_password_with_slashes_is_left(password: str, rest: str) -> None:
    """A password holding / and @ anywhere (but an @ later followed by a /) goes whole."""
    if "@" in password and "/" in password.split("@", 1)[1]:
        password = password.replace("/", "_")  # there the path would begin: see the README
    text, found = redact_text(f"see postgres://app:{password}@db.internal{rest}", DEFAULT_PATTERNS)
    assert text == f"see postgres://app:[REDACTED:url_password]@db.internal{rest}"
    assert found == {"url_password": 1}


@pytest.mark.parametrize(
    "text",
    [
        "from huggingface_hub import hf_hub_download; hf_hub_download(repo_id='x')",
        "npm_config_cache=/tmp/npm and npm_package_version, npm_lifecycle_event",
        "the glpat- prefix alone, glpat-short, and my_glpat-" + "a" * 24,
        "_authToken=${NPM_TOKEN} and _authToken=",
        "see https://api.slack.com/messaging/webhooks and hooks.slack.com/services/",
        "https://example.com:8080/path@v2, http://localhost:3000/users/@me",
        "https://registry.npmjs.org:443/@types/node and https://host:/x@y",
        "pip install git+https://github.com/org/repo.git@v1.0#egg=repo",
        "the authorization header, Authorization: none given, unauthorized",
        "SecretAccessKey is the field, SecretAccessKey: short",
        "aliases: {'hf_': 'huggingface', 'npm_': 'npm'}",
    ],
)
def test_ordinary_text_about_the_new_kinds_is_left_alone(text: str) -> None:
    """Code and prose that mention the new prefixes, hosts and labels are not secrets."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        ("xa" + "pp-1-A0B1C2D3E4-1234567890123-" + "ab12" * 16, "slack_token"),
        (fake("pypi-" + "AgEIcHlwaS5vcmc", 120, "Ab3_dE6-gH9"), "pypi_token"),
        ("SG." + fake("", 22, "aB3_dE6-") + "." + fake("", 43, "Xy9-Zw8_"), "sendgrid_api_key"),
    ],
)
def test_slack_app_pypi_and_sendgrid_keys_are_found(secret: str, kind: str) -> None:
    """Slack's xapp- app tokens, PyPI's pypi-AgE... tokens and SendGrid's SG. keys go whole."""
    assert redact_text(f"key: {secret} end", DEFAULT_PATTERNS) == (
        f"key: [REDACTED:{kind}] end",
        {kind: 1},
    )


@pytest.mark.parametrize(
    ("prefix", "field"),
    [
        ("DefaultEndpointsProtocol=https;AccountName=demo;AccountKey=", ";EndpointSuffix=x"),
        ("Endpoint=sb://demo.servicebus.windows.net/;SharedAccessKeyName=x;SharedAccessKey=", ""),
    ],
)
def test_the_key_of_an_azure_connection_string_is_removed(prefix: str, field: str) -> None:
    """AccountKey= and SharedAccessKey= lose their base64 value; the rest of the string stays."""
    key = fake("", 86, "Ab3+dE6/gH9") + "=="
    assert redact_text(prefix + key + field, DEFAULT_PATTERNS) == (
        prefix + "[REDACTED:azure_key]" + field,
        {"azure_key": 1},
    )


@pytest.mark.parametrize(
    "text",
    [
        "SLACK_BOT_TOKEN=xoxb-your-token-here",
        "xoxp-replace-with-yours and xapp-your-app-token",
        "pypi-AgE alone, pypi-project-name, SG.short.key, sendgrid SG.",
        "AccountKey=; AccountKey=<key> and SharedAccessKeyName=RootManageSharedAccessKey",
    ],
)
def test_placeholders_for_the_new_kinds_are_left_alone(text: str) -> None:
    """A Slack placeholder (no number after the dash) and bare prefixes are no secrets."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("DB_PASSWORD=hunter22\n", "DB_PASSWORD=[REDACTED:env_secret]\n"),
        (
            "export DJANGO_SECRET_KEY='x9!k#2%z'\n",
            "export DJANGO_SECRET_KEY='[REDACTED:env_secret]'\n",
        ),
        (
            'docker run -e API_KEY="0c2d9e3a0c2d" img',
            'docker run -e API_KEY="[REDACTED:env_secret]" img',
        ),
        ("TWILIO_AUTH_TOKEN=" + "0c2d9e3a" * 4, "TWILIO_AUTH_TOKEN=[REDACTED:env_secret]"),
        ("CLIENT_SECRET=s3cr3t-v4lue", "CLIENT_SECRET=[REDACTED:env_secret]"),
        # A value another rule knows keeps that rule's kind.
        ("GITHUB_TOKEN=" + fake("gh" + "p_", 36), "GITHUB_TOKEN=[REDACTED:github_token]"),
    ],
)
def test_an_env_line_named_for_a_secret_loses_its_value(line: str, expected: str) -> None:
    """NAME=value with NAME ending PASSWORD, SECRET(_KEY), API_KEY or TOKEN keeps only NAME."""
    redacted, found = redact_text(line, DEFAULT_PATTERNS)
    assert redacted == expected
    assert sum(found.values()) == 1


@pytest.mark.parametrize(
    "text",
    [
        "PASSWORD_MIN_LENGTH=12\nTOKEN_TTL_SECONDS=3600\nSECRET_KEY_FILE=/run/secrets/key",
        "PASSWORD=\nAPI_KEY=$API_KEY\nSECRET_KEY=${SECRET_KEY}\nTOKEN=<token>\nPASSWD=%PASSWD%",
        "OPENAI_API_KEY=sk-...\nSTRIPE_SECRET_KEY=sk_live_xxxx\nAPI_KEY=your-api-key-here",
        "TOKEN=short and password=lowercase_is_code(), api_key = settings.API_KEY",
        "DATABASE_URL=postgres://user:${DB_PASSWORD}@localhost:5432/app",
    ],
)
def test_env_settings_placeholders_and_url_templates_are_left_alone(text: str) -> None:
    """Names that only start with a secret's word, variables and placeholders are no secrets."""
    assert redact_text(text, DEFAULT_PATTERNS) == (text, {})
