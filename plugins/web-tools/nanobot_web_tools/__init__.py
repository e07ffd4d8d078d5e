"""nanobot-web-tools: the `web_fetch` tool for nanobot-core, with SSRF protection."""

from __future__ import annotations

from nanobot_web_tools.addresses import refusal_reason, resolve_checked, system_resolver
from nanobot_web_tools.errors import FetchFailed, FetchRefused
from nanobot_web_tools.fetch import FetchedPage, FetchLimits, PinnedFetcher
from nanobot_web_tools.html_text import html_to_text
from nanobot_web_tools.tool import ALLOW_LOOPBACK_ENV, WebFetch

__all__ = [
    "ALLOW_LOOPBACK_ENV",
    "FetchFailed",
    "FetchLimits",
    "FetchRefused",
    "FetchedPage",
    "PinnedFetcher",
    "WebFetch",
    "html_to_text",
    "refusal_reason",
    "resolve_checked",
    "system_resolver",
]
