"""Adversarial input: the scan stays linear, by construction and by the work it does.

No timings here (they belong in bench/redact_bench.py): the rules are checked
for the quantifiers that make a backtracking engine slow, and the scanner's
calls into the regex engine are counted on inputs of two lengths.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from nanobot_redact import DEFAULT_PATTERNS, Rule, Scanner

try:  # the parser's module is private and moved in Python 3.11
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11 is not supported anyway
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]


def _unbounded_backtracking_repeats(parsed: Any) -> list[str]:
    """The greedy or lazy repeats without an upper bound in a parsed pattern.

    A lazy repeat of "any character" is allowed: each step of it only tries a
    fixed literal (the END line of a key block), so it reads the text once.
    """
    problems: list[str] = []
    for op, av in parsed:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            low, high, item = av
            lazy_any = op is sre_constants.MIN_REPEAT and [o for o, _ in item] == [
                sre_constants.ANY
            ]
            if high == sre_constants.MAXREPEAT and not lazy_any:
                problems.append(f"{op} {low}..unbounded over {list(item)}")
            problems += _unbounded_backtracking_repeats(item)
        elif op is sre_constants.POSSESSIVE_REPEAT:
            problems += _unbounded_backtracking_repeats(av[2])
        elif op is sre_constants.SUBPATTERN:
            problems += _unbounded_backtracking_repeats(av[3])
        elif op is sre_constants.BRANCH:
            for branch in av[1]:
                problems += _unbounded_backtracking_repeats(branch)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            problems += _unbounded_backtracking_repeats(av[1])
    return problems


@pytest.mark.parametrize("rule", DEFAULT_PATTERNS, ids=lambda r: r.kind)
def test_every_unbounded_repeat_in_a_rule_is_possessive(rule: Rule) -> None:
    """No built-in rule has a greedy or lazy unbounded repeat that could backtrack."""
    assert _unbounded_backtracking_repeats(sre_parse.parse(rule.regex.pattern)) == []


def test_the_repeat_check_does_catch_a_backtracking_pattern() -> None:
    """The check above flags the shape that made the old header pattern quadratic."""
    parsed = sre_parse.parse(r"authorization\s*[:=]\s*bearer")
    assert len(_unbounded_backtracking_repeats(parsed)) == 2


class _Counting:
    """A compiled pattern that counts how often the scanner calls into the engine."""

    def __init__(self, regex: re.Pattern[str], calls: list[int]) -> None:
        self._regex = regex
        self._calls = calls
        self.pattern = regex.pattern
        self.groupindex = regex.groupindex

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self._calls[0] += 1
        return self._regex.search(text, pos)

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self._calls[0] += 1
        return self._regex.match(text, pos)


def _counting_scanner() -> tuple[Scanner, list[int]]:
    calls = [0]
    rules = tuple(attrs.evolve(r, regex=_Counting(r.regex, calls)) for r in DEFAULT_PATTERNS)
    return Scanner(rules), calls


M = "[REDACTED:{}]".format

# (name, input of size n, what it must become). The first two are the issue's cases.
ADVERSARIAL: list[tuple[str, Any, Any]] = [
    ("header then spaces", lambda n: "Authorization:" + " " * n + "x", None),
    ("a. repeated", lambda n: "a." * n, None),
    ("sk- repeated", lambda n: "sk-" * n, lambda n: M("openai_api_key")),
    ("query secret repeated", lambda n: "?token=" * n, lambda n: "?token=" + M("url_token")),
    ("scheme and colon repeated", lambda n: "://a:" * n, None),
    ("colons after a scheme", lambda n: "x://" + ":" * n, None),
    ("escaped schemes and colons", lambda n: ":\\/\\/a:" * n + "@", None),
    (
        "at signs in a url password",
        lambda n: "x://a:" + "b@" * n,
        lambda n: "x://a:" + M("url_password") + "@",
    ),
    ("at signs after a scheme and colon", lambda n: "x://a:" + "@" * n, None),
    (
        "url passwords without a host",
        lambda n: "://a:b@c " * n,
        lambda n: "://a:[REDACTED:url_password]@c " * n,
    ),
    ("jwt segments", lambda n: "eyJaaaaa." * (3 * n), lambda n: (M("jwt") + ".") * n),
    ("curl options", lambda n: "curl" + " -u" * n, None),
    ("curl users", lambda n: "curl -u " * n, None),
    ("begin lines", lambda n: "-----BEGIN PRIVATE KEY-----" * n, lambda n: M("private_key")),
    (
        "mismatched end lines",
        lambda n: "-----BEGIN RSA PRIVATE KEY-----" + "-----END DSA PRIVATE KEY-----" * n,
        lambda n: M("private_key"),
    ),
    ("aws labels", lambda n: "aws_secret_access_key=" * n, None),
    ("github prefixes", lambda n: "ghp_" * n, None),
    ("stripe prefixes", lambda n: "sk_live_" * n, None),
    ("a stripe key glued to the next", lambda n: "rk_test_" + "a1B2" * n + "_x", None),
    ("bearer then a long word", lambda n: "Bearer " + "a" * n + " x", None),
    ("header spaces and quotes", lambda n: "authorization" + ' "' * n, None),
    ("query marks", lambda n: "?&=" * n, None),
    ("every gate character, no substring behind one", lambda n: "Bz-U@?&A:=_J " * n, None),
    ("every gate character, the new ones too", lambda n: "BzZ-U@?&A:=_J/BT " * n, None),
    ("gitlab prefixes", lambda n: "glpat-" * n, lambda n: M("gitlab_token")),
    (
        "a gitlab token then dots",
        lambda n: "glpat-" + "a" * 20 + ".0" * n,
        lambda n: M("gitlab_token") + ".0" * n,
    ),
    ("hugging face prefixes", lambda n: "hf_" * n, None),
    ("a hugging face token glued to the next", lambda n: "hf_" + "aB" * n + "_x", None),
    ("npm prefixes", lambda n: "npm_" * n, None),
    ("npmrc labels", lambda n: "_authToken=" * n, lambda n: "_authToken=" + M("npm_token")),
    ("npmrc label then spaces", lambda n: "_authToken" + " " * n + "x", None),
    ("slack webhook hosts", lambda n: "hooks.slack.com/services/T" * n, None),
    ("slack webhook ids", lambda n: "hooks.slack.com/services/T" + "A1/B" * n, None),
    (
        "gitlab prefixes of every kind",
        lambda n: "gldt-glrtr-glagent-" * n,
        lambda n: M("gitlab_token"),
    ),
    ("gitlab prefixes apart", lambda n: "gldt- glrtr- glagent- glcbt- " * n, None),
    ("gitlab near-prefixes", lambda n: "gl glr glrt glrtr glagen " * n, None),
    ("slack workflow hosts", lambda n: "://hooks.slack.com/triggers/T" * n, None),
    ("escaped slack workflow hosts", lambda n: ":\\/\\/hooks.slack.com\\/workflows\\/T" * n, None),
    ("slack workflow ids", lambda n: "https://hooks.slack.com/workflows/T" + "A1/" * n, None),
    (
        "a slack trigger id without its secret",
        lambda n: "https://hooks.slack.com/triggers/T0A1B2C3/" + "1" * n,
        None,
    ),
    ("mixed-case header names", lambda n: "AuThOrIzAtIoN" * n, None),
    ("mixed-case header then spaces", lambda n: "aUTHORIZATION:" + " " * n + "x", None),
    ("camel-case aws labels", lambda n: "SecretAccessKey=" * n, None),
    ("slashes in a url password without an at sign", lambda n: "x://a:" + "b/" * n, None),
    ("slashes and at signs in a url password", lambda n: "x://a:" + "/@" * n, None),
    ("schemes with an at sign as password", lambda n: "://a:@" * n, None),
    ("scheme-less slack workflow hosts", lambda n: "hooks.slack.com/triggers/T" * n, None),
    (
        "scheme-less slack workflow ids",
        lambda n: "hooks.slack.com/workflows/T0A1B2C3/" + "A1/" * n,
        None,
    ),
    (
        "a scheme-less slack trigger id without its secret",
        lambda n: "hooks.slack.com/triggers/T0A1B2C3/" + "1" * n,
        None,
    ),
    (
        "scheme-less slack hosts glued together",
        lambda n: "hooks.slack.comhooks.slack.com/" * n,
        None,
    ),
    ("gitlab session cookies", lambda n: "_gitlab_session=" * n, None),
    (
        "a gitlab session value glued to a word",
        lambda n: "_gitlab_session=" + "a0" * n + "g",
        None,
    ),
    (
        "gitlab session values",
        lambda n: ("_gitlab_session=" + "f" * 32 + ";") * n,
        lambda n: ("_gitlab_session=" + M("gitlab_session") + ";") * n,
    ),
    ("glued gitlab session cookies", lambda n: "x_gitlab_session=" + "a" * 40 * n, None),
    ("every gate character, k too", lambda n: "BzZ-U@?&A:=_J/BTk " * n, None),
    ("every gate character, G too", lambda n: "BzZ-U@?&A:=_J/BTkG " * n, None),
    ("slack app prefixes", lambda n: "xapp-" * n, None),
    ("a slack app token glued to the next", lambda n: "xapp-1" + "A1" * n + "_x", None),
    ("pypi prefixes", lambda n: "pypi-AgE" * n, lambda n: M("pypi_token")),
    ("a pypi token glued to the next", lambda n: "xpypi-AgE" + "aB" * n, None),
    ("sendgrid prefixes", lambda n: "SG." * n, None),
    ("sendgrid key ids", lambda n: ("SG." + "a" * 22 + ".") * n, None),
    ("azure account keys", lambda n: "AccountKey=" * n, None),
    ("an azure key then padding", lambda n: "AccountKey=" + "aB" * n + "===", None),
    ("env names", lambda n: "DB_PASSWORD=" * n, lambda n: "DB_PASSWORD=" + M("env_secret")),
    ("env names, short values", lambda n: "TOKEN=abc " * n, None),
    ("env names then placeholder dots", lambda n: "TOKEN=a... " * n, None),
    (
        "env values of equals signs",
        lambda n: "SECRET=" + "=" * n,
        lambda n: "SECRET=" + M("env_secret"),
    ),
    ("quoted env names", lambda n: "API_KEY=\"'" * n, None),
    ("url templates", lambda n: "x://u:${A}" * n + "@", None),
    (
        "a url password of at signs and slashes",
        lambda n: "x://a:" + "b/@" * n,
        lambda n: "x://a:[REDACTED:url_password]@" + "b/@" * (n - 1),
    ),
]


@pytest.mark.parametrize(("name", "make", "expected"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_input_is_scanned_with_bounded_work(
    name: str, make: Any, expected: Any
) -> None:
    """The output is right, and the engine is entered a number of times set by the matches alone."""
    for n in (5_000, 20_000):
        scanner, calls = _counting_scanner()
        text = make(n)
        redacted, found = scanner.redact(text)
        assert redacted == (text if expected is None else expected(n))
        bound = 2 * (sum(found.values()) + len(DEFAULT_PATTERNS))
        assert calls[0] <= bound, f"{name}: {calls[0]} engine calls at n={n}"


def test_the_issues_inputs_at_full_size_come_back_unchanged() -> None:
    """The two inputs that took 34 s and 3.7 s before are returned as they are."""
    scanner = Scanner(DEFAULT_PATTERNS)
    for text in ("Authorization:" + " " * 100_000 + "x", "a." * 50_000):
        redacted, found = scanner.redact(text)
        assert redacted is text
        assert found == {}


def test_engine_calls_grow_with_the_matches_not_the_text() -> None:
    """Many secrets cost a bounded number of engine calls each, whatever lies between them."""
    secret = "sk-" + "A1b2" * 8
    for filler in (" ", " " + "word " * 2_000):
        scanner, calls = _counting_scanner()
        text = filler.join([secret] * 100)
        redacted, found = scanner.redact(text)
        assert found == {"openai_api_key": 100}
        assert secret not in redacted
        assert calls[0] <= 3 * (100 + len(DEFAULT_PATTERNS))
