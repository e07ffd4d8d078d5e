"""A token counter backed by real BPE encodings that ship inside the bpe-openai wheel.

Nothing is downloaded, ever: the cl100k and o200k rank files are package data
of bpe-openai, and the merging runs in its Rust extension. Importing bpe-openai
takes about half a second (it builds its model tables), so the encoding is
loaded on the first count, not when the plugin is discovered.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from nanobot_tokenizer.encodings import ENCODINGS
from nanobot_tokenizer.segments import pieces_for_counting

__all__ = ["BpeTokenCounter", "load_encoding"]


@functools.cache
def load_encoding(name: str) -> Any:
    """The bpe-openai encoding `name`, loaded once per process."""
    with warnings.catch_warnings():
        # bpe-openai 0.1.4 reads its bundled files with a deprecated importlib.resources call.
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai  # type: ignore[import-untyped]

        return bpe_openai.get_encoding(name)


class BpeTokenCounter:
    """Counts tokens exactly as the OpenAI tokenizer of one encoding would.

    Special-token markers such as ``<|endoftext|>`` in the text are counted as
    the ordinary text they are, which is how a chat API treats user content.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}: choose one of {', '.join(ENCODINGS)}")
        self.encoding = encoding
        self.name = f"bpe-openai:{encoding}"

    def __repr__(self) -> str:
        return f"BpeTokenCounter({self.encoding!r})"

    def count_text(self, text: str) -> int:
        """The number of tokens in `text`."""
        if not text:
            return 0
        encoder = load_encoding(self.encoding)
        return sum(len(encoder.encode_ordinary(piece)) for piece in pieces_for_counting(text))
