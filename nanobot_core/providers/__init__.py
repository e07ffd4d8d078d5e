"""Model providers: the protocol every provider follows, and the built-in OpenAI-compatible one."""

from __future__ import annotations

from nanobot_core.providers.base import (
    ProgressCallback,
    ProgressEvent,
    Provider,
    ProviderFactory,
    ProviderReply,
    RetryNotice,
    Usage,
    normalise_assistant_message,
    normalise_usage,
    sendable_call_id,
    token_count,
    with_sendable_call_ids,
)
from nanobot_core.providers.endpoint import check_endpoint
from nanobot_core.providers.http import (
    KeptClients,
    Retryable,
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
    transport_failure,
    without_credentials,
)
from nanobot_core.providers.openai import OpenAIProvider
from nanobot_core.providers.retry import RetryPolicy, is_retryable_status, retry_after_seconds

__all__ = [
    "KeptClients",
    "OpenAIProvider",
    "ProgressCallback",
    "ProgressEvent",
    "Provider",
    "ProviderFactory",
    "ProviderReply",
    "RetryNotice",
    "RetryPolicy",
    "Retryable",
    "Usage",
    "check_endpoint",
    "describe_body",
    "error_text",
    "excerpt",
    "failure_for_status",
    "is_retryable_status",
    "mask_secret",
    "normalise_assistant_message",
    "normalise_usage",
    "post_request",
    "reply_json",
    "request_content",
    "request_fault",
    "retry_after_seconds",
    "send_with_retries",
    "sendable_call_id",
    "server_message",
    "token_count",
    "transport_failure",
    "with_sendable_call_ids",
    "without_credentials",
]
