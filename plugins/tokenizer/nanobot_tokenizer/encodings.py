"""Which BPE encoding fits which model."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "ENCODING_ENV",
    "choose_encoding",
    "encoding_for_model",
    "not_shipped",
]

ENCODINGS = ("o200k_base", "cl100k_base")
#: Names the encoding explicitly, whatever the model.
ENCODING_ENV = "NANOBOT_TOKENIZER_ENCODING"
#: For models this table does not know (other vendors' models, local ones): the
#: newest OpenAI encoding is the closer estimate for current multilingual models.
DEFAULT_ENCODING = "o200k_base"

# The one table of model names, as tiktoken 0.14 maps them (the README lists it, a test
# checks that). A name ending in "*" is a prefix, any other is a whole model name (an
# ":..." after it allowed, as in a fine-tune's name). Checked in order: "gpt-4o*" must
# match before "gpt-4*", "davinci-002*" before "davinci".
_MODELS: tuple[tuple[str, str], ...] = (
    ("gpt-4o*", "o200k_base"),
    ("chatgpt-4o*", "o200k_base"),
    ("gpt-4.1*", "o200k_base"),
    ("gpt-4.5*", "o200k_base"),
    ("gpt-5*", "o200k_base"),
    # tiktoken names this o200k_harmony: o200k_base's ranks and split pattern with the
    # special tokens of the harmony chat format added. Special-token markers are counted
    # as plain text here, so every count is the same as o200k_base's.
    ("gpt-oss*", "o200k_base"),
    ("o1*", "o200k_base"),
    ("o3*", "o200k_base"),
    ("o4*", "o200k_base"),
    ("gpt-4*", "cl100k_base"),
    ("gpt-3.5*", "cl100k_base"),
    ("gpt-35*", "cl100k_base"),
    ("text-embedding-3*", "cl100k_base"),
    ("text-embedding-ada-002*", "cl100k_base"),
    # The base models that replaced davinci and babbage (tiktoken's table maps them so).
    ("davinci-002*", "cl100k_base"),
    ("babbage-002*", "cl100k_base"),
    # Retired models whose encodings bpe-openai does not ship: `choose_encoding` names
    # them and the plugin refuses them (see `not_shipped`), rather than count with an
    # encoding that gives them 10 to 35 % fewer tokens than theirs.
    ("text-davinci-edit-001", "p50k_edit"),
    ("code-davinci-edit-001", "p50k_edit"),
    ("text-davinci-003", "p50k_base"),
    ("text-davinci-002", "p50k_base"),
    ("code-davinci-002", "p50k_base"),
    ("code-davinci-001", "p50k_base"),
    ("code-cushman-002", "p50k_base"),
    ("code-cushman-001", "p50k_base"),
    ("davinci-codex", "p50k_base"),
    ("cushman-codex", "p50k_base"),
    ("text-davinci-001", "r50k_base"),
    ("text-curie-001", "r50k_base"),
    ("text-babbage-001", "r50k_base"),
    ("text-ada-001", "r50k_base"),
    ("davinci", "r50k_base"),
    ("curie", "r50k_base"),
    ("babbage", "r50k_base"),
    ("ada", "r50k_base"),
    ("text-similarity-*", "r50k_base"),
    ("text-search-*", "r50k_base"),
    ("code-search-*", "r50k_base"),
    ("gpt2", "gpt2"),
    ("gpt-2", "gpt2"),
)


def _matches(name: str, entry: str) -> bool:
    """Whether the model `name` is the table's `entry` (a prefix when it ends in "*")."""
    if entry.endswith("*"):
        return name.startswith(entry[:-1])
    return name.split(":", 1)[0] == entry


def encoding_for_model(model: str) -> str:
    """The encoding of an OpenAI model name (router prefixes like "openai/" are ignored).

    A fine-tuned model (``ft:gpt-3.5-turbo-0125:acme::8abc``, as OpenAI names them)
    has its base model's encoding. A retired model's encoding may be one this plugin
    does not ship (``p50k_base``, say): see `not_shipped`.
    """
    name = model.rsplit("/", 1)[-1].strip().lower().removeprefix("ft:")
    for entry, encoding in _MODELS:
        if _matches(name, entry):
            return encoding
    return DEFAULT_ENCODING


def not_shipped(model: str, encoding: str) -> str:
    """Why `model`, whose encoding is `encoding`, gets no counter, and what to do instead."""
    return (
        f"model {model!r} is tokenized with {encoding}, which this plugin does not ship "
        f"(it ships {', '.join(ENCODINGS)}); to count with one of those anyway, which gives "
        f"fewer tokens than {encoding} does, set {ENCODING_ENV}"
    )


def choose_encoding(model: str, environ: Mapping[str, str]) -> str:
    """The encoding named in the environment, else the one that fits `model`.

    Raises ValueError for an encoding name in the environment that is not shipped; the
    message says what is wrong with the name, and leaves naming the variable to whoever
    reports it. The encoding of `model` is returned as it is, shipped or not.
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
