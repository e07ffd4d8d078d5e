"""Properties of redaction on any text: idempotent, no secret shape left, the rest kept, bounded.

Fake secrets are assembled at run time so that no secret scanner mistakes this
file for a leak.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_redact import DEFAULT_PATTERNS, Scanner, marker
from nanobot_redact.prefilter import Prefilter

SCANNER = Scanner(DEFAULT_PATTERNS)
PREFILTER = Prefilter.of(SCANNER.rules)
LONGEST_MARKER = max(len(marker(rule.kind)) for rule in DEFAULT_PATTERNS)

# (secret text, what it must become): realistic shapes, each replaced whole.
SECRETS: list[tuple[str, str]] = [
    ("sk-" + "proj-Ab3dE6gH9jK2mN5pQ8sT1vW4", marker("openai_api_key")),
    ("sk-ant-" + "api03-" + "Zx9Yw8" * 6, marker("anthropic_api_key")),
    ("AKIA" + "IOSFODNN7EXAMPLE", marker("aws_access_key_id")),
    ("gh" + "p_" + "a1B2c3" * 6, marker("github_token")),
    ("github_" + "pat_" + "11ABCDEFG0" * 4, marker("github_token")),
    ("xo" + "xb-" + "1234-5678-abcdefghij", marker("slack_token")),
    ("AI" + "za" + "Sy" + "B" * 33, marker("google_api_key")),
    ("sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc", marker("stripe_api_key")),
    ("rk_" + "test_" + "51H8aBcDeFgHiJkLmNoPqRsT", marker("stripe_api_key")),
    ("eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxIn0" + ".c2lnbmF0dXJl", marker("jwt")),
    (
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----",
        marker("private_key"),
    ),
    (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF8\n-----END PGP PRIVATE KEY BLOCK-----",
        marker("private_key"),
    ),
    ("Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer " + marker("bearer_token")),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic " + marker("basic_auth")),
    (
        "https://app:s3cr3t@db.example.com/x",
        "https://app:" + marker("url_password") + "@db.example.com/x",
    ),
    ("https://x.io/a?sig=Zm9v&n=1", "https://x.io/a?sig=" + marker("url_token") + "&n=1"),
    ("glpat-" + "aB3dE6gH9jK2mN5pQ8sT", marker("gitlab_token")),
    ("hf_" + "aBcDeFgHiJ" * 3 + "kLmN", marker("huggingface_token")),
    ("npm_" + "a1B2c3" * 6, marker("npm_token")),
    ("_authToken=" + "3f1c2b9a-5d4e-4f6a", "_authToken=" + marker("npm_token")),
    (
        "https://hooks.slack.com/services/" + "T0A1B2C3D/B0A1B2C3D/" + "Xy9" * 8,
        "https://hooks.slack.com/services/" + marker("slack_webhook"),
    ),
    (
        "https://hooks.slack.com/triggers/" + "T0A1B2C3D/" + "5614161463698/" + "4d1696b2" * 4,
        "https://hooks.slack.com/triggers/" + marker("slack_webhook"),
    ),
    ("gldt-" + "aB3dE6gH9jK2mN5pQ8sT", marker("gitlab_token")),
    ("glcbt-" + "64_" + "aB3dE6gH9jK2mN5pQ8sT", marker("gitlab_token")),
    ("AuthoriZation: Bearer abc.def-ghi_jkl", "AuthoriZation: Bearer " + marker("bearer_token")),
    (
        '"SecretAccessKey": "' + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" + '"',
        '"SecretAccessKey": "' + marker("aws_secret_access_key") + '"',
    ),
    (
        "https://app:@s3/cr@db.example.com/x",
        "https://app:" + marker("url_password") + "@db.example.com/x",
    ),
    (
        "hooks.slack.com/triggers/" + "T0A1B2C3D/" + "5614161463698/" + "4d1696b2" * 4,
        "hooks.slack.com/triggers/" + marker("slack_webhook"),
    ),
    (
        "hooks.slack.com/workflows/" + "T0A1B2C3D/A0B1C2D3E/" + "442660231806/" + "Xy9" * 8,
        "hooks.slack.com/workflows/" + marker("slack_webhook"),
    ),
    ("_gitlab_session=" + "0c2d9e3a" * 4, "_gitlab_session=" + marker("gitlab_session")),
]

# Words with none of the rules' required substrings: they can never be (part of) a secret.
SAFE_WORDS = st.sampled_from(
    ["the", "build", "failed", "in", "module", "parser", "line", "42", "retry", "ok", "path.py"]
)
SEPARATORS = st.sampled_from([" ", "\n", ", ", " (", ") ", "; "])

# Text that is mostly the characters secrets are made of, so that look-alikes abound.
_TRICKY_PIECES = [
    *"skAKIAeyJghp_xob-.:/@?&=' \"\n\t",
    *("sk-", "eyJ", "://", "Bearer ", "Basic ", "Authorization: ", "curl ", " -u "),
    *("-----BEGIN ", "PRIVATE KEY-----", "ghp_", "token=", "AKIA", "AIza", "A1b2C3d4"),
    *("aws_secret_access_key=", "[REDACTED:jwt]", "-----END PRIVATE KEY-----"),
    *("sk-ant-", "AUTHORIZATION: ", "aws_secret_access_key: ", "=", ":"),
    *("sk_live_", "rk_test_", "_"),
    *("glpat-", "hf_", "npm_", "_authToken=", "hooks.slack.com/services/T", "/B"),
    *("aUTHORIZATION: ", "SecretAccessKey: ", "Z", "z"),
    *("gldt-", "glrtr-", "glagent-", "https://hooks.slack.com/triggers/T", "T0A1B2C3D/", "/A"),
    *("hooks.slack.com/triggers/T", "hooks.slack.com/workflows/T", "5614161463698/", "k"),
    *("_gitlab_session=", "0c2d9e3a" * 4, "f"),
]
TRICKY = st.lists(st.sampled_from(_TRICKY_PIECES), max_size=40).map("".join)


@settings(derandomize=True, deadline=None, max_examples=400)
@given(st.one_of(TRICKY, st.text(max_size=80)))
def test_redacting_is_idempotent_and_leaves_no_secret_shape(text: str) -> None:
    """A second pass finds nothing: no rule matches the output except on its own markers."""
    once, _ = SCANNER.redact(text)
    twice, found = SCANNER.redact(once)
    assert found == {}
    assert twice == once


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.lists(
        st.one_of(SAFE_WORDS.map(lambda w: (w, w)), st.sampled_from(SECRETS)),
        min_size=1,
        max_size=12,
    ),
    st.lists(SEPARATORS, min_size=12, max_size=12),
)
def test_secrets_are_replaced_and_everything_else_is_kept(
    pieces: list[tuple[str, str]], separators: list[str]
) -> None:
    """Text made of plain words and secrets comes back with exactly the secrets replaced."""
    text = "".join(piece + sep for (piece, _), sep in zip(pieces, separators, strict=False))
    expected = "".join(out + sep for (_, out), sep in zip(pieces, separators, strict=False))
    redacted, found = SCANNER.redact(text)
    assert redacted == expected
    assert sum(found.values()) == sum(piece != out for piece, out in pieces)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.one_of(TRICKY, st.text(max_size=80)))
def test_output_grows_at_most_one_marker_per_secret(text: str) -> None:
    """Each secret adds at most one marker's length; text without secrets is the same object."""
    redacted, found = SCANNER.redact(text)
    assert len(redacted) <= len(text) + LONGEST_MARKER * sum(found.values())
    if not found:
        assert redacted is text


@settings(derandomize=True, deadline=None, max_examples=400)
@given(st.one_of(TRICKY, st.text(max_size=80)))
def test_the_prefilter_passes_every_text_with_a_secret(text: str) -> None:
    """What the stage's prefilter rules out, a scan finds nothing in."""
    if not SCANNER.could_change(text):
        assert SCANNER.redact(text) == (text, {})


@settings(derandomize=True, deadline=None, max_examples=400)
@given(st.one_of(TRICKY, TRICKY.map(lambda text: " \n" + text), st.text(max_size=80)))
def test_admits_says_whether_any_rule_is_a_candidate(text: str) -> None:
    """The prefilter's early-exit test agrees with the list of candidate rules."""
    assert PREFILTER.admits(text) is bool(PREFILTER.candidates(text))
