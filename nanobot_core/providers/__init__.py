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
)
from nanobot_core.providers.openai import OpenAIProvider
from nanobot_core.providers.retry import RetryPolicy, is_retryable_status, retry_after_seconds

__all__ = [
    "OpenAIProvider",
    "ProgressCallback",
    "ProgressEvent",
    "Provider",
    "ProviderFactory",
    "ProviderReply",
    "RetryNotice",
    "RetryPolicy",
    "Usage",
    "is_retryable_status",
    "normalise_assistant_message",
    "normalise_usage",
    "retry_after_seconds",
]
