"""One scan of a text for every secret shape, in time linear in the text.

Most text holds no secret, and Python's ``re`` tries a pattern at every position
of a text (an alternation of many patterns is slower still). So a `Prefilter`
first tells, with a few C-speed substring tests, which rules can match at all;
a text that none can match is handed back as the very same object, with
nothing allocated.

The rules that can match run together, leftmost match first, exactly as one
combined pattern would: each rule keeps its next match, the earliest (the
first rule on a tie) is taken, and the rules whose next match it overlapped
search again from its end. A search never goes back before the end of the
last match, and each rule is written so that a try from one position reads
only a bounded stretch or up to where its own kind of token ends, so the whole
scan is linear in the text. Extra patterns from config then run one pass each,
as written.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import attrs

from nanobot_redact.patterns import MARKER, Rule, SecretPattern, marker
from nanobot_redact.prefilter import Prefilter

__all__ = ["Scanner", "redact_text", "scanner_for"]


def _always(_text: str) -> bool:
    return True


@attrs.frozen
class Scanner:
    """The compiled form of a set of patterns: call `redact` on each text."""

    rules: tuple[Rule, ...]
    extras: tuple[SecretPattern, ...] = ()
    #: Whether the URLs of image parts are scanned (``disabled_kinds`` can turn it off).
    images: bool = True
    #: Which rules can match a text, built once (from `rules`: not part of equality).
    _prefilter: Prefilter = attrs.field(init=False, eq=False)

    #: Whether the stage could find a secret in a text, wherever in a message it is: the
    #: stage's prefilter. `could_match`, and true as well of what the stage decodes before
    #: it scans (JSON arguments with escapes, a ``data:`` URL's payload), whose secrets
    #: the raw text need not show. One function, asked of every text of a history.
    could_change: Callable[[str], bool] = attrs.field(init=False, eq=False, repr=False)

    @_prefilter.default
    def _build_prefilter(self) -> Prefilter:
        return Prefilter.of(self.rules)

    @could_change.default
    def _build_could_change(self) -> Callable[[str], bool]:
        if self.extras:
            return _always  # an extra pattern runs on every text
        return self._prefilter.test(holding=("\\",), data_url=self.images)

    @classmethod
    def of(cls, patterns: Iterable[SecretPattern], *, images: bool = True) -> Scanner:
        """A scanner for `patterns`: built-in rules run together, plain patterns one by one."""
        rules: list[Rule] = []
        extras: list[SecretPattern] = []
        for pattern in patterns:
            if isinstance(pattern, Rule):
                rules.append(pattern)
            else:
                extras.append(pattern)
        return cls(tuple(rules), tuple(extras), images)

    @property
    def patterns(self) -> tuple[SecretPattern, ...]:
        """Every pattern this scanner looks for, built-in rules first."""
        return (*self.rules, *self.extras)

    def redact(self, text: str) -> tuple[str, Counter[str]]:
        """Replace every secret in `text`; return the new text and how many of each kind went.

        A secret that is already a redaction marker is left alone, so redacting
        twice changes nothing the second time. With nothing found, `text` itself
        is returned.
        """
        text, found = self.scan(text)
        return text, found if found is not None else Counter()

    def scan(self, text: str) -> tuple[str, Counter[str] | None]:
        """`redact`, with None for "nothing found": a text without secrets allocates nothing."""
        active = self._prefilter.candidates(text)
        if not active and not self.extras:
            return text, None
        found: Counter[str] = Counter()
        if active:
            text = self._redact_rules(text, active, found)
        for extra in self.extras:
            text = extra.regex.sub(functools.partial(_replace, kind=extra.kind, found=found), text)
        return text, found or None

    def could_match(self, text: str) -> bool:
        """Whether any pattern could find a secret in `text` (False: `redact` would find none)."""
        return bool(self.extras) or self._prefilter.admits(text)

    def _next(self, index: int, text: str, position: int) -> re.Match[str] | None:
        rule = self.rules[index]
        if rule.at_start:
            return rule.regex.match(text) if position == 0 else None
        return rule.regex.search(text, position)

    def _redact_rules(self, text: str, active: Sequence[int], found: Counter[str]) -> str:
        pending = {index: self._next(index, text, 0) for index in active}
        pieces: list[str] = []
        cursor = 0
        while True:
            best: tuple[int, int] | None = None
            for index, match in pending.items():
                if match is not None and (best is None or match.start() < best[0]):
                    best = (match.start(), index)
            if best is None:
                break
            index = best[1]
            match = pending[index]
            assert match is not None
            secret_start, secret_end = match.span("secret")
            if not MARKER.fullmatch(text, secret_start, secret_end):
                pieces += (text[cursor:secret_start], marker(self.rules[index].kind))
                cursor = secret_end
                found[self.rules[index].kind] += 1
            # The rest of the match (a closing quote, the END line) is kept, not rescanned.
            pieces.append(text[cursor : match.end()])
            cursor = max(match.end(), match.start() + 1)
            for other, next_match in pending.items():
                if next_match is not None and next_match.start() < cursor:
                    pending[other] = self._next(other, text, cursor)
        if not found:
            return text
        pieces.append(text[cursor:])
        return "".join(pieces)


def _replace(match: re.Match[str], *, kind: str, found: Counter[str]) -> str:
    whole = match.group(0)
    if MARKER.fullmatch(match.group("secret")):
        return whole
    found[kind] += 1
    # Keep what surrounds the secret inside the match ("Authorization: Bearer ", "user:").
    start, end = match.start("secret") - match.start(), match.end("secret") - match.start()
    return f"{whole[:start]}{marker(kind)}{whole[end:]}"


def scanner_for(patterns: Sequence[SecretPattern] | Scanner) -> Scanner:
    """The scanner for `patterns` (built once per set of patterns)."""
    return patterns if isinstance(patterns, Scanner) else _scanner(tuple(patterns))


@functools.lru_cache(maxsize=16)
def _scanner(patterns: tuple[SecretPattern, ...]) -> Scanner:
    return Scanner.of(patterns)


def redact_text(text: str, patterns: Sequence[SecretPattern] | Scanner) -> tuple[str, Counter[str]]:
    """Replace every secret of `patterns` in `text` (see `Scanner.redact`)."""
    return scanner_for(patterns).redact(text)
