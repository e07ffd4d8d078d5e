"""Token counts against published reference values, computed with no network access.

Reference counts come from OpenAI's cookbook "How to count tokens with
tiktoken" (the compare_encodings table, and the chat example whose totals the
OpenAI API itself reported: 129 prompt tokens for gpt-4, 124 for gpt-4o).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobot_tokenizer import BpeTokenCounter
from nanobot_tokenizer.counter import load_encoding
from nanobot_tokenizer.segments import MAX_PIECE_CHARS


@pytest.mark.parametrize(
    ("encoding", "text", "tokens"),
    [
        ("cl100k_base", "hello world", 2),
        ("cl100k_base", "tiktoken is great!", 6),
        ("cl100k_base", "antidisestablishmentarianism", 6),
        ("o200k_base", "antidisestablishmentarianism", 6),
        ("cl100k_base", "2 + 2 = 4", 7),
        ("o200k_base", "2 + 2 = 4", 7),
        ("cl100k_base", "お誕生日おめでとう", 9),
        ("o200k_base", "お誕生日おめでとう", 8),
    ],
)
def test_published_token_counts(encoding: str, text: str, tokens: int) -> None:
    """Counts match the values OpenAI publishes for these strings."""
    assert BpeTokenCounter(encoding).count_text(text) == tokens


COOKBOOK_CHAT = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that "
        "translates corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean "
        "for the client deliverable.",
    },
]


@pytest.mark.parametrize(("encoding", "prompt_tokens"), [("cl100k_base", 129), ("o200k_base", 124)])
def test_chat_prompt_matches_what_the_api_reported(encoding: str, prompt_tokens: int) -> None:
    """With the cookbook's per-message overheads, the total is the API's own prompt_tokens."""
    counter = BpeTokenCounter(encoding)
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in COOKBOOK_CHAT:
        total += 3 + sum(counter.count_text(value) for value in message.values())
        total += 1 if "name" in message else 0
    assert total == prompt_tokens


def test_empty_text_has_no_tokens() -> None:
    """The empty string counts as zero tokens."""
    assert BpeTokenCounter().count_text("") == 0


def test_special_token_markers_count_as_plain_text() -> None:
    """ "<|endoftext|>" in user text is ordinary text (several tokens), never an error."""
    assert BpeTokenCounter("cl100k_base").count_text("<|endoftext|>") > 1


def test_long_text_is_counted_exactly_across_pieces() -> None:
    """Text far beyond one backend call (~300 000 tokens) is counted, lines adding up exactly."""
    counter = BpeTokenCounter("cl100k_base")
    line = "hello world\n"  # "hello", " world", "\n": three tokens per line
    assert counter.count_text(line) == 3
    assert counter.count_text(line * 100_000) == 300_000


def test_a_single_enormous_line_is_still_counted() -> None:
    """A line longer than any safe piece (no line breaks at all) still gets a count."""
    counter = BpeTokenCounter("o200k_base")
    count = counter.count_text("x" * 400_000)
    assert 0 < count <= 400_000


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("fill", ["x", "  ", "a b "])
@pytest.mark.parametrize("after", ["a b", "  "])
def test_a_cut_at_the_limit_beside_a_surrogate_pair_shifts_the_count_by_a_token_at_most(
    encoding: str, fill: str, after: str
) -> None:
    """A character past U+FFFF held as two surrogates right at the 50,000-character limit is
    counted whole: the total is the one-call count give or take one token (it was 3 off)."""
    text = (fill * MAX_PIECE_CHARS)[: MAX_PIECE_CHARS - 1] + "\ud834\udd1e" + after
    whole = len(load_encoding(encoding).encode_ordinary(text))
    assert abs(BpeTokenCounter(encoding).count_text(text) - whole) <= 1


def test_unknown_encodings_are_refused() -> None:
    """Only the shipped encodings can be asked for."""
    with pytest.raises(ValueError, match="o200k_base, cl100k_base"):
        BpeTokenCounter("p50k_base")


def test_nothing_is_downloaded_or_cached(empty_tiktoken_cache: Path) -> None:
    """Loading both encodings leaves the tiktoken cache empty (the files ship in the wheel)."""
    for encoding in ("cl100k_base", "o200k_base"):
        assert BpeTokenCounter(encoding).count_text("offline") >= 1
    assert list(empty_tiktoken_cache.iterdir()) == []
