"""A provider call past its deadline, or whose caller is cancelled, is stopped as a tool is."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nanobot_core.config import Config
from nanobot_core.errors import ProviderError
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, Section
from nanobot_core.runner import Runner
from nanobot_core.sessions import Session
from nanobot_core.tools.executor import STOP_GRACE, Executor
from nanobot_core.tools.registry import ToolRegistry

ABANDONED = "tool ignored cancellation and was abandoned; it may still be running"


class RaisingWhenStopped:
    """Never answers; when cancelled, raises an error of its own instead of stopping quietly."""

    name = "raising"

    async def complete(self, messages: Any, tools: Any) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None


class IgnoringCancellation:
    """Never answers in time, and keeps working past its cancellation for a while."""

    name = "stubborn"

    async def complete(self, messages: Any, tools: Any) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(STOP_GRACE + 0.5)  # ignores the request, then gives up
        raise RuntimeError("gave up")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with JsonlSessionStore(tmp_path).open("stop") as opened:
        yield opened


def _runner(provider: Any, session: Session, tmp_path: Path, deadline: float) -> Runner:
    config = Config()
    registry = ToolRegistry()
    return Runner(
        provider,
        registry,
        Executor(registry, default_timeout=5.0),
        Governor(builtin_stages(), config=config.governance, workspace=tmp_path),
        PromptBuilder([(Section("only", 1, lambda ctx: "Be brief."), "test")], config=config),
        session,
        provider_deadline=deadline,
        provider_owner="plugin 'slowllm' from slowllm 1.0",
    )


def test_what_a_provider_raises_while_stopped_at_its_deadline_is_not_reported_lost(
    session: Session, tmp_path: Path
) -> None:
    """The error a stopped provider raises is retrieved: asyncio never logs it as lost."""
    runner = _runner(RaisingWhenStopped(), session, tmp_path, deadline=0.2)
    lost: list[dict[str, Any]] = []

    async def turn() -> str:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: lost.append(context))
        try:
            await runner.run_turn_async("hi")
        except ProviderError as exc:
            said = str(exc)
        else:
            said = ""
        gc.collect()  # a task whose exception nobody read reports it when it is freed
        await asyncio.sleep(0)
        return said

    said = asyncio.run(turn())
    assert "provider 'raising' of plugin 'slowllm' from slowllm 1.0 did not answer" in said
    assert lost == []


def test_a_provider_that_ignores_its_callers_cancellation_is_abandoned_with_a_warning(
    session: Session, tmp_path: Path
) -> None:
    """Cancelling a turn stops the provider's call; one that ignores it is named and left."""
    runner = _runner(IgnoringCancellation(), session, tmp_path, deadline=30.0)

    async def cancelled_turn() -> bool:
        turn = asyncio.create_task(runner.run_turn_async("hi"))
        await asyncio.sleep(0.2)
        turn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turn
        await asyncio.sleep(1.0)  # the abandoned call ends on its own before the loop closes
        return turn.cancelled()

    with capture_logs() as logs:
        assert asyncio.run(cancelled_turn())
    warnings = [line for line in logs if line["event"] == ABANDONED]
    assert len(warnings) == 1
    assert warnings[0]["tool"] == "provider 'stubborn'"
    assert warnings[0]["plugin"] == "plugin 'slowllm' from slowllm 1.0"
    assert warnings[0]["why"] == "its caller was cancelled"
