"""Single-task agents: one user message (the task), then many steps, under a tight budget.

The cut falls between steps (an assistant message and all its results): the
task is kept with a notice of how many steps were left out, then the newest
steps that fit. Tested on synthetic histories and on real OpenHands and
SWE-agent trajectories from tests/data.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages import snip_history
from nanobot_core.governance.stages.snip import NARROW_LABEL, left_out_steps
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import call, calls, context, result, run_pure, say, system, user
from tests.governance.strategies import build_builtin_governor
from tests.governance.test_data_shapes import in_openai_shape, swe_agent_histories
from tests.helpers import data_dir

TASK = "Fix the failing test in src/app.py and tell me what was wrong."


def _task_with_steps(count: int, size: int = 1_200) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [system(), user(TASK)]
    for index in range(count):
        history += [calls(call(f"c{index}")), result(f"c{index}", f"{index}:" + "o" * size)]
    return history


def _roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


def test_the_task_and_the_newest_steps_that_fit_are_kept() -> None:
    """One task and 40 steps over budget: the task, a notice and the newest steps stay."""
    history = _task_with_steps(40)
    budget = 4_000
    outcome = run_pure(snip_history, history, context(budget=budget))
    kept = outcome.messages
    assert kept[0] is history[0]
    assert kept[1]["role"] == "user" and kept[1]["content"].startswith(TASK)
    steps = (len(kept) - 2) // 2
    assert 2 <= steps < 40
    assert kept[2:] == history[len(history) - 2 * steps :]
    assert left_out_steps(kept[1]) == 40 - steps
    assert f"[{40 - steps} earlier steps of this task were left out" in kept[1]["content"]
    assert count_request(None, kept) <= int(budget * 0.7)
    assert check_invariants(kept, budget=budget) == []
    assert not any(a == b == "user" for a, b in zip(_roles(kept), _roles(kept)[1:], strict=False))


def test_a_second_cut_adds_up_the_steps_left_out() -> None:
    """Cutting a cut history again counts every step left out in one notice."""
    budget = 4_000
    first = run_pure(snip_history, _task_with_steps(40), context(budget=budget)).messages
    grown = [*first, *_task_with_steps(20)[2:]]  # twenty more steps arrive
    second = run_pure(snip_history, grown, context(budget=budget)).messages
    kept_steps = (len(second) - 2) // 2
    assert left_out_steps(second[1]) == 60 - kept_steps
    assert second[1]["content"].count("earlier steps of this task") == 1


def test_governing_a_step_cut_again_changes_nothing() -> None:
    """The step-cut request fits, so governing it again hands it back as it is."""
    history = _task_with_steps(40)
    kept = run_pure(snip_history, history, context(budget=4_000)).messages
    assert run_pure(snip_history, kept, context(budget=4_000)).messages is kept


def test_a_result_too_big_alone_is_cut_with_a_notice_to_narrow_the_call() -> None:
    """The newest step's huge result is cut head and tail and tells the model to narrow it."""
    history = [system(), user(TASK), calls(call("a")), result("a", "HEAD" + "z" * 60_000 + "TAIL")]
    outcome = run_pure(snip_history, history, context(budget=3_000))
    kept = outcome.messages
    assert _roles(kept) == ["system", "user", "assistant", "tool"]
    text = kept[3]["content"]
    assert text.startswith("HEAD") and text.endswith("TAIL") and NARROW_LABEL in text
    assert "do not repeat the call" in text
    assert count_request(None, kept) <= 3_000


def test_when_task_and_newest_step_cannot_fit_the_task_alone_is_kept_cut() -> None:
    """Invariant 4: with no room for the newest step, only the task is kept, cut head and tail."""
    history = [system(), user("T" * 40_000), calls(call("a")), result("a", "r" * 40_000)]
    outcome = run_pure(snip_history, history, context(budget=1_000))
    assert _roles(outcome.messages) == ["system", "user"]
    assert len(outcome.messages[1]["content"]) < 40_000


def test_an_older_turn_is_still_cut_whole() -> None:
    """With several user turns, whole older turns go first; steps are cut only in the newest."""
    history = [system(), user("old"), say("done"), *_task_with_steps(3)[1:]]
    budget = count_request(None, [history[0], *history[3:]]) + 10
    kept = run_pure(snip_history, history, context(budget=budget, low_watermark=1.0)).messages
    assert kept == [history[0], *history[3:]]


# -- real trajectories -----------------------------------------------------------------


def _openhands_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenHands events as chat messages: the task, then each model response and its results."""
    messages: list[dict[str, Any]] = []
    responses: set[str] = set()
    for event in events:
        meta = event.get("tool_call_metadata")
        if event.get("source") == "user" and event.get("action") == "message":
            messages.append({"role": "user", "content": event["args"]["content"]})
        elif meta and "action" in event:
            response = meta["model_response"]
            if response["id"] not in responses:
                responses.add(response["id"])
                reply = response["choices"][0]["message"]
                messages.append(
                    {
                        "role": "assistant",
                        "content": reply.get("content") or "",
                        "tool_calls": reply["tool_calls"],
                    }
                )
        elif meta and "observation" in event:
            messages.append(
                {"role": "tool", "tool_call_id": meta["tool_call_id"], "content": event["content"]}
            )
        elif event.get("source") == "agent" and event.get("action") == "message":
            messages.append({"role": "assistant", "content": event["args"]["content"]})
    return messages


@cache
def _openhands() -> list[dict[str, Any]]:
    path = data_dir() / "openhands-event-trajectories" / "basic_gui_mode.json"
    return _openhands_messages(json.loads(path.read_text("utf-8")))


def _governed(
    history: list[dict[str, Any]], window: int, workspace: Path, disabled: tuple[str, ...] = ()
) -> Any:
    config = GovernanceConfig(
        context_window=window, max_output=0, safety_margin=0, disabled=list(disabled)
    )
    return build_builtin_governor(config, workspace).govern(history)


@pytest.mark.parametrize("window", [3_000, 2_000])
def test_openhands_trajectory_keeps_its_task_and_newest_steps(tmp_path: Path, window: int) -> None:
    """The OpenHands trajectory over a small window keeps the task and its newest steps, not 1."""
    history = _openhands()
    assert _roles(history)[:2] == ["user", "assistant"] and len(history) == 10
    assert count_request(None, history) > window  # a cut is needed
    result = _governed(history, window, tmp_path)
    sent = result.messages
    assert result.fits
    assert len(sent) > 2 and sent[0]["content"].startswith(history[0]["content"])
    assert left_out_steps(sent[0]) > 0
    assert sent[-1] == history[-1]  # the newest step is there
    assert check_invariants(sent, budget=window) == []


@pytest.mark.parametrize("trajectory", swe_agent_histories(), ids=lambda item: item[0])
def test_swe_agent_trajectory_keeps_the_task_and_steps_over_a_small_window(
    tmp_path: Path, trajectory: tuple[str, list[dict[str, Any]]]
) -> None:
    """Each SWE-agent trajectory, with room for about three steps, keeps system, task and steps."""
    history = in_openai_shape(trajectory[1])
    window = count_request(None, [*history[:2], *history[-6:]]) + 50
    assert count_request(None, history) > window
    result = _governed(history, window, tmp_path, disabled=("compact_results",))
    sent = result.messages
    assert result.fits
    assert check_invariants(sent, budget=window) == []
    assert _roles(sent)[:2] == ["system", "user"]
    assert sent[1]["content"].startswith(history[1]["content"])
    assert left_out_steps(sent[1]) > 0
    assert len(sent) > 3 and sent[-1] == history[-1]


def _one_huge_step(calls_made: int) -> list[dict[str, Any]]:
    """The task, then one reply of `calls_made` calls and their results (most refused)."""
    made = [call(f"c{i}", "list_dir") for i in range(calls_made)]
    answers = [
        result(f"c{i}", "Error: only the first 128 calls of a reply run" if i >= 128 else "a.txt")
        for i in range(calls_made)
    ]
    return [user(TASK), calls(*made), *answers]


def test_a_step_too_big_even_cut_down_leaves_the_task_saying_so(tmp_path: Path) -> None:
    """A reply of 3,000 calls cannot fit beside the task: the task stays, and its notice says
    the step was left out and to take smaller steps, so the model does not repeat it."""
    history = _one_huge_step(3_000)
    result_ = _governed(history, 4_000, tmp_path)
    (task,) = result_.messages
    assert result_.fits
    assert task["content"].startswith(TASK)
    assert left_out_steps(task) == 1
    assert task["content"].endswith(
        "[1 step of this task was left out to fit the context budget; none fitted, not even "
        "the newest cut down: take smaller steps, with fewer or narrower tool calls.]"
    )
    assert check_invariants(result_.messages, budget=4_000) == []
    again = _governed(result_.messages, 4_000, tmp_path)
    assert again.messages == result_.messages and not again.report.changed


def test_the_next_smaller_step_follows_the_task_and_the_notice_counts_the_huge_one(
    tmp_path: Path,
) -> None:
    """After the huge step, a small one is kept: the notice counts one step left out, once."""
    history = [*_one_huge_step(3_000), calls(call("small", "read_file")), result("small", "ok")]
    sent = _governed(history, 4_000, tmp_path).messages
    assert _roles(sent) == ["user", "assistant", "tool"]
    assert left_out_steps(sent[0]) == 1
    assert sent[0]["content"].count("of this task") == 1
    assert "the newest ones follow" in sent[0]["content"]
    assert sent[1:] == history[-2:]


def test_without_room_for_the_notice_the_task_alone_is_sent_and_fits(tmp_path: Path) -> None:
    """A budget that holds the task but not the notice: fitting comes first, no notice."""
    history = _one_huge_step(200)
    bare = count_request(None, history[:1])
    result_ = _governed(history, bare + 5, tmp_path)
    assert result_.fits
    assert result_.messages == history[:1]


def test_the_largest_result_of_the_newest_step_is_cut_first() -> None:
    """When the newest step must be cut down, its largest result is cut and a smaller one kept."""
    small = "s" * 2_000
    history = [
        system(),
        user(TASK),
        calls(call("a"), call("b")),
        result("a", small),
        result("b", "HEAD" + "z" * 60_000 + "TAIL"),
    ]
    kept = run_pure(snip_history, history, context(budget=3_000)).messages
    assert _roles(kept) == ["system", "user", "assistant", "tool", "tool"]
    assert kept[3]["content"] == small
    assert NARROW_LABEL in kept[4]["content"]
    assert count_request(None, kept) <= 3_000
