"""Many `nanobot-core run` processes on sessions in PostgreSQL: killed, contending, server crashes.

A seeded generator draws a schedule of steps on a few sessions. Each run is one
process in the workspace of one of several machines (its own folder, its own
pool), against a loopback OpenAI-compatible server that scripts its turn:
rounds of calls to the built-in tools, results large enough to be offloaded,
and a window small enough that governance compacts and cuts. A step is one of:

- a run SIGKILLed at a random moment (while the server holds its model
  request, just after a reply went out, while a tool runs, or at a random
  time), or let finish; the next run on the session, on any machine, resumes;
- two runs on one session at once: the second, without ``[sessions]
  lease_wait``, fails at once (exit 1) naming the holder's pid and the store;
  with it, it waits in the server's lock queue until the first ends (finished,
  or SIGKILLed meanwhile) and then takes its turn, or it is SIGKILLed in the
  queue, or stopped there by Ctrl-C (exit 130, ``Interrupted.``), and the first
  finishes its turn whole;
- the PostgreSQL server stopped abruptly (``pg_ctl stop -m immediate``) while a
  run holds a model request or runs a tool, now and then while a second run
  waits for the lease: each of them exits 1 with one ``Error:`` line naming the
  store, no traceback and no password; then the server is started again, and
  every line stored before is there, once.

After every step, from the database: the session's rows are numbered 0..n-1,
its counters match them, and the rows before the step are unchanged; each
run appended its user message and then the replies the server sent, in order,
each round's results whole, all of it when it finished, and the runs of one
step did not interleave; every request the server received is one a strict
server accepts; and every request is what a fresh governor, restored with the
newest governance record the session held when it was made, makes of the
session's history at that moment (a governance record appended exactly when
its decisions moved), every offloaded result it names being in the database.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from nanobot_core import GovernanceState, PluginManager, load_config
from nanobot_core.sessions import is_meta_record
from nanobot_core.testing_sessions import (
    MOMENTS,
    ReceivedRequest,
    RunProcess,
    ScriptedModel,
    ScriptedRun,
    check_appended,
    check_calls_once,
    check_request,
)

from nanobot_postgres.results import reference_hash
from nanobot_postgres.store import PostgresSessionStore
from nanobot_postgres.testserver import TemporaryPostgres

#: The exit code of a run stopped by Ctrl-C (docs/headless.md, "Exit codes").
EXIT_INTERRUPTED = 130
#: How an offload notice begins (docs/governance.md).
OFFLOAD_PREFIX = "[Tool result saved to a file"


#: The seed of the schedule, the turns' scripts and the moments.
SEED = 20_261_208
#: The steps of the schedule, by kind (shuffled by the seed).
SCHEDULE = {
    "kill": 12,
    "finish": 3,
    "contend": 3,
    "contend_wait": 4,
    "crash": 3,
    "crash_waiting": 1,
}
#: At most so many kill steps are added for kills that came after the run ended.
MISSES = 6
SESSIONS = ("north", "south")
MACHINES = 3
#: How a wait for a busy session ends, each once (`SCHEDULE["contend_wait"]`).
FATES = ("holder finishes", "holder killed", "waiter killed", "waiter interrupted")
#: The longest any one run may take before the test gives up on it.
RUN_TIMEOUT = 30.0
#: How long a run waits for a pool connection while the server is down.
CONNECT_TIMEOUT = 3

CONFIG = """\
[governance]
context_window = 7000
max_output = 500
safety_margin = 100
max_tool_result_chars = 1500
"""

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "sigma"]


@attrs.define
class Snapshot:
    """What the database held for a session when a request came: its lines, the results."""

    records: list[dict[str, Any]]
    results: set[str]


def _snapshot(dsn: str, session: str) -> Snapshot | None:
    """The session's lines and the stored results' hashes; None while the server is down."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            lines = conn.execute(
                "SELECT line FROM nanobot_session_lines WHERE session = %s ORDER BY seq",
                (session,),
            ).fetchall()
            results = conn.execute("SELECT sha256 FROM nanobot_results").fetchall()
    except psycopg.OperationalError:
        return None
    return Snapshot([json.loads(line) for (line,) in lines], {digest for (digest,) in results})


def _stored(dsn: str, session: str) -> list[dict[str, Any]]:
    """The session's lines, checked: numbered 0..n-1, counted right by its session row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT seq, line FROM nanobot_session_lines WHERE session = %s ORDER BY seq",
            (session,),
        ).fetchall()
        head = conn.execute(
            "SELECT lines, messages, bytes FROM nanobot_sessions WHERE name = %s", (session,)
        ).fetchone()
    assert [seq for seq, _ in rows] == list(range(len(rows))), f"{session}: seq has gaps"
    records = [json.loads(line) for _, line in rows]
    if head is None:
        assert rows == [], f"{session}: lines without a session row"
        return records
    messages = sum(1 for r in records if not is_meta_record(r))
    size = sum(len(line.encode("utf-8")) + 1 for _, line in rows)
    assert tuple(head) == (len(rows), messages, size), f"{session}: counters {head}"
    return records


def _text(rng: random.Random, words: int) -> str:
    lines = []
    for _ in range(max(1, words // 12)):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(12)))
    return "\n".join(lines) + "\n"


def _call(rng: random.Random, call_id: str) -> dict[str, Any]:
    """One call to a built-in tool, with arguments that make it do real work."""
    kind = rng.choice(("read_file", "read_file", "grep", "list_dir", "write_file"))
    arguments: dict[str, Any]
    if kind == "read_file":
        arguments = {"path": f"docs/f{rng.randrange(8)}.txt"}
    elif kind == "grep":
        arguments = {"pattern": rng.choice(WORDS), "path": "docs"}
    elif kind == "list_dir":
        arguments = {"path": "docs"}
    else:
        arguments = {"path": f"out/{call_id}.txt", "content": _text(rng, rng.choice((20, 300)))}
    function = {"name": kind, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def _script(rng: random.Random, turn: int, *, tool: bool = False) -> list[dict[str, Any]]:
    """The replies of one turn: 0 to 3 rounds of 1 to 3 calls (at least one with `tool`;
    now and then 6 to 8 rounds, longer than the window), then the answer."""
    replies = []
    long = rng.random() < 0.12
    rounds = rng.randint(6, 8) if long else rng.randrange(1 if tool else 0, 4)
    for round_ in range(rounds):
        calls = [_call(rng, f"call_t{turn}r{round_}c{i}") for i in range(rng.randint(1, 3))]
        if long:  # a call whose arguments no compaction shrinks
            content = _text(rng, 600)
            arguments = json.dumps({"path": f"out/t{turn}r{round_}.txt", "content": content})
            function = {"name": "write_file", "arguments": arguments}
            calls.append(
                {"id": f"call_t{turn}r{round_}w", "type": "function", "function": function}
            )
        replies.append({"role": "assistant", "content": f"step {round_}", "tool_calls": calls})
    replies.append({"role": "assistant", "content": f"answer {turn}: {_text(rng, 30)}"})
    return replies


def _wait(condition: Any, what: str, timeout: float = RUN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _waiting_for_lock(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND application_name LIKE %s",
            (f"% pid {pid}",),
        ).fetchone()
    return bool(row and row[0])


def _await_the_wait(dsn: str, waiter: RunProcess[Snapshot | None]) -> None:
    """Return once `waiter` waits in the server's lock queue; fail if it ended instead."""
    pid = waiter.process.pid
    _wait(lambda: _waiting_for_lock(dsn, pid) or waiter.process.poll() is not None, "the wait")
    assert waiter.process.poll() is None, f"{waiter.run.prompt}: {''.join(waiter.stderr)}"


def _check_request(
    run: ScriptedRun[Snapshot | None],
    received: ReceivedRequest[Snapshot | None],
    index: int,
    pm: PluginManager,
    dsn: str,
) -> bool:
    """What was sent is what a fresh governor, restored with the newest record, makes of the
    history then; a record was appended for it exactly when the decisions moved; every
    offloaded result it points to was in the database then. False when the database could
    not be read as the request came (the server was down)."""
    snapshot = received.snapshot
    if snapshot is None:
        return False

    def read_offloaded(path: str) -> str | None:
        digest = reference_hash(path)
        if digest is None or digest not in snapshot.results:
            return None
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT data FROM nanobot_results WHERE sha256 = %s", (digest,)
            ).fetchone()
        return bytes(row[0]).decode("utf-8") if row else None

    problems = check_request(snapshot.records, received.body["messages"], pm, read_offloaded)
    assert problems == [], f"run {run.prompt!r}, request {index}"
    return True


def _check_store_error(
    run: ScriptedRun[Snapshot | None], server: TemporaryPostgres, database: str
) -> None:
    """The run ended on the server gone: exit 1, one `Error:` line naming the store."""
    where = f"run {run.prompt!r} ({run.moment})"
    assert run.returncode == 1, f"{where}: exit {run.returncode}\n{run.stderr}"
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    store = f"postgresql://nanobot@127.0.0.1:{server.port}/{database}"
    assert len(errors) == 1 and store in errors[0], f"{where}: {run.stderr}"
    # The error is one line: nothing else on stderr but progress lines (a tool running, or
    # the wait for a model reply, shown after two seconds on a slow machine).
    others = [line for line in run.stderr.splitlines() if not line.startswith("Error:")]
    assert all(line.startswith("nanobot: ") for line in others), f"{where}: {run.stderr}"
    for raw in ("Traceback", "discarding", "error connecting", server.password):
        assert raw not in run.stderr, f"{where}: {run.stderr}"


@pytest.fixture
def crashing_server() -> Iterator[TemporaryPostgres]:
    """A server of this test's own, stopped abruptly and started again.

    Commits are synchronous (as a production server's are): with ``synchronous_commit
    = off`` a crash may lose the last commits by design, which is not the store's doing.
    """
    server = TemporaryPostgres(fast=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_runs_on_several_machines_killed_contending_and_crashing_keep_every_session_whole(
    crashing_server: TemporaryPostgres, tmp_path: Path
) -> None:
    """Kills, contention and server crashes at random moments: nothing stored is lost,
    doubled or interleaved, and every request is well formed and made as a resumed
    governor makes it."""
    rng = random.Random(SEED)
    database = "crashfuzz"
    dsn = crashing_server.create_database(database)
    schema = PostgresSessionStore(dsn)
    assert schema.list_sessions() == []  # the schema, before the first check reads it
    schema.close()
    machines = [tmp_path / f"machine{number}" for number in range(MACHINES)]
    docs = [_text(rng, rng.choice((40, 150, 900, 1500))) for _ in range(8)]
    for workspace in [*machines, tmp_path / "governor"]:
        (workspace / "docs").mkdir(parents=True)
        (workspace / "nanobot.toml").write_text(CONFIG, encoding="utf-8")
        for number, text in enumerate(docs):
            (workspace / "docs" / f"f{number}.txt").write_text(text, encoding="utf-8")
    # The governor the checks restore: the runs' configuration and plugins, results kept local.
    governor_workspace = tmp_path / "governor"
    pm = PluginManager(
        load_config(cwd=governor_workspace, environ={}), workspace=governor_workspace
    )
    pm.load()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI_"))}
    base_env.update(
        NANOBOT_SESSIONS__STORE="postgres",
        NANOBOT_POSTGRES_DSN=dsn,
        NANOBOT_SESSIONS__POSTGRES__CONNECT_TIMEOUT=str(CONNECT_TIMEOUT),
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY="test-key",
        NANOBOT_PROVIDER__MAX_RETRIES="0",
        NANOBOT_PROVIDER__TIMEOUT=str(RUN_TIMEOUT),
    )
    schedule = [kind for kind, count in SCHEDULE.items() for _ in range(count)]
    rng.shuffle(schedule)
    counts: dict[str, int] = {}
    checked = unchecked = 0
    numbers = iter(range(1, 10_000))

    def bump(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1

    def snapshot(run: ScriptedRun[Snapshot | None]) -> Snapshot | None:
        return _snapshot(dsn, run.session)

    with ScriptedModel(snapshot, timeout=RUN_TIMEOUT) as model:

        def start(
            run: ScriptedRun[Snapshot | None], *, wait: float = 0.0
        ) -> RunProcess[Snapshot | None]:
            env = dict(base_env)
            if wait:
                env["NANOBOT_SESSIONS__LEASE_WAIT"] = str(wait)
            workspace = rng.choice(machines)
            stdout = tmp_path / f"stdout{len(model.runs)}"
            return model.start_run(run, cwd=workspace, env=env, stdout=stdout)

        def new_run(session: str, *, tool: bool = False) -> ScriptedRun[Snapshot | None]:
            number = next(numbers)
            script = _script(rng, number, tool=tool)
            return ScriptedRun(session, f"turn {number} of {session}: carry on", script)

        def kill_at(child: RunProcess[Snapshot | None], moment: str | None) -> None:
            """SIGKILL `child` at `moment` (None: let it finish); it has ended on return."""
            run = child.run
            child.signal_at(moment, rng, window=(0.3, 1.5))
            if run.returncode == -signal.SIGKILL:
                bump(f"killed at {moment}")
            else:
                assert run.returncode == 0, f"{run.prompt}: {run.stderr}"
                if moment is not None and counts.get("kills missed", 0) < MISSES:
                    # The run ended before its moment came: another kill step in its place.
                    bump("kills missed")
                    schedule.append("kill")

        for step, kind in enumerate(schedule):  # kill steps that missed add one each
            session = rng.choice(SESSIONS)
            before = _stored(dsn, session)
            runs: list[ScriptedRun[Snapshot | None]] = []
            if kind in ("kill", "finish"):
                # The kind of moment killed at least so far: each kind gets its share.
                fewest = min(counts.get(f"killed at {m}", 0) for m in MOMENTS)
                least = [m for m in MOMENTS if counts.get(f"killed at {m}", 0) == fewest]
                moment = rng.choice(least) if kind == "kill" else None
                run = new_run(session, tool=moment == "tool")
                run.moment = moment
                at = rng.randrange(len(run.script))
                run.hold_at = at if moment == "request" else None
                run.reply_at = at if moment == "reply" else None
                runs.append(run)
                kill_at(start(run), moment)
            elif kind in ("contend", "contend_wait"):
                first = new_run(session)
                first.hold_at = rng.randrange(len(first.script))
                holder = start(first)
                assert holder.until(first.held, "held"), holder.stderr
                second = new_run(session)
                runs += [first, second]
                if kind == "contend":
                    # Refused at once, naming the holder; it asked the model nothing.
                    started = time.monotonic()
                    refused = start(second).finish()
                    assert time.monotonic() - started < 10
                    assert refused.returncode == 1, refused.stderr
                    assert f"session {session!r} is in use by another worker" in refused.stderr
                    assert f" pid {holder.process.pid}, server pid " in refused.stderr
                    assert "Traceback" not in refused.stderr and refused.requests == []
                    bump("refused")
                    kill_at(holder, rng.choice((None, "random")))
                else:
                    waiter = start(second, wait=RUN_TIMEOUT)
                    _await_the_wait(dsn, waiter)
                    assert second.requests == [] and waiter.process.poll() is None
                    # The holder goes on, or dies holding the lease: either way the waiter
                    # gets it then, and only then. Or the waiter dies in the queue, and the
                    # holder's turn is not the worse for it.
                    # Or Ctrl-C stops the waiter: exit 130, `Interrupted.` (docs/headless.md).
                    fewest = min(counts.get(fate, 0) for fate in FATES)
                    fate = rng.choice([f for f in FATES if counts.get(f, 0) == fewest])
                    victim = holder if fate == "holder killed" else waiter
                    if fate != "holder finishes":
                        victim.process.send_signal(
                            signal.SIGINT if fate == "waiter interrupted" else signal.SIGKILL
                        )
                        victim.process.wait(RUN_TIMEOUT)
                    first.release.set()
                    holder.finish()
                    waiter.finish()
                    ends = {
                        "holder killed": (-signal.SIGKILL, 0),
                        "waiter killed": (0, -signal.SIGKILL),
                        "waiter interrupted": (0, EXIT_INTERRUPTED),
                    }.get(fate, (0, 0))
                    for ended, expected in zip((first, second), ends, strict=True):
                        assert ended.returncode == expected, f"{fate}: {ended.stderr}"
                        assert "Traceback" not in ended.stderr, ended.stderr
                    if fate == "waiter interrupted":
                        assert "Interrupted." in second.stderr and "Error:" not in second.stderr
                    bump(fate)
            else:  # the server crashes mid-turn, and is started again
                # While a request is held, or while the first round's tools run (the
                # request after them held, so the run cannot finish before the crash).
                moment = "request" if kind == "crash_waiting" else rng.choice(MOMENTS[:3:2])
                run = new_run(session, tool=True)
                run.moment = f"server crash at {moment}"
                run.hold_at = rng.randrange(len(run.script)) if moment == "request" else 1
                child = start(run)
                trigger = run.held if moment == "request" else child.tool_running
                assert child.until(trigger, moment), f"{run.prompt}: {child.stderr}"
                runs.append(run)
                children = [child]
                if kind == "crash_waiting":
                    waiting = new_run(session)
                    runs.append(waiting)
                    children.append(start(waiting, wait=RUN_TIMEOUT))
                    _await_the_wait(dsn, children[-1])
                stored = _snapshot(dsn, session)
                crashing_server.stop_server(mode="immediate")
                bump("server crashes")
                for in_flight in children:
                    in_flight.finish()
                crashing_server.start_server()
                for failed in runs:  # each run in flight fails, naming the store
                    _check_store_error(failed, crashing_server, database)
                    bump("failed on the crash")
                assert stored is not None
                # What was stored before the crash is there after it, once.
                after = _stored(dsn, session)
                assert after[: len(stored.records)] == stored.records, f"step {step}: lost"
            after = _stored(dsn, session)
            for run in runs:
                if run.returncode == 0:
                    assert len(run.requests) == len(run.script), run.prompt
            problems = check_appended(before, after, [run.turn() for run in runs])
            assert problems == [], [(run.moment, run.returncode) for run in runs]
            for run in runs:
                for index, received in enumerate(run.requests):
                    if _check_request(run, received, index, pm, dsn):
                        checked += 1
                    else:
                        unchecked += 1
                assert not run.cut_requests or run.returncode != 0, run.stderr
        assert model.problems == []
    # Every call and its result once, across every session.
    decided: list[GovernanceState] = []
    for session in SESSIONS:
        records = _stored(dsn, session)
        decided += [s for s in map(GovernanceState.from_record, records) if s is not None]
        assert check_calls_once(records) == [], session
    # What the sessions went through: kills at every kind of moment, refusals, waits that
    # ended each way, crashes that failed each run in flight; nearly every request checked.
    assert all(counts.get(f"killed at {moment}", 0) >= 2 for moment in MOMENTS), counts
    assert counts.get("refused", 0) == SCHEDULE["contend"], counts
    assert [counts.get(fate, 0) for fate in FATES] == [1] * len(FATES), counts
    crashes = SCHEDULE["crash"] + SCHEDULE["crash_waiting"]
    assert counts.get("server crashes", 0) == crashes, counts
    assert counts.get("failed on the crash", 0) == crashes + SCHEDULE["crash_waiting"], counts
    assert checked > 40 and unchecked <= crashes, (checked, unchecked)
    # Governance that offloaded, compacted and cut, each decision resumed by the next run.
    assert any(state.compacted for state in decided) and any(state.start for state in decided)
    sent = [m for run in model.runs for q in run.requests for m in q.body["messages"]]
    assert any(str(m.get("content")).startswith(OFFLOAD_PREFIX) for m in sent)
