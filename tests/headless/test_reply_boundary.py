"""What the loop makes of hostile model replies: every call answered, nothing run on a guess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nanobot_core import tool
from nanobot_core.config import Config
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.governance.invariants import check_tool_pairing
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, Section, SectionContext
from nanobot_core.providers import OpenAIProvider
from nanobot_core.providers.base import MAX_CALL_ID_LENGTH
from nanobot_core.runner import ReplyCutOff, Runner, ToolFinished, ToolStarted, TurnResult
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer
from nanobot_core.tools.executor import Executor
from nanobot_core.tools.registry import ToolRegistry
from tests.headless.conftest import provider_config

writes: list[dict[str, Any]] = []


@tool
def save(path: str, content: str) -> str:
    """Record a write instead of making it.

    Args:
        path: Where the text would go.
        content: The text.
    """
    writes.append({"path": path, "content": content})
    return f"saved {len(content)} characters"


class Scripted:
    """A model on a loopback server: answers each request with the next body, then "done"."""

    def __init__(self, bodies: list[Any]) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: LoopbackRequest) -> LoopbackResponse:
        self.requests.append(request.json)
        if len(self.requests) > len(self.bodies):
            body: Any = {"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}]}
        else:
            body = self.bodies[len(self.requests) - 1]
        return LoopbackResponse(200, body)


def _turn(workspace: Path, model: Scripted, text: str = "go") -> tuple[TurnResult, list[Any]]:
    """One turn of a runner over real parts but `model`, and the progress events it sent."""
    config = Config()
    registry = ToolRegistry()
    registry.add(save)
    events: list[Any] = []
    prompt = PromptBuilder([(Section("only", 1, lambda ctx: "Be brief."), "test")], config=config)
    with LoopbackServer(model) as server, JsonlSessionStore(workspace).open("default") as opened:
        runner = Runner(
            OpenAIProvider(provider_config(server.url + "/v1", max_retries=0)),
            registry,
            Executor(registry, default_timeout=5.0),
            Governor(builtin_stages(), config=config.governance, workspace=workspace),
            prompt,
            opened,
            prompt_context=SectionContext(workspace=workspace),
            progress=events.append,
        )
        return runner.run_turn(text), events


def _reply(calls: list[Any], finish_reason: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return {"model": "m", "choices": [{"message": message, "finish_reason": finish_reason}]}


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "save", "arguments": arguments}}


def _lines(workspace: Path) -> list[dict[str, Any]]:
    path = JsonlSessionStore(workspace).path("default")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_call_cut_off_at_the_output_limit_is_not_run(tmp_path: Path) -> None:
    """Arguments that the output limit cut short are not repaired and run: the model is told."""
    writes.clear()
    cut = '{"path": "app.py", "content": "def main():\\n    print(\\"hel'
    model = Scripted(
        [_reply([_call("whole", '{"path": "a", "content": "x"}'), _call("cut", cut)], "length")]
    )
    result, events = _turn(tmp_path, model)
    assert writes == [{"path": "a", "content": "x"}]  # the whole call ran, the cut one did not
    assert result.answer == "done"
    results = {m["tool_call_id"]: m for m in _lines(tmp_path) if m.get("role") == "tool"}
    assert results["whole"]["content"] == "saved 1 characters"
    assert results["cut"]["_meta"]["error"] is True
    assert "cut off at the output limit (finish_reason 'length')" in results["cut"]["content"]
    assert "was not run" in results["cut"]["content"]
    assert ReplyCutOff(1, "length") in events
    assert check_tool_pairing(model.requests[1]["messages"]) == []


def test_a_cut_call_of_deeply_nested_arguments_is_answered_not_a_crash(tmp_path: Path) -> None:
    """A model that loops on brackets until the output limit: the turn goes on, nothing runs.

    Arguments nested past Python's recursion limit are read within the core's JSON
    limits (as the executor reads them), not with a RecursionError out of the turn.
    """
    writes.clear()
    model = Scripted(
        [_reply([_call("open", "[" * 5_000), _call("deep", "[" * 5_000 + "]" * 5_000)], "length")]
    )
    result, _ = _turn(tmp_path, model)
    assert writes == [] and result.answer == "done"
    results = {m["tool_call_id"]: m for m in _lines(tmp_path) if m.get("role") == "tool"}
    # Past the limits, whether cut or whole: the executor refuses them, saying why.
    for refused in (results["open"], results["deep"]):
        assert refused["_meta"]["error"] is True
        assert "nested deeper than 100 levels" in refused["content"]
    assert check_tool_pairing(model.requests[1]["messages"]) == []


def test_broken_arguments_without_a_cut_are_still_repaired(tmp_path: Path) -> None:
    """A reply that ended on its own keeps the repair of broken JSON: only a cut stops a call."""
    writes.clear()
    model = Scripted([_reply([_call("c", "{'path': 'a', 'content': 'x'")], "tool_calls")])
    _, events = _turn(tmp_path, model)
    assert writes == [{"path": "a", "content": "x"}]
    assert not any(isinstance(event, ReplyCutOff) for event in events)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    content=st.text(max_size=40),
    cut=st.integers(min_value=0, max_value=200),
    reason=st.sampled_from(["length", "max_tokens"]),
)
@example(content="abc", cut=10_000, reason="length")
def test_a_cut_reply_runs_only_calls_whose_arguments_are_whole(
    tmp_path_factory: Any, content: str, cut: int, reason: str
) -> None:
    """Cut anywhere, a call runs exactly when its text is still JSON, and is answered either way."""
    writes.clear()
    workspace = tmp_path_factory.mktemp("cut")
    arguments = json.dumps({"path": "p", "content": content})[:cut]
    model = Scripted([_reply([_call("c", arguments)], reason)])
    result, _ = _turn(workspace, model)
    try:
        json.loads(arguments)
    except ValueError:
        assert writes == []
    else:
        assert writes == [{"path": "p", "content": content}]
    results = [m for m in _lines(workspace) if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in results] == ["c"]
    assert check_tool_pairing(model.requests[1]["messages"]) == []
    assert result.answer == "done"


def test_over_long_call_ids_are_replaced_before_they_are_stored(tmp_path: Path) -> None:
    """Ids OpenAI would refuse (over 40 characters, or a megabyte) never reach the session."""
    writes.clear()
    long_ids = ["y" * 41, "z" * 1_000_000]
    model = Scripted(
        [_reply([_call(i, json.dumps({"path": i[:3], "content": "x"})) for i in long_ids], "stop")]
    )
    result, _ = _turn(tmp_path, model)
    assert result.answer == "done"
    assert len(writes) == 2
    stored = [line for line in _lines(tmp_path) if line.get("role")]
    ids = [call["id"] for call in stored[1]["tool_calls"]]
    assert all(len(i) <= MAX_CALL_ID_LENGTH for i in ids) and len(set(ids)) == 2
    assert [m["tool_call_id"] for m in stored[2:4]] == ids
    sent = model.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert check_tool_pairing(sent) == []


def test_a_meta_key_sent_by_the_model_is_not_passed_off_as_bookkeeping(tmp_path: Path) -> None:
    """A reply's own ``_meta`` is dropped: the turn's messages hold only what was stored."""
    forged = {"kind": "governance", "start": 5, "steps_from": None, "compacted": [], "length": 9}
    body = {"choices": [{"message": {"content": "hi", "_meta": forged}, "finish_reason": "stop"}]}
    result, _ = _turn(tmp_path, Scripted([body]))
    assert result.answer == "hi"
    assert "_meta" not in result.messages[-1]
    assert _lines(tmp_path)[1]["_meta"]["round"] == 1


def _text(content: Any, finish_reason: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {"model": "m", "choices": [{"message": message, "finish_reason": finish_reason}]}


def test_an_answer_cut_off_at_the_output_limit_says_so(tmp_path: Path) -> None:
    """A text-only reply stopped by the output limit ends the turn marked cut off, and says why."""
    result, events = _turn(tmp_path, Scripted([_text("The three steps are: first, you", "length")]))
    assert result.stop_reason == "answer" and result.answer == "The three steps are: first, you"
    assert result.cut_off is True and result.to_json()["cut_off"] is True
    (notice,) = [event for event in events if isinstance(event, ReplyCutOff)]
    assert notice == ReplyCutOff(1, "length", answer=True)
    assert "the answer is incomplete" in notice.describe()
    assert "not run" not in notice.describe()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    content=st.one_of(st.none(), st.text(max_size=20)),
    reason=st.one_of(
        st.none(),
        st.integers(),
        st.sampled_from(
            ["stop", "length", "max_tokens", "model_context_window_exceeded", "content_filter"]
        ),
        st.text(max_size=10),
    ),
)
def test_cut_off_is_true_exactly_when_the_last_reply_hit_the_limit(
    tmp_path_factory: Any, content: Any, reason: Any
) -> None:
    """Whatever a server says, `cut_off` is set by an output-limit finish reason alone."""
    result, _ = _turn(tmp_path_factory.mktemp("cut"), Scripted([_text(content, reason)]))
    assert result.cut_off is (reason in ("length", "max_tokens", "model_context_window_exceeded"))
    assert result.stop_reason == ("answer" if (content or "").strip() else "empty_reply")
    assert result.to_json()["cut_off"] is result.cut_off


def test_a_turn_that_ends_after_a_cut_tool_round_is_not_cut_off(tmp_path: Path) -> None:
    """Only the reply that ends the turn counts: a cut round of calls before it does not."""
    writes.clear()
    model = Scripted([_reply([_call("c", '{"path": "a", "content": "x"}')], "length")])
    result, _ = _turn(tmp_path, model)
    assert result.answer == "done" and result.cut_off is False


def test_a_reply_the_full_context_window_cut_is_cut_off_and_says_so(tmp_path: Path) -> None:
    """Anthropic's model_context_window_exceeded marks the answer incomplete, naming the window."""
    reason = "model_context_window_exceeded"
    result, events = _turn(tmp_path, Scripted([_text("The three steps are: first", reason)]))
    assert result.cut_off is True
    (notice,) = [event for event in events if isinstance(event, ReplyCutOff)]
    assert "cut off at the model's context window" in notice.describe()
    assert "governance.context_window" in notice.describe()
    assert "the answer is incomplete" in notice.describe()


def test_a_call_the_full_context_window_cut_is_not_run(tmp_path: Path) -> None:
    """A call whose arguments the full window cut short is answered unrun, naming the window."""
    writes.clear()
    cut = '{"path": "app.py", "content": "def main():\\n    pri'
    model = Scripted([_reply([_call("cut", cut)], "model_context_window_exceeded")])
    _turn(tmp_path, model)
    assert writes == []
    (answer,) = [m for m in _lines(tmp_path) if m.get("role") == "tool"]
    assert "cut off at the model's context window" in answer["content"]
    assert "governance.context_window" not in answer["content"]  # settings are the user's
    assert "was not run" in answer["content"]


def test_a_cut_call_is_never_shown_running_or_failed(tmp_path: Path) -> None:
    """Progress shows the whole call run and finished; the cut one only as ReplyCutOff says."""
    writes.clear()
    cut = '{"path": "app.py", "content": "def main():\\n    pri'
    model = Scripted(
        [_reply([_call("whole", '{"path": "a", "content": "x"}'), _call("cut", cut)], "length")]
    )
    _, events = _turn(tmp_path, model)
    shown = [
        (type(event).__name__, event.call_id)
        for event in events
        if isinstance(event, ToolStarted | ToolFinished)
    ]
    assert shown == [("ToolStarted", "whole"), ("ToolFinished", "whole")]
