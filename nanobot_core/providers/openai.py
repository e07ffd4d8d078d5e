"""The built-in ``openai`` provider: any OpenAI-compatible chat-completions endpoint over HTTP.

Works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, llama.cpp's
server and every other server that speaks ``POST {base_url}/chat/completions``.
The API key is sent as a Bearer token and is never logged, printed or put in
an error message: messages built from server replies have it masked, and the
provider's repr leaves it out.

``provider.max_tokens``, when set, is sent as the reply limit, in one field:
``max_completion_tokens`` to OpenAI's API (its reasoning models refuse
``max_tokens``, which it documents as deprecated), ``max_tokens`` to any other
server (what Ollama, llama.cpp, LM Studio, OpenRouter document);
``provider.max_tokens_field`` names the field for a server the host does not
tell (a gateway in front of OpenAI, Azure). A refusal that names the field says
which setting sent it, where it was set, and in which field; so does a refusal
of the key, the model or the address (401, 403, 404) of the settings that sent
them. A redirect is never followed (the key would go with it): its error says
where it points and that ``provider.base_url`` is to be set to it. An answer
that is not HTTP (another kind of server at the address, a status outside
100-599) is not retried: its error names ``provider.base_url`` and where it
was set, as a 404's does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nanobot_core._clip import quoted
from nanobot_core._json_boundary import JSONBoundaryError, JSONLimitError, loads
from nanobot_core._logging import get_logger
from nanobot_core.config import ProviderConfig, check_reply_limit, source_prefix
from nanobot_core.errors import ProviderError
from nanobot_core.governance.anthropic import OTHER_BLOCKS_KEY, THINKING_KEY
from nanobot_core.kernel.records import core_version
from nanobot_core.providers.base import (
    ProgressCallback,
    ProviderReply,
    normalise_assistant_message,
    normalise_usage,
    with_sendable_call_ids,
)
from nanobot_core.providers.endpoint import check_endpoint, is_openai_api
from nanobot_core.providers.http import (
    KeptClients,
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
    server_message,
    without_credentials,
)
from nanobot_core.providers.retry import HTTP_STATUSES, RetryPolicy

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIProvider"]

log = get_logger("nanobot_core.providers.openai")

#: How a user sets what `check_endpoint` refuses, as its errors say.
_BASE_URL_HINT = "set --base-url or NANOBOT_BASE_URL, e.g. http://localhost:11434/v1"
_API_KEY_HINT = (
    "set NANOBOT_API_KEY or OPENAI_API_KEY; NANOBOT_API_KEY=none for a server that needs no key"
)
#: The reply-limit fields, as ``provider.max_tokens_field`` names them.
_FIELDS = ("max_tokens", "max_completion_tokens")
#: How a user sets each setting a refusal may be about, as its error says.
_HOW_TO_SET = {
    "provider.api_key": "NANOBOT_API_KEY or OPENAI_API_KEY sets it",
    "provider.base_url": "--base-url or NANOBOT_BASE_URL sets it",
    "provider.model": "--model or NANOBOT_MODEL sets it",
}


def _reply_limit_field(base_url: str, setting: str = "auto") -> str:
    """The request field that carries ``provider.max_tokens`` to `base_url`: `setting` when
    it names one of `_FIELDS`; for ``"auto"``, ``max_completion_tokens`` when the host is
    OpenAI's API (``api.openai.com`` or a regional ``*.api.openai.com``), else
    ``max_tokens``."""
    if setting != "auto":
        return setting
    return "max_completion_tokens" if is_openai_api(base_url) else "max_tokens"


def _setting_note(config: ProviderConfig, field: str) -> str:
    """What an error about the reply-limit field says of the settings that sent it: where
    ``provider.max_tokens`` was set, its value, the field it went in and why that one
    (``nanobot.toml: provider.max_tokens = 4096, sent as max_tokens, ...``)."""
    said = f"{source_prefix(config=config, keys=['provider.max_tokens'])}provider.max_tokens"
    said += f" = {config.max_tokens}, sent as {field}"
    other = _FIELDS[1 - _FIELDS.index(field)]
    where = source_prefix(config=config, keys=["provider.max_tokens_field"])
    if config.max_tokens_field != "auto":
        return (
            f"{said} ({where}provider.max_tokens_field = '{field}'; 'auto' or '{other}' change it)"
        )
    taker = (
        "OpenAI's API takes"
        if field == "max_completion_tokens"
        else "servers other than OpenAI's API take"
    )
    default = "" if where else ", the default"
    return (
        f"{said}, the field {taker} ({where}provider.max_tokens_field = 'auto'{default}; "
        f"'{other}' sends the other)"
    )


def _said(config: ProviderConfig, key: str, value: str | None) -> str:
    """A setting as a refusal's error names it: where it was set, its key and value, and how
    to set it (``command line: provider.model = 'gpt-4o' (--model or NANOBOT_MODEL sets
    it)``); of ``provider.api_key``, only whether it is set, never its value."""
    where = source_prefix(config=config, keys=[key])
    if key == "provider.api_key":
        shown = "is set (not shown)" if value else "is not set: no key was sent"
        return f"{where}{key} {shown}; {_HOW_TO_SET[key]}"
    return f"{where}{key} = {quoted(value)} ({_HOW_TO_SET[key]})"


def _status_notes(config: ProviderConfig, base_url: str) -> dict[int, str]:
    """What the error of a refusal with each of these statuses adds: the settings to check.

    The server names what it refused (a key, a model) in its own words, if at all;
    never the setting that sent it nor where that was set.
    """
    key = _said(config, "provider.api_key", config.api_key)
    model = _said(config, "provider.model", config.model)
    base = _said(config, "provider.base_url", base_url)
    return {
        401: (
            f"the server did not take the key: {key}"
            if config.api_key
            else f"the server wants a key: {key}"
        ),
        403: f"the key may not use this model or endpoint: {model}; {key}",
        404: (
            f"no such endpoint or model here: {base}, the endpoint being it and "
            f"/chat/completions; {model}"
        ),
    }


def _names_field(response: httpx.Response, field: str) -> bool:
    """Whether an error reply is about request field `field`: its ``error.param`` is the
    field (OpenAI's shape), or the server's message names it as a word."""
    if re.search(rf"(?<![A-Za-z0-9_]){field}(?![A-Za-z0-9_])", server_message(response)):
        return True
    try:  # the bounded reader: an error body nested past what `json` walks is no crash
        data = loads(response.content).value
    except JSONBoundaryError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    return isinstance(error, dict) and error.get("param") == field


class OpenAIProvider:
    """Chat completions over HTTP with retries, built from ``config.provider``.

    `transport` replaces httpx's network transport (for embedding and tests).
    The HTTP client, and with it the open connections, are kept from call to call:
    one client per event loop (`KeptClients`), so the provider can be used from
    any loop, and the calls of a turn share one connection instead of each opening
    (and, over TLS, setting up) its own. A loop's client is closed when that loop
    ends, or by :meth:`aclose` awaited on it.
    """

    name = "openai"
    #: It only encodes what it is handed (`with_sendable_call_ids` builds new dicts for
    #: what it changes), so the runner need not copy the request for it.
    leaves_input_unchanged = True

    def __init__(
        self,
        config: ProviderConfig,
        *,
        progress: ProgressCallback | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # A fault no retry can cure: ConfigError, before any request.
        check_endpoint(
            config.base_url,
            config.api_key,
            base_url_hint=_BASE_URL_HINT,
            api_key_hint=_API_KEY_HINT,
        )
        self.base_url = config.base_url.rstrip("/")
        self.model = config.model
        self.timeout = config.timeout
        self.max_reply_bytes = config.max_reply_bytes
        self.temperature = config.temperature
        # `load_config` refuses what this does; a `ProviderConfig` made in code is checked here.
        check_reply_limit(config)
        self.max_tokens = config.max_tokens
        #: The request field `max_tokens` is sent in (`_reply_limit_field`).
        self.max_tokens_field = _reply_limit_field(self.base_url, config.max_tokens_field)
        # What a refusal naming that field adds: the setting, where it was set, the field.
        self._reply_limit_note = (
            _setting_note(config, self.max_tokens_field) if self.max_tokens is not None else None
        )
        # What a refusal of the key, the model or the URL adds: the settings that sent them.
        self._status_notes = _status_notes(config, without_credentials(self.base_url))
        self._base_url_said = _said(config, "provider.base_url", without_credentials(self.base_url))
        self.policy = RetryPolicy(config.max_retries, config.backoff_base, config.retry_after_cap)
        self._api_key = config.api_key or None
        self._progress = progress
        self._transport = transport
        self._clients = KeptClients(timeout=self.timeout, transport=transport)

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.display_url!r}, model={self.model!r})"

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        return f"{self.base_url}/chat/completions"

    @property
    def display_url(self) -> str:
        """The endpoint without any ``user:password@`` part, for messages and logs."""
        return without_credentials(self.endpoint)

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The JSON body of one request (``tools`` is left out when there are none).

        Call ids longer than OpenAI takes (from a session stored before replies
        were normalised, or imported) are replaced on both sides of each call
        (`with_sendable_call_ids`). The blocks an Anthropic provider kept on an
        assistant message (`THINKING_KEY`, `OTHER_BLOCKS_KEY`) are left out.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _without_anthropic_blocks(with_sendable_call_ids(messages)),
            "stream": False,
        }
        if tools:
            body["tools"] = list(tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:  # unset: nothing sent, the server's own limit applies
            body[self.max_tokens_field] = self.max_tokens
        return body

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        """Send one request, retrying what is worth retrying; return the normalised reply.

        A body that cannot be encoded (a message nested past what the encoder walks,
        holding itself, or holding an integer too long to write) is a ProviderError
        naming the message or tool definition, before anything is sent.
        """
        body = self.request_body(messages, tools)
        try:
            content = request_content(body)
        except JSONLimitError:  # nested past what the encoder walks, or holding itself
            fault = request_fault(messages, tools)
            if fault is None:
                raise
            plugin = f"nanobot-core {core_version()}"
            raise ProviderError(f"{plugin} sends no request: {fault}") from None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        salt = str(len(messages))

        async def attempt() -> ProviderReply:
            # The client is looked up for each attempt: one closed meanwhile is replaced.
            return await self._attempt(await self._clients.get(), content, headers, salt=salt)

        reply = await send_with_retries(
            attempt,
            self.policy,
            url=self.display_url,
            progress=self._progress,
            timeout=self.timeout,
        )
        log.debug("provider usage", model=reply.model, usage=reply.usage.to_json())
        return reply

    async def aclose(self) -> None:
        """Close the connections kept on the running event loop (see `KeptClients.aclose`).

        The provider stays usable: its next call opens a new connection.
        """
        await self._clients.aclose()

    async def _attempt(
        self, client: httpx.AsyncClient, content: bytes, headers: dict[str, str], *, salt: str
    ) -> ProviderReply:
        """One HTTP exchange and its reply.

        Raises `Retryable` for failures worth another attempt, ProviderError for
        the others (a request the server refuses, a reply too large or not JSON).
        """
        response = await post_request(
            client,
            self.endpoint,
            content=content,
            headers=headers,
            max_bytes=self.max_reply_bytes,
            timeout=self.timeout,
            secret=self._api_key,
            url_setting=self._base_url_said,
        )
        status = response.status_code
        if 200 <= status < 300:
            return self._parse_reply(response, salt=salt)
        failure = failure_for_status(
            response, self.display_url, self._api_key, url_setting=self._base_url_said
        )
        if status not in HTTP_STATUSES:  # the error names the status and the base URL
            raise failure
        note = self._reply_limit_note
        if (
            note is not None
            and isinstance(failure, ProviderError)
            and _names_field(response, self.max_tokens_field)
        ):
            # The server names the field, never the setting that filled it or where it was set.
            raise ProviderError(f"{failure} [{mask_secret(note, self._api_key)}]")
        # A redirect's error says where it points (`failure_for_status`); it is never followed
        # (httpx's default), as the key would go with the request to any host.
        note = self._status_notes.get(status)
        if note is not None and isinstance(failure, ProviderError):
            raise ProviderError(f"{failure} [{mask_secret(note, self._api_key)}]")
        raise failure

    def _parse_reply(self, response: httpx.Response, *, salt: str) -> ProviderReply:
        data = reply_json(response, self.display_url, self._api_key)
        if not isinstance(data, dict):
            raise ProviderError(f"{self.display_url} sent a reply that is not a JSON object")
        choices = data.get("choices")
        if not choices and data.get("error") is not None:
            # Some proxies answer 200 with an error object instead of a status code.
            raise ProviderError(
                f"{self.display_url} answered with an error: "
                f"{excerpt(mask_secret(error_text(data['error']), self._api_key))}"
            )
        if not isinstance(choices, list):
            # A Responses API, Cohere or Bedrock body behind a misconfigured URL: an
            # empty answer here would end the run as a success with nothing said.
            raise ProviderError(
                f"{self.display_url} sent a 200 reply that is not a chat completion "
                f"(no 'choices' list): {mask_secret(describe_body(data), self._api_key)}"
            )
        choice = choices[0] if choices else {"message": {}}
        if not _chat_choice(choice):
            # A legacy completion (`choices[0].text`) or a choice of another shape: its text
            # would be lost and the turn end as a success with an empty answer.
            raise ProviderError(
                f"{self.display_url} sent a 200 reply that is not a chat completion "
                f"(no 'message' object in choices[0]): "
                f"{mask_secret(_describe_choice(choice), self._api_key)}"
            )
        finish_reason = choice.get("finish_reason")
        model = data.get("model")
        return ProviderReply(
            message=normalise_assistant_message(choice.get("message"), salt=salt),
            usage=normalise_usage(data.get("usage")),
            model=model if isinstance(model, str) else None,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )


#: What an Anthropic provider keeps on the assistant messages of a session, to send back
#: to its own API: no chat-completions field, and a strict server (OpenAI's, or one that
#: forbids extra inputs) refuses a message holding a key it does not know, so a session
#: continued here after the Anthropic provider would be refused on every request.
_ANTHROPIC_KEYS = (THINKING_KEY, OTHER_BLOCKS_KEY)


def _without_anthropic_blocks(messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`messages` (a list of its own) with `_ANTHROPIC_KEYS` left out of those holding them;
    the others are shared, and nothing handed in is changed."""
    for index, message in enumerate(messages):
        if isinstance(message, Mapping) and (
            THINKING_KEY in message or OTHER_BLOCKS_KEY in message
        ):
            messages[index] = {k: v for k, v in message.items() if k not in _ANTHROPIC_KEYS}
    return messages


def _chat_choice(choice: object) -> bool:
    """Whether the first choice of a reply is a chat completion's: one with a message object.

    A choice without a message that says why it stopped (a ``content_filter``)
    and holds no legacy ``text`` counts as one, with an empty message.
    """
    if not isinstance(choice, Mapping):
        return False
    message = choice.get("message")
    if isinstance(message, Mapping):
        return True
    return message is None and "text" not in choice and isinstance(choice.get("finish_reason"), str)


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def _describe_choice(choice: object) -> str:
    """What ``choices[0]`` held instead of a chat completion's choice, briefly."""
    if isinstance(choice, Mapping):
        return "choices[0] " + describe_body(choice).removeprefix("top-level ")
    kind = "null" if choice is None else _JSON_TYPES.get(type(choice), "a number")
    return f"choices[0] is {kind}"
