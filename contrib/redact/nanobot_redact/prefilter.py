"""Which rules can match a text, told by a few substring tests at C speed.

Most text holds no secret, so what a text without one costs is what this
module costs. Each rule names conditions every text it matches meets
(`patterns.Rule.requires`); the first condition of each rule is reduced to a
*gate*, one character of its substring that is rare in prose and code (``z``
for ``uthorization``, ``-`` for ``sk-``). A single-character test is one
``memchr`` over the text, at memory speed, so a text that holds none of the
dozen or so gates is settled without any longer search, any regular
expression or any allocation. A text that holds a gate has the conditions of
the rules behind that gate checked in full (each substring behind its own
gate), and only the rules whose every condition holds run. Rules that match
only at the start of a text are decided by what the text starts with.

The tests are necessary conditions, never guesses: a rule the prefilter rules
out cannot match the text, so the scan finds exactly what running every rule
would find (the tests check this against a scanner without conditions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from nanobot_redact.patterns import Condition, Rule

__all__ = ["Prefilter"]

# Characters by how often they occur in prose and code, most frequent first; any
# other character (upper-case letters, most punctuation) is taken to be rarer still.
_FREQUENT = " etaoinsrhldcumfpgwybvk_-=:/.,'\"()\nxjqz"
_TOO_FREQUENT = 14  # a gate among the first 14 would nearly always be there

#: One alternative of a condition: (the substring, a rarer character of it to look for first or "").
_Needle = tuple[str, str]
#: A condition, ready to test: one pattern for alternatives that share an uncommon first
#: character (the regex skips to that character in C), or else the alternatives one by one.
_Test = tuple[re.Pattern[str] | None, tuple[_Needle, ...]]


def gate(needle: str) -> str:
    """What to look for first in a text that must hold `needle`: a rare character of it.

    A one-character needle is its own gate; a longer one gets its rarest
    character when that is rare enough to be worth a pass, else the needle itself.
    """
    if len(needle) < 2:
        return needle
    rank = {char: index for index, char in enumerate(_FREQUENT)}
    rarest = max(needle, key=lambda char: rank.get(char, len(_FREQUENT)))
    return rarest if rank.get(rarest, len(_FREQUENT)) >= _TOO_FREQUENT else needle


def _test(condition: Condition) -> _Test:
    needles = tuple((n, "" if gate(n) == n else gate(n)) for n in condition)
    first = {needle[0] for needle in condition}
    if len(condition) > 1 and len(first) == 1 and not next(iter(first)).islower():
        return re.compile("|".join(map(re.escape, condition))), needles
    return None, needles


@attrs.frozen
class Prefilter:
    """The tests that tell which of a scanner's rules can match a text (see the module)."""

    #: (a gate, the rules whose first condition needs it or another gate of theirs).
    _gates: tuple[tuple[str, frozenset[int]], ...]
    #: Per rule, its conditions (`Rule.conditions`, but for the start of a start rule), to test.
    _tests: tuple[tuple[_Test, ...], ...]
    #: What texts start with (after whitespace) for a rule that matches only there.
    _starts: tuple[tuple[int, tuple[str, ...]], ...]
    #: The first characters of every prefix in `_starts`, for one test of a text's start.
    _heads: frozenset[str]
    #: Rules without conditions: candidates for every text, in rule order.
    _always: tuple[int, ...]

    @classmethod
    def of(cls, rules: Sequence[Rule]) -> Prefilter:
        """The prefilter for `rules`, built once per scanner."""
        gates: dict[str, set[int]] = {}
        starts: list[tuple[int, tuple[str, ...]]] = []
        tests: list[tuple[_Test, ...]] = []
        for index, rule in enumerate(rules):
            conditions = rule.conditions
            if rule.at_start and rule.requires:
                starts.append((index, conditions[0]))
                conditions = conditions[1:]  # the start is tested on its own
            elif conditions:
                for needle in conditions[0]:
                    gates.setdefault(gate(needle), set()).add(index)
            tests.append(tuple(_test(condition) for condition in conditions))
        always = tuple(i for i, rule in enumerate(rules) if not rule.conditions)
        # Single characters first: each is one memchr, a longer needle a slower search.
        order = sorted(gates, key=lambda g: len(g) > 1)
        return cls(
            tuple((g, frozenset(gates[g])) for g in order),
            tuple(tests),
            tuple(starts),
            frozenset(prefix[:1] for _, prefixes in starts for prefix in prefixes),
            always,
        )

    def candidates(self, text: str) -> Sequence[int]:
        """The rules that can match `text`, in rule order (empty: no rule can)."""
        gated: frozenset[int] = frozenset()
        for needle, ids in self._gates:
            if needle in text:
                gated |= ids
        # The start rules skip leading whitespace with \s, which is str.isspace's.
        head = text[:1]
        started = head in self._heads or (head.isspace() and bool(self._starts))
        if not gated and not started:
            return self._always
        chosen = [*self._always]
        for index in gated:
            for test in self._tests[index]:
                if not _holds(test, text):
                    break
            else:
                chosen.append(index)
        if started:
            stripped = text.lstrip()
            chosen += (
                i
                for i, prefixes in self._starts
                if stripped.startswith(prefixes) and all(_holds(t, text) for t in self._tests[i])
            )
        chosen.sort()
        return chosen


def _holds(test: _Test, text: str) -> bool:
    pattern, needles = test
    if pattern is not None:
        return pattern.search(text) is not None
    for needle, first in needles:  # noqa: SIM110 - a loop costs less than any() of a generator
        if (not first or first in text) and needle in text:
            return True
    return False
