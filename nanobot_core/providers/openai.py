"""The built-in ``openai`` provider: any OpenAI-compatible chat-completions endpoint over HTTP.

Works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, llama.cpp's
server and every other server that speaks ``POST {base_url}/chat/completions``.
The API key is sent as a Bearer token and is never logged, printed or put in
an error message: messages built from server replies have it masked, and the
provider's repr leaves it out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from nanobot_core._json_boundary import JSONBoundaryError, dumps, loads, without_lone_surrogates
from nanobot_core._logging import get_logger
from nanobot_core.config import ProviderConfig
from nanobot_core.errors import ProviderError
from nanobot_core.providers.base import (
    ProgressCallback,
    ProviderReply,
    RetryNotice,
    normalise_assistant_message,
    normalise_usage,
)
from nanobot_core.providers.retry import RetryPolicy, is_retryable_status, retry_after_seconds

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIProvider"]

log = get_logger("nanobot_core.providers.openai")

_MAX_MESSAGE_CHARS = 1_000


class OpenAIProvider:
    """Chat completions over HTTP with retries, built from ``config.provider``.

    `transport` replaces httpx's network transport (for embedding and tests).
    A new HTTP client is opened for each :meth:`complete` call, so the provider
    holds no connection between rounds and can be used from any event loop.
    """

    name = "openai"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        progress: ProgressCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = config.base_url.rstrip("/")
        self.model = config.model
        self.timeout = config.timeout
        self.temperature = config.temperature
        self.policy = RetryPolicy(config.max_retries, config.backoff_base, config.retry_after_cap)
        self._api_key = config.api_key or None
        self._progress = progress
        self._transport = transport

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.display_url!r}, model={self.model!r})"

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        return f"{self.base_url}/chat/completions"

    @property
    def display_url(self) -> str:
        """The endpoint without any ``user:password@`` part, for messages and logs."""
        return _without_credentials(self.endpoint)

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The JSON body of one request (``tools`` is left out when there are none)."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": False}
        if tools:
            body["tools"] = list(tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        """Send one request, retrying what is worth retrying; return the normalised reply."""
        import httpx

        body = self.request_body(messages, tools)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout), transport=self._transport
        ) as client:
            retries = self.policy.max_retries
            for attempt in range(retries + 1):
                started = time.monotonic()
                try:
                    reply = await self._attempt(client, body, headers)
                except _Retryable as failure:
                    if attempt == retries:
                        raise ProviderError(
                            f"{self.display_url}: gave up after {attempt + 1} attempt(s); "
                            f"last error: {failure.reason}"
                        ) from None
                    await self._wait_before_retry(attempt + 1, failure)
                    continue
                log.debug(
                    "provider reply",
                    url=self.display_url,
                    model=reply.model,
                    attempt=attempt + 1,
                    seconds=round(time.monotonic() - started, 3),
                    usage=reply.usage.to_json(),
                )
                return reply
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def _wait_before_retry(self, retry: int, failure: _Retryable) -> None:
        delay = self.policy.delay(retry, failure.server_wait)
        # Info, not warning: the progress callback is how a person hears about retries.
        log.info(
            "provider request failed; retrying",
            url=self.display_url,
            error=failure.reason,
            retry=retry,
            max_retries=self.policy.max_retries,
            delay=round(delay, 3),
        )
        if self._progress is not None:
            self._progress(RetryNotice(retry, self.policy.max_retries, delay, failure.reason))
        await _sleep(delay)

    async def _attempt(
        self, client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> ProviderReply:
        """One HTTP exchange and its reply.

        Raises `_Retryable` for failures worth another attempt, ProviderError for
        the others (a request the server refuses, a reply that is not JSON).
        """
        import httpx

        try:
            # Strict UTF-8 JSON whatever the history holds (no NaN, no lone surrogate).
            content = dumps(body, separators=(",", ":")).encode("utf-8")
            response = await client.post(self.endpoint, content=content, headers=headers)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out after {self.timeout:g}s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            reason = self._redact(f"connection failed: {type(exc).__name__}: {exc}")
            raise _Retryable(reason) from None
        status = response.status_code
        if 200 <= status < 300:
            return self._parse_reply(response, salt=str(len(body["messages"])))
        message = self._redact(_server_message(response))
        if is_retryable_status(status):
            raise _Retryable(f"HTTP {status}: {message}", retry_after_seconds(response.headers))
        raise ProviderError(f"{self.display_url} refused the request: HTTP {status}: {message}")

    def _parse_reply(self, response: httpx.Response, *, salt: str) -> ProviderReply:
        try:
            decoded = loads(response.content)
        except JSONBoundaryError as exc:
            raise ProviderError(
                f"{self.display_url} sent a reply that cannot be used: {exc}: "
                f"{_excerpt(response.text)!r}"
            ) from None
        if decoded.replaced:
            log.warning("provider reply decoded with replacements", replaced=list(decoded.replaced))
        data = decoded.value
        if not isinstance(data, dict):
            raise ProviderError(f"{self.display_url} sent a reply that is not a JSON object")
        choices = data.get("choices")
        if not choices and data.get("error") is not None:
            # Some proxies answer 200 with an error object instead of a status code.
            raise ProviderError(
                f"{self.display_url} answered with an error: "
                f"{self._redact(_error_text(data['error']))}"
            )
        if not isinstance(choices, list):
            # A Responses API, Cohere or Bedrock body behind a misconfigured URL: an
            # empty answer here would end the run as a success with nothing said.
            raise ProviderError(
                f"{self.display_url} sent a 200 reply that is not a chat completion "
                f"(no 'choices' list): {self._redact(_describe_body(data))}"
            )
        choice = choices[0] if choices else {}
        choice = choice if isinstance(choice, Mapping) else {}
        finish_reason = choice.get("finish_reason")
        model = data.get("model")
        return ProviderReply(
            message=normalise_assistant_message(choice.get("message"), salt=salt),
            usage=normalise_usage(data.get("usage")),
            model=model if isinstance(model, str) else None,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )

    def _redact(self, text: str) -> str:
        """Mask the API key wherever a server or an exception echoed it."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text


class _Retryable(Exception):
    """Internal: an attempt failed in a way worth retrying."""

    def __init__(self, reason: str, server_wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_wait = server_wait


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _server_message(response: httpx.Response) -> str:
    """The server's own explanation of an error status, as short plain text."""
    reason = response.reason_phrase or ""
    try:
        data: Any = loads(response.content).value
    except JSONBoundaryError:
        text = without_lone_surrogates(response.text.strip())
        return _excerpt(text) if text else reason or "(empty body)"
    if isinstance(data, Mapping):
        for key in ("error", "message", "detail"):
            if data.get(key) is not None:
                return _excerpt(_error_text(data[key]))
    return _excerpt(dumps(data))


def _describe_body(data: Mapping[str, Any]) -> str:
    """What a reply held instead of choices: its keys and its ``object`` kind, briefly."""
    keys = ", ".join(sorted(str(key) for key in data)[:12]) or "(none)"
    if len(data) > 12:
        keys += f", ... ({len(data)} keys)"
    kind = data.get("object")
    described = f"top-level keys: {keys}"
    if isinstance(kind, str) and kind:
        described += f"; object: {_excerpt(kind)!r}"
    return _excerpt(described)


def _error_text(error: object) -> str:
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str) and message:
            code = error.get("code") or error.get("type")
            return f"{message} ({code})" if isinstance(code, str) and code else message
    if isinstance(error, str):
        return without_lone_surrogates(error)
    return dumps(error)


def _excerpt(text: str) -> str:
    if len(text) <= _MAX_MESSAGE_CHARS:
        return text
    return text[:_MAX_MESSAGE_CHARS] + f"... ({len(text)} characters)"


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))
