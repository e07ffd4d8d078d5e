"""Which rules can match a text, told by a few substring tests at C speed.

Most text holds no secret, so what a text without one costs is what this
module costs. Each rule names conditions every text it matches meets
(`patterns.Rule.requires`); the first condition of each rule is reduced to a
*gate*, one character of its substring that is rare in prose and code (``-``
for ``sk-``, ``B`` for ``-----BEGIN ``). A single-character test is one
``memchr`` over the text, at memory speed, so a text that holds none of the
eight or so gates is settled without any longer search, any regular
expression or any allocation: each gate is one more pass over every text,
so a rule whose match holds a character that is another rule's gate names it
first and goes behind it. A text that holds a gate has the conditions of
the rules behind that gate checked in full (each substring behind its own
gate; alternatives that share a first character in one pass of ``re``, after
one ``in`` test of what they start with), and only the rules whose every
condition holds run. Rules that match only at the start of a text are
decided by what the text starts with.

`Prefilter.admits` (is any rule a candidate: what a text without a secret
costs) tests less still: not a rule whose conditions imply another's (a text
that holds ``sk-ant-`` holds ``sk-``), and not a rule behind a second gate a
text holds, when it was ruled out behind the first. It is written out as one
Python function per set of rules (`Prefilter.test`), a run of ``in`` tests
with no loop over tables: on the short texts that make up most of a history,
walking the tables cost about as much again as the tests themselves.

The tests are necessary conditions, never guesses: a rule the prefilter rules
out cannot match the text, so the scan finds exactly what running every rule
would find (the tests check this against a scanner whose rules have no `requires`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import count
from typing import Any, cast

import attrs

from nanobot_redact.patterns import Caseless, Condition, Rule

__all__ = ["Prefilter"]

# Characters by how often they occur in prose and code, most frequent first; any
# other character (upper-case letters, most punctuation) is taken to be rarer still.
_FREQUENT = " etaoinsrhldcumfpgwybvk_-=:/.,'\"()\nxjqz"
_TOO_FREQUENT = 14  # a gate among the first 14 would nearly always be there

#: One alternative of a condition: (the substring, a rarer character of it to look for first or "").
_Needle = tuple[str, str]
#: A condition, ready to test: one pattern for alternatives that share their first
#: character, or else the alternatives one by one.
_Test = tuple[re.Pattern[str] | None, tuple[_Needle, ...]]


#: What `admits` tests behind one gate: per rule, its tests and the earlier gates it is
#: behind too.
_Behind = tuple[tuple[tuple[_Test, ...], tuple[str, ...]], ...]

_RANK = {char: index for index, char in enumerate(_FREQUENT)}
#: The ASCII characters str.isspace (and so str.lstrip and re's \s) takes for whitespace.
_ASCII_SPACE = frozenset(char for char in map(chr, range(128)) if char.isspace())


def _rarest(needle: str) -> str:
    """The character of `needle` least often found in prose and code."""
    return max(needle, key=lambda char: _RANK.get(char, len(_FREQUENT)))


def gate(needle: str) -> str:
    """What to look for first in a text that must hold `needle`: a rare character of it.

    A one-character needle is its own gate; a longer one gets its rarest
    character when that is rare enough to be worth a pass, else the needle itself.
    """
    if len(needle) < 2:
        return needle
    rarest = _rarest(needle)
    return rarest if _RANK.get(rarest, len(_FREQUENT)) >= _TOO_FREQUENT else needle


def _test(condition: Condition) -> _Test:
    # A `Caseless` substring is looked for in the text put in lower case (its rarest
    # character is then no test: "" stands for none).
    if any(isinstance(needle, Caseless) for needle in condition):
        return None, tuple((n, "") for n in condition)
    # Each substring is searched only where its rarest character is: one memchr that,
    # when the character is missing (no "c" in a text, no "C" in lower-case code),
    # saves a substring search that costs forty times as much.
    needles = tuple((n, _rarest(n) if len(n) > 1 else "") for n in condition)
    if len(condition) > 1 and len({needle[:1] for needle in condition}) == 1:
        # One pass instead of one per alternative: re factors out the shared first
        # character and skips from one to the next in C.
        return re.compile("|".join(map(re.escape, condition))), needles
    return None, needles


@attrs.frozen
class Prefilter:
    """The tests that tell which of a scanner's rules can match a text (see the module)."""

    #: Every gate, single characters first: each is one memchr, a longer one a slower search.
    _gates: tuple[str, ...]
    #: Per gate, the rules whose first condition it stands for.
    _admits: Mapping[str, frozenset[int]] = attrs.field(eq=False)  # the same as `_gates`
    #: Per rule, the conditions still to test once one of its gates is there (a first
    #: condition made of single characters is settled by the gate itself).
    _tests: tuple[tuple[_Test, ...], ...]
    #: Rules that match only at the start of a text: (index, what the text starts with,
    #: the rule's other conditions).
    _starts: tuple[tuple[int, Condition, tuple[_Test, ...]], ...]
    #: The first characters of every prefix in `_starts`, for one test of a text's start.
    _heads: frozenset[str]
    #: Rules without conditions: candidates for every text, in rule order.
    _always: tuple[int, ...]
    #: Rules `admits` need not test: every text that meets all of such a rule's
    #: conditions meets all of another's (``sk-ant-`` holds ``sk-``), which is tested.
    _implied: frozenset[int] = frozenset()
    #: For `admits`: per gate, in `_gates` order, for each rule behind it that is not
    #: `_implied`, the conditions still to test (as in `_tests`) and the earlier gates it
    #: is behind: a text that holds one of those had the rule tested there already.
    _behind_gate: tuple[tuple[str, _Behind], ...] = attrs.field(init=False, eq=False)
    #: The rules behind each set of gates met so far, in rule order (at most one
    #: entry per subset of the gates: bounded, and filled by the first texts).
    _behind: dict[tuple[str, ...], tuple[int, ...]] = attrs.field(
        init=False, factory=dict, eq=False
    )
    #: `admits`, written out for these rules as one function (`_admits_source`).
    _admits_text: Callable[[str], bool] = attrs.field(init=False, eq=False, repr=False)

    @_admits_text.default
    def _compile_admits(self) -> Callable[[str], bool]:
        return _compiled(self._admits_source(), self._namespace())

    @_behind_gate.default
    def _gate_tests(self) -> tuple[tuple[str, _Behind], ...]:
        behind = {g: sorted(self._admits[g] - self._implied) for g in self._gates}
        return tuple(
            (
                g,
                tuple(
                    (
                        self._tests[index],
                        tuple(e for e in self._gates[:position] if index in behind[e]),
                    )
                    for index in behind[g]
                ),
            )
            for position, g in enumerate(self._gates)
        )

    @classmethod
    def of(cls, rules: Sequence[Rule]) -> Prefilter:
        """The prefilter for `rules`, built once per scanner."""
        admits: dict[str, set[int]] = {}
        starts: list[tuple[int, Condition, tuple[_Test, ...]]] = []
        tests: list[tuple[_Test, ...]] = []
        for index, rule in enumerate(rules):
            first, *rest = rule.conditions or ((),)
            if rule.at_start and rule.requires:
                starts.append((index, first, tuple(map(_test, rest))))
                first, rest = (), []  # tested apart, never behind a gate
            elif first:
                if any(isinstance(needle, Caseless) for needle in first):
                    raise ValueError(f"{rule.kind}: a first condition has no caseless substring")
                for needle in first:
                    admits.setdefault(gate(needle), set()).add(index)
                if all(len(needle) == 1 for needle in first):
                    first = ()  # its gates are its substrings: met when the rule is behind one
            tests.append(tuple(map(_test, (first, *rest) if first else rest)))
        return cls(
            tuple(sorted(admits, key=lambda g: len(g) > 1)),
            {g: frozenset(ids) for g, ids in admits.items()},
            tuple(tests),
            tuple(starts),
            frozenset(prefix[:1] for _, prefixes, _ in starts for prefix in prefixes),
            tuple(i for i, rule in enumerate(rules) if not rule.conditions),
            _implied_rules(rules),
        )

    def admits(self, text: str) -> bool:
        """Whether any rule can match `text`: `candidates` is not empty, told at less cost.

        It stops at the first rule whose conditions all hold, builds nothing, and
        is what a text without a secret (nearly every text) costs the stage's prefilter.
        """
        return self._admits_text(text)

    def test(
        self, *, holding: tuple[str, ...] = (), data_url: bool = False
    ) -> Callable[[str], bool]:
        """`admits` as one function, true as well of a text `holding` one of those substrings
        or (`data_url`) starting ``data:`` in any case.

        For a caller that asks it of every text: the tests are written out in
        one function (see `_admits_source`), so asking costs one call.
        """
        if not holding and not data_url:
            return self._admits_text
        return _compiled(self._admits_source(holding, data_url), self._namespace())

    def _namespace(self) -> dict[str, Any]:
        patterns = {f"_p{index}": pattern for index, pattern in enumerate(self._patterns())}
        # The first characters that call for a closer look: a start rule's (leading
        # whitespace too) and a data: URL's (the stage's prefilter only asks of those).
        firsts = (self._heads | _ASCII_SPACE if self._starts else frozenset()) | {"d", "D"}
        return {**patterns, "_heads": self._heads, "_firsts": firsts, "_start": self._start_admits}

    def _patterns(self) -> list[re.Pattern[str]]:
        """Every pattern `admits` tests, in the order `_admits_source` names them."""
        return [
            pattern
            for _, behind in self._behind_gate
            for tests, _ in behind
            for pattern, _ in tests
            if pattern is not None
        ]

    def _admits_source(self, holding: tuple[str, ...] = (), data_url: bool = False) -> str:
        """The source of `admits` for these rules: each gate's tests written out in order.

        Written out, a text without a secret costs a run of ``in`` tests and no
        loop, tuple or call of the interpreter's: half of what walking the
        tables costs, on short texts (most of a history's).
        """
        lines = ["def admits(text):"]
        if self._always:
            lines.append("    return True")
            return "\n".join(lines)
        # An empty text holds no secret and nothing to decode: a tenth of a history's texts
        # (a tool call's empty content) are settled without a pass.
        lines.append("    if not text: return False")
        lines += [f"    if {needle!r} in text: return True" for needle in holding]
        if data_url or self._starts:
            # What a text starts with is read once, and one set test (`_firsts`) rules out
            # both a data: URL and a start rule for nearly every text; only a first
            # character past ASCII is asked whether it is whitespace too.
            lines.append("    head = text[:1]")
            ahead = "head in _firsts"
            if self._starts:
                ahead += " or (head > '\\x7f' and head.isspace())"
            lines.append(f"    if {ahead}:")
            if data_url:
                lines.append("        if head in 'dD' and text[:5].lower() == 'data:': return True")
            if self._starts:
                lines.append(
                    "        if (head in _heads or head.isspace()) and _start(text): return True"
                )
        names = count()  # the patterns' places in `_patterns`, in the order met below
        # A gate that a later gate's rules look back at, or test as one of their characters
        # ("=" for the npm and GitLab names behind "_"), is kept in a local when first tested:
        # a text without it would otherwise be read through once more for each look. Which
        # gates those are is known once every block is written.
        locals_ = {g: f"_held{i}" for i, g in enumerate(self._gates) if len(g) == 1}
        known: dict[str, str] = {}  # gate tested above -> its local, for the blocks below
        used: set[str] = set()  # the gates of `known` the blocks below read
        gate_lines: dict[str, int] = {}  # gate -> the index of its `if` line
        for gate_, behind in self._behind_gate:
            if not behind:
                continue  # every rule behind it is implied by one tested elsewhere
            gate_lines[gate_] = len(lines)
            lines.append(f"    if {gate_!r} in text:")
            for tests, earlier in behind:
                condition = (
                    " and ".join(_expression(t, names, gate_, known, used) for t in tests) or "True"
                )
                if earlier:
                    ruled_out = " or ".join(known.get(e, f"{e!r} in text") for e in earlier)
                    used.update(e for e in earlier if e in known)
                    condition = f"not ({ruled_out}) and {condition}"
                lines.append(f"        if {condition}: return True")
            if gate_ in locals_:
                known[gate_] = locals_[gate_]
        for gate_, index in gate_lines.items():
            if gate_ in used:
                lines[index] = f"    if ({locals_[gate_]} := {gate_!r} in text):"
        lines.append("    return False")
        return "\n".join(lines)

    def _start_admits(self, text: str) -> bool:
        """Whether a rule that matches only at the start of a text can match `text`."""
        return next(self._start_matches(text), None) is not None

    def _may_start(self, text: str) -> bool:
        """Whether a rule that matches only at the start of a text could match `text`."""
        # The start rules skip leading whitespace with \s, which is str.isspace's.
        head = text[:1]
        return head in self._heads or (head.isspace() and bool(self._starts))

    def _start_matches(self, text: str) -> Iterator[int]:
        """The start rules whose every condition `text` meets, in rule order."""
        stripped = text.lstrip()
        return (
            index
            for index, prefixes, tests in self._starts
            if stripped.startswith(prefixes) and all(_holds(t, text) for t in tests)
        )

    def candidates(self, text: str) -> Sequence[int]:
        """The rules that can match `text`, in rule order (empty: no rule can)."""
        met = tuple([g for g in self._gates if g in text])
        started = self._may_start(text)
        if not met and not started:
            return self._always
        chosen = [*self._always]
        if met:
            behind = self._behind.get(met)
            if behind is None:
                behind = tuple(sorted(frozenset().union(*(self._admits[g] for g in met))))
                self._behind[met] = behind
            for index in behind:
                for test in self._tests[index]:
                    if not _holds(test, text):
                        break
                else:
                    chosen.append(index)
        if started:
            chosen += self._start_matches(text)
        if started or self._always:
            chosen.sort()
        return chosen


def _expression(
    test: _Test, names: Iterator[int], held: str, known: Mapping[str, str], used: set[str]
) -> str:
    """`_holds` of `test` as a Python expression on ``text``, which holds `held` (a
    pattern is named by the next of `names`); a character of `known` (a gate tested
    above) is read from its local instead of the text, and added to `used`."""

    def holds(char: str) -> str:
        if char in known:
            used.add(char)
            return known[char]
        return f"{char!r} in text"

    pattern, needles = test
    if pattern is not None:
        search = f"_p{next(names)}.search(text) is not None"
        # What the alternatives start with is one ``in`` test, where a search costs a call
        # into ``re``: a text without it is spared the call. A start of two or more
        # characters is looked for by its rarest one, a memchr: searching for the substring
        # itself costs about what re's own scan for it does (twice as much, for "gl").
        shared = _shared_start([needle for needle, _ in needles])
        if shared == held:
            return search
        first = _rarest(shared)
        look = f"{shared!r} in text" if first == held else holds(first)
        return f"({look} and {search})"
    either = [f"{str(n)!r} in text.lower()" for n, _ in needles if isinstance(n, Caseless)]
    plain = [needle for needle, _ in needles if not isinstance(needle, Caseless)]
    if plain:
        for first, group in _by_character(tuple(plain), held):
            rest = [f"{needle!r} in text" for needle in group if needle != first]
            if not first:
                either += rest
            elif len(rest) < len(group):  # the character is a needle itself: it settles the group
                either.append(holds(first))
            elif len(rest) == 1:
                either.append(f"({holds(first)} and {rest[0]})")
            else:
                either.append(f"({holds(first)} and ({' or '.join(rest)}))")
    return either[0] if len(either) == 1 else f"({' or '.join(either)})"


# Kept: every scanner of the same rules (one per governor built) asks the same of it.
@functools.cache
def _by_character(needles: tuple[str, ...], held: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`needles` grouped behind characters to look for first, one memchr per group.

    Each needle goes behind a rare character it holds (or its rarest one), as few
    characters as cover them all, the rarer first where as many needles share them:
    ``SECRET=``, ``_KEY=``, ``APIKEY=`` and ``TOKEN=`` all behind an ``E``, where their
    rarest characters were four passes over a text that holds none. A one-character
    needle is its own test; `held` (the gate the text is known to hold) is no test.
    """
    # A needle whose rarest character is the gate held is searched for as it is (no
    # character of it is worth a pass more).
    choices = [
        {""}
        if _rarest(needle) == held
        else {c for c in needle if c != held and _RANK.get(c, len(_FREQUENT)) >= _TOO_FREQUENT}
        or {_rarest(needle)}
        for needle in needles
    ]
    left = set(range(len(needles)))
    groups: dict[str, list[int]] = {}
    while left:
        # The character most needles left can go behind; of those, the rarest, then the
        # first met, a needle's rarest before its others (so the source is the same every time).
        order = [
            c
            for i in sorted(left)
            for c in (_rarest(needles[i]), *needles[i], "")
            if c in choices[i]
        ]
        best = max(
            dict.fromkeys(order),
            key=lambda c: (
                sum(c in choices[i] for i in left),
                _RANK.get(c, len(_FREQUENT)),
                -order.index(c),
            ),
        )
        for i in sorted(left):
            if best in choices[i]:
                groups.setdefault(best, []).append(i)
                left.discard(i)
    # In the order of the needles, as the rule names them (the likelier first).
    return tuple(
        (first, tuple(needles[i] for i in members))
        for first, members in sorted(groups.items(), key=lambda group: group[1][0])
    )


def _shared_start(needles: list[str]) -> str:
    """What every one of `needles` starts with (the first and last in order differ first)."""
    first, last = min(needles), max(needles)
    same = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    return first if same is None else first[:same]


def _compiled(source: str, namespace: dict[str, Any]) -> Callable[[str], bool]:
    """The function `source` defines, its names taken from `namespace`."""
    scope = dict(namespace)
    # The source is built from the rules' own substrings, each written with repr().
    exec(compile(source, "<nanobot_redact.prefilter>", "exec"), scope)
    return cast("Callable[[str], bool]", scope["admits"])


def _implies(stronger: Condition, weaker: Condition) -> bool:
    """Whether a text that meets `stronger` meets `weaker`: each needle holds one of weaker's."""
    return all(any(_holds_needle(needle, other) for other in weaker) for needle in stronger)


def _holds_needle(needle: str, other: str) -> bool:
    """Whether every text that holds `needle` holds `other` (each `Caseless` or not)."""
    if isinstance(needle, Caseless):  # held in some case: only a caseless `other` is sure
        return isinstance(other, Caseless) and other in needle
    return (other in needle.lower()) if isinstance(other, Caseless) else other in needle


def _implied_rules(rules: Sequence[Rule]) -> frozenset[int]:
    """The rules behind gates whose conditions, all met, meet all of another such rule's.

    Each one left out implies one that is kept (of rules that imply one another,
    one is kept), so `admits` tests what it must.
    """
    gated = [i for i, rule in enumerate(rules) if rule.conditions and not rule.at_start]
    implied: set[int] = set()
    for index in gated:
        mine = rules[index].conditions
        for other in gated:
            if other == index or other in implied:
                continue
            theirs = rules[other].conditions
            if all(any(_implies(c, t) for c in mine) for t in theirs):
                implied.add(index)
                break
    return frozenset(implied)


def _holds(test: _Test, text: str) -> bool:
    pattern, needles = test
    if pattern is not None:
        return pattern.search(text) is not None
    for needle, first in needles:  # a loop costs less than any() of a generator
        if isinstance(needle, Caseless):
            if needle in text.lower():
                return True
        elif (not first or first in text) and needle in text:
            return True
    return False
