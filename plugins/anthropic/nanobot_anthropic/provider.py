"""The ``anthropic`` provider: ``POST {base_url}/v1/messages`` with retries and prompt caching.

The key (``ANTHROPIC_API_KEY``, else ``NANOBOT_API_KEY`` / ``provider.api_key``)
is sent as ``x-api-key`` and never logged, printed or put in an error message:
text built from server replies has it masked, and the repr leaves it out.
Retries are the core's (:func:`nanobot_core.providers.send_with_retries`):
408, 429, 5xx (529 "overloaded" included) and connection failures, with
backoff, jitter and ``retry-after``; any other 4xx, and the 429 of a reached
spend limit (``enforced_spend_limit_reached``, which no wait lifts), is a
ProviderError quoting Anthropic's own message. An answer that is not HTTP
(another kind of server at the address, a status outside 100-599) is one too,
naming the base URL and where it was set. So is the reading of the reply
(:func:`nanobot_core.providers.post_request`): one larger than
``provider.max_reply_bytes`` is refused, not retried.

A reply that stopped at ``pause_turn`` (the API paused a server tool's long
turn) is sent back as it was, as the assistant's turn of the same request, for
the model to continue it: up to `MAX_CONTINUATIONS` times, then a
ProviderError, never the paused part taken for the answer.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

import attrs
from nanobot_core import (
    ConfigError,
    ProviderError,
    is_openai_api,
    quoted,
    source_prefix,
    variable_source,
)
from nanobot_core.config import ProviderConfig
from nanobot_core.governance import to_messages_api
from nanobot_core.providers import (
    KeptClients,
    ProgressCallback,
    ProviderReply,
    Retryable,
    RetryPolicy,
    check_endpoint,
    describe_body,
    error_text,
    excerpt,
    failure_for_status,
    mask_secret,
    post_request,
    reply_json,
    request_content,
    request_fault,
    send_with_retries,
    sendable_parts,
    without_credentials,
)

from nanobot_anthropic.caching import place_breakpoints
from nanobot_anthropic.reply import parse_reply, parse_usage

if TYPE_CHECKING:
    import httpx

__all__ = [
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "MAX_CONTINUATIONS",
    "AnthropicProvider",
    "resolve_key",
]

API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_MAX_TOKENS = 8192
# The 1-hour cache TTL was introduced behind this flag; servers that have made it
# general accept the flag still.
EXTENDED_TTL_BETA = "extended-cache-ttl-2025-04-11"
#: How many times one call sends a paused turn (``stop_reason: "pause_turn"``) back to be
#: continued. Each continuation is a request billed in full; a server tool's loop pauses
#: after some ten steps of its own, so this bounds a call at some sixty of them.
MAX_CONTINUATIONS = 5
#: The stop reason of a turn the API paused: the reply is to be sent back as it is.
_PAUSED = "pause_turn"

_CORE_DEFAULTS = ProviderConfig()
#: The settings sent in every request whose range the Messages API documents, as (lowest,
#: highest): the core takes any temperature from 0 (OpenAI's go to 2), and refuses a
#: max_tokens below 1 only in a config it read, not in a ProviderConfig made in code.
_RANGES: dict[str, tuple[float, float]] = {"temperature": (0, 1), "max_tokens": (1, math.inf)}
#: The characters the Messages API takes in a tool name (``^[a-zA-Z0-9_-]{1,64}$``; its
#: length limit has changed over time, so only the characters are checked here).
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]+")
#: The ``error.details.error_code`` of a 429 that says the organisation's spend limit is
#: reached: no wait lifts it before the next month, so it is not retried.
_SPEND_LIMIT_CODE = "enforced_spend_limit_reached"
#: The request fields Anthropic's error message names first when it refuses their value
#: (``max_tokens: 100000 > 64000, which is the maximum ...``, a 404's ``model: gpt-4o``) that
#: a setting gives: its config key, and how to set it (said when the default was sent).
_SETTINGS: dict[str, tuple[str, str]] = {
    "model": ("provider.model", "--model, NANOBOT_MODEL or provider.model sets it"),
    "max_tokens": (
        "provider.max_tokens",
        "provider.max_tokens or NANOBOT_PROVIDER__MAX_TOKENS sets it",
    ),
    "temperature": (
        "provider.temperature",
        "provider.temperature or NANOBOT_PROVIDER__TEMPERATURE sets it",
    ),
}
#: How a user sets what `check_endpoint` refuses, as its errors say.
_BASE_URL_HINT = (
    "set --base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL, e.g. https://api.anthropic.com"
)
_API_KEY_HINT = (
    "set ANTHROPIC_API_KEY or NANOBOT_API_KEY, not OPENAI_API_KEY: that is never sent to "
    "Anthropic; NANOBOT_API_KEY=none for a server that needs no key"
)


def resolve_key(config: ProviderConfig, environ: Mapping[str, str]) -> str | None:
    """``ANTHROPIC_API_KEY``, else the configured key (``NANOBOT_API_KEY``, the config file).

    The core fills ``provider.api_key`` from ``OPENAI_API_KEY`` when nothing
    else sets it; that key is never sent to Anthropic.
    """
    key = environ.get("ANTHROPIC_API_KEY") or None
    if key:
        return key
    configured = config.api_key or None
    if configured and _openais_key(config, environ):
        return None
    return configured


def _openais_key(config: ProviderConfig, environ: Mapping[str, str]) -> bool:
    """Whether ``provider.api_key`` is the one the core took from ``OPENAI_API_KEY``: told by
    where its value was set when `load_config` read it (a key a file or another variable set
    is the user's, even one equal to OpenAI's), else by its value (a key made in code, or put
    in a loaded config), when no ``NANOBOT_API_KEY`` gave it."""
    # The value's own source, not the key's: a key a program put in a loaded config has none,
    # while the key's source still names the variable that gave the value it replaced.
    where = source_prefix(config.api_key)
    if where:
        return where == source_prefix(variables=["OPENAI_API_KEY"])
    return config.api_key == environ.get("OPENAI_API_KEY") and not environ.get("NANOBOT_API_KEY")


def _tool(definition: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI tool definition as a Messages API tool."""
    function = definition.get("function")
    function = function if isinstance(function, Mapping) else definition
    tool: dict[str, Any] = {"name": function.get("name")}
    if function.get("description"):
        tool["description"] = function["description"]
    schema = function.get("parameters")
    tool["input_schema"] = schema if isinstance(schema, Mapping) else {"type": "object"}
    return tool


def _check_tool_names(tools: Sequence[Mapping[str, Any]]) -> None:
    """Raise ProviderError naming the first tool whose name the Messages API refuses: it
    would answer 400 naming only the tool's index, in the middle of the turn."""
    for index, tool in enumerate(tools):
        name = tool.get("name")
        if isinstance(name, str) and _TOOL_NAME.fullmatch(name):
            continue
        raise ProviderError(
            f"{_plugin()} sends no request: tools[{index}] is named {quoted(name)}, which "
            "Anthropic's Messages API refuses (a tool name is letters, digits, '_' and '-' "
            "only); `nanobot-core tools` shows which plugin gives it, and tools.disabled "
            "leaves it out"
        )


def _error_object(response: httpx.Response) -> dict[str, Any]:
    """The ``error`` object of an error reply in Anthropic's shape (empty when there is none)."""
    try:
        data = json.loads(response.content)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError)
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _spend_limit_reached(response: httpx.Response) -> bool:
    """Whether an error reply is the 429 of a reached spend limit (a rate limit's is not)."""
    details = _error_object(response).get("details")
    return isinstance(details, dict) and details.get("error_code") == _SPEND_LIMIT_CODE


def _refused_field(response: httpx.Response) -> str | None:
    """The field of `_SETTINGS` an error reply's message is about (``max_tokens: ...``)."""
    message = _error_object(response).get("message")
    if not isinstance(message, str) or ":" not in message:
        return None
    field = message.partition(":")[0].strip()
    return field if field in _SETTINGS else None


def _has_calls(content: Sequence[Any]) -> bool:
    """Whether a reply's content holds a call for the client to run (a ``tool_use``): a paused
    turn sent back with one unanswered would be refused, so the runner runs it instead."""
    return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)


def _plugin() -> str:
    """This plugin's distribution and version, as its errors name it."""
    try:
        return f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"
    except metadata.PackageNotFoundError:  # imported from a checkout, not installed
        return "nanobot-anthropic"


def _refuse_unsendable(messages: Sequence[Any], tools: Sequence[Any]) -> None:
    """Raise the ProviderError naming the message or tool definition to blame for a body
    that failed to build or encode; return when none is (the caller re-raises its error)."""
    fault = request_fault(messages, tools)
    if fault is not None:
        raise ProviderError(f"{_plugin()} sends no request: {fault}") from None


def _set(config: ProviderConfig, key: str) -> bool:
    """Whether a source `load_config` read (a file, a variable, the command line) set `key`:
    a value set there is the user's, even one equal to the core's default."""
    return bool(source_prefix(config=config, keys=[key]))


def _model_unset(config: ProviderConfig) -> bool:
    """Whether `config` leaves the model to the provider: the core's default (OpenAI's) that
    no source set. A model a source set is sent as it is, even that name, for the server to
    refuse and the error to name where it was set; a default in code has no source to ask."""
    return config.model == _CORE_DEFAULTS.model and not _set(config, "provider.model")


def _refuse_openai(base: str, *, from_environment: bool) -> None:
    """Raise ConfigError, naming where it was set, for a base URL of OpenAI's API (a regional
    host too: `is_openai_api`): it serves no Messages API, and each request would carry the
    Anthropic key there to be refused. Set on purpose (the core's default named in a file,
    say), it is neither sent to nor replaced by Anthropic's. `from_environment`: it is
    ``ANTHROPIC_BASE_URL``'s."""
    if not is_openai_api(base):  # not a URL either: `check_endpoint` says what is wrong with it
        return
    key = "ANTHROPIC_BASE_URL" if from_environment else "provider.base_url"
    where = source_prefix(base, variables=[key] if from_environment else [])
    # Unset, provider.base_url gives way to ANTHROPIC_BASE_URL, which gives way to Anthropic's.
    fallback = DEFAULT_BASE_URL if from_environment else f"ANTHROPIC_BASE_URL or {DEFAULT_BASE_URL}"
    raise ConfigError(
        f"{where}provider.base_url: {without_credentials(base)!r} is OpenAI's API, which "
        f"does not serve Anthropic's Messages API, so no request is sent there (set {key} "
        f"to Anthropic's API or a gateway to it, or leave it unset for {fallback})"
    )


def _check_ranges(config: ProviderConfig) -> None:
    """Raise ConfigError, naming where it was set, for a number of `_RANGES` outside its
    range (NaN too): the API would refuse it with a 400 at the first request, mid-turn."""
    for key, (low, high) in _RANGES.items():
        value = getattr(config, key)
        if value is None or low <= value <= high:
            continue
        span = f"from {low:g} to {high:g}" if math.isfinite(high) else f"at least {low:g}"
        where = source_prefix(config=config, keys=[f"provider.{key}"])
        raise ConfigError(
            f"{where}provider.{key}: must be {span} for Anthropic's Messages API, got {value}"
        )


def _base_url_said(config: ProviderConfig, base: str, from_environment: bool) -> str:
    """The base URL as an error about the server at it names it: where it was set, its value
    and how to set it (``environment variable ANTHROPIC_BASE_URL: provider.base_url =
    'http://...' (...)``). When no source `load_config` read set it, it is Anthropic's own,
    said to be the default, only when the core's (OpenAI's) was left for it; any other is
    one the program gave the config, said to be set in code."""
    how = "--base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL sets it"
    said = f"provider.base_url = {quoted(without_credentials(base))}"
    if from_environment:
        return f"{source_prefix(variables=['ANTHROPIC_BASE_URL'])}{said} ({how})"
    if _set(config, "provider.base_url"):
        return f"{source_prefix(config=config, keys=['provider.base_url'])}{said} ({how})"
    if config.base_url == _CORE_DEFAULTS.base_url:
        return f"{said}, the default ({how})"
    return f"{said}, set in code ({how})"


@attrs.frozen
class _Endpoint:
    url: str
    display: str


class AnthropicProvider:
    """Anthropic's Messages API over HTTP, built from ``config.provider``.

    `transport` replaces httpx's network transport (for embedding and tests);
    `environ` is where the key is looked up (default: the process environment).
    The HTTP client and its connections are kept from call to call, one per event
    loop (the core's `KeptClients`), closed when that loop ends or by :meth:`aclose`.
    The runner passes ``prefix`` (see ``accepts_prefix``) so that a history
    governance changed still reads its unchanged start from the cache.
    """

    name = "anthropic"
    accepts_prefix = True
    #: It only reads the messages and tool definitions it is handed: the request is built
    #: of new lists and dicts (what is unchanged shared, never altered), so the runner need
    #: not copy the request for it.
    leaves_input_unchanged = True

    def __init__(
        self,
        config: ProviderConfig,
        *,
        progress: ProgressCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        base, base_source = config.base_url, None
        # Not set (the core's default is OpenAI's): a default the user named is refused below.
        if base == _CORE_DEFAULTS.base_url and not _set(config, "provider.base_url"):
            base = env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
            if env.get("ANTHROPIC_BASE_URL"):
                base_source = variable_source("ANTHROPIC_BASE_URL")
        _refuse_openai(base, from_environment=base_source is not None)
        self._api_key = resolve_key(config, env)
        # A fault no retry can cure: ConfigError, before any request. A key set empty is
        # passed as it is, for the error to name where; one only OpenAI's is not a key here.
        stated = config.api_key if config.api_key == "" else None
        own_key = bool(env.get("ANTHROPIC_API_KEY"))  # read here, not by the core's config
        check_endpoint(
            base,
            self._api_key or stated,
            base_url_hint=_BASE_URL_HINT,
            api_key_hint=_API_KEY_HINT,
            base_url_source=base_source,
            api_key_source=variable_source("ANTHROPIC_API_KEY") if own_key else None,
        )
        _check_ranges(config)
        self.base_url = base.rstrip("/")
        self.model = DEFAULT_MODEL if _model_unset(config) else config.model
        self.max_tokens = config.max_tokens or DEFAULT_MAX_TOKENS
        self.timeout = config.timeout
        self.max_reply_bytes = config.max_reply_bytes
        self.temperature = config.temperature
        self.cache = config.cache
        self.policy = RetryPolicy(config.max_retries, config.backoff_base, config.retry_after_cap)
        self.max_continuations = MAX_CONTINUATIONS
        self._settings = {field: self._setting(config, field) for field in _SETTINGS}
        self._base_url_said = _base_url_said(config, self.base_url, base_source is not None)
        self._progress = progress
        self._transport = transport
        self._clients = KeptClients(timeout=self.timeout, transport=transport)
        self.last_marks: list[str] = []

    def _setting(self, config: ProviderConfig, field: str) -> str:
        """What an error about request field `field` says of the setting that gave it: where
        it was set, its key and value (``nanobot.toml: provider.max_tokens = 100000``)."""
        key, how = _SETTINGS[field]
        value = getattr(self, field)
        said = f"{key} = {quoted(value) if isinstance(value, str) else value}"
        # The core's defaults are OpenAI's: for these, the provider sends its own instead.
        if (field == "model" and _model_unset(config)) or (
            field == "max_tokens" and config.max_tokens is None
        ):
            return f"{said}, the default: {how}"
        return f"{source_prefix(config=config, keys=[key])}{said}"

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self.display_url!r}, model={self.model!r})"

    @property
    def endpoint(self) -> str:
        """The Messages URL (a base URL ending in ``/v1`` gets ``/messages``; one ending in
        ``/v1/messages``, the endpoint Anthropic's examples show, is taken as it is)."""
        if self.base_url.endswith("/v1/messages"):
            return self.base_url
        suffix = "/messages" if self.base_url.endswith("/v1") else "/v1/messages"
        return self.base_url + suffix

    @property
    def display_url(self) -> str:
        """The endpoint without any ``user:password@`` part, for messages and logs."""
        return without_credentials(self.endpoint)

    def headers(self) -> dict[str, str]:
        """The request headers (the key included: never log them)."""
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "anthropic-version": API_VERSION,
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        if self.cache == "1h":
            headers["anthropic-beta"] = EXTENDED_TTL_BETA
        return headers

    def request_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        prefix: int | None = None,
    ) -> dict[str, Any]:
        """The JSON body of one request, with its cache marks placed.

        Raises ProviderError naming the message or tool definition the body cannot be
        built from (one holding itself, or nested past the recursion limit), or the
        message and call whose arguments cannot be its input (`to_messages_api`).
        """
        try:
            return self._body(messages, tools, prefix=prefix)
        except (RecursionError, ValueError):  # a cycle, or nesting past the recursion limit
            _refuse_unsendable(messages, tools)
            raise

    def _body(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        prefix: int | None,
    ) -> dict[str, Any]:
        # Governance changed nothing before message `prefix` (0: it changed the first): the
        # request cut there is converted in the same pass, for the mark that reads it again.
        unchanged = prefix if self.cache != "off" and prefix is not None and prefix > 0 else None
        try:
            converted = to_messages_api(messages, prefix=unchanged)
        except ValueError as exc:  # a call whose arguments cannot be its input: never sent empty
            raise ProviderError(f"{_plugin()} sends no request: {exc}") from None
        definitions = [_tool(t) for t in tools]
        _check_tool_names(definitions)
        plan = place_breakpoints(
            definitions,
            converted.system,
            converted.messages,
            ttl=self.cache,
            model=self.model,
            kept=converted.prefix_messages,
        )
        self.last_marks = plan.marks
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": plan.messages,
        }
        if plan.system:
            body["system"] = plan.system
        if plan.tools:
            body["tools"] = plan.tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        prefix: int | None = None,
    ) -> ProviderReply:
        """Send one request, retrying what is worth retrying; return the reply, core-shaped.

        A reply that stopped at ``pause_turn`` is sent back as the assistant's turn of the
        same request, as Anthropic documents, until one does not (at most
        `max_continuations` times; then a ProviderError): the reply returned holds the
        whole turn, its usage that of every request.
        """
        body = self.request_body(messages, tools, prefix=prefix)
        try:
            payload = request_content(body)  # strict UTF-8 JSON, as every provider sends
        except ValueError:  # the core's JSONLimitError: nested deeper than it walks
            _refuse_unsendable(messages, tools)
            raise
        data = await self._send(payload)
        usage = parse_usage(data.get("usage"))
        paused: list[Any] = []  # the content of the turn so far, as the server sent it
        pauses = 0
        while data.get("stop_reason") == _PAUSED and not _has_calls(data["content"]):
            pauses += 1
            if pauses > self.max_continuations:
                raise ProviderError(
                    f"{self.display_url} paused the model's turn {pauses} times in a row "
                    f"(stop_reason {_PAUSED!r}: a server tool's long turn); {_plugin()} sends "
                    f"a paused turn back to be continued {self.max_continuations} times at "
                    "most, so this turn ends without its answer"
                )
            paused += data["content"]
            # The same request (tools, system, marks) with the paused turn after it: what
            # was encoded once already, and what the core decoded from JSON within its limits.
            turn = {"role": "assistant", "content": paused}
            data = await self._send(
                request_content({**body, "messages": [*body["messages"], turn]})
            )
            usage += parse_usage(data.get("usage"))
        if paused:
            data = {**data, "content": [*paused, *data["content"]]}
        reply = parse_reply(data, salt=str(len(messages)))
        return attrs.evolve(reply, usage=usage)

    async def _send(self, payload: bytes) -> dict[str, Any]:
        """POST one encoded body, retrying what is worth retrying; the reply's JSON object,
        checked to be a Messages API response."""
        headers = self.headers()

        async def attempt() -> dict[str, Any]:
            response = await post_request(
                await self._clients.get(),  # for each attempt: one closed meanwhile is replaced
                self.endpoint,
                content=payload,
                headers=headers,
                max_bytes=self.max_reply_bytes,
                timeout=self.timeout,
                secret=self._api_key,
                url_setting=self._base_url_said,
            )
            if 200 <= response.status_code < 300:
                return self._reply_data(response)
            failure = failure_for_status(
                response, self.display_url, self._api_key, url_setting=self._base_url_said
            )
            if isinstance(failure, Retryable) and _spend_limit_reached(response):
                raise ProviderError(
                    f"{self.display_url} refused the request: {failure.reason} "
                    f"[{_SPEND_LIMIT_CODE}: the spend limit is reached, no retry lifts it]"
                )
            field = _refused_field(response) if isinstance(failure, ProviderError) else None
            if field is not None:  # the server names the field, never where its value came from
                setting = mask_secret(self._settings[field], self._api_key)
                raise ProviderError(f"{failure} [{setting}]")
            raise failure

        return await send_with_retries(
            attempt,
            self.policy,
            url=self.display_url,
            progress=self._progress,
            timeout=self.timeout,
        )

    async def aclose(self) -> None:
        """Close the connections kept on the running event loop; the next call connects again."""
        await self._clients.aclose()

    def _reply_data(self, response: httpx.Response) -> dict[str, Any]:
        data = reply_json(response, self.display_url, self._api_key)
        if not isinstance(data, dict):
            raise ProviderError(f"{self.display_url} sent a reply that is not a JSON object")
        if data.get("type") == "error" or (data.get("error") and "content" not in data):
            raise ProviderError(
                f"{self.display_url} answered with an error: "
                f"{excerpt(mask_secret(error_text(data.get('error')), self._api_key))}"
            )
        if not isinstance(data.get("content"), list):
            # An OpenAI or other API's body behind a misconfigured URL: an empty
            # answer here would end the run as a success with nothing said.
            raise ProviderError(
                f"{self.display_url} sent a 200 reply that is not a Messages API response "
                f"(no 'content' list): {mask_secret(describe_body(data), self._api_key)}"
            )
        # Here, not only in `parse_reply`: a paused turn's content is sent back as it came.
        return {**data, "content": sendable_parts(data["content"])}
