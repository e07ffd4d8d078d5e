"""The parts of a crash test in `nanobot_core.testing_sessions`: the scripted model, the run.

`ScriptedModel` is driven here by hand over HTTP (each answer, refusal and mark), and
`RunProcess` on real ``run`` children: let finish, SIGKILLed while the model holds a
request, interrupted while a tool runs. Both crash tests (``test_crash_fuzz.py`` here and
in ``plugins/postgres``) run on these same parts.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core._exit_codes import EXIT_INTERRUPTED
from nanobot_core.testing_sessions import (
    MOMENTS,
    RunProcess,
    ScriptedModel,
    ScriptedRun,
    Turn,
    check_appended,
    restore_stop_signals,
)
from tests.headless.conftest import API_KEY
from tests.helpers import clean_env

TIMEOUT = 30.0
USER = [{"role": "user", "content": "hello"}]
LIST_DIR: dict[str, Any] = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "list_dir", "arguments": json.dumps({"path": "."})},
}
SCRIPT: list[dict[str, Any]] = [
    {"role": "assistant", "content": "looking", "tool_calls": [LIST_DIR]},
    {"role": "assistant", "content": "done"},
]


@pytest.fixture
def model() -> Iterator[ScriptedModel[int]]:
    """A started scripted model whose snapshot of a run is how many requests it had before."""
    with ScriptedModel(lambda run: len(run.requests), timeout=TIMEOUT) as running:
        yield running


def _post(url: str, body: Any = None, *, raw: bytes | None = None) -> httpx.Response:
    if raw is None:
        raw = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return httpx.post(f"{url}/chat/completions", content=raw, headers=headers, timeout=TIMEOUT)


def _run(
    script: list[dict[str, Any]] | None = None,
    *,
    hold_at: int | None = None,
    reply_at: int | None = None,
    fail_at: int | None = None,
) -> ScriptedRun[int]:
    replies = list(SCRIPT if script is None else script)
    return ScriptedRun("s", "turn 1: go", replies, None, hold_at, reply_at, fail_at)


def test_each_run_is_answered_its_own_script_in_order(model: ScriptedModel[int]) -> None:
    """Two runs at their own URLs get their own replies in order, each request recorded
    with the snapshot taken as it came, and a request past the script is refused, noted."""
    first, second = _run(), _run([{"role": "assistant", "content": "other"}])
    first_url, second_url = model.base_url(first), model.base_url(second)
    assert first_url != second_url and model.base_url(first) == first_url
    answers = [_post(first_url, {"messages": USER}) for _ in range(2)]
    assert [a.json()["choices"][0]["message"] for a in answers] == SCRIPT
    assert [a.json()["choices"][0]["finish_reason"] for a in answers] == ["tool_calls", "stop"]
    other = _post(second_url, {"messages": USER, "n": 2})
    assert other.json()["choices"][0]["message"]["content"] == "other"
    assert [(r.body, r.snapshot) for r in second.requests] == [({"messages": USER, "n": 2}, 0)]
    assert [r.snapshot for r in first.requests] == [0, 1]
    assert model.problems == []
    past = _post(first_url, {"messages": USER})
    assert past.status_code == 400
    assert model.problems == ["run 'turn 1: go': request 2 is past its script"]
    assert model.runs == [first, second]


def test_a_request_a_strict_server_refuses_is_answered_400_and_noted(
    model: ScriptedModel[int],
) -> None:
    """A history that starts with the assistant is refused and named with its run and index."""
    run = _run()
    answer = _post(model.base_url(run), {"messages": [{"role": "assistant", "content": "x"}]})
    assert answer.status_code == 400
    assert len(model.problems) == 1
    assert model.problems[0].startswith("run 'turn 1: go', request 0: [")
    assert len(run.requests) == 1


def test_a_request_of_no_run_is_refused_and_noted(model: ScriptedModel[int]) -> None:
    """A request at a URL no run was given is answered 400 and named by its path."""
    answer = _post(model.base_url(_run()).replace("/run0/", "/run7/"), {"messages": USER})
    assert answer.status_code == 400
    assert model.problems == ["a request nobody expected: POST /run7/v1/chat/completions"]


def test_a_body_cut_short_is_counted_not_recorded(model: ScriptedModel[int]) -> None:
    """A body that is not a JSON object (sent in part by a killed run) is counted on the run."""
    run = _run()
    assert _post(model.base_url(run), raw=b'{"messages": [{"ro').status_code == 400
    assert (run.cut_requests, run.requests, model.problems) == (1, [], [])


def test_the_marked_requests_are_failed_held_and_signalled(model: ScriptedModel[int]) -> None:
    """`fail_at` is answered 500; `hold_at` sets `held` and waits for `release`; `reply_at`
    sets `replied` as its answer goes out."""
    failing = _run(fail_at=0)
    assert _post(model.base_url(failing), {"messages": USER}).status_code == 500
    held = _run(hold_at=0, reply_at=1)
    url = model.base_url(held)
    answers: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: answers.append(_post(url, {"messages": USER})))
    sender.start()
    assert held.held.wait(TIMEOUT)
    time.sleep(0.1)
    assert answers == [] and not held.replied.is_set()
    held.release.set()
    sender.join(TIMEOUT)
    assert answers[0].status_code == 200 and not held.replied.is_set()
    assert _post(url, {"messages": USER}).status_code == 200
    assert held.replied.is_set()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_body_is_answered_and_accounted_for(raw: bytes) -> None:
    """Whatever bytes a run sends, the server answers, and the request is either recorded
    (a JSON object) or counted as cut short, never lost."""
    with ScriptedModel(lambda run: len(run.requests), timeout=TIMEOUT) as model:
        run = _run()
        answer = _post(model.base_url(run), raw=raw)
    assert answer.status_code in (200, 400)
    assert len(run.requests) + run.cut_requests == 1
    assert bool(run.cut_requests) == (not isinstance(_json_or_none(raw), dict))


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        return None


def _session(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / ".nanobot" / "sessions" / "s.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _start(model: ScriptedModel[int], run: ScriptedRun[int], tmp_path: Path) -> RunProcess[int]:
    env = clean_env(
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return model.start_run(run, cwd=workspace, env=env, stdout=tmp_path / "stdout")


def test_a_run_let_finish_reports_its_whole_turn(model: ScriptedModel[int], tmp_path: Path) -> None:
    """A run let go on finishes: exit 0, every reply requested, and its turn as `run --json`
    reported it, which is what the session stored."""
    run = _run()
    child = _start(model, run, tmp_path)
    child.signal_at(None, random.Random(1), window=(0.1, 1.0))
    assert run.returncode == 0, run.stderr
    assert child.tool_running.is_set() and "nanobot: tool list_dir: running" in run.stderr
    assert len(run.requests) == 2
    turn = run.turn()
    assert (turn.prompt, list(turn.replies), turn.finished) == ("turn 1: go", SCRIPT, True)
    assert turn.reported == json.loads(run.stdout)["messages"]
    assert check_appended([], _session(tmp_path / "workspace"), [turn]) == []


def test_a_run_killed_while_its_request_is_held_ends_there(
    model: ScriptedModel[int], tmp_path: Path
) -> None:
    """SIGKILL at the moment the second request is held: the run ends killed, the turn
    unfinished, and the session holds its first round whole."""
    run = _run(hold_at=1)
    _start(model, run, tmp_path).signal_at("request", random.Random(2), window=(0.1, 1.0))
    assert run.returncode == -signal.SIGKILL
    assert len(run.requests) == 2 and run.release.is_set()
    assert run.turn() == Turn("turn 1: go", SCRIPT, finished=False, reported=None)
    stored = _session(tmp_path / "workspace")
    assert [m["role"] for m in stored if "role" in m] == ["user", "assistant", "tool"]
    assert check_appended([], stored, [run.turn()]) == []


def test_a_run_interrupted_while_a_tool_runs_exits_130(
    model: ScriptedModel[int], tmp_path: Path
) -> None:
    """SIGINT once a tool runs: Ctrl-C's exit 130 and ``Interrupted.``, no traceback."""
    run = _run()
    child = _start(model, run, tmp_path)
    child.signal_at("tool", random.Random(3), window=(0.1, 1.0), signum=signal.SIGINT)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr
    assert run.stderr.endswith("Interrupted.\n") and "Traceback" not in run.stderr


def _sleeper(stderr: str = "", **options: Any) -> subprocess.Popen[str]:
    code = f"import sys, time; sys.stderr.write({stderr!r}); sys.stderr.flush(); time.sleep(30)"
    return subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, **options
    )


def test_a_moment_that_is_not_one_is_refused(tmp_path: Path) -> None:
    """`signal_at` names the moments it knows when given another, and sends nothing."""
    process = _sleeper()
    child = RunProcess(_run(), process, tmp_path / "stdout", timeout=TIMEOUT)
    try:
        with pytest.raises(ValueError, match="'later' is not one of request, reply, tool"):
            child.signal_at("later", random.Random(4), window=(0.1, 1.0))
        assert process.poll() is None
    finally:
        process.kill()
        process.communicate()
    assert set(MOMENTS) == {"request", "reply", "tool", "random"}


def test_a_random_moment_signals_within_the_window(tmp_path: Path) -> None:
    """At ``"random"`` a run still going is signalled once the time drawn from the window
    has passed, and `tool_running` is set from what its stderr says."""
    (tmp_path / "stdout").write_text("", encoding="utf-8")
    process = _sleeper("nanobot: tool grep: running\n")
    child = RunProcess(_run(), process, tmp_path / "stdout", timeout=TIMEOUT)
    child.reader = threading.Thread(target=child.read_stderr, daemon=True)
    child.reader.start()
    assert child.until(child.tool_running, "the tool")
    started = time.monotonic()
    child.signal_at("random", random.Random(5), window=(0.2, 0.3))
    assert 0.2 <= time.monotonic() - started < 10
    assert child.run.returncode == -signal.SIGKILL
    assert child.run.stderr == "nanobot: tool grep: running\n"


def test_restore_stop_signals_lets_ctrl_c_stop_a_child_started_ignoring_it() -> None:
    """A child started while this process ignores SIGINT stops on it with the function as its
    `preexec_fn`, and ignores it without (what a background job's child would do)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ignoring = _sleeper("ready\n")
        interruptible = _sleeper("ready\n", preexec_fn=restore_stop_signals)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        for process in (ignoring, interruptible):
            assert process.stderr is not None and process.stderr.readline() == "ready\n"
            process.send_signal(signal.SIGINT)
        _, stderr = interruptible.communicate(timeout=TIMEOUT)
        assert interruptible.returncode != 0 and "KeyboardInterrupt" in stderr
        time.sleep(0.3)
        assert ignoring.poll() is None
    finally:
        for process in (ignoring, interruptible):
            process.kill()
            process.communicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_restore_stop_signals_lets_a_stop_signal_end_a_child_started_ignoring_it(
    signum: int,
) -> None:
    """A child started while this process ignores SIGTERM or SIGHUP (a run under ``nohup``)
    ends on it with the function as its `preexec_fn`, and ignores it without."""
    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        ignoring = _sleeper("ready\n")
        stoppable = _sleeper("ready\n", preexec_fn=restore_stop_signals)
    finally:
        signal.signal(signum, previous)
    try:
        for process in (ignoring, stoppable):
            assert process.stderr is not None and process.stderr.readline() == "ready\n"
            process.send_signal(signum)
        stoppable.communicate(timeout=TIMEOUT)
        assert stoppable.returncode == -signum
        time.sleep(0.3)
        assert ignoring.poll() is None
    finally:
        for process in (ignoring, stoppable):
            process.kill()
            process.communicate()
