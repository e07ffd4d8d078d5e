"""Which BPE encoding fits which model."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_ENCODING", "ENCODINGS", "ENCODING_ENV", "choose_encoding", "encoding_for_model"]

ENCODINGS = ("o200k_base", "cl100k_base")
#: Names the encoding explicitly, whatever the model.
ENCODING_ENV = "NANOBOT_TOKENIZER_ENCODING"
#: For models this table does not know (other vendors' models, local ones): the
#: newest OpenAI encoding is the closer estimate for current multilingual models.
DEFAULT_ENCODING = "o200k_base"

# The one table of model prefixes (the README lists it, a test checks that). Checked in
# order: "gpt-4o" must match before "gpt-4".
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("gpt-oss", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
    # The base models that replaced davinci and babbage (tiktoken's table maps them so).
    ("davinci-002", "cl100k_base"),
    ("babbage-002", "cl100k_base"),
)


def encoding_for_model(model: str) -> str:
    """The encoding of an OpenAI model name (router prefixes like "openai/" are ignored).

    A fine-tuned model (``ft:gpt-3.5-turbo-0125:acme::8abc``, as OpenAI names them)
    has its base model's encoding.
    """
    name = model.rsplit("/", 1)[-1].strip().lower().removeprefix("ft:")
    for prefix, encoding in _PREFIXES:
        if name.startswith(prefix):
            return encoding
    return DEFAULT_ENCODING


def choose_encoding(model: str, environ: Mapping[str, str]) -> str:
    """The encoding named in the environment, else the one that fits `model`.

    Raises ValueError for an encoding name that is not shipped; the message says what is
    wrong with the name, and leaves naming the variable to whoever reports it.
    """
    explicit = environ.get(ENCODING_ENV, "").strip()
    if not explicit:
        return encoding_for_model(model)
    if explicit not in ENCODINGS:
        raise ValueError(
            f"{explicit!r} is not an encoding this plugin ships (choose one of "
            f"{', '.join(ENCODINGS)})"
        )
    return explicit
