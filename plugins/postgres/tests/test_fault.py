"""Eight workers share 200 sessions on one server; two are killed with SIGKILL mid-turn.

Bounded in time: the workers must finish within WORKERS_TIMEOUT seconds (a bound for a
busy machine: it took 2.5 minutes on 2 cores shared with seven other test runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import psycopg
from nanobot_core.governance.invariants import check_tool_pairing

from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.store import PostgresSessionStore

SESSIONS = 200
TURNS = 5
WORKERS = 8
VICTIMS = [("s017", 1), ("s060", 2)]
WORKERS_TIMEOUT = 480


class _Output:
    """The stdout lines of one worker, read by a thread as they come."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.strip())


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stored_calls(dsn: str, session: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT line FROM nanobot_session_lines WHERE session = %s", (session,)
        ).fetchall()
    ids: set[str] = set()
    for (line,) in rows:
        for call in json.loads(line).get("tool_calls") or []:
            ids.add(call["id"])
    return ids


def _backends_of(dsn: str, pid: int) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"% pid {pid}",),
        ).fetchone()
    return int(row[0]) if row else 0


def _turns(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The lines of a session split at its user messages."""
    turns: list[list[dict[str, Any]]] = []
    for record in records:
        if set(record) == {"_meta"}:
            continue  # a record line (the usage of a model call), not a message
        if record.get("role") == "user":
            turns.append([])
        assert turns, "a session must start with a user message"
        turns[-1].append(record)
    return turns


def _check_complete_turn(session: str, number: int, lines: list[dict[str, Any]]) -> None:
    label = f"{session}-{number}"
    assert lines[0]["content"].split("\n", 1)[0] == f"session {session} turn {number}"
    assert [line.get("role") for line in lines] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [c["id"] for c in lines[1]["tool_calls"]] == [f"{label}-a", f"{label}-b"]
    assert [line["tool_call_id"] for line in lines[2:4]] == [f"{label}-a", f"{label}-b"]
    assert lines[4]["content"] == f"done {label}"


def test_eight_workers_two_killed_mid_turn(dsn: str, tmp_path: Path) -> None:
    """No loss, duplicate, reorder or interleave; killed sessions are free at once, then healed."""
    PostgresSessionStore(dsn).close()
    started = time.monotonic()
    store = PostgresSessionStore(dsn)
    assert store.list_sessions() == []  # the schema exists before anyone polls it
    with ScriptedChatServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI_"))}
        env.update(
            NANOBOT_SESSIONS__STORE="postgres",
            NANOBOT_POSTGRES_DSN=dsn,
            NANOBOT_SESSIONS__POSTGRES__POOL_SIZE="2",
            NANOBOT_BASE_URL=server.base_url,
            NANOBOT_API_KEY="test-key",
            NANOBOT_MODEL="scripted",
            NANOBOT_DISABLE_PLUGIN_AUTOLOAD="0",
        )
        hang = ",".join(f"{s}:{t}" for s, t in VICTIMS)
        workers: list[subprocess.Popen[str]] = []
        outputs: list[_Output] = []
        try:
            for index in range(WORKERS):
                worker = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "nanobot_postgres.loadtest",
                        "--workspace",
                        str(tmp_path / f"worker{index}"),
                        "--sessions",
                        str(SESSIONS),
                        "--turns",
                        str(TURNS),
                        "--seed",
                        str(index),
                        "--workers",
                        str(WORKERS),
                        "--hang",
                        hang,
                    ],
                    stdout=subprocess.PIPE,
                    env=env,
                    text=True,
                )
                assert worker.stdout is not None
                workers.append(worker)
                outputs.append(_Output(worker.stdout))
            killed: dict[tuple[str, int], int] = {}
            for session, turn in VICTIMS:
                label = f"{session}-{turn}-a"
                # Mid-turn: the model's tool calls are stored and the slow call is running.
                _wait_for(
                    lambda s=session, lbl=label: lbl in _stored_calls(dsn, s),
                    WORKERS_TIMEOUT,
                    f"{session} turn {turn} to start",
                )
                line = f"start {session} {turn}"
                _wait_for(lambda ln=line: any(ln in o.lines for o in outputs), 10, line)
                (index,) = [i for i, out in enumerate(outputs) if line in out.lines]
                time.sleep(0.2)
                os.kill(workers[index].pid, signal.SIGKILL)
                workers[index].wait(timeout=30)
                killed[(session, turn)] = workers[index].pid
                # The server drops the dead worker's connections, and its lease with them, at once.
                _wait_for(lambda p=workers[index].pid: _backends_of(dsn, p) == 0, 3, "lease freed")
            for worker in workers:
                remaining = WORKERS_TIMEOUT - (time.monotonic() - started)
                assert worker.wait(timeout=max(1.0, remaining)) in (0, -signal.SIGKILL)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        assert sorted(killed) == sorted(VICTIMS)
        assert sum(1 for w in workers if w.returncode == 0) == WORKERS - len(VICTIMS)

        names = [info.name for info in store.list_sessions()]
        assert names == [f"s{i:03d}" for i in range(SESSIONS)]
        for name in names:
            loaded = store.load(name)
            assert loaded.problems == [] and loaded.seq == len(loaded.lines)
            turns = _turns(loaded.records)
            assert len(turns) == TURNS, name
            for number, lines in enumerate(turns, start=1):
                if (name, number) in VICTIMS:
                    # The rows of the interrupted turn stay as written: nothing was rewritten.
                    assert [line.get("role") for line in lines] == ["user", "assistant"]
                    assert len(lines[1]["tool_calls"]) == 2
                else:
                    _check_complete_turn(name, number, lines)
        for session, turn in VICTIMS:
            # The next call of the session sent the interrupted calls with backfilled results.
            later = [
                body
                for body in server.requests_of(session)
                if f"session {session} turn {turn + 1}" in json.dumps(body["messages"][-1])
            ]
            assert later, f"{session} turn {turn + 1} never reached the model"
            sent = later[0]["messages"]
            assert check_tool_pairing([m for m in sent if m.get("role") != "system"]) == []
            answered = {m.get("tool_call_id") for m in sent if m.get("role") == "tool"}
            assert {f"{session}-{turn}-a", f"{session}-{turn}-b"} <= answered
        store.close()
    assert time.monotonic() - started < WORKERS_TIMEOUT + 30
