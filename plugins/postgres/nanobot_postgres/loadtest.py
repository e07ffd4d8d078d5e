"""A load-test worker: serve turns of many sessions until each has its turns (tests, bench).

``python -m nanobot_postgres.loadtest --sessions 200 --turns 5 --workspace DIR``
serves sessions ``s000``... of the configured store (``NANOBOT_*`` as usual)
against the model at ``NANOBOT_BASE_URL``, like a worker behind a queue: it
walks the sessions in turn (each worker from its own starting point), takes
the next one whose lease is free and that still lacks turns, runs one turn
(``session NAME turn K``, which the scripted server answers with tool calls),
releases it, and goes on. Each turn prints ``start NAME K`` and ``done NAME
K`` on stdout. With ``--stats FILE`` it writes the durations of every lease
taken and every append, and the turn count, as JSON at the end. One event
loop, provider and HTTP transport serve all the worker's turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from nanobot_core import (
    Executor,
    PluginManager,
    Runner,
    SectionContext,
    hookimpl,
    load_config,
    tool,
)
from nanobot_core.errors import SessionLockedError
from nanobot_core.providers.openai import OpenAIProvider
from nanobot_core.sessions import (
    Lease,
    SessionLog,
    SessionStore,
    open_session,
    select_session_store,
)

__all__ = ["main"]


@tool(read_only=True)
async def slow_step(ms: int) -> str:
    """Wait `ms` milliseconds (a tool call that takes time).

    Args:
        ms: how long to wait, in milliseconds
    """
    await asyncio.sleep(ms / 1000)
    return f"waited {ms} ms"


class _Tools:
    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [slow_step]


class _TimedLease:
    """A lease whose appends are timed."""

    def __init__(self, lease: Lease, appends: list[float]) -> None:
        self.session = lease.session
        self._lease = lease
        self._appends = appends

    def load(self) -> SessionLog:
        return self._lease.load()

    def check_held(self) -> None:
        # Passed on, so that the worker's turns ask the lease before each model request.
        check = getattr(self._lease, "check_held", None)
        if check is not None:
            check()

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        started = time.perf_counter()
        seq = self._lease.append(lines, expected_seq=expected_seq)
        self._appends.append(time.perf_counter() - started)
        return seq

    def release(self) -> None:
        self._lease.release()


class _TimedStore:
    """A store whose leases and appends are timed."""

    def __init__(self, store: SessionStore) -> None:
        self.name = store.name
        self._store = store
        self.leases: list[float] = []
        self.appends: list[float] = []
        self.busy = 0

    def describe(self) -> str:
        return self._store.describe()

    def list_sessions(self) -> Any:
        return self._store.list_sessions()

    def load(self, session: str) -> SessionLog:
        return self._store.load(session)

    def lease(self, session: str, *, wait: float = 0.0) -> Lease:
        started = time.perf_counter()
        try:
            lease = self._store.lease(session, wait=wait)
        except SessionLockedError:
            self.busy += 1
            raise
        self.leases.append(time.perf_counter() - started)
        return _TimedLease(lease, self.appends)

    def close(self) -> None:
        self._store.close()


def _users(history: list[dict[str, Any]]) -> int:
    return sum(1 for message in history if message.get("role") == "user")


class _KeptTransport(httpx.AsyncBaseTransport):
    """One HTTP transport for every model call of the worker, which the worker closes at the
    end (the provider closes its client, and with it a transport it owns, when it is closed
    or its event loop ends)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Kept open: the worker's event loop closes it at the end."""


async def _serve(args: argparse.Namespace, manager: PluginManager, store: _TimedStore) -> int:
    """Take free sessions in turn (a queue, rotated per worker) until all have their turns."""
    config = manager.config
    transport = _KeptTransport()
    provider = OpenAIProvider(config.provider, transport=transport)
    registry = manager.tool_registry()
    executor = Executor(
        registry, default_timeout=config.tools.timeout, hooks=manager.tool_call_hooks()
    )
    prompt_builder = manager.prompt_builder()
    names = [f"s{index:03d}" for index in range(args.sessions)]
    shift = (args.seed * len(names)) // max(1, args.workers)
    pending = names[shift:] + names[:shift]
    position = 0
    turns = 0
    while pending:
        position %= len(pending)
        name = pending[position]
        try:
            session = open_session(store, name)
        except SessionLockedError:
            position += 1
            await asyncio.sleep(0.001)
            continue
        with session:
            done = _users(session.history())
            if done >= args.turns:
                pending.remove(name)
                continue
            position += 1
            turn = done + 1
            text = f"session {name} turn {turn}"
            if f"{name}:{turn}" in args.hang.split(","):
                text += " HANG"
            print(f"start {name} {turn}", flush=True)
            runner = Runner(
                provider,
                registry,
                executor,
                manager.governor(),
                prompt_builder,
                session,
                prompt_context=SectionContext(
                    workspace=manager.context.workspace, session=name, config=config
                ),
                runtime_lines=manager.runtime_lines,
                channel="loadtest",
            )
            await runner.run_turn_async(text)
            print(f"done {name} {turn}", flush=True)
            turns += 1
    await transport._inner.aclose()
    return turns


def main(argv: Sequence[str] | None = None) -> int:
    """Serve turns until every session has its turns; return the exit code."""
    parser = argparse.ArgumentParser(prog="nanobot_postgres.loadtest")
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="this worker's number")
    parser.add_argument("--workers", type=int, default=8, help="how many workers share the queue")
    parser.add_argument("--hang", default="", help="SESSION:TURN,... whose first call hangs")
    parser.add_argument("--stats", type=Path)
    parser.add_argument("--start-file", type=Path, help="print ready, then wait for this file")
    args = parser.parse_args(argv)
    args.workspace.mkdir(parents=True, exist_ok=True)
    manager = PluginManager(load_config(cwd=args.workspace), workspace=args.workspace)
    manager.register(_Tools(), "loadtest-tools")
    store = _TimedStore(select_session_store(manager))
    store.list_sessions()  # connect (and migrate) before the clock starts
    if args.start_file is not None:
        print("ready", flush=True)
        while not args.start_file.exists():
            time.sleep(0.01)
    started_at = time.time()
    started = time.perf_counter()
    turns = asyncio.run(_serve(args, manager, store))
    elapsed = time.perf_counter() - started
    if args.stats:
        args.stats.write_text(
            json.dumps(
                {
                    "turns": turns,
                    "seconds": elapsed,
                    "started_at": started_at,
                    "ended_at": started_at + elapsed,
                    "leases": store.leases,
                    "appends": store.appends,
                    "busy": store.busy,
                }
            )
        )
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
