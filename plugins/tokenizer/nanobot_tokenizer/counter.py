"""A token counter backed by real BPE encodings that ship inside the bpe-openai wheel.

Nothing is downloaded, ever: the cl100k and o200k rank files are package data
of bpe-openai, and the merging runs in its Rust extension. Importing bpe-openai
takes about half a second (it builds its model tables), so the encoding is
loaded when the governor asks for a counter, not when the plugin is discovered.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from nanobot_core import PluginError

from nanobot_tokenizer.encodings import ENCODINGS
from nanobot_tokenizer.segments import pieces_for_counting

__all__ = ["BpeTokenCounter", "TokenizerUnavailable", "load_encoding"]


class TokenizerUnavailable(PluginError, RuntimeError):
    """The bpe-openai backend cannot load an encoding (a missing or broken install)."""


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
    Should the backend raise while counting, the error goes to the core, which
    checks every count of a plugin's counter: that text gets the core's
    estimate, and the first such failure is logged naming this plugin.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}: choose one of {', '.join(ENCODINGS)}")
        self.encoding = encoding
        self.name = f"bpe-openai:{encoding}"

    def __repr__(self) -> str:
        return f"BpeTokenCounter({self.encoding!r})"

    def load(self) -> None:
        """Load the encoding now; raises `TokenizerUnavailable` saying why it cannot be."""
        try:
            load_encoding(self.encoding)
        except Exception as exc:
            raise TokenizerUnavailable(
                f"bpe-openai cannot load the {self.encoding} encoding: {type(exc).__name__}: {exc}"
            ) from exc

    def count_text(self, text: str) -> int:
        """The number of tokens in `text`."""
        if not text:
            return 0
        encoder = load_encoding(self.encoding)
        return sum(len(encoder.encode_ordinary(piece)) for piece in pieces_for_counting(text))
