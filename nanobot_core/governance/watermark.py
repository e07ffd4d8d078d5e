"""The low watermark: how far down a compaction or a cut goes once one is needed.

Cutting exactly to the budget would make the next turn cut again, and every
new cut changes the start of the request, which the provider's prompt cache
keys on. Going down to ``low_watermark`` of the budget leaves room for the
next turns to append.

A compaction changes the request only from the first result it compacts, so
it goes down to the low watermark itself. A cut changes the request from its
first message (the whole prompt cache is lost), so it goes further, to the low
watermark of the low watermark (``low_watermark`` squared: 0.49 of the budget
by default), leaving room for many more turns before the next cut. A watermark
of 1 means both go exactly to the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["cut_watermark_tokens", "low_watermark_tokens"]


def _share(ctx: StageContext) -> float:
    return min(1.0, max(0.0, ctx.config.low_watermark))  # config files are checked; code is not


def low_watermark_tokens(ctx: StageContext) -> int:
    """The request size, in tokens, a needed compaction aims for."""
    return int(ctx.budget.limit * _share(ctx))


def cut_watermark_tokens(ctx: StageContext) -> int:
    """The request size, in tokens, a needed cut aims for (``low_watermark`` squared)."""
    share = _share(ctx)
    return int(ctx.budget.limit * share * share)
