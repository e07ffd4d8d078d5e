"""Memory on model-controlled input: how many values a reply or arguments decode to is bounded."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    MAX_VALUES,
    JSONLimitError,
    check_values,
    loads,
)
from nanobot_core._json_repair import repair
from nanobot_core.governance.invariants import check_tool_pairing
from nanobot_core.governance.stages.arguments import normalise_arguments
from nanobot_core.tools.base import Tool
from nanobot_core.tools.registry import ToolRegistry
from tests.headless.fake_server import (
    FakeChatServer,
    Reply,
    _completion,
    text_reply,
    tool_call_reply,
)
from tests.helpers import REPO_ROOT, clean_env, run_python

# Three million empty objects: 9 MB of text that decoded to about 430 MB (replies) and
# 900 MB (tool arguments) before the limit; each ceiling below is far from both.
MANY = 3_000_000
CEILING_MIB = 250
TIMEOUT = 120


class ArrayTool(Tool):
    """A tool taking one array of strings and one string."""

    name = "take"
    description = "Takes items."
    parameters = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}},
    }

    async def execute(self, **kwargs: Any) -> str:
        return "ran"


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.add(ArrayTool())
    return registry


def _values(value: Any) -> int:
    """The values of `value` as the limit counts them: an empty array or object holds one."""
    if isinstance(value, dict):
        return 1 + sum(_values(item) for item in value.values()) + (not value)
    if isinstance(value, list):
        return 1 + sum(_values(item) for item in value) + (not value)
    return 1


# Runs the command given after the report path and, at exit, writes the peak resident
# memory of this process alone (VmHWM, kB) to that path. The peak the parent learns from
# `wait4` would not do: on Linux a child's ru_maxrss starts from the parent's resident
# size at fork, so a test process grown large by earlier tests looked like a leak.
_REPORT_PEAK = """
import atexit, runpy, sys
report, mode, target, *rest = sys.argv[1:]

def _write_peak():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(report, "w") as out:
        out.write(peak)

atexit.register(_write_peak)
if mode == "-m":
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *rest]
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


def _peak_mib(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, peak resident MiB) of ``python ARGS`` (``-m M ...`` or
    ``-c CODE``) run in a child process, the peak being that process's own."""
    report = cwd / "peak"
    child = run_python(_REPORT_PEAK, str(report), *args, cwd=cwd, env=env, timeout=TIMEOUT)
    return child.returncode, child.stdout, child.stderr, int(report.read_text()) / 1024


def _env(**changes: str) -> dict[str, str]:
    return clean_env(PYTHONPATH=str(REPO_ROOT), **changes)


def _run(tmp_path: Path, replies: list[Reply]) -> tuple[int, str, str, float]:
    with FakeChatServer(replies) as server:
        args = ["-m", "nanobot_core", "run", "hi", "--base-url", server.base_url]
        env = _env(
            NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
            NANOBOT_MODEL="fake-model",
            NANOBOT_PROVIDER__MAX_RETRIES="0",
        )
        return _peak_mib(args, tmp_path, env)


def _python_peak(tmp_path: Path, code: str) -> tuple[str, float]:
    """(stdout, peak resident MiB) of `code` run by a fresh interpreter."""
    status, stdout, stderr, peak = _peak_mib(["-c", textwrap.dedent(code)], tmp_path, _env())
    assert status == 0, stderr
    return stdout, peak


def test_a_reply_of_millions_of_empty_objects_ends_run_with_a_clear_error(tmp_path: Path) -> None:
    """`run` on a 9 MB reply of empty objects exits 1 naming the limit, in bounded memory."""
    body = json.dumps(_completion({"role": "assistant", "content": "hi"}, "stop", None))
    body = body[:-1] + ', "extra": [' + "{}," * MANY + "{}]}"
    status, stdout, stderr, peak = _run(tmp_path, [Reply(body=body)])
    assert status == 1, stderr
    assert stdout == ""
    assert f"sent a reply that cannot be used: more than {MAX_VALUES:,} values" in stderr
    assert "MemoryError" not in stderr and "Traceback" not in stderr
    assert peak < CEILING_MIB, f"{peak:.0f} MiB"


def test_arguments_of_millions_of_empty_objects_get_an_error_result(tmp_path: Path) -> None:
    """A call with 9 MB of empty objects as arguments fails by the limit; the turn goes on."""
    arguments = '{"path": "a", "extra": [' + "{}," * MANY + "{}]}"
    replies = [tool_call_reply([("call_1", "read_file", arguments)]), text_reply("done")]
    status, stdout, stderr, peak = _run(tmp_path, replies)
    assert status == 0, stderr
    assert stdout == "done\n"
    assert "tool read_file: failed" in stderr
    assert peak < CEILING_MIB, f"{peak:.0f} MiB"
    stored = "\n".join(path.read_text() for path in tmp_path.rglob("*.jsonl"))
    assert f"cannot be used: more than {MAX_ARGUMENT_VALUES:,} values" in stored


@pytest.mark.parametrize(
    ("head", "unit", "tail"),
    [
        ('{"items": [', "{},", "{}]}"),  # valid JSON
        ('{"items": [', "{},", "{}"),  # cut off: the repair path
        ('{"items": [', "0,", "0]}"),  # numbers for strings: the cast path
    ],
    ids=["valid", "cut-off", "cast"],
)
def test_prepare_call_on_millions_of_values_is_bounded(
    tmp_path: Path, head: str, unit: str, tail: str
) -> None:
    """`prepare_call` refuses arguments over the limit by name, in bounded memory."""
    stdout, peak = _python_peak(
        tmp_path,
        f"""
        from tests.boundary.test_memory_bounds import _registry
        arguments = {head!r} + {unit!r} * {MANY} + {tail!r}
        print(_registry().prepare_call("take", arguments).error)
        """,
    )
    assert stdout.strip() == (
        f'Error: arguments for tool "take" cannot be used: more than {MAX_ARGUMENT_VALUES:,} '
        "values (each comma, [ and { counts one)"
    ), stdout
    assert peak < CEILING_MIB, f"{peak:.0f} MiB"


def test_governance_of_a_history_holding_such_arguments_is_bounded(tmp_path: Path) -> None:
    """Normalising and checking a stored call with 9 MB of empty objects stays in bounded memory."""
    stdout, peak = _python_peak(
        tmp_path,
        f"""
        from nanobot_core.governance import anthropic
        from nanobot_core.governance.invariants import check_tool_pairing
        from nanobot_core.governance.stages.arguments import normalise_arguments
        arguments = '{{"x": [' + '{{}},' * {MANY} + '{{}}]}}'
        function = {{"name": "t", "arguments": arguments}}
        call = {{"id": "c1", "type": "function", "function": function}}
        message = {{"role": "assistant", "content": None, "tool_calls": [call]}}
        print(normalise_arguments(arguments)[0])
        result = {{"role": "tool", "tool_call_id": "c1", "content": "x"}}
        print(len(check_tool_pairing([message, result])))
        print(anthropic._use_block(call)["input"])
        """,
    )
    assert stdout.split() == ["{}", "1", "{}"]
    assert peak < CEILING_MIB, f"{peak:.0f} MiB"


def test_the_limit_is_exact_for_arguments() -> None:
    """Arguments of exactly the limit are used; one value more is refused with the limit's text."""
    at_limit = '{"items": [' + '"a",' * (MAX_ARGUMENT_VALUES - 3) + '"a"]}'
    assert _values(json.loads(at_limit)) == MAX_ARGUMENT_VALUES
    registry = _registry()
    assert registry.prepare_call("take", at_limit).ok
    over = at_limit.replace("[", '["a",', 1)
    error = registry.prepare_call("take", over).error
    assert error is not None
    assert f"more than {MAX_ARGUMENT_VALUES:,} values" in error


def test_a_json_string_cast_to_an_array_keeps_the_limit() -> None:
    """A string holding more JSON values than the limit stays a string that validation refuses."""
    inner = "[" + '"a",' * MAX_ARGUMENT_VALUES + '"a"]'
    prepared = _registry().prepare_call("take", json.dumps({"items": inner}))
    assert prepared.error is not None
    assert "is not of type" in prepared.error


def test_governance_names_the_limit() -> None:
    """Governance replaces arguments over the limit by {} and says why; the check says so too."""
    arguments = '{"x": [' + "{}," * MAX_ARGUMENT_VALUES + "{}]}"
    fixed, note = normalise_arguments(arguments)
    assert fixed == "{}"
    assert note is not None and f"more than {MAX_ARGUMENT_VALUES:,} values" in note
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": arguments}}
    result = {"role": "tool", "tool_call_id": "c1", "content": "x"}
    (problem,) = check_tool_pairing([{"role": "assistant", "tool_calls": [call]}, result])
    assert "arguments cannot be used" in problem


def test_braces_and_commas_inside_strings_do_not_count() -> None:
    """A reply full of code (braces and commas in strings), far over the limit by bytes, decodes."""
    code = "f({a: [1, 2]}, {b: []});\n" * (MAX_VALUES // 2)
    text = json.dumps({"choices": [{"message": {"content": code, "arguments": json.dumps(code)}}]})
    assert loads(text).value["choices"][0]["message"]["content"] == code
    check_values(text)


def test_a_cut_off_text_over_the_limit_is_refused_before_repair() -> None:
    """A cut-off text of too many values is refused by the limit, not rebuilt."""
    with pytest.raises(JSONLimitError, match="more than 10 values"):
        repair("[" + "[]," * 10, max_values=10)


# Any text, and text of what the count looks at: commas, brackets, quotes and escapes.
_texts = st.text() | st.text(',[]{}"\\ab')
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _texts,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_texts, inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, limit=st.integers(min_value=1, max_value=60))
def test_json_under_the_limit_decodes_as_before_and_over_it_is_refused(
    value: Any, limit: int
) -> None:
    """Any JSON of at most `limit` values decodes exactly as before; more is a JSONLimitError."""
    text = json.dumps(value)
    if _values(value) <= limit:
        assert loads(text, max_values=limit) == loads(text, max_values=sys.maxsize)
        check_values(text, limit)
    else:
        with pytest.raises(JSONLimitError, match=f"more than {limit:,} values"):
            loads(text, max_values=limit)
        with pytest.raises(JSONLimitError):
            check_values(text, limit)
