"""The `web_fetch` tool: a URL in, readable text out, internal addresses refused."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nanobot_core import ConfigError, Tool, ToolResult, clip, source_prefix

from nanobot_web_tools.errors import FetchFailed, FetchRefused
from nanobot_web_tools.fetch import FetchedPage, FetchLimits, PinnedFetcher, without_userinfo

if TYPE_CHECKING:
    from nanobot_core import Config, PluginContext

__all__ = ["ALLOW_LOOPBACK_ENV", "WebFetch"]

#: Test-only switch: "1" lets web_fetch reach 127.0.0.0/8 and ::1 (never private or
#: metadata addresses), so a test suite can serve pages from a local server.
ALLOW_LOOPBACK_ENV = "NANOBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS"

DEFAULT_MAX_CHARS = 20_000
#: The most characters of the page's URL its result shows: more than nearly any real URL has.
MAX_URL_SHOWN = 2_000
_MAX_CHARS_CEILING = 200_000
_OPTION_KEYS = frozenset({"max_bytes", "timeout", "max_redirects", "max_chars"})
#: The config table of the options, as a refusal names it (and its keys under it).
_TABLE = "tools.options.web_fetch"


class WebFetch(Tool):
    """Fetch a public web page or document and return its text."""

    name = "web_fetch"
    description = (
        "Fetch a public http(s) URL with GET and return its readable text: HTML is reduced "
        "to text; plain text, JSON and XML come back as they are. Binary content, private "
        "networks, localhost and cloud metadata addresses are refused. Long pages are cut."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
            "max_chars": {
                "type": "integer",
                "minimum": 100,
                "maximum": _MAX_CHARS_CEILING,
                "description": "Return at most this many characters of text.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    read_only = True

    def __init__(
        self, fetcher: PinnedFetcher | None = None, *, max_chars: int = DEFAULT_MAX_CHARS
    ) -> None:
        self.fetcher = fetcher or PinnedFetcher()
        self.max_chars = max_chars
        # Leave the fetcher's own deadline room to fire first, with a precise message.
        self.timeout = self.fetcher.limits.timeout + 5.0

    @classmethod
    def create(cls, ctx: PluginContext) -> WebFetch:
        """Build the tool from ``[tools.options.web_fetch]`` and the test-only loopback switch.

        A refusal begins with where the option was set (the file, the environment variable
        or the command line), as the core's config errors do.
        """
        config = ctx.config
        options = _options(config.tools.options.get(cls.name, {}), config)
        for key, value in options.items():  # one by one, so that the refusal names its source
            if key == "max_chars":
                continue
            try:
                FetchLimits.from_options({key: value})
            except (TypeError, ValueError) as exc:
                where = source_prefix(config=config, keys=[f"{_TABLE}.{key}"])
                raise ConfigError(f"{where}{_TABLE}: {exc}") from exc
        limits = FetchLimits.from_options(options)
        max_chars = options.get("max_chars", DEFAULT_MAX_CHARS)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            where = source_prefix(config=config, keys=[f"{_TABLE}.max_chars"])
            raise ConfigError(f"{where}{_TABLE}: 'max_chars' must be a positive integer")
        allow_loopback = os.environ.get(ALLOW_LOOPBACK_ENV, "") == "1"
        return cls(PinnedFetcher(limits, allow_loopback=allow_loopback), max_chars=max_chars)

    async def execute(self, url: str, max_chars: int | None = None) -> ToolResult:
        """Fetch `url` and return a header block followed by the text, or an error result."""
        shown = clip(without_userinfo(url))
        try:
            page = await self.fetcher.fetch(url)
        except FetchRefused as exc:
            return ToolResult.error(f"web_fetch refused {shown}: {exc}")
        except FetchFailed as exc:
            return ToolResult.error(f"web_fetch failed for {shown}: {exc}")
        return ToolResult(render_page(page, max_chars or self.max_chars))


def render_page(page: FetchedPage, max_chars: int) -> str:
    """The text the model sees: where the page came from, then at most `max_chars` of it."""
    text = page.text if page.text.strip() else "(the page has no text)"
    notes: list[str] = []
    if page.truncated:
        notes.append("the download stopped at the size limit")
    if len(text) > max_chars:
        notes.append(f"showing {max_chars} of {len(text)} characters")
        text = text[:max_chars]
    # The server chose both (a redirect's Location, a header of up to 100 kB): each is cut, so
    # that the result stays within max_chars and a header block.
    lines = [
        f"URL: {clip(page.url, MAX_URL_SHOWN)}",
        f"Status: {page.status}",
        f"Content-Type: {clip(page.content_type)}",
    ]
    if notes:
        lines.append("Truncated: " + "; ".join(notes))
    return "\n".join(lines) + "\n\n" + text


def _options(raw: Any, config: Config) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        where = source_prefix(config=config, keys=[_TABLE])
        raise ConfigError(f"{where}{_TABLE} must be a table")
    unknown = sorted(set(raw) - _OPTION_KEYS)
    if unknown:
        known = ", ".join(sorted(_OPTION_KEYS))
        where = source_prefix(config=config, keys=[f"{_TABLE}.{key}" for key in unknown])
        raise ConfigError(f"{where}{_TABLE}: unknown option(s) {unknown} (known: {known})")
    return raw
