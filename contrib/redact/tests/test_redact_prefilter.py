"""The prefilter only ever skips work: it never hides a secret the full scan would find.

The reference is a scanner whose rules have no `requires`, so that every rule
runs on every text (a rule's `context`, such as "curl" for ``-u user:password``,
is part of what it means, and stays). Fake secrets are assembled at run time so that no secret
scanner mistakes this file for a leak.
"""

from __future__ import annotations

import re
import sys

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_redact import DEFAULT_PATTERNS, Scanner, marker
from nanobot_redact.patterns import Rule
from nanobot_redact.prefilter import Prefilter, _holds, _test, gate

SCANNER = Scanner(DEFAULT_PATTERNS)
#: Every rule on every text it applies to: what the scan must find with the prefilter too.
FULL = Scanner(tuple(attrs.evolve(rule, requires=()) for rule in DEFAULT_PATTERNS))

# One or more of every kind, in the spellings the rules know (fake, built at run time).
SECRETS = [
    "sk-" + "proj-Ab3dE6gH9jK2mN5pQ8sT1vW4",
    "sk-ant-" + "api03-" + "Zx9Yw8" * 6,
    "AKIA" + "IOSFODNN7EXAMPLE",
    "ASIA" + "Q3EGRK2VXEXAMPLE",
    "gh" + "p_" + "a1B2c3" * 6,
    "gh" + "s_" + "Z9y8X7" * 6,
    "github_" + "pat_" + "11ABCDEFG0" * 4,
    "xo" + "xb-" + "1234-5678-abcdefghij",
    "AI" + "za" + "Sy" + "B" * 33,
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxIn0" + ".c2lnbmF0dXJl",
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF8\n-----END PGP PRIVATE KEY BLOCK-----",
    "-----BEGIN PGP SECRET KEY BLOCK-----\n\nlQOYBF8",
    "Authorization: Bearer abc.def-ghi_jkl",
    "AUTHORIZATION=token abcdefghijkl",
    '"authorization": "Basic dXNlcjpwYXNz"',
    "curl -s -u admin:hunter22 https://x.io",
    "curl --user=admin:hunter22 x",
    "https://app:s3cr3t@db.example.com/x",
    "redis://:pw1234@cache:6379",
    "https://x.io/a?sig=Zm9v&n=1",
    "https://x.io/a?n=1&X-Amz-Signature=abc123",
    "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    'AWS_SECRET_ACCESS_KEY: "' + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" + '"',
    "AwsSecretAccessKey=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    '"SecretAccessKey": "' + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" + '"',
    # Every other way the words may be spelt and joined (the prefilter tells them apart).
    "secretaccesskey=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "secretAccessKey: " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "secret_accesskey = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "secretaccessKEY=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "SECRETACCESSKEY=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AuthoriZation: Bearer abc.def-ghi_jkl",
    "aUTHORIZATION: basic dXNlcjpwYXNz",
    "glpat-" + "aB3dE6gH9jK2mN5pQ8sT",
    "hf_" + "aBcDeFgHiJ" * 3 + "kLmN",
    "npm_" + "a1B2c3" * 6,
    "//registry.npmjs.org/:_authToken=" + "3f1c2b9a-5d4e-4f6a",
    "https://hooks.slack.com/services/" + "T0A1B2C3D/B0A1B2C3D/" + "Xy9" * 8,
    "https://hooks.slack.com/triggers/" + "T0A1B2C3D/" + "5614161463698/" + "4d1696b2" * 4,
    "http://hooks.slack.com/workflows/" + "T0A1B2C3D/A0B1C2D3E/" + "442660231806/" + "Xy9" * 8,
    "gldt-" + "aB3dE6gH9jK2mN5pQ8sT",
    "glcbt-" + "64_" + "aB3dE6gH9jK2mN5pQ8sT",
    "glrtr-" + "aB3dE6gH9jK2mN5pQ8sT",
    "https://app:ab/cd@db.example.com/x",
    "mysql://root:@bc1@db/x",
    "hooks.slack.com/triggers/" + "T0A1B2C3D/" + "5614161463698/" + "4d1696b2" * 4,
    "hooks.slack.com/workflows/" + "T0A1B2C3D/A0B1C2D3E/" + "442660231806/" + "Xy9" * 8,
    "hooks.slack.com\\/triggers\\/" + "T0A1B2C3D\\/" + "5614161463698\\/" + "4d1696b2" * 4,
    "_gitlab_session=" + "0c2d9e3a" * 4,
    "Cookie: a=b; _gitlab_session=" + "0C2D9E3A" * 5,
    "xa" + "pp-1-A0B1C2D3E4-1234567890123-" + "ab12" * 8,
    "pypi-" + "AgEIcHlwaS5vcmc" + "Ab3_dE6-gH9" * 6,
    "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + "." + "Xy9_Zw8-Vu7" * 3 + "Ts6Rq5Po4N",
    "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "Ab3dE6gH9jK2" * 7 + "==",
    "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey=" + "Ab3dE6gH9jK2" * 4 + "=",
    "DB_PASSWORD=" + "hunter22",
    "export DJANGO_SECRET_KEY='" + "Ab3dE6gH9jK2" * 3 + "'",
    '"API_KEY=' + "0c2d9e3a" * 4 + '"',
    "GITHUB_TOKEN=" + "gh" + "p_" + "a1B2c3" * 6,
]
# Whole texts for the rules that match only a text that is just the header value.
WHOLE = ["Bearer abcdefghijklmnop", " \tbasic dXNlcjpwYXNz\n", "\u3000BEARER abcdefghijkl"]
# Bits of secrets and of their surroundings, so that near-misses abound.
PIECES = [
    *"skAKIAeyJghp_xob-.:/@?&=' \"\n\tzZUBJ",
    *("sk-", "eyJ", "://", "Bearer ", "Basic ", "Authorization: ", "curl ", " -u "),
    *("-----BEGIN ", "PRIVATE KEY-----", "ghp_", "token=", "AKIA", "AIza", "A1b2C3d4"),
    *("aws_secret_access_key=", "SECRET", "[REDACTED:jwt]", "-----END PRIVATE KEY-----"),
    *("glpat-", "hf_", "npm_", "_authToken=", "hooks.slack.com/services/T", "/B", "Z", "z"),
    *("AuThOrIzAtIoN: ", "SecretAccessKey=", "x://a:@", "b/"),
    *("gldt-", "glrtr-", "glagent-", "gl", "https://hooks.slack.com/triggers/T", "/A", "T"),
    *("hooks.slack.com/workflows/T", ":\\/\\/", "4426602318062/"),
    *("hooks.slack.com/triggers/T", "hooks.slack.com\\/triggers\\/T", "k", "hooks"),
    *("_gitlab_session=", "_gitlab_session", "0c2d9e3a" * 4, "x", "f"),
    *("secret", "access", "key", "Secret", "ACCESS", "Key", "_", "secretaccesskey", "c", "E"),
    *("xapp-", "pypi-AgE", "SG.", "G", "AccountKey=", "SharedAccessKey=", "PASSWORD=", "TOKEN"),
    *("SECRET_KEY=", "API_KEY='", 'APIKEY="', "PASSWD", "...", "xxxx", "your", "${A}@", "$"),
]
FILLER = st.one_of(st.text(max_size=30), st.lists(st.sampled_from(PIECES), max_size=8).map("".join))


@st.composite
def texts_with_secrets(draw: st.DrawFn) -> str:
    """Filler with secrets of any kind dropped in at random places."""
    chunks = [draw(FILLER)]
    for secret in draw(st.lists(st.sampled_from(SECRETS), max_size=4)):
        chunks += [secret, draw(FILLER)]
    return "".join(chunks)


@settings(derandomize=True, deadline=None, max_examples=600)
@given(st.one_of(texts_with_secrets(), st.sampled_from(WHOLE), FILLER))
def test_the_prefilter_finds_what_running_every_rule_finds(text: str) -> None:
    """With and without the prefilter, any text comes out the same, with the same counts."""
    assert SCANNER.redact(text) == FULL.redact(text)


@settings(derandomize=True, deadline=None, max_examples=200)
@given(
    st.sets(st.integers(0, len(DEFAULT_PATTERNS) - 1), min_size=1),
    st.one_of(texts_with_secrets(), st.sampled_from(WHOLE)),
)
def test_any_choice_of_rules_finds_what_running_those_rules_finds(
    chosen: set[int], text: str
) -> None:
    """With kinds disabled, the gates of the rules left give the result of running them all."""
    rules = tuple(DEFAULT_PATTERNS[i] for i in sorted(chosen))
    full = Scanner(tuple(attrs.evolve(rule, requires=()) for rule in rules))
    assert Scanner(rules).redact(text) == full.redact(text)


@st.composite
def texts_in_a_rules_shape(draw: st.DrawFn) -> str:
    """Filler around a text drawn from one rule's own regex (any match it can have)."""
    rule = draw(st.sampled_from(DEFAULT_PATTERNS))
    return draw(FILLER) + draw(st.from_regex(rule.regex)) + draw(FILLER)


@settings(derandomize=True, deadline=None, max_examples=1_000)
@given(texts_in_a_rules_shape())
def test_the_stages_prefilter_passes_every_text_a_rule_matches(text: str) -> None:
    """Whatever a rule finds in a text of its own shape, the one-function prefilter lets through."""
    if FULL.redact(text)[1]:
        assert SCANNER.could_change(text)
        assert SCANNER._prefilter.admits(text)
    assert SCANNER._prefilter.admits(text) is bool(SCANNER._prefilter.candidates(text))


def test_code_with_an_equals_sign_is_read_once_per_character_behind_it() -> None:
    """Lower-case code with "=": the env, Azure and npm tests share their memchrs, no repeats."""
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    text = "total = compute(value, step.k)\n" * 50
    assert not SCANNER.could_change(Recording(text))
    # Capitals are what rules out the names behind "=" ("PASSWORD=", "AccountKey="): each
    # is looked for once (the "T" by the Slack workflow rule, behind "k"), and the npm and
    # GitLab names, behind "_", not at all.
    assert [asked.count(capital) for capital in "PSKT"] == [1, 1, 1, 1]
    assert not {"_authToken", "_gitlab_session", "_gitlab_session="} & set(asked)
    # Its "k" and "." pass the Slack workflow gate; no capital T rules the host search out.
    assert "hooks.slack.com" not in asked
    assert not SCANNER.could_change("hooks.slack.com/triggers/t0a1b2c3d/5614161463698/abc")


def test_an_empty_text_is_settled_without_a_test() -> None:
    """An empty text (a tool call's content) is ruled out before any substring test."""
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    assert not SCANNER.could_change(Recording(""))
    assert not SCANNER._prefilter.admits(Recording(""))
    assert asked == []


def test_every_kind_of_secret_passes_the_prefilter() -> None:
    """Each sample secret, alone and inside prose, is found with the prefilter on."""
    for secret in [*SECRETS, *WHOLE]:
        redacted, found = SCANNER.redact(secret)
        assert found, secret
        assert (redacted, found) == FULL.redact(secret)
        inside = f"see {secret} here"
        if secret not in WHOLE:
            assert SCANNER.redact(inside) == FULL.redact(inside)
            assert SCANNER.redact(inside)[1] == found


class _Untouchable:
    """A stand-in for a rule's compiled pattern that fails the test when the scan calls it."""

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.pattern = regex.pattern
        self.groupindex = regex.groupindex

    def search(self, text: str, pos: int = 0) -> None:
        raise AssertionError(f"searched with {self.pattern!r}")

    def match(self, text: str, pos: int = 0) -> None:
        raise AssertionError(f"matched with {self.pattern!r}")


def test_a_text_without_any_gate_character_is_settled_without_a_search() -> None:
    """Plain prose and numbered lines never reach a rule's regex: `scan` says None, same text."""
    untouchable = Scanner(
        tuple(attrs.evolve(rule, regex=_Untouchable(rule.regex)) for rule in DEFAULT_PATTERNS)
    )
    text = "000123: agent buffer cache commit config, the parser failed (retry).\n" * 2_000
    redacted, found = untouchable.scan(text)
    assert found is None
    assert redacted is text


def test_a_text_full_of_gate_characters_comes_back_unchanged() -> None:
    """Every gate present, no needle behind it: the text is the same object, nothing found."""
    text = "Bz-U@?&A:=_J " * 10_000
    assert SCANNER.redact(text) == (text, {})
    assert SCANNER.redact(text)[0] is text


def test_gates_are_rare_characters_of_each_substring() -> None:
    """A one-character substring is its own gate; a longer one its rarest character, if rare."""
    assert gate("@") == "@"
    assert gate("uthorization") == "z"
    assert gate("sk-") == "-"
    assert gate("-----BEGIN ") == "B"
    assert gate("ecret") == "ecret"  # only frequent letters: the substring itself is searched


def test_a_substring_is_searched_only_where_its_rarest_character_is() -> None:
    """A text missing that character rules the substring out by one memchr; others still match."""
    pattern, needles = _test(("ecret", "ECRET"))
    assert pattern is None and needles == (("ecret", "c"), ("ECRET", "E"))
    assert not _holds((pattern, needles), "x = 1\n" * 1_000)  # no "c", no "E"
    assert _holds((pattern, needles), "x = 1\n" * 1_000 + "secret")
    key = "aws_secret_access_key = " + "A" * 40
    assert SCANNER.redact("x = 1\n" * 1_000 + key)[1] == {"aws_secret_access_key": 1}


def test_prose_with_a_colon_is_ruled_out_for_aws_keys_without_a_search_for_ecret() -> None:
    """Numbered lines of lower-case prose hold ":" and "c": memchr tests settle them, no "ecret"."""
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    aws = Scanner(tuple(rule for rule in DEFAULT_PATTERNS if rule.kind == "aws_secret_access_key"))
    text = "000123: the worker read the config, its cache key and the access log\n" * 50
    assert not aws._prefilter.admits(Recording(text))
    assert "ecret" not in asked and "ECRET" not in asked
    assert not aws._prefilter.admits(Recording("x = 1\n" * 50))
    assert asked[-2:] == ["c", "E"]  # code without either letter: two memchrs after the "="
    for spelling in ("secretaccesskey", "secret_access_key", "SecretAccessKey", "secretACCESSkey"):
        assert aws._prefilter.admits(text + spelling + "=x"), spelling


def test_alternatives_are_looked_for_by_a_rare_character_of_their_shared_start() -> None:
    """GitLab's prefixes all start with "gl": a memchr for its "g", not a slower search for "gl"."""
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    gitlab = Scanner(tuple(rule for rule in DEFAULT_PATTERNS if rule.kind == "gitlab_token"))
    assert not gitlab._prefilter.admits(Recording("a-b, single-line"))
    assert asked == ["-", "g"]
    assert gitlab._prefilter.admits("gldt-" + "aB3dE6gH9jK2mN5pQ8sT")
    assert not gitlab._prefilter.admits("single-line, glob-" + "a" * 30)


def test_start_rules_skip_exactly_the_whitespace_that_their_regex_skips() -> None:
    r"""str.lstrip (the prefilter) and \s (the rules) agree on every code point."""
    space = re.compile(r"\s")
    disagree = [
        hex(code)
        for code in range(sys.maxunicode + 1)
        if (space.match(chr(code)) is not None) != chr(code).isspace()
    ]
    assert disagree == []
    for char in ("\x1c", "\x85", "\u2003", "\u3000", "\t", "\x0b"):
        assert SCANNER.could_change(f"{char}Bearer abcdefghijkl")  # the first character's set
        assert SCANNER._prefilter.admits(f"{char}Bearer abcdefghijkl")
        redacted, found = SCANNER.redact(f"{char}Bearer abcdefghijkl")
        assert redacted == f"{char}Bearer {marker('bearer_token')}"
        assert found == {"bearer_token": 1}


def test_a_scanner_is_hashable_and_equal_by_its_patterns_whatever_it_scanned() -> None:
    """What the prefilter remembers between texts is no part of the scanner's identity."""
    fresh = Scanner(DEFAULT_PATTERNS)
    used = Scanner(DEFAULT_PATTERNS)
    for text in ("a: b", "x = y?", "Bz-U@?&A:=_J", "plain"):
        used.redact(text)
    assert used == fresh
    assert hash(used) == hash(fresh)
    assert {used: 1}[fresh] == 1


def test_a_rule_without_conditions_is_admitted_for_every_text() -> None:
    """Rules that need nothing of a text make `admits` true even of text without any gate."""
    prefilter = FULL._prefilter
    for text in ("", "plain words", "x = 1\n" * 50):
        assert prefilter.candidates(text)
        assert prefilter.admits(text)


def test_a_rule_whose_conditions_imply_another_rules_is_not_tested_by_admits() -> None:
    """``sk-ant-`` holds ``sk-``: a text that fails the weaker rule cannot pass the stronger."""
    specific = Rule.of("specific", r"sk-ant-\w+", "sk-ant-")
    generic = Rule.of("generic", r"sk-\w+", "sk-")
    unrelated = Rule.of("unrelated", r"xox\w+", "-", "xox")
    prefilter = Prefilter.of([specific, generic, unrelated])
    assert prefilter._implied == frozenset({0})
    for text in ("sk-ant-abc", "sk-abc", "a-b", "-xoxb", "plain", "sk-ant", "ant-sk"):
        assert prefilter.admits(text) is bool(prefilter.candidates(text))
    # Rules that imply each other: one of them is still tested.
    twins = Prefilter.of([generic, Rule.of("twin", r"sk-\d+", "sk-")])
    assert len(twins._implied) == 1
    assert twins.admits("sk-1") and not twins.admits("sk 1")


def test_a_rule_behind_two_gates_is_tested_once_per_text() -> None:
    """Behind the second gate a text holds, a rule already ruled out there is not tested again."""
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    rule = Rule.of("pair", r"(?:key|KEY)[:=]\w+", (":", "="), ("key", "KEY"))
    prefilter = Prefilter.of([rule])
    text = Recording("a: b = c")
    assert not prefilter.admits(text)
    assert asked.count("k") == asked.count("K") == 1  # each needle's rarest character
    assert prefilter.admits("key=1") and prefilter.admits("KEY:1")


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.sets(st.integers(0, len(DEFAULT_PATTERNS) - 1)),
    st.booleans(),
    st.one_of(texts_with_secrets(), FILLER, FILLER.map(lambda text: "Data:" + text)),
)
def test_the_written_out_prefilter_of_any_choice_of_rules_agrees_with_the_candidates(
    chosen: set[int], images: bool, text: str
) -> None:
    """The stage's one-function prefilter is true exactly when the tables say it must be."""
    scanner = Scanner(tuple(DEFAULT_PATTERNS[i] for i in sorted(chosen)), images=images)
    decoded = "\\" in text or (images and text[:5].lower() == "data:")
    expected = decoded or bool(scanner._prefilter.candidates(text))
    assert scanner.could_change(text) is expected
    assert scanner._prefilter.admits(text) is bool(scanner._prefilter.candidates(text))


def test_substrings_that_need_escaping_are_written_out_as_themselves() -> None:
    """Quotes, backslashes, line breaks and braces in a rule's substrings test just those."""
    odd = "'\"\\\n{x}"
    rule = Rule.of("odd", re.escape(odd) + r"\w+", odd, ("?'", '"?'))
    prefilter = Prefilter.of([rule])
    source = prefilter._admits_source()
    assert repr(odd) in source
    for text in (odd + "a ?'", odd + 'b "?', odd, "?' \"?", "'\"\\ {x}?'", ""):
        assert prefilter.admits(text) is bool(prefilter.candidates(text)), text
    assert prefilter.admits(f"see {odd}1 ?'")
    assert not prefilter.admits("'\"\\\n{y} ?'")


def test_a_scanner_with_extra_patterns_asks_its_stage_about_every_text() -> None:
    """An extra pattern from config has no conditions: the stage's prefilter passes all."""
    from nanobot_redact.patterns import SecretPattern

    scanner = Scanner(DEFAULT_PATTERNS, (SecretPattern.compile("ticket", r"TKT-\d+"),))
    assert scanner.could_change("plain words")
    assert scanner.could_change("")
    assert not Scanner(DEFAULT_PATTERNS).could_change("plain words")


def test_a_rule_whose_match_holds_another_rules_gate_goes_behind_it() -> None:
    """The header name and a URL password cost a text without ``:`` and ``=`` no pass."""
    assert SCANNER._prefilter._gates == ("B", ":", "=", "-", "A", "_", "k", "G", "J")
    asked: list[str] = []

    class Recording(str):
        def __contains__(self, needle: object) -> bool:
            asked.append(str(needle))
            return super().__contains__(needle)  # type: ignore[operator]

    assert not SCANNER.could_change(Recording("plain words, nothing else"))
    assert not {"z", "Z", "@"} & set(asked)
    for text in ("Authorization: Bearer abcdefghijkl", "AUTHORIZATION=token abcdefghijkl"):
        assert SCANNER.could_change(text)
    assert SCANNER.could_change("https://app:s3cr3t@db.example.com/x")


def test_scheme_less_slack_workflow_urls_and_gitlab_sessions_pass_the_prefilter() -> None:
    """The new shapes pass the stage's prefilter alone and in prose; prose without them does not."""
    found = [
        "hooks.slack.com/triggers/" + "T0A1B2C3D/" + "5614161463698/" + "4d1696b2" * 4,
        "see hooks.slack.com/workflows/" + "T0A1B2C3D/A0B1C2D3E/442660231806/" + "Xy9" * 8,
        "cookie _gitlab_session=" + "0c2d9e3a" * 4 + " here",
    ]
    for text in found:
        assert SCANNER.could_change(text), text
        assert SCANNER.redact(text)[1], text
    for text in ("look at the slack hooks, not the gitlab session", "hooks.slack.com"):
        assert not SCANNER.could_change(text), text
