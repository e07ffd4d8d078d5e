"""What a secret looks like, and how one piece of text is redacted.

Each pattern has a kind (the name that appears in ``[REDACTED:<kind>]`` and in
the report) and a regular expression whose ``secret`` group is the part to
replace; text around it (``Authorization: Bearer``, ``user:`` in a URL) is
kept so the model still understands what was there.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping

import attrs

__all__ = ["DEFAULT_PATTERNS", "SecretPattern", "marker", "patterns_from_options", "redact_text"]

_MARKER_PREFIX = "[REDACTED:"
# Token characters: a secret is never glued to more of them on either side.
_BEFORE = r"(?<![A-Za-z0-9_-])"
_AFTER = r"(?![A-Za-z0-9_-])"


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


# Order matters: a span redacted by an earlier pattern is no longer seen by a later
# one, so the specific forms (PEM blocks, sk-ant-) come before the generic (sk-).
DEFAULT_PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern.compile(
        "private_key",
        r"-----BEGIN (?P<label>[A-Z0-9 ]*)PRIVATE KEY-----"
        r".*?(?:-----END (?P=label)PRIVATE KEY-----|\Z)",
        re.DOTALL,
    ),
    SecretPattern.compile(
        "bearer_token",
        r"(?i:authorization)[\"']?\s*[:=]\s*[\"']?\s*(?i:bearer)\s+"
        r"(?P<secret>[A-Za-z0-9._~+/=-]{8,})",
    ),
    # A whole string that is just "Bearer <token>": an Authorization value on its own,
    # as in a JSON headers object whose key holds the word "Authorization".
    SecretPattern.compile(
        "bearer_token", r"\A\s*(?i:bearer)\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})\s*\Z"
    ),
    SecretPattern.compile(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"'<>]+:(?P<secret>[^\s@/\"'<>]+)@",
    ),
    SecretPattern.compile("anthropic_api_key", _BEFORE + r"sk-ant-[A-Za-z0-9_-]{20,}" + _AFTER),
    SecretPattern.compile("openai_api_key", _BEFORE + r"sk-[A-Za-z0-9_-]{20,}" + _AFTER),
    SecretPattern.compile("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    SecretPattern.compile(
        "aws_secret_access_key",
        r"(?i:aws_?secret_?access_?key)[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})"
        r"(?![A-Za-z0-9/+=])",
    ),
    SecretPattern.compile(
        "github_token",
        _BEFORE + r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})" + _AFTER,
    ),
    SecretPattern.compile("slack_token", _BEFORE + r"xox[a-z]-[A-Za-z0-9-]{10,}" + _AFTER),
    SecretPattern.compile("google_api_key", _BEFORE + r"AIza[0-9A-Za-z_-]{35}" + _AFTER),
)


def redact_text(text: str, patterns: Iterable[SecretPattern]) -> tuple[str, Counter[str]]:
    """Replace every secret in `text`; return the new text and how many of each kind went.

    A span that is already a redaction marker is left alone, so redacting twice
    changes nothing the second time.
    """
    found: Counter[str] = Counter()
    for pattern in patterns:
        text = pattern.regex.sub(functools.partial(_replace, kind=pattern.kind, found=found), text)
    return text, found


def _replace(match: re.Match[str], *, kind: str, found: Counter[str]) -> str:
    secret = match.group("secret")
    if secret.startswith(_MARKER_PREFIX):
        return match.group(0)
    found[kind] += 1
    # Keep what surrounds the secret inside the match ("Authorization: Bearer ", "user:").
    whole = match.group(0)
    start, end = match.start("secret") - match.start(), match.end("secret") - match.start()
    return f"{whole[:start]}{marker(kind)}{whole[end:]}"


def patterns_from_options(options: Mapping[str, object]) -> tuple[SecretPattern, ...]:
    """The patterns a ``[governance.stages.redact_secrets]`` table asks for.

    ``disabled_kinds`` drops built-in kinds by name; ``extra_patterns`` maps new
    kinds to regular expressions (with an optional ``secret`` group). Raises
    ValueError for unknown kinds, bad regexes or wrong types.
    """
    unknown_keys = sorted(set(options) - {"disabled_kinds", "extra_patterns"})
    if unknown_keys:
        raise ValueError(
            f"unknown option(s) {unknown_keys} (known: disabled_kinds, extra_patterns)"
        )
    disabled = options.get("disabled_kinds", [])
    if not isinstance(disabled, list) or not all(isinstance(k, str) for k in disabled):
        raise ValueError("disabled_kinds must be a list of kind names")
    known = {p.kind for p in DEFAULT_PATTERNS}
    if set(disabled) - known:
        raise ValueError(f"unknown kind(s) {sorted(set(disabled) - known)} in disabled_kinds")
    extra = options.get("extra_patterns", {})
    if not isinstance(extra, Mapping):
        raise ValueError("extra_patterns must be a table of kind = regex")
    compiled: list[SecretPattern] = []
    for kind, regex in extra.items():
        if not isinstance(regex, str) or not re.fullmatch(r"[a-z0-9_]+", str(kind)):
            raise ValueError(f"extra_patterns.{kind}: need a lower_snake kind and a regex string")
        try:
            compiled.append(SecretPattern.compile(str(kind), regex))
        except re.error as exc:
            raise ValueError(f"extra_patterns.{kind}: invalid regex: {exc}") from exc
    return (*(p for p in DEFAULT_PATTERNS if p.kind not in disabled), *compiled)
