"""`nanobot-core run` killed with SIGKILL at random moments of a long session, then resumed.

A loopback OpenAI-compatible server scripts a long agent session: many turns,
rounds of calls to the built-in tools, some with results large enough that
governance offloads them, and a context window small enough that it compacts
and cuts. Each turn is one ``run`` process; most are killed with SIGKILL at a
moment drawn from a seeded generator (while the server holds the model request,
just after it answered, while a tool runs, or at a random time), and the next
``run`` resumes the session. Some runs are interrupted with SIGINT instead
(Ctrl-C: exit 130, ``Interrupted.``), or with SIGTERM or SIGHUP, which end a
command as Ctrl-C does (exit 143, ``Terminated.``; 129, ``Hung up.``), and
some of those let go on end on a
model request that fails for good (exit 1, the provider named). After every
run the test checks what docs/headless.md promises:

- the session file parses, and it only grew: the lines before the run are all
  there, as they were. Now and then a killed run's file is given a torn last
  line, as a power cut leaves one (SIGKILL never does): the next run moves it
  to ``<name>.jsonl.torn``, says so on stderr, and goes on;
- each run appended its user message, then the replies the server sent in order,
  each call answered by its result in the one batch of its round: a completed
  turn whole and exactly once, an interrupted one cut at a line boundary;
- every request the server received is one a strict server accepts (no two user
  messages in a row, every call answered, the history starting at a user message);
- every request is what a fresh governor, restored with the newest governance
  record the session held when the request was made, makes of the session's
  history at that moment: a resumed session makes the cut it made before; and a
  governance record is appended exactly when that governor's decisions moved;
- every offloaded result a request points to exists, holding the full result;
- now and then, and at the end, ``govern --json`` on the session says what that
  fresh governor makes of the history: the same messages, prefix and state.
"""

from __future__ import annotations

import json
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nanobot_core import PluginManager, load_config
from nanobot_core._exit_codes import EXIT_HUNG_UP, EXIT_INTERRUPTED, EXIT_TERMINATED
from nanobot_core.governance.continuity import GovernanceState, latest_state
from nanobot_core.governance.stages.offload import OFFLOAD_PREFIX
from nanobot_core.sessions import is_meta_record, strip_meta
from nanobot_core.testing_sessions import (
    MOMENTS,
    ReceivedRequest,
    ScriptedModel,
    ScriptedRun,
    check_appended,
    check_calls_once,
    check_request,
)
from tests.headless.conftest import API_KEY
from tests.helpers import clean_env

#: The seed of the session's script and of the moments the runs are killed at.
SEED = 20_261_207
#: How many runs are killed before the session is finished with one more run.
KILLS = 30
#: The longest any one run may take before the test gives up on it.
RUN_TIMEOUT = 30.0
SESSION = "crash"
#: Every so many runs stopped at a moment, one is interrupted instead of killed: with SIGINT
#: (Ctrl-C), SIGTERM and SIGHUP in turn.
INTERRUPT_EVERY = 4
#: Each signal an interrupted run is stopped with: the exit status and the stderr line it gives.
INTERRUPTS = {
    signal.SIGINT: (EXIT_INTERRUPTED, "Interrupted.\n"),
    signal.SIGTERM: (EXIT_TERMINATED, "Terminated.\n"),
    signal.SIGHUP: (EXIT_HUNG_UP, "Hung up.\n"),
}
#: Every so many runs let go on, one has a model request fail for good (HTTP 500, no retry).
FAIL_EVERY = 3

# A small window: the session outgrows it after a few turns, so governance offloads,
# compacts and cuts, and every resumed run has to make the cut its predecessor made.
CONFIG = """\
[governance]
context_window = 7000
max_output = 500
safety_margin = 100
max_tool_result_chars = 1500
"""

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "sigma"]


def _text(rng: random.Random, words: int) -> str:
    lines = []
    for _ in range(max(1, words // 12)):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(12)))
    return "\n".join(lines) + "\n"


def _workspace(root: Path, rng: random.Random) -> None:
    """Text files of every size: small ones read whole, large ones offloaded."""
    (root / "nanobot.toml").write_text(CONFIG, encoding="utf-8")
    docs = root / "docs"
    docs.mkdir()
    for number in range(8):
        size = rng.choice((40, 150, 900, 1500))
        (docs / f"f{number}.txt").write_text(_text(rng, size), encoding="utf-8")


def _call(rng: random.Random, call_id: str) -> dict[str, Any]:
    """One call to a built-in tool, with arguments that make it do real work."""
    kind = rng.choice(("read_file", "read_file", "grep", "find_files", "list_dir", "write_file"))
    arguments: dict[str, Any]
    if kind == "read_file":
        arguments = {"path": f"docs/f{rng.randrange(8)}.txt"}
    elif kind == "grep":
        arguments = {"pattern": rng.choice(WORDS)}
    elif kind == "find_files":
        arguments = {"pattern": "**/*.txt"}
    elif kind == "list_dir":
        arguments = {"path": "docs"}
    else:
        arguments = {"path": f"out/{call_id}.txt", "content": _text(rng, rng.choice((20, 300)))}
    function = {"name": kind, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def _script(rng: random.Random, turn: int) -> list[dict[str, Any]]:
    """The replies of one turn: 0 to 3 rounds of 1 to 3 calls (now and then a turn of 6 to 8
    rounds, longer than the window: cut between its steps), then the answer."""
    replies = []
    long = rng.random() < 0.12
    for round_ in range(rng.randint(6, 8) if long else rng.randrange(4)):
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


def _records(data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The complete lines of a session file, each a JSON object, and a torn tail if any."""
    cut = data.rfind(b"\n") + 1
    records = []
    for number, line in enumerate(data[:cut].splitlines(), 1):
        record = json.loads(line)
        assert isinstance(record, dict), f"line {number} is not a JSON object: {line[:80]!r}"
        records.append(record)
    return records, data[cut:]


def _messages(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [strip_meta(r) for r in records if not is_meta_record(r)]


def _check_request(
    received: ReceivedRequest[bytes], index: int, workspace: Path, pm: PluginManager
) -> None:
    """What was sent is what a fresh governor, restored with the newest record, makes of the
    history then; a record was appended for it exactly when the decisions moved; every
    offloaded result it points to is in the workspace."""
    records, torn = _records(received.snapshot)
    assert not torn, f"request {index}: sent while the session had a torn line"

    def read_offloaded(path: str) -> str | None:
        saved = workspace / path
        return saved.read_text(encoding="utf-8") if saved.is_file() else None

    problems = check_request(records, received.body["messages"], pm, read_offloaded)
    assert problems == [], f"request {index}"


def _check_govern(workspace: Path, session_file: Path, pm: PluginManager) -> None:
    """`govern --json` on the session says what a fresh governor restored with its newest
    governance record makes of its history: the same messages, prefix and state."""
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "govern", str(session_file), "--json"],
        cwd=workspace,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    records, _ = _records(session_file.read_bytes())
    governor = pm.governor()
    governor.restore(latest_state(records))
    result = governor.govern(_messages(records), tools=pm.tool_registry().definitions())
    assert shown["messages"] == result.messages
    assert shown["prefix"] == result.prefix.to_json()
    # The record's framing (its kind and version) is not part of the state shown.
    framing = ("kind", "version")
    state = {k: v for k, v in result.state.to_record()["_meta"].items() if k not in framing}
    assert shown["state"] == state


def test_runs_killed_at_random_moments_leave_a_session_every_resume_continues(
    tmp_path: Path,
) -> None:
    """Thirty SIGKILLs at random moments of a long session: nothing persisted is lost,
    doubled or torn, every request is well formed and made as a resumed governor makes it."""
    rng = random.Random(SEED)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _workspace(workspace, rng)
    session_file = workspace / ".nanobot" / "sessions" / f"{SESSION}.jsonl"
    pm = PluginManager(load_config(cwd=workspace, environ={}), workspace=workspace, autoload=False)
    pm.load()
    runs: list[ScriptedRun[bytes]] = []
    killed: dict[str, int] = {}
    healed = 0  # torn last lines the next run moved out
    failed = let_go = 0  # runs whose provider failed for good, runs let go on
    interrupted: dict[str, int] = {}  # runs ended by SIGINT, SIGTERM or SIGHUP, by moment
    finished = [0.5]  # how long the runs that were let finish took (seconds)

    def stored(run: ScriptedRun[bytes]) -> bytes:
        """The session file as a request comes (each request is checked against it)."""
        return session_file.read_bytes() if session_file.exists() else b""

    env = clean_env(
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
        NANOBOT_PROVIDER__TIMEOUT=str(RUN_TIMEOUT),
    )
    with ScriptedModel(stored, timeout=RUN_TIMEOUT) as model:
        turn = 0
        # Runs are killed until KILLS of them were (a moment may come after the run ended),
        # one in four is let finish, and a last one finishes the session.
        while sum(killed.values()) < KILLS or runs[-1].returncode != 0:
            kill = sum(killed.values()) < KILLS and rng.random() < 0.75
            # The kind of moment killed least so far: each kind gets its share of the kills.
            fewest = min(killed.get(m, 0) for m in MOMENTS)
            moment = (
                rng.choice([m for m in MOMENTS if killed.get(m, 0) == fewest]) if kill else None
            )
            interrupt = kill and turn % INTERRUPT_EVERY == 0
            stops = list(INTERRUPTS)
            signum = stops[turn // INTERRUPT_EVERY % len(stops)] if interrupt else signal.SIGKILL
            turn += 1
            run: ScriptedRun[bytes] = ScriptedRun(
                SESSION, f"turn {turn}: carry on", _script(rng, turn), moment
            )
            if moment == "tool" and len(run.script) == 1:  # a turn with a tool to kill it in
                calls = [_call(rng, f"call_t{turn}x")]
                run.script.insert(0, {"role": "assistant", "content": "", "tool_calls": calls})
            at = rng.randrange(len(run.script))
            run.hold_at = at if moment == "request" else None
            run.reply_at = at if moment == "reply" else None
            let_go += moment is None
            run.fail_at = at if moment is None and let_go % FAIL_EVERY == 0 else None
            before = session_file.read_bytes() if session_file.exists() else b""
            child = model.start_run(run, cwd=workspace, env=env, stdout=tmp_path / "stdout")
            started = time.monotonic()
            # A random moment falls within the time a run typically takes (however fast the
            # machine).
            typical = statistics.median(finished)
            child.signal_at(moment, rng, window=(0.1 * typical, typical), signum=signum)
            runs.append(run)
            if run.fail_at is not None:  # the provider failed for good: exit 1, saying so
                assert run.returncode == 1, run.stderr
                assert "Error: provider 'openai'" in run.stderr and "HTTP 500" in run.stderr
                assert "Traceback" not in run.stderr, run.stderr
                failed += 1
            elif signum in INTERRUPTS and run.returncode != 0:
                # 130 and "Interrupted." (143 "Terminated.", 129 "Hung up.") at every moment:
                # during the turn, and once it is over, on the way out.
                status, words = INTERRUPTS[signum]
                assert run.returncode == status, run.stderr
                assert "Traceback" not in run.stderr, run.stderr
                assert run.stderr.endswith(words), run.stderr
                interrupted[moment or ""] = interrupted.get(moment or "", 0) + 1
            else:
                assert run.returncode in (0, -signal.SIGKILL), run.stderr
            assert not run.cut_requests or run.returncode != 0, run.stderr
            if run.returncode == 0:
                finished.append(time.monotonic() - started)
            if run.returncode == -signal.SIGKILL:
                killed[moment or "none"] = killed.get(moment or "none", 0) + 1
            after = session_file.read_bytes() if session_file.exists() else b""
            old, old_torn = _records(before)
            new, torn = _records(after)
            if old_torn and not after.endswith(old_torn):  # healed (not killed before it)
                torn_file = session_file.with_name(f"{SESSION}.jsonl.torn")
                assert torn_file.read_bytes().endswith(old_torn + b"\n"), turn
                assert "torn last line moved out of the session" in run.stderr, run.stderr
                healed += 1
            if torn:
                assert run.returncode != 0, f"turn {turn}: finished with a torn last line"
            where = f"turn {turn} ({run.moment or 'not killed'}, exit {run.returncode})"
            if run.returncode == 0:
                assert len(run.requests) == len(run.script), where
            assert check_appended(old, new, [run.turn()]) == [], where
            for index, received in enumerate(run.requests):
                _check_request(received, index, workspace, pm)
            if turn % 10 == 0:
                _check_govern(workspace, session_file, pm)
            if run.returncode != 0 and not torn and rng.random() < 0.2:
                # A write cut short, as a power cut leaves one (SIGKILL never does): the next
                # run must move it out, say so, and go on.
                line = json.dumps({"role": "assistant", "content": f"cut short {turn}"})
                with session_file.open("ab") as handle:
                    handle.write(line[: rng.randrange(1, len(line) - 1)].encode())
    assert model.problems == []
    _check_govern(workspace, session_file, pm)
    assert check_calls_once(_records(session_file.read_bytes())[0]) == []
    # What the session went through: kills at every kind of moment, torn lines healed, and
    # governance that offloaded, compacted, cut between turns and between the steps of one.
    assert min(killed.get(moment, 0) for moment in MOMENTS) >= KILLS // len(MOMENTS), killed
    assert healed >= 2, healed
    assert failed >= 2, failed
    assert sum(interrupted.values()) >= 3, interrupted
    states = [GovernanceState.from_record(r) for r in _records(session_file.read_bytes())[0]]
    decided = [state for state in states if state is not None]
    assert any(state.compacted for state in decided)
    assert any(state.start for state in decided)
    assert any(state.steps_from is not None for state in decided)
    sent = [m for r in runs for q in r.requests for m in q.body["messages"]]
    assert any(str(m.get("content")).startswith(OFFLOAD_PREFIX) for m in sent)
