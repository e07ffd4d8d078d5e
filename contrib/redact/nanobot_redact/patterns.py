"""What a secret looks like: one rule per shape, each with a kind and a ``secret`` group.

Each rule has a kind (the name that appears in ``[REDACTED:<kind>]`` and in the
report) and a regular expression whose ``secret`` group is the part to replace;
text around it (``Authorization: Bearer``, ``user:`` in a URL) is kept so the
model still understands what was there.

The built-in rules are matched with Python's backtracking ``re``, so each is
written to be linear on any input: every quantifier after the literal a match
starts with is possessive (it never gives back what it took) or bounded, and a
token starts only at a token boundary, so a try from one position reads only
as far as that kind of token reaches, and the scan moves on past what it read.
Each rule also names substrings that any text it matches contains
(`Rule.requires`); `scanner.Scanner` runs a rule only on texts that hold them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast

import attrs

__all__ = [
    "DEFAULT_PATTERNS",
    "IMAGE_KIND",
    "MARKER",
    "Caseless",
    "Condition",
    "Rule",
    "SecretPattern",
    "check_disabled_kinds",
    "extra_patterns",
    "images_enabled",
    "marker",
    "patterns_from_options",
]

_MARKER_PREFIX = "[REDACTED:"
#: The kind of an image part replaced because its URL held a secret (see `images`).
IMAGE_KIND = "image_url"
#: A whole redaction marker; a secret group that holds exactly this is already redacted.
MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")

_TOKEN = "A-Za-z0-9_-"
_AFTER = f"(?![{_TOKEN}])"


def _token_start(literal: str) -> str:
    """`literal` where it starts a token: not glued to token characters before it.

    The literal comes first and the check looks back over it, so that ``re``
    can find candidates by the literal alone.
    """
    return f"{re.escape(literal)}(?<![{_TOKEN}]{re.escape(literal)})"


# `Authorization: `, `"authorization": "`, `authorization=`: the header name and separator.
# Possessive: whitespace around an optional quote can be split only one way. Header
# names are read in any case (HTTP says so), which its `requires` cover: any spelling
# holds a z or a Z, and the name in some case.
_HEADER = r"(?i:authorization)[\"']?+\s*+[:=]\s*+[\"']?+\s*+"
_BEARER_VALUE = r"(?P<secret>[A-Za-z0-9._~+/=-]{8,}+)"
_BASIC_VALUE = r"(?P<secret>[A-Za-z0-9+/]{8,}+={0,2}+)"
# Query parameters whose value is a credential (presigned URLs, OAuth redirects, API calls).
_QUERY_SECRET_NAMES = (
    "access_token|refresh_token|id_token|auth_token|session_token|token|api_key|apikey|api-key"
    "|client_secret|password|passwd|secret|sig|signature|x-amz-signature|x-amz-credential"
    "|x-amz-security-token|x-goog-signature|x-goog-credential|auth"
)


@attrs.frozen
class SecretPattern:
    """One kind of secret: its name and a regex with a ``secret`` group to replace."""

    kind: str
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, kind: str, pattern: str, flags: int = 0) -> SecretPattern:
        """Compile `pattern`; when it has no ``secret`` group, the whole match is the secret."""
        compiled = re.compile(pattern, flags)
        if "secret" not in compiled.groupindex:
            compiled = re.compile(f"(?P<secret>{pattern})", flags)
        return cls(kind, compiled)


def marker(kind: str) -> str:
    """The text a secret of this kind is replaced with."""
    return f"{_MARKER_PREFIX}{kind}]"


class Caseless(str):
    """A substring a text holds in any mix of cases (written in lower case)."""

    __slots__ = ()


#: One condition on a text a rule can match: the text holds at least one of these substrings
#: (a `Caseless` one in any case).
Condition = tuple[str, ...]

# The separator first (`_HEADER` needs a : or an =): gates other rules have, so the header
# name costs a text that holds neither no pass of its own; then a z or a Z (any spelling
# of the name holds one), then the name in the text put in lower case.
_HEADER_NAME: tuple[Condition, ...] = ((":", "="), ("z", "Z"), (Caseless("authorization"),))


@attrs.frozen
class Rule(SecretPattern):
    """A built-in pattern, written to be linear, with what a text must hold for it to match.

    `requires` are conditions that every text the rule matches meets: for each
    one, the text holds at least one of its substrings, a `Caseless` one in any
    case (no conditions: the rule always runs). They only save work, and change
    nothing the rule finds. The first condition is what the scanner tests on
    every text, so it is the one that rules out the most for the least work (a
    substring with a character that is rare in prose and code). With
    `at_start`, the rule matches only at the start of a text, and its first
    condition names what the text starts with once leading whitespace is
    skipped.

    `context` is part of what the rule means: substrings the text must hold,
    every one, for the rule to apply at all (``curl``: curl's ``-u user:password``
    counts only in a text that runs curl).
    """

    requires: tuple[Condition, ...] = ()
    at_start: bool = False
    context: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        kind: str,
        pattern: str,
        *requires: str | Condition,
        at_start: bool = False,
        context: tuple[str, ...] = (),
    ) -> Rule:
        """Compile `pattern` (see `SecretPattern.compile`) with its conditions.

        Each of `requires` is one condition: a substring the text must hold, or a
        tuple of substrings of which it must hold one.
        """
        compiled = SecretPattern.compile(kind, pattern)
        conditions = tuple((need,) if isinstance(need, str) else tuple(need) for need in requires)
        return cls(compiled.kind, compiled.regex, conditions, at_start, context)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """Every condition a text must meet to be scanned with this rule: `requires`, `context`."""
        return (*self.requires, *((needle,) for needle in self.context))


#: The prefixes of GitLab's tokens (see the gitlab_token rule).
_GITLAB_PREFIXES: Condition = tuple(
    f"gl{kind}-"
    for kind in (
        "pat",
        "oas",
        "dt",
        "rt",
        "rtr",
        "cbt",
        "ptt",
        "ft",
        "imt",
        "agent",
        "wt",
        "soat",
        "ffct",
    )
)


#: The words an environment variable's name ends with when its value is a secret
#: (DB_PASSWORD, DJANGO_SECRET_KEY, OPENAI_API_KEY, GITHUB_TOKEN), as `env_secret` reads them.
_ENV_SECRET_NAMES = ("PASSWORD", "PASSWD", "SECRET", "SECRET_KEY", "API_KEY", "APIKEY", "TOKEN")
#: What a text must hold for `env_secret` to match: a name's last word and its "=" (code
#: names these words far more often than it assigns them; "_KEY=" for API_KEY= and
#: SECRET_KEY=): on this repository's sources the rule then runs on 23 files, not 61.
_ENV_SECRET_NAMES_HELD: Condition = (
    "PASSWORD=",
    "PASSWD=",
    "SECRET=",
    "_KEY=",
    "APIKEY=",
    "TOKEN=",
)


# Where two rules match at the same place, the earlier one wins, so the specific
# forms (sk-ant-) come before the generic (sk-). Flags are inline.
DEFAULT_PATTERNS: tuple[Rule, ...] = (
    Rule.of(
        "private_key",
        r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40})PRIVATE KEY-----"
        r"(?s:.*?)(?:-----END (?P=label)PRIVATE KEY-----|\Z)",
        "-----BEGIN ",
        "PRIVATE KEY-----",
    ),
    Rule.of(
        "private_key",
        # PGP 2 wrote SECRET where GnuPG writes PRIVATE.
        r"-----BEGIN PGP (?P<word>PRIVATE|SECRET) KEY BLOCK-----"
        r"(?s:.*?)(?:-----END PGP (?P=word) KEY BLOCK-----|\Z)",
        "-----BEGIN PGP ",
    ),
    Rule.of("bearer_token", _HEADER + r"(?i:bearer|token)\s++" + _BEARER_VALUE, *_HEADER_NAME),
    Rule.of("basic_auth", _HEADER + r"(?i:basic)\s++" + _BASIC_VALUE, *_HEADER_NAME),
    # A whole string that is just "Bearer <token>" or "Basic <credentials>": an
    # Authorization value on its own, as in a JSON headers object.
    Rule.of(
        "bearer_token",
        r"\s*+(?:[Bb]earer|BEARER)\s++" + _BEARER_VALUE + r"\s*+\Z",
        ("Bearer", "bearer", "BEARER"),
        at_start=True,
    ),
    Rule.of(
        "basic_auth",
        r"\s*+(?:[Bb]asic|BASIC)\s++" + _BASIC_VALUE + r"\s*+\Z",
        ("Basic", "basic", "BASIC"),
        at_start=True,
    ),
    # curl's -u/--user user:password, in a text that runs curl. The option is the
    # anchor (not "curl", then anything up to it), so that every try is one short run.
    Rule.of(
        "basic_auth",
        r"-(?<!\S-)(?:u|-user)(?:\s++|=)[\"']?+[^\s:\"'-][^\s:\"']*+:[\"']?+(?P<secret>[^\s\"']++)",
        "-u",
        context=("curl",),
    ),
    # The user part may be empty (redis://:password@host); JSON text may write the
    # slashes escaped (https:\/\/). The password may hold a / and begin with an @ (as
    # lenient DSN parsers read it), but not where a port and path stand (host:8080/x@y:
    # digits, or nothing, then a slash). An unencoded @ in the password ends it only at
    # the last @ before the host, as URL parsers read it: a piece after an @ is taken only
    # when another @ follows it (one character of look-ahead), and a piece holds no /
    # (there the path has begun). The password stops before another scheme's ://, so a
    # try reads each character once.
    Rule.of(
        "url_password",
        r":(?://|\\/\\/)[^\s:/@\"'<>]*+:"
        # A ${VARIABLE} in a URL template is no password.
        r"(?!\$\{[A-Za-z_][A-Za-z0-9_]*+\}@)(?P<secret>"
        r"(?!\d*+(?:/|\\/))(?:[^\s@\"'<>:]++|:(?!//|\\/\\/))++(?:@[^\s@/\"'<>]*+(?=@))*+"
        # From an @: its first piece may hold a / too, and a host must follow.
        r"|@(?:[^\s@\"'<>:]++|:(?!//|\\/\\/))*+(?=@)(?:@[^\s@/\"'<>]*+(?=@))*+"
        r"(?=@[^\s@/\"'<>:?#])"
        r")@",
        ":",  # first: a gate other rules have, where "@" would be one more pass of every text
        "@",
        ("://", ":\\/\\/"),  # JSON text may escape the slashes
    ),
    Rule.of(
        "url_token",
        r"[?&](?i:" + _QUERY_SECRET_NAMES + r")=(?P<secret>[^&#;\s\"'<>()\[\]{}`,]++)",
        "=",  # first: the gate the AWS secret rule has too, so one pass fewer
        ("?", "&"),
    ),
    Rule.of("anthropic_api_key", _token_start("sk-") + r"ant-[A-Za-z0-9_-]{20,}+", "sk-ant-"),
    Rule.of("openai_api_key", _token_start("sk-") + r"[A-Za-z0-9_-]{20,}+", "sk-"),
    Rule.of(
        "aws_access_key_id",
        r"A(?:KIA|SIA|BIA|CCA)(?<!\w....)[0-9A-Z]{16}\b",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    Rule.of(
        "aws_secret_access_key",
        # The label with or without its "aws" (an STS reply's "SecretAccessKey", rclone's
        # secret_access_key), in snake, upper and camel case.
        r"(?:secret|SECRET|Secret)_?+(?:access|ACCESS|Access)_?+(?:key|KEY|Key)"
        r"[\"']?+\s*+[:=]\s*+[\"']?+(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        # The separator first: a memchr each, where "ecret" is a slower search.
        (":", "="),
        # Then, before the search for "ecret" (about a nanosecond a character on prose),
        # what every spelling holds that a memchr tells: a "c" or an "E" (rules out code
        # like "x = 1" at once), and an underscore or a capital of one of its words, or
        # else the one spelling in lower case without either (a search three times as fast
        # as that for "ecret"). A long text of prose or numbered lines (a `cat -n`) that
        # holds a ":" is so ruled out at a fraction of the cost.
        ("c", "E"),
        ("_", "S", "A", "K", "secretaccesskey"),
        ("ecret", "ECRET"),
    ),
    Rule.of(
        "github_token",
        _token_start("g") + r"(?:h[pousr]_[A-Za-z0-9]{36,}+|ithub_pat_[A-Za-z0-9_]{22,}+)" + _AFTER,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    # Slack's bot, user and other xox?- tokens and its app-level xapp- tokens: every kind
    # Slack documents goes on with a number after the dash (a team, app or version), which
    # tells a token from a placeholder such as xoxb-your-token. "-" first: rarer in prose
    # than the "x" of "xox".
    Rule.of(
        "slack_token",
        r"x(?<![A-Za-z0-9_-]x)(?:ox[a-z]|app)-[0-9][A-Za-z0-9-]{9,}+" + _AFTER,
        "-",
        ("xox", "xapp-"),
    ),
    Rule.of("google_api_key", _token_start("AIza") + r"[0-9A-Za-z_-]{35}" + _AFTER, "AIza"),
    # Stripe's secret (sk_) and restricted (rk_) keys, live or test; the publishable
    # pk_ keys are meant to be public. The look-behind spans the 8-character prefix.
    Rule.of(
        "stripe_api_key",
        r"[sr]k_(?:live|test)_(?<![A-Za-z0-9_-].{8})[0-9A-Za-z]{16,}+" + _AFTER,
        ("k_live_", "k_test_"),
    ),
    # GitLab tokens, by the prefixes GitLab documents (personal, project and group access
    # glpat-, OAuth application secret gloas-, deploy gldt-, runner glrt- and glrtr-, CI/CD
    # job glcbt-, trigger glptt-, feed glft-, incoming mail glimt-, agent for Kubernetes
    # glagent-, workspace glwt-, SCIM glsoat-, feature flags client glffct-) and at least 20
    # characters (the shortest any of them has), or the routable form's longer payload with
    # its version and checksum after dots.
    Rule.of(
        "gitlab_token",
        _token_start("gl")
        + r"(?:pat|oas|dt|rtr?+|cbt|ptt|ft|imt|agent|wt|soat|ffct)-"
        + r"[A-Za-z0-9_-]{20,}+(?:\.[0-9a-z]{2}\.?+[0-9a-z]{7,}+)?+",
        # One condition: alternatives that share their first character are one pass of
        # re, after one test of the "gl" they start with (behind the "-" gate they share).
        _GITLAB_PREFIXES,
    ),
    # GitLab's session cookie, _gitlab_session=<32 or more hex digits>: it signs its holder
    # in as the user. Behind "_" (a gate other rules have), then the cookie's name and its
    # "=": behind "=", it cost every text of code with an "=" and no "_" a pass of its own.
    Rule.of(
        "gitlab_session",
        _token_start("_gitlab_session") + r"=(?P<secret>[0-9A-Fa-f]{32,}+)" + _AFTER,
        "_",
        "_gitlab_session=",
    ),
    # Hugging Face access tokens: hf_ and 34 letters (digits allowed, at least 30).
    Rule.of("huggingface_token", _token_start("hf_") + r"[A-Za-z0-9]{30,}+" + _AFTER, "hf_"),
    # npm access tokens (npm_ and 36 letters and digits), and the value of an .npmrc
    # ``_authToken=`` (older tokens are UUIDs); a ${VARIABLE} holds none.
    Rule.of("npm_token", _token_start("npm_") + r"[A-Za-z0-9]{36}" + _AFTER, "npm_"),
    Rule.of(
        "npm_token",
        r"_authToken[\"']?+\s*+=\s*+[\"']?+(?P<secret>[A-Za-z0-9._~+/=-]{8,}+)",
        # First "_", a gate other rules have, where "_authToken" would be a new one (and "="
        # the gate behind which it cost every text of code with no "_" a pass for its "T").
        "_",
        "=",
        "_authToken",
    ),
    # Slack incoming webhooks: hooks.slack.com/services/T.../B.../secret; the host stays.
    Rule.of(
        "slack_webhook",
        r"hooks\.slack\.com(?:/|\\/)services(?:/|\\/)"
        r"(?P<secret>T[A-Z0-9]{6,}+(?:/|\\/)B[A-Z0-9]{6,}+(?:/|\\/)[A-Za-z0-9]{16,}+)",
        "/B",  # first: B is a gate already (-----BEGIN)
        "hooks.slack.com",
    ),
    # Slack workflow webhooks: hooks.slack.com/workflows/T.../A.../<id>/secret and
    # hooks.slack.com/triggers/T.../<id>/secret, with or without a scheme (a .env or a
    # config often leaves it out); the host stays. Neither path holds another rule's gate
    # character (the ":" of a scheme was one, but then a URL without it went unfound), so
    # the rule has a gate of its own: the host's "k", the rarest of its letters in prose.
    # "T" (of "/T") and "." cost the same on the benchmark's history and this repository's
    # sources, but pass nearly every paragraph of prose, each then searched for the host.
    Rule.of(
        "slack_webhook",
        r"hooks\.slack\.com(?:/|\\/)(?:workflows|triggers)(?:/|\\/)"
        r"(?P<secret>T[A-Z0-9]{6,}+(?:/|\\/)(?:A[A-Z0-9]{6,}+(?:/|\\/))?+[0-9]{6,}+(?:/|\\/)"
        r"[A-Za-z0-9]{16,}+)",
        "k",
        # The team ID's "/T" before the host: code (no capital T) is ruled out by one memchr,
        # where the host's "." is in nearly every text that holds a "k", then searched for it.
        "/T",  # the team ID starts every path (after "\/" in JSON text too)
        "hooks.slack.com",
    ),
    # PyPI API tokens: pypi- and a macaroon, whose base64 starts AgE (version and location).
    Rule.of("pypi_token", _token_start("pypi-") + r"AgE[A-Za-z0-9_-]{50,}+" + _AFTER, "pypi-AgE"),
    # SendGrid API keys: SG., 22 characters of key ID, ".", 43 of secret (base64url). Its
    # own gate, "G" (no other rule's gate character is sure to be in it): rarer in prose
    # and code than the "S" or "." of "SG.".
    Rule.of(
        "sendgrid_api_key",
        _token_start("SG.") + r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _AFTER,
        "G",
        "SG.",
    ),
    # The key of an Azure connection string: a storage account's AccountKey=, a Service
    # Bus or Event Hubs SharedAccessKey= (base64). Behind "=", a gate other rules have.
    Rule.of(
        "azure_key",
        r"(?:Account|SharedAccess)Key=(?P<secret>[A-Za-z0-9+/]{20,}+={0,2}+)(?![A-Za-z0-9+/=])",
        "=",
        ("AccountKey=", "SharedAccessKey="),
    ),
    # A JSON Web Token: base64url header and payload, both JSON objects (so "eyJ"),
    # and a signature that is empty for unsigned tokens.
    Rule.of(
        "jwt",
        _token_start("eyJ") + r"[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+",
        "eyJ",
    ),
    # A .env, `env` or `docker run -e` line: NAME=value, NAME ending in one of these
    # upper-case words (lower case is read as code: password=pw). Last, and matched from
    # the value on, so that a value another rule knows (GITHUB_TOKEN=ghp_...) keeps that
    # rule's kind. A try starts only right after NAME= (a quote may follow), and the value
    # is read once, possessively: the checks before it (not a ${VARIABLE}, $VARIABLE,
    # <placeholder>, nor one that holds "...", "xxxx", "your" within its first 40
    # characters) read a bounded stretch.
    Rule.of(
        "env_secret",
        r"(?<=[=\"'])(?:"
        + "|".join(f"(?<={word}=)|(?<={word}=[\"'])" for word in _ENV_SECRET_NAMES)
        + r")(?![$<{%]|[^\s\"'`]{0,40}?(?:\.\.\.|xxxx|XXXX|\*\*\*|your|YOUR|Your))"
        r"(?P<secret>[^\s\"'`]{6,}+)",
        "=",  # first: a gate other rules have
        _ENV_SECRET_NAMES_HELD,
    ),
)


def patterns_from_options(options: Mapping[str, object]) -> tuple[SecretPattern, ...]:
    """The patterns a ``[governance.stages.redact_secrets]`` table asks for.

    ``disabled_kinds`` drops built-in kinds by name (``image_url`` is handled by
    `images_enabled`, not by a pattern); ``extra_patterns`` maps new
    kinds to regular expressions (with an optional ``secret`` group). Raises
    ValueError for unknown kinds, bad regexes or wrong types.
    """
    unknown_keys = sorted(set(options) - {"disabled_kinds", "extra_patterns"})
    if unknown_keys:
        raise ValueError(
            f"unknown option(s) {unknown_keys} (known: disabled_kinds, extra_patterns)"
        )
    disabled = options.get("disabled_kinds", [])
    try:
        check_disabled_kinds(disabled)
    except ValueError as exc:
        raise ValueError(f"disabled_kinds: {exc}") from exc
    kinds = frozenset(cast("list[str]", disabled))
    try:
        compiled = extra_patterns(options.get("extra_patterns", {}))
    except ValueError as exc:
        raise ValueError(f"extra_patterns: {exc}") from exc
    return (*(p for p in DEFAULT_PATTERNS if p.kind not in kinds), *compiled)


def check_disabled_kinds(disabled: object) -> None:
    """Refuse a ``disabled_kinds`` that is not a list of known kind names (ValueError)."""
    if not isinstance(disabled, list) or not all(isinstance(k, str) for k in disabled):
        raise ValueError("must be a list of kind names")
    known = {p.kind for p in DEFAULT_PATTERNS} | {IMAGE_KIND}
    if set(disabled) - known:
        raise ValueError(
            f"unknown kind(s) {sorted(set(disabled) - known)} (known: {', '.join(sorted(known))})"
        )


def extra_patterns(extra: object) -> list[SecretPattern]:
    """The patterns of an ``extra_patterns`` table (kind = regex); ValueError when one is bad."""
    if not isinstance(extra, Mapping):
        raise ValueError("must be a table of kind = regex")
    compiled: list[SecretPattern] = []
    for kind, regex in extra.items():
        if not isinstance(regex, str) or not re.fullmatch(r"[a-z0-9_]+", str(kind)):
            raise ValueError(f"entry {kind!r}: need a lower_snake kind and a regex string")
        try:
            compiled.append(SecretPattern.compile(str(kind), regex))
        except re.error as exc:
            raise ValueError(f"entry {kind!r}: invalid regex: {exc}") from exc
    return compiled


def images_enabled(options: Mapping[str, object]) -> bool:
    """Whether image parts are scanned: unless ``disabled_kinds`` names ``image_url``."""
    disabled = options.get("disabled_kinds", [])
    return not (isinstance(disabled, list) and IMAGE_KIND in disabled)
