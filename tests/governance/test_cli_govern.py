"""``nanobot-core govern`` end to end, on the shipped wedged session."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.cli import cli
from nanobot_core.governance.continuity import GovernanceState, newer_version
from nanobot_core.governance.invariants import check_invariants
from tests.helpers import REPO_ROOT, clean_env, run_cli

EXAMPLE = REPO_ROOT / "examples" / "wedged-session.jsonl"
STAGES = [
    "strip_placeholders",
    "drop_non_messages",
    "strip_malformed_calls",
    "pair_results",
    "backfill_results",
    "sanitize_content",
    "merge_user_turns",
    "offload_results",
    "compact_results",
    "snip_history",
]


@pytest.fixture(autouse=True)
def _isolated(nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty directory, with no external plugins and no developer's settings."""
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")


def _run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["govern", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str, stdin: bytes | None = None) -> dict[str, Any]:
    code, out, err = _run(*args, "--json", stdin=stdin)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _example_lines() -> list[str]:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()


def test_shipped_example_is_healed(tmp_path: Path) -> None:
    """The wedged example comes out legal; every stage is reported; the big result is offloaded."""
    digest = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    data = _json(str(EXAMPLE), "--workspace", str(tmp_path))
    assert check_invariants(data["messages"]) == []
    assert [e["stage"] for e in data["report"]] == ["load", *STAGES, "final"]
    assert all(
        set(e) == {"stage", "changed", "details", "tokens_before", "tokens_after"}
        for e in data["report"]
    )
    changed = {e["stage"] for e in data["report"] if e["changed"]}
    assert {*STAGES[:6], "offload_results"} <= changed
    assert list((tmp_path / ".nanobot" / "cache" / "tool-results").glob("*.txt"))
    assert data["fits"] and data["tokens"] <= data["budget"]
    assert data["prefix"] == {
        "kept": True,
        "changed_at": None,
        "reason": "first request: nothing was sent before",
    }
    assert hashlib.sha256(EXAMPLE.read_bytes()).hexdigest() == digest


def test_bad_lines_are_left_out_and_named_in_a_load_entry(tmp_path: Path) -> None:
    """Lines that are not JSON are reported by file and line in a first "load" entry; exit 0."""
    session = tmp_path / "s.jsonl"
    session.write_text(
        '{"role": "user", "content": "hi"}\nnot json\n\n'
        '{"role": "assistant", "content": "ok"}\n{"trunc\n',
        encoding="utf-8",
    )
    data = _json(str(session))
    load = data["report"][0]
    assert load["stage"] == "load" and load["changed"]
    left_out = [d for d in load["details"] if "left out" in d]
    assert [d.split(": left out")[0] for d in left_out] == [f"{session}:2", f"{session}:5"]
    assert [m["content"] for m in data["messages"]] == ["hi", "ok"]


def test_json_array_and_stdin_give_the_same_result(tmp_path: Path) -> None:
    """A JSON array file, JSONL on stdin and the JSONL file itself govern alike."""
    entries = [json.loads(line) for line in _example_lines() if line.endswith("}")]
    array = tmp_path / "session.json"
    array.write_text(json.dumps(entries), encoding="utf-8")
    from_file = _json(str(EXAMPLE), "--workspace", str(tmp_path))["messages"]
    from_array = _json(str(array), "--workspace", str(tmp_path))["messages"]
    from_stdin = _json("-", "--workspace", str(tmp_path), stdin=EXAMPLE.read_bytes())["messages"]
    assert from_file == from_array == from_stdin


@pytest.mark.parametrize("target", ["missing.jsonl", "."])
def test_unreadable_input_exits_2(target: str) -> None:
    """A missing file or a directory cannot be read: exit 2 with a message on stderr."""
    code, out, err = _run(target)
    assert code == 2
    assert "cannot read" in err and out == ""


def test_output_is_written_as_jsonl(tmp_path: Path) -> None:
    """--output holds the governed messages, one per line, with no temporary file left behind."""
    output = tmp_path / "out" / "governed.jsonl"
    output.parent.mkdir()
    output.write_text("old content\n", encoding="utf-8")
    data = _json(str(EXAMPLE), "--workspace", str(tmp_path), "--output", str(output))
    written = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert written == data["messages"]
    assert [p.name for p in output.parent.iterdir()] == ["governed.jsonl"]


def test_output_may_not_overwrite_the_input(tmp_path: Path) -> None:
    """--output pointing at the input is a usage error, and the input stays as it was."""
    session = tmp_path / "s.jsonl"
    session.write_text('{"role": "assistant", "content": "x"}\n', encoding="utf-8")
    code, _out, err = _run(str(session), "--output", str(session))
    assert code == 2 and "input" in err
    assert session.read_text(encoding="utf-8") == '{"role": "assistant", "content": "x"}\n'


def test_budget_flags_override_the_config(tmp_path: Path) -> None:
    """--context-window and --max-output set the budget (minus the default safety margin)."""
    data = _json(
        str(EXAMPLE),
        "--workspace",
        str(tmp_path),
        "--context-window",
        "5000",
        "--max-output",
        "1000",
    )
    assert data["budget"] == 5000 - 1000 - 1024
    assert data["tokens"] <= data["budget"]


def test_readable_summary_names_every_stage(tmp_path: Path) -> None:
    """Without --json: one line per stage, the details under it, and a verdict."""
    code, out, _err = _run(str(EXAMPLE), "--workspace", str(tmp_path))
    assert code == 0
    for name in ["load", *STAGES, "final"]:
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert f"{EXAMPLE}:14: left out" in out  # the file and line, as an editor opens them
    assert "fits" in out.splitlines()[-2]


def test_the_installed_command_runs_the_quick_start(tmp_path: Path) -> None:
    """`python -m nanobot_core govern examples/wedged-session.jsonl` works from a fresh process."""
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "govern", str(EXAMPLE), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert check_invariants(json.loads(done.stdout)["messages"]) == []


def test_a_request_that_does_not_fit_is_a_warning_on_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A last user message bigger than the budget: exit 0, JSON on stdout, a warning on stderr."""
    monkeypatch.setenv("NANOBOT_GOVERNANCE__INPUT_LIMIT", "50")
    history = json.dumps([{"role": "user", "content": "word " * 2_000}]).encode()
    code, out, err = _run("-", "--json", stdin=history)
    assert code == 0, err
    assert json.loads(out)["fits"] is False
    assert "warning: the request takes" in err and "input budget of 50" in err
    monkeypatch.delenv("NANOBOT_GOVERNANCE__INPUT_LIMIT")
    code, _out, err = _run("-", "--json", stdin=history)
    assert code == 0 and "warning" not in err


def _govern_process(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m nanobot_core govern -` on an empty history, in a fresh process."""
    return run_cli("govern", "-", cwd=cwd, env=clean_env(**env), stdin="[]", timeout=120)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "kep = 3",
            "governance.stages.compact_results.kep: unknown option of stage 'compact_results'",
        ),
        (
            'exclude_tools = "read_file"',
            "governance.stages.compact_results.exclude_tools: expected a list of strings",
        ),
        ("keep = -1", "governance.stages.compact_results.keep: must be at least 0, got -1"),
    ],
)
def test_a_bad_stage_option_exits_2_naming_the_key(
    tmp_path: Path, table: str, message: str
) -> None:
    """A typo, a string for a list or a negative count in a stage's table: exit 2, no traceback."""
    (tmp_path / "nanobot.toml").write_text(
        f"[governance.stages.compact_results]\n{table}\n", encoding="utf-8"
    )
    done = _govern_process(tmp_path, NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert done.returncode == 2, done.stderr
    source = tmp_path / "nanobot.toml"
    assert done.stderr.startswith(f"Error: configuration: {source}: {message}")
    assert "(built-in plugin 'builtin:governance' from nanobot-core " in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_bad_stage_option_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    """A negative count a variable sets over a file's good one names that variable."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance.stages.compact_results]\nkeep = 2\n", encoding="utf-8"
    )
    done = _govern_process(
        tmp_path,
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_GOVERNANCE__STAGES__COMPACT_RESULTS__KEEP="-1",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "Error: configuration: environment variable "
        "NANOBOT_GOVERNANCE__STAGES__COMPACT_RESULTS__KEEP: "
        "governance.stages.compact_results.keep: must be at least 0, got -1"
    )
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_bad_stage_option_names_the_file_that_set_it_not_a_later_source(
    tmp_path: Path,
) -> None:
    """A file's typo is named by the file though the environment sets another key of the table."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance.stages.compact_results]\nkep = 3\n", encoding="utf-8"
    )
    done = _govern_process(
        tmp_path,
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_GOVERNANCE__STAGES__COMPACT_RESULTS__KEEP="2",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"Error: configuration: {tmp_path / 'nanobot.toml'}: "
        "governance.stages.compact_results.kep: unknown option"
    )


@pytest.mark.parametrize(("command", "code"), [("plugins", 2), ("tools", 0)])
def test_a_bad_stage_option_stops_the_commands_that_build_a_governor(
    tmp_path: Path, command: str, code: int
) -> None:
    """`plugins` builds a governor and exits 2 on a bad stage table; `tools` builds none."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance.stages.compact_results]\nkep = 3\n", encoding="utf-8"
    )
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    done = run_cli(command, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == code, done.stderr


NOTES_PLUGIN = '''
from nanobot_core import Stage, StageOption, StageOutcome, hookimpl


def find_notes(messages, ctx):
    """Hand the history on as it is."""
    return StageOutcome.unchanged(messages)


@hookimpl
def nanobot_governance_stages(ctx):
    level = StageOption(int, "how many passes", at_least=1)
    return [Stage("find_notes", find_notes, options={"level": level})]
'''


def test_a_plugin_stage_with_a_bad_option_exits_2_naming_the_plugin(tmp_path: Path) -> None:
    """An installed plugin's stage declares `level`; a string for it names the plugin's version."""
    site = tmp_path / "site"
    info = site / "nanobot_notes-2.1.0.dist-info"
    info.mkdir(parents=True)
    (site / "notes_plugin.py").write_text(NOTES_PLUGIN, encoding="utf-8")
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nanobot-notes\nVersion: 2.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[nanobot.plugins]\nnotes = notes_plugin\n", encoding="utf-8"
    )
    work = tmp_path / "work"
    work.mkdir()
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    (work / "nanobot.toml").write_text(
        '[governance.stages.find_notes]\nlevel = "2"\n', encoding="utf-8"
    )
    done = _govern_process(work, PYTHONPATH=path, NANOBOT_PLUGINS="nanobot-notes")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"Error: configuration: {work / 'nanobot.toml'}: "
        "governance.stages.find_notes.level: expected an integer (int), "
        "got str '2'; an option of stage 'find_notes' (plugin 'notes' from nanobot-notes 2.1.0): "
        "how many passes\n"
    )
    (work / "nanobot.toml").write_text("[governance.stages.find_notes]\nlevel = 2\n", "utf-8")
    done = _govern_process(work, PYTHONPATH=path, NANOBOT_PLUGINS="nanobot-notes")
    assert done.returncode == 0, done.stderr
    assert "find_notes" in done.stdout


def test_output_through_a_link_writes_the_linked_file(tmp_path: Path) -> None:
    """--output naming a symbolic link writes the file it points to; the link stays a link."""
    real = tmp_path / "healed.jsonl"
    real.write_text("old\n", encoding="utf-8")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    data = _json(str(EXAMPLE), "--workspace", str(tmp_path), "--output", str(link))
    assert link.is_symlink()
    written = [json.loads(line) for line in real.read_text(encoding="utf-8").splitlines()]
    assert written == data["messages"]


def test_output_to_a_named_pipe_writes_into_it(tmp_path: Path) -> None:
    """--output naming a pipe (like /dev/stdout) sends the lines through it, never replacing it."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        code, _out, err = _run(str(EXAMPLE), "--workspace", str(tmp_path), "--output", str(pipe))
        assert code == 0, err
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
        lines = os.read(reader, 1 << 16).decode("utf-8").splitlines()
    finally:
        os.close(reader)
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)


def test_json_report_names_an_anthropic_tool_block_left_out(tmp_path: Path) -> None:
    """`govern --json` shows, under final, the tool_use block a user message could not send."""
    history = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "stray", "name": "get", "input": {}},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in history), encoding="utf-8")
    data = _json(str(path), "--workspace", str(tmp_path))
    final = data["report"][-1]
    assert final["stage"] == "final" and final["changed"]
    assert final["details"][0] == (
        "messages[0]: left out the tool_use block content[1] (id 'stray'): "
        "a message with role 'user' cannot send it"
    )
    assert data["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def test_a_session_file_is_governed_from_its_newest_governance_record(tmp_path: Path) -> None:
    """A session of `run` is governed as its next run governs it: from the newest governance
    record (the cut sent before kept), which --json shows as `state` with the prefix."""
    turns = [
        ({"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": f"a{n}"})
        for n in range(3)
    ]
    usage = {"_meta": {"kind": "usage", "round": 1}}
    old_cut = {"kind": "governance", "start": 2, "steps_from": None, "compacted": []}
    newest = {**old_cut, "start": 4, "length": 6, "steps_left_out": None}
    lines: list[dict[str, Any]] = [
        {**turns[0][0], "_meta": {"time": "2025-01-31T09:30:00+01:00"}},
        turns[0][1],
        usage,
        turns[1][0],
        {"_meta": {**old_cut, "length": 3, "steps_left_out": None}},
        turns[1][1],
        turns[2][0],
        {"_meta": newest},
        turns[2][1],
        usage,
    ]
    session = tmp_path / "default.jsonl"
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = _json(str(session))
    assert result["messages"] == list(turns[2])
    assert result["state"] == {k: v for k, v in newest.items() if k != "kind"}
    assert result["prefix"]["reason"] == "first request: nothing was sent before"
    (load, *_) = result["report"]
    assert load["details"][1:] == [
        "set aside 4 session record line(s) (only _meta): messages[N] below counts the "
        "messages alone",
        f"{session}:8: restored the newest governance record: the history from messages[4], "
        "0 tool result(s) compacted",
    ]


def test_a_damaged_newest_governance_record_is_named_in_the_load_entry(tmp_path: Path) -> None:
    """A governance record newer than the one restored, but not a state, is passed over as a
    run passes it over, and the load entry says which entry it is and what is wrong."""
    lines: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "two"},
        {"_meta": {"kind": "governance", "start": 2, "length": 3, "compacted": []}},
        {"role": "assistant", "content": "a2"},
        {"_meta": {"kind": "governance", "start": 2, "length": 5, "compacted": [-1]}},
    ]
    session = tmp_path / "default.jsonl"
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = _json(str(session))
    assert result["messages"] == lines[2:3] + lines[4:5]
    (load, *_) = result["report"]
    assert load["details"][2:] == [
        f"{session}:6: passed over a damaged governance record: compacted is [-1], "
        "not a list of whole numbers of 0 or more",
        f"{session}:4: restored the newest governance record: the history from messages[2], "
        "0 tool result(s) compacted",
    ]


def test_a_governance_record_of_a_newer_version_is_named_in_the_load_entry(
    tmp_path: Path,
) -> None:
    """A governance record a newer nanobot-core wrote is passed over as a run passes it over,
    named as such with the version found and the version known, and never read."""
    lines: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "two"},
        {"_meta": {"kind": "governance", "start": 2, "length": 3, "compacted": []}},
        {"role": "assistant", "content": "a2"},
        {"_meta": {"kind": "governance", "version": 7, "start": 0, "length": 4, "compacted": []}},
    ]
    session = tmp_path / "default.jsonl"
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = _json(str(session))
    assert result["messages"] == lines[2:3] + lines[4:5]
    assert result["state"]["start"] == 2 and "version" not in result["state"]
    (load, *_) = result["report"]
    assert load["details"][2:] == [
        f"{session}:6: passed over a governance record written by a newer nanobot-core: "
        "version 7, this one reads up to version 1",
        f"{session}:4: restored the newest governance record: the history from messages[2], "
        "0 tool result(s) compacted",
    ]


_FIELD = st.one_of(
    st.none(),
    st.integers(min_value=-2, max_value=12),
    st.text(max_size=3),
    st.lists(st.integers(min_value=-1, max_value=12), max_size=4),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fields=st.fixed_dictionaries(
        {},
        optional={
            name: _FIELD
            for name in ("start", "steps_from", "compacted", "length", "steps_left_out")
        }
        | {"version": st.one_of(st.integers(min_value=-1, max_value=3), st.just("1"))},
    ),
    at=st.integers(min_value=0, max_value=9),
    noise=st.lists(st.sampled_from(["", "  \t", "\r", "not json"]), max_size=4),
)
def test_any_governance_record_in_a_session_file_gives_a_legal_request(
    tmp_path: Path, fields: dict[str, Any], at: int, noise: list[str]
) -> None:
    """A governance record of any values, anywhere in a session file after any blank or
    invalid lines: exit 0, a legal request, a `state` that fits the history it was governed
    from, and the record named by its file and line in the load entry exactly when it is no
    state (as damaged, or as written by a newer nanobot-core)."""
    lines: list[dict[str, Any]] = []
    for n in range(3):
        call = {"id": f"c{n}", "type": "function"}
        call["function"] = {"name": "read_file", "arguments": '{"path": "a"}'}
        lines += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n}"},
        ]
    lines.insert(at, {"_meta": {"kind": "governance", **fields}})
    session = tmp_path / "any.jsonl"
    text = "".join(line + "\n" for line in noise)
    session.write_text(text + "".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    result = _json(str(session))
    assert check_invariants(result["messages"]) == []
    state = result["state"]
    assert 0 <= state["start"] < 9 and all(0 <= i < 9 for i in state["compacted"])
    assert state["length"] == 9  # the messages, as a run counts them: not the record line
    named = [detail for detail in result["report"][0]["details"] if "passed over a " in detail]
    where = f"{session}:{len(noise) + at + 1}: passed over a "  # the line an editor opens
    newer = newer_version(lines[at])
    if newer is not None:
        [note] = named
        assert note.startswith(f"{where}governance record written by a newer nanobot-core: ")
        assert note.endswith(f"version {newer}, this one reads up to version 1")
    elif GovernanceState.from_record(lines[at]) is None:
        [note] = named
        assert note.startswith(f"{where}damaged governance record: ")
    else:
        assert named == []


def test_a_passed_over_record_is_named_by_the_file_line_a_run_names(tmp_path: Path) -> None:
    """Past blank, whitespace-only and invalid lines, `govern` names a passed-over record by
    the line of the file, which a run's warning names too, not by its place among the entries;
    stdin is named as such."""
    records = [
        '{"role": "user", "content": "one"}',
        "",
        "   ",
        "not json",
        '{"role": "assistant", "content": "a1"}',
        '{"_meta": {"kind": "governance", "start": 0, "length": -1, "compacted": []}}',
    ]
    data = ("\n".join(records) + "\n").encode()
    session = tmp_path / "s.jsonl"
    session.write_bytes(data)
    details = _json(str(session))["report"][0]["details"]
    problem = "passed over a damaged governance record: length is -1, not a whole number"
    assert f"{session}:4: left out, not JSON" in " ".join(details)
    [named] = [d for d in details if "passed over" in d]
    assert named.startswith(f"{session}:6: {problem}")
    from_stdin = _json("-", stdin=data)["report"][0]["details"]
    [named] = [d for d in from_stdin if "passed over" in d]
    assert named.startswith(f"stdin:6: {problem}")
    array = tmp_path / "s.json"
    array.write_text(json.dumps([json.loads(records[0]), json.loads(records[5])]), "utf-8")
    from_array = _json(str(array))["report"][0]["details"]
    [named] = [d for d in from_array if "passed over" in d]
    assert named.startswith(f"{array}, entry 2 of the 2 read: {problem}")
