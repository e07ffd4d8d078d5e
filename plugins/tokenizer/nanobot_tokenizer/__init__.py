"""nanobot-tokenizer: exact token counts for the governance budget, with no download.

Registered through the ``nanobot.plugins`` entry point; this module is the
plugin. Its ``nanobot_token_counter`` hook answers before the core's built-in
estimator, so the budget is measured in real tokens.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nanobot_core import ConfigError, hookimpl, source_prefix

from nanobot_tokenizer.counter import BpeTokenCounter, TokenizerUnavailable
from nanobot_tokenizer.encodings import (
    ENCODING_ENV,
    ENCODINGS,
    choose_encoding,
    encoding_for_model,
    not_shipped,
)

if TYPE_CHECKING:
    from nanobot_core import PluginContext

__all__ = [
    "ENCODINGS",
    "ENCODING_ENV",
    "BpeTokenCounter",
    "TokenizerUnavailable",
    "choose_encoding",
    "encoding_for_model",
    "nanobot_token_counter",
    "not_shipped",
]


@hookimpl
def nanobot_token_counter(ctx: PluginContext) -> BpeTokenCounter:
    """A counter for the configured model's encoding (or the one named in the environment).

    The encoding is loaded here, so a backend that cannot load fails the plugin
    (reported by ``nanobot-core plugins``) and the core keeps its estimate. So does a
    retired model whose encoding is not shipped: its counts would be an estimate
    presented as exact.
    """
    model = ctx.config.provider.model
    try:
        encoding = choose_encoding(model, os.environ)
    except ValueError as exc:  # named as the core names a variable that set a config value
        raise ConfigError(f"{source_prefix(variables=[ENCODING_ENV])}{exc}") from exc
    if encoding not in ENCODINGS:
        where = source_prefix(config=ctx.config, keys=["provider.model"])
        raise ConfigError(f"{where}{not_shipped(model, encoding)}")
    counter = BpeTokenCounter(encoding)
    counter.load()
    return counter
