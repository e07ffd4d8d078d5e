"""The low watermark: how far down a cut or a compaction goes once one is needed.

Cutting exactly to the budget would make the next turn cut again, and every
new cut changes the start of the request, which the provider's prompt cache
keys on. Going down to ``low_watermark`` of the budget leaves room for the
next turns to append.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["low_watermark_tokens"]


def low_watermark_tokens(ctx: StageContext) -> int:
    """The request size, in tokens, a needed cut or compaction aims for."""
    share = min(1.0, max(0.0, ctx.config.low_watermark))  # config files are checked; code is not
    return int(ctx.budget.limit * share)
