"""Why a fetch did not produce a page: refused by policy, or failed on the way."""

from __future__ import annotations

from nanobot_core import ToolError

__all__ = ["FetchFailed", "FetchRefused"]


class FetchRefused(ToolError):
    """The URL, one of its addresses, a redirect or the response is not allowed."""


class FetchFailed(ToolError):
    """The fetch was allowed but did not complete (connection, timeout, HTTP status)."""
