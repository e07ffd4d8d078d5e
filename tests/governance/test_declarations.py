"""What stages declare, and the governor's shortcuts derived from it for every stage alike."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, Stage, StageContext, StageOutcome, builtin_stages
from nanobot_core.governance.messages import STRUCTURAL_KEYS, any_text_passes, with_changes
from nanobot_core.governance.stage import WORK_KINDS
from nanobot_core.governance.stages import BUILTIN_ORDER, BUILTIN_TABLE, sanitize_content
from nanobot_core.governance.survey import KIND_BITS
from tests.governance.builders import (
    DROPPED_BETWEEN_USER_MESSAGES,
    call,
    calls,
    result,
    say,
    turn,
    user,
)

LONE = "half an emoji \ud83d"


def _governor(*extra: Stage, **config: Any) -> Governor:
    return Governor([*builtin_stages(), *extra], config=GovernanceConfig(**config))


def test_every_kind_of_work_has_its_survey_bits() -> None:
    """The documented kinds and the bits the governor tests are the same set."""
    assert set(WORK_KINDS) == set(KIND_BITS)
    assert len(set(KIND_BITS.values())) == len(KIND_BITS)


def test_an_unknown_kind_of_work_is_refused_by_name() -> None:
    """A typo in `acts_on` is an error naming the kind and the valid ones."""
    with pytest.raises(ValueError, match=r"'dirty'.*dirty_text"):
        Stage("typo", lambda m, c: m, acts_on=("dirty",))


def test_the_table_gives_the_order_and_the_declarations() -> None:
    """The default order is the table's, and every built-in declares its work."""
    assert [s.name for s in builtin_stages()] == list(BUILTIN_ORDER)
    assert all(row.stage.acts_on for row in BUILTIN_TABLE)
    assert [row.stage.name for row in BUILTIN_TABLE if row.final][-1] == "snip_history"


def test_a_declared_stage_is_skipped_when_its_work_is_absent() -> None:
    """Never called on a history without its kind of work, called when it is there."""
    calls_seen: list[int] = []

    def watch(messages: list[Any], ctx: StageContext) -> StageOutcome:
        calls_seen.append(len(messages))
        return StageOutcome.unchanged(messages)

    stage = Stage("watch", watch, acts_on=("dirty_text",))
    governor = _governor(stage, disabled=["sanitize_content"])  # which would fix it first
    clean = [*turn(1), *turn(2)]
    assert governor.govern(clean).messages is clean
    governor.govern([*clean, result("x", ""), user()])  # a defect, but not its kind
    assert calls_seen == []
    governor.govern([*clean, user(LONE)])
    assert calls_seen == [len(clean) + 1]


def test_a_stage_that_declares_nothing_runs_every_time() -> None:
    """Without declarations a stage is run on the whole history, clean or not."""
    seen: list[int] = []

    def watch(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(len(messages))
        return StageOutcome.unchanged(messages)

    clean = [*turn(1), *turn(2)]
    result_ = _governor(Stage("watch", watch)).govern(clean)
    assert seen == [len(clean)]
    assert result_.messages is clean


def test_widening_options_make_a_declared_stage_run() -> None:
    """With an option named in `widened_by` configured, the stage runs on a clean history."""
    seen: list[int] = []

    def watch(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(len(messages))
        return StageOutcome.unchanged(messages)

    stage = Stage("watch", watch, acts_on=("placeholders",), widened_by=("extra",))
    clean = [*turn(1)]
    _governor(stage).govern(clean)
    assert seen == []
    _governor(stage, stages={"watch": {"extra": ["x"]}}).govern(clean)
    assert seen == [len(clean)]


def _loud(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Per message: uppercases user text, editing the message it is handed in place."""
    (message,) = messages
    if message.get("role") == "user" and isinstance(message.get("content"), str):
        message["content"] = message["content"].upper()
        return StageOutcome(messages, changed=True, details=["messages[0]: shouted"])
    return StageOutcome.unchanged(messages)


def test_a_per_message_stage_gets_a_copy_of_its_one_message() -> None:
    """It edits what it is handed in place: the caller's history is untouched."""
    history = [*turn(1), user("again")]
    snapshot = copy.deepcopy(history)
    governed = _governor(Stage("loud", _loud, per_message=True)).govern(history)
    assert history == snapshot
    assert [m["content"] for m in governed.messages if m["role"] == "user"] == [
        "QUESTION 1",
        "AGAIN",
    ]
    entry = governed.report.entry("loud")
    assert entry is not None and entry.details == ["messages[0]: shouted", "messages[4]: shouted"]
    assert governed.messages[1] is history[1]  # what it kept is the caller's own dict


def test_a_per_message_stage_is_remembered_per_message_across_calls() -> None:
    """A message seen in an earlier call is not handed to the stage again."""
    seen: list[Any] = []

    def note(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(messages[0].get("content"))
        return StageOutcome.unchanged(messages)

    governor = _governor(Stage("note", note, per_message=True))
    history = [*turn(1)]
    governor.govern(history)
    first = len(seen)
    history += turn(2)
    governor.govern(history)
    assert first == 4 and len(seen) == 8 and seen[4:] == [m["content"] for m in turn(2)]


def test_a_per_message_stage_remembers_a_message_a_shorter_history_left_out() -> None:
    """A message absent from the last call is not handed again when it comes back."""
    seen: list[Any] = []

    def note(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(messages[0].get("content"))
        return StageOutcome.unchanged(messages)

    governor = _governor(Stage("note", note, per_message=True))
    history = [*turn(1), *turn(2)]
    governor.govern(history)
    governor.govern(history[4:])  # the first turn left out: nothing new to hand
    governor.govern(history)  # and back: every message seen already
    assert seen == [m["content"] for m in history]


@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_a_per_message_stage_memo_stays_within_twice_the_last_history(sizes: list[int]) -> None:
    """Whatever histories come in turn, the memo holds at most twice the last one's messages."""
    governor = _governor(Stage("quiet", lambda m, c: StageOutcome.unchanged(m), per_message=True))
    for number, size in enumerate(sizes):
        # Fresh messages every call: nothing a later call hands is remembered already.
        history = [user(f"question {number}.{index}") for index in range(size)]
        governor.govern(history)
        assert len(governor._memo.get("quiet", {})) <= 2 * len(history)


def test_a_per_message_stage_runs_only_where_its_work_is() -> None:
    """Declaring per-message work, it is handed only the messages that have it."""
    seen: list[Any] = []

    def fix(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(messages[0]["content"])
        return sanitize_content(messages, ctx)

    stage = Stage("fix", fix, acts_on=("dirty_text",), per_message=True)
    history = [*turn(1), user(LONE), say("fine")]
    governed = _governor(stage, disabled=["sanitize_content"]).govern(history)
    assert seen == [LONE]
    entry = governed.report.entry("fix")
    assert entry is not None and entry.changed and entry.details[0].startswith("messages[4]")


def test_an_undeclared_whole_list_stage_that_mutates_cannot_reach_the_caller() -> None:
    """It reads copies: editing them in place is harmless, and what it left alone is shared."""

    def vandal(messages: list[Any], ctx: StageContext) -> StageOutcome:
        for message in messages:
            if message.get("role") == "user":
                message["content"] = "vandalised"
        return StageOutcome(messages, changed=True)

    history = [*turn(1), user(LONE)]
    snapshot = copy.deepcopy(history)
    governed = _governor(Stage("vandal", vandal)).govern(history)
    assert history == snapshot
    assert [m["content"] for m in governed.messages if m["role"] == "user"] == ["vandalised"] * 2
    assert governed.messages[1] is history[1]  # what it left alone is shared, not copied


def test_an_undeclared_stage_that_reads_nothing_is_handed_no_copy() -> None:
    """A stage that hands its list on unread costs no copy of any message."""
    handed: list[Any] = []

    def idle(messages: list[Any], ctx: StageContext) -> StageOutcome:
        handed.append(messages)
        return StageOutcome(messages, changed=True)

    history = [*turn(1), *turn(2)]
    governed = _governor(Stage("idle", idle)).govern(history)
    assert governed.messages is history
    assert not handed[0].given


def test_an_undeclared_stage_that_moves_messages_still_reads_copies() -> None:
    """Inserting before reading shifts positions; what it then reads is still a copy."""

    def shift(messages: list[Any], ctx: StageContext) -> StageOutcome:
        messages.insert(0, {"role": "user", "content": "first"})
        messages[1]["content"] = "changed"
        messages.pop()["content"] = "popped"
        return StageOutcome(messages, changed=True)

    history = [*turn(1)]
    snapshot = copy.deepcopy(history)
    _governor(Stage("shift", shift)).govern(history)
    assert history == snapshot


def test_a_renamed_copy_of_a_builtin_does_what_the_builtin_does() -> None:
    """The same function with the same declarations, under another name, gives the same result."""
    row = next(r for r in BUILTIN_TABLE if r.stage.name == "sanitize_content")
    twin = Stage(
        "sanitize_twin",
        row.stage.func,
        phase="repair",
        after="backfill_results",
        acts_on=row.stage.acts_on,
        per_message=row.stage.per_message,
    )
    history = [*turn(1), calls(call("a")), result("a", "  "), user(LONE)]
    builtin = _governor().govern(history)
    copied = _governor(twin, disabled=["sanitize_content"]).govern(history)
    assert copied.messages == builtin.messages
    mine, theirs = copied.report.entry("sanitize_twin"), builtin.report.entry("sanitize_content")
    assert mine is not None and theirs is not None
    assert (mine.changed, mine.details) == (theirs.changed, theirs.details)


def test_a_stage_handing_back_a_renamed_dict_is_a_change() -> None:
    """A new dict that differs from its original is taken, the rest stays shared."""

    def rename(messages: list[Any], ctx: StageContext) -> StageOutcome:
        return StageOutcome(
            [with_changes(m, content="x") if m.get("role") == "user" else m for m in messages],
            changed=True,
        )

    history = [*turn(1)]
    governed = _governor(Stage("rename", rename)).govern(history)
    assert governed.messages[0]["content"] == "x"
    assert all(a is b for a, b in zip(governed.messages[1:], history[1:], strict=True))


def _watched_stray_repair(seen: list[int]) -> Stage:
    """A local repair stage in front of the built-ins that drops stray results, counted."""

    def drop_strays(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(len(messages))
        strays = {index for index, _ in ctx.survey(messages).strays}
        if not strays:
            return StageOutcome.unchanged(messages)
        kept = [m for i, m in enumerate(messages) if i not in strays]
        return StageOutcome(kept, changed=True, details=[f"dropped {len(strays)}"])

    return Stage(
        "drop_strays",
        drop_strays,
        phase="repair",
        before="strip_placeholders",
        acts_on="stray_results",
        local=True,
    )


def _first(stage: Stage) -> Governor:
    """The built-ins with `stage` placed first."""
    governor = _governor(stage)
    assert governor.stage_names()[0] == stage.name
    return governor


def test_a_local_stage_is_not_run_again_for_what_was_governed_before() -> None:
    """Appending messages without work reuses its outcome; appending work runs it again."""
    seen: list[int] = []
    governor = _first(_watched_stray_repair(seen))
    history = [user(), result("ghost", "stray"), *turn(1)]
    first = governor.govern(history)
    assert seen == [len(history)]
    assert first.report.entry("drop_strays").changed  # type: ignore[union-attr]
    grown = [*history, *turn(2)]
    second = governor.govern(grown)
    assert seen == [len(history)]  # reused: the turn appended has no work
    assert second.report.entry("drop_strays").details == ["dropped 1"]  # type: ignore[union-attr]
    fresh = _first(_watched_stray_repair([]))
    assert second.messages == fresh.govern(grown).messages
    with_work = [*grown, result("ghost2", "another stray"), user("go on")]
    third = governor.govern(with_work)
    assert len(seen) == 2  # the stray appended is work: it ran again
    assert third.messages == _first(_watched_stray_repair([])).govern(with_work).messages


def test_an_appended_call_named_by_an_old_stray_result_is_not_reused_past() -> None:
    """A result before its call: once the call comes, the stages see the history anew."""
    seen: list[int] = []
    governor = _first(_watched_stray_repair(seen))
    history = [user(), say(), result("late", "early answer"), *turn(1)]
    governor.govern(history)
    grown = [*history, calls(call("late")), result("late", "answer"), user("more")]
    assert (
        governor.govern(grown).messages == _first(_watched_stray_repair([])).govern(grown).messages
    )
    assert len(seen) == 2


def test_user_messages_in_a_row_appended_after_earlier_ones_are_merged_by_the_repairs() -> None:
    """A second pair of user messages, appended whole, is merged like the first, not left over."""
    history = [user("first ask"), user("second ask"), *turn(1)]
    governor = _governor()
    governor.govern(history)
    grown = [*history, user("third ask"), user("fourth ask"), *turn(2)]
    second = governor.govern(grown)
    fresh = _governor().govern(grown)
    assert second.messages == fresh.messages
    merged = second.report.entry("merge_user_turns")
    assert merged is not None and len(merged.details) == 2
    final = second.report.entry("final")
    assert final is not None and not final.changed


@pytest.mark.parametrize("between", DROPPED_BETWEEN_USER_MESSAGES)
def test_a_user_message_appended_after_one_a_repair_left_last_is_merged_with_it(
    between: Any,
) -> None:
    """The last call's history ended on a user message and an entry a repair drops: the user
    message appended next follows that one in what the local stages made of it, so they are
    merged as on a fresh governor, and a request that fits merged is sent whole."""
    history = [message for index in range(20) for message in turn(index)]
    history += [user("first ask"), between]
    grown = [*history, user("second ask")]
    limit = _governor().govern(grown).tokens  # merged, within a few tokens of the budget
    fresh = _governor(input_limit=limit).govern(grown)
    assert fresh.messages[-1]["content"] == "first ask\n\nsecond ask"
    assert len(fresh.messages) == len(grown) - 2 and fresh.fits
    governor = _governor(input_limit=limit)
    governor.govern(history)
    again = governor.govern(grown)
    assert again.messages == fresh.messages
    assert (again.tokens, again.fits) == (fresh.tokens, True)


def test_offloading_is_remembered_per_result_and_exclude_tools_reads_the_call(
    tmp_path: Any,
) -> None:
    """The offloaded copy is the same object on the next call; an excluded tool stays whole."""
    big = "line of output\n" * 2_000
    history = [user(), calls(call("c1", "read_file")), result("c1", big), say()]
    governor = Governor(builtin_stages(), config=GovernanceConfig(), workspace=tmp_path)
    first = governor.govern(history).messages[2]
    assert first["content"].startswith("[Tool result saved to a file")
    assert governor.govern([*history, user("again")]).messages[2] is first
    excluded = GovernanceConfig(stages={"offload_results": {"exclude_tools": ["read_file"]}})
    kept = Governor(builtin_stages(), config=excluded, workspace=tmp_path).govern(history)
    assert kept.messages[2]["content"] == big


def _without_secret(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("SECRET", "[gone]")
    if isinstance(value, dict):
        return {key: _without_secret(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_secret(item) for item in value]
    return value


def _marked(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Per message: replaces SECRET wherever it is in a text, as a redaction stage would."""
    (message,) = messages
    cleaned = _without_secret(message)
    if cleaned == message:
        return StageOutcome.unchanged(messages)
    return StageOutcome([cleaned], changed=True, details=["messages[0]: SECRET removed"])


def _secretive() -> list[Any]:
    """A history with SECRET in a user text, call arguments, a result and an image URL."""
    image = {"type": "image_url", "image_url": {"url": "https://x.test/a?k=SECRET"}}
    return [
        user("question 1"),
        calls(call("call_1", "lookup", '{"token": "SECRET"}')),
        result("call_1", "ok"),
        say("answer 1"),
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
        say("seen"),
        user("my SECRET is out"),
        calls(call("call_2", "lookup", '{"n": 2}')),
        result("call_2", "the SECRET again"),
        say("done"),
    ]


def test_a_prefilter_spares_the_stage_the_messages_it_rules_out() -> None:
    """The stage is called only where a text passes; the result is the same as without it."""
    handed: list[Any] = []

    def marked(messages: list[Any], ctx: StageContext) -> StageOutcome:
        handed.append(messages[0])
        return _marked(messages, ctx)

    history = _secretive()
    snapshot = copy.deepcopy(history)
    with_filter = Stage("marked", marked, per_message=True, prefilter=lambda t: "SECRET" in t)
    without = Stage("marked", _marked, per_message=True)
    filtered, plain = _governor(with_filter).govern(history), _governor(without).govern(history)
    assert filtered.messages == plain.messages
    assert filtered.report.entry("marked") == plain.report.entry("marked")
    assert history == snapshot
    assert [m.get("role") for m in handed] == ["assistant", "user", "user", "tool"]
    assert all("SECRET" in repr(m) for m in handed)
    assert filtered.messages[0] is history[0]  # spared: the caller's own dict, no copy


def test_a_prefilter_is_asked_of_texts_only_never_of_roles_ids_or_names() -> None:
    """Roles, types, names and ids are not texts a stage acts on: the test never sees them."""
    asked: list[str] = []

    def note(text: str) -> bool:
        asked.append(text)
        return False

    stage = Stage("quiet", lambda m, c: StageOutcome.unchanged(m), per_message=True, prefilter=note)
    _governor(stage).govern(_secretive())
    assert asked and not {"user", "assistant", "tool", "function", "text", "image_url"} & set(asked)
    assert not {"call_1", "call_2", "lookup"} & set(asked)
    assert '{"token": "SECRET"}' in asked and "https://x.test/a?k=SECRET" in asked


def test_a_prefilter_that_raises_skips_its_stage_and_says_why() -> None:
    """An error in the test is the stage's failure: skipped for that call, named in the report."""

    def broken(text: str) -> bool:
        raise RuntimeError("no patterns loaded")

    history = _secretive()
    snapshot = copy.deepcopy(history)
    stage = Stage("marked", _marked, per_message=True, prefilter=broken)
    governed = _governor(stage).govern(history)
    entry = governed.report.entry("marked")
    assert entry is not None and not entry.changed
    assert entry.details == [
        "skipped: the stage's prefilter raised RuntimeError: no patterns loaded"
    ]
    assert history == snapshot


def test_a_prefilter_needs_a_per_message_stage_and_must_be_callable() -> None:
    """Declared on a whole-list stage it is refused by name; a non-callable is refused too."""
    with pytest.raises(ValueError, match="'whole': a prefilter needs per_message=True"):
        Stage("whole", lambda m, c: m, prefilter=lambda t: True)
    with pytest.raises(TypeError, match="prefilter must be callable"):
        Stage("odd", lambda m, c: m, per_message=True, prefilter="SECRET")  # type: ignore[arg-type]


_TEXT = st.text(alphabet="ab0 ", max_size=6)  # small: a needle is often there, often not
_KEYS = st.sampled_from(
    [
        *("role", "id", "name", "type", "content", "tool_calls", "function", "arguments"),
        *("note", "reasoning_content"),
    ]
)
_LEAF = st.one_of(_TEXT, st.none(), st.integers(), st.booleans(), st.just(("opaque",)))
_VALUE = st.recursive(
    _LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4)
)
_CALL = st.fixed_dictionaries(
    {"id": _TEXT, "type": st.just("function")},
    optional={
        "function": st.fixed_dictionaries(
            {"name": _TEXT},
            optional={"arguments": _TEXT | _VALUE, "note": _VALUE},
        ),
        "note": _VALUE,
    },
)
_CALLING_MESSAGE = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "tool_calls": st.lists(_CALL, max_size=3) | _VALUE,
        "content": _TEXT | _VALUE,
        "name": _TEXT,
        "reasoning_content": _TEXT | _VALUE,
    },
)


def _any_text_passes(value: Any, test: Any) -> bool:
    """What `any_text_passes` is documented to do, written out plainly."""
    if isinstance(value, str):
        return bool(test(value))
    if isinstance(value, dict):
        return any(_any_text_passes(v, test) for k, v in value.items() if k not in STRUCTURAL_KEYS)
    if isinstance(value, list):
        return any(_any_text_passes(item, test) for item in value)
    return not (value is None or isinstance(value, int | float))


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.one_of(_CALLING_MESSAGE, _VALUE), st.sampled_from(["", "a", "0", "ab"]))
def test_any_text_passes_asks_of_exactly_the_texts_outside_structure(
    message: Any, needle: str
) -> None:
    """Whatever the shape (calls of the usual shape or not), the answer is the plain walk's."""
    asked: list[str] = []

    def test(text: str) -> bool:
        asked.append(text)
        return needle in text if needle else False

    assert any_text_passes(message, test) == _any_text_passes(
        message, lambda t: needle and needle in t
    )
    assert set(asked) <= set(_texts(message))


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() if k not in STRUCTURAL_KEYS for t in _texts(v)]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    return []
