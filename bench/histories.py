"""Deterministic synthetic agent histories in the OpenAI chat-completions shape.

Both sides of the governance benchmark read the same histories: this module is
stdlib-only so that nanobot-ai's environment can import it too. A history is a
long coding-agent session: user turns, assistant messages with one to three
tool calls, their results (mostly small, a few very large), and a little of the
dirt real session files accumulate (placeholder messages, calls without a name,
orphan, missing, duplicate and empty results, truncated arguments). The dirt is
limited to what nanobot-ai 0.3.5 also repairs, so both sides do comparable work.

Run as a script to write one history as JSON:
``python bench/histories.py --messages 10000 --out history.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

Message = dict[str, Any]

DEFAULT_SEED = 20250601
PLACEHOLDER_TEXT = "[Previous assistant message omitted.]"
# One large result in this many; sized so that 10,000 messages weigh about 17 MB.
LARGE_RESULT_EVERY = 60
LARGE_RESULT_CHARS = (60_000, 200_000)
SMALL_RESULT_CHARS = (40, 1_000)
# One piece of dirt per this many turns, cycling through DIRT_KINDS.
DIRT_EVERY_TURNS = 40

SYSTEM_PROMPT = (
    "You are a careful coding agent working in a local repository. Use the tools to read, "
    "search and edit files and to run commands; explain what you changed and why.\n" * 40
)

_WORD_TEXT = """
agent buffer cache commit config context daemon debug deploy diff error event file
function handler index input kernel layer limit module network option output parser
patch path plugin process queue request result router schema server session socket
stage state stream string table task test thread token tool trace update value
worker the a of to in and for with on is that by this from as be it at are was or an
"""
_WORDS = _WORD_TEXT.split()

_TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "grep",
    "glob",
    "exec",
    "web_fetch",
    "web_search",
    "git_diff",
    "git_log",
    "run_tests",
)


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_PATH = {"type": "string", "description": "Path relative to the workspace."}
TOOL_DEFINITIONS: list[dict[str, Any]] = [
    _function("read_file", "Read a text file.", {"path": _PATH}, ["path"]),
    _function(
        "write_file",
        "Write a text file.",
        {"path": _PATH, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _function(
        "edit_file",
        "Replace text in a file.",
        {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
        ["path", "old", "new"],
    ),
    _function("list_dir", "List a directory.", {"path": _PATH}, ["path"]),
    _function(
        "grep",
        "Search file contents with a regular expression.",
        {"pattern": {"type": "string"}, "path": _PATH},
        ["pattern"],
    ),
    _function("glob", "Find files by glob pattern.", {"pattern": {"type": "string"}}, ["pattern"]),
    _function(
        "exec",
        "Run a shell command.",
        {"command": {"type": "string"}, "timeout": {"type": "integer", "minimum": 1}},
        ["command"],
    ),
    _function("web_fetch", "Fetch a URL as text.", {"url": {"type": "string"}}, ["url"]),
    _function(
        "web_search",
        "Search the web.",
        {"query": {"type": "string"}, "count": {"type": "integer"}},
        ["query"],
    ),
    _function("git_diff", "Show the working-tree diff.", {"path": _PATH}, []),
    _function("git_log", "Show recent commits.", {"limit": {"type": "integer"}}, []),
    _function("run_tests", "Run the test suite.", {"selector": {"type": "string"}}, []),
]


class _HistoryWriter:
    """Builds one history turn by turn from a seeded random source."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[Message] = []
        self.turns = 0
        self.dirt_done = 0
        self.results = 0
        self._lines = [self._words(self.rng.randint(6, 16)) for _ in range(2048)]

    def _words(self, count: int) -> str:
        return " ".join(self.rng.choices(_WORDS, k=count))

    def _text(self, chars: int) -> str:
        # Words are ~5 characters with the space.
        return self._words(max(1, chars // 5))

    def _call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        return "call_" + "".join(self.rng.choices(alphabet, k=24))

    def _large_result(self) -> str:
        target = self.rng.randint(*LARGE_RESULT_CHARS)
        # Numbered lines drawn from a pool: cheap to make, yet every result is distinct.
        lines: list[str] = [f"# output {self.results} of a long command"]
        size = 0
        number = 0
        while size < target:
            number += 1
            line = f"{number:06d}: {self.rng.choice(self._lines)}"
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def _result(self) -> str:
        self.results += 1
        if self.results % LARGE_RESULT_EVERY == 0:
            return self._large_result()
        return self._text(self.rng.randint(*SMALL_RESULT_CHARS))

    def _arguments(self, name: str) -> str:
        words = self._words(self.rng.randint(1, 4))
        options: dict[str, dict[str, Any]] = {
            "read_file": {"path": f"src/{words.replace(' ', '_')}.py"},
            "write_file": {"path": "notes.md", "content": self._text(300)},
            "edit_file": {"path": "src/app.py", "old": words, "new": words.upper()},
            "grep": {"pattern": words, "path": "src"},
            "exec": {"command": f"python -m pytest -k '{words}'", "timeout": 120},
            "web_search": {"query": words, "count": 5},
            "git_log": {"limit": 20},
        }
        return json.dumps(options.get(name, {"path": ".", "pattern": "*.py", "url": words}))

    def _tool_call(self, name: str | None = None) -> dict[str, Any]:
        name = name or self.rng.choice(_TOOL_NAMES)
        return {
            "id": self._call_id(),
            "type": "function",
            "function": {"name": name, "arguments": self._arguments(name)},
        }

    def _result_message(self, call: dict[str, Any]) -> Message:
        return {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": call["function"]["name"],
            "content": self._result(),
        }

    def add_turn(self) -> None:
        """One user request, one to four tool rounds, a final answer; sometimes with dirt."""
        self.turns += 1
        self.messages.append({"role": "user", "content": self._text(self.rng.randint(30, 600))})
        for _ in range(self.rng.randint(1, 4)):
            calls = [self._tool_call() for _ in range(self.rng.randint(1, 3))]
            assistant: Message = {"role": "assistant", "content": None, "tool_calls": calls}
            if self.rng.random() < 0.3:
                # Keys the pipeline does not know must pass through untouched.
                assistant["reasoning_content"] = self._text(self.rng.randint(100, 800))
            self.messages.append(assistant)
            self.messages.extend(self._result_message(call) for call in calls)
        if self.turns % DIRT_EVERY_TURNS == 0:
            DIRT_KINDS[self.dirt_done % len(DIRT_KINDS)](self)
            self.dirt_done += 1
        answer = self._text(self.rng.randint(80, 900))
        self.messages.append({"role": "assistant", "content": answer})


def _placeholder(writer: _HistoryWriter) -> None:
    writer.messages.append({"role": "assistant", "content": PLACEHOLDER_TEXT})


def _nameless_call(writer: _HistoryWriter) -> None:
    good = writer._tool_call()
    bad = writer._tool_call()
    bad["function"]["name"] = None
    writer.messages.append({"role": "assistant", "content": "", "tool_calls": [good, bad]})
    writer.messages.append(writer._result_message(good))
    writer.messages.append({"role": "tool", "tool_call_id": bad["id"], "content": "done"})


def _orphan_result(writer: _HistoryWriter) -> None:
    writer.messages.append(
        {
            "role": "tool",
            "tool_call_id": writer._call_id(),
            "name": "exec",
            "content": writer._text(200),
        }
    )


def _missing_result(writer: _HistoryWriter) -> None:
    calls = [writer._tool_call(), writer._tool_call()]
    writer.messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    writer.messages.append(writer._result_message(calls[1]))


def _duplicate_result(writer: _HistoryWriter) -> None:
    call = writer._tool_call()
    writer.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    result = writer._result_message(call)
    writer.messages.extend([result, dict(result)])


def _empty_result(writer: _HistoryWriter) -> None:
    call = writer._tool_call("exec")
    writer.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    writer.messages.append({**writer._result_message(call), "content": ""})


def _truncated_arguments(writer: _HistoryWriter) -> None:
    call = writer._tool_call("write_file")
    call["function"]["arguments"] = call["function"]["arguments"][:40]
    writer.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    writer.messages.append(writer._result_message(call))


DIRT_KINDS: tuple[Callable[[_HistoryWriter], None], ...] = (
    _placeholder,
    _nameless_call,
    _orphan_result,
    _missing_result,
    _duplicate_result,
    _empty_result,
    _truncated_arguments,
)


def generate_history(messages: int, seed: int = DEFAULT_SEED) -> list[Message]:
    """A history of about `messages` messages (whole turns; ends with a user message)."""
    writer = _HistoryWriter(seed)
    while len(writer.messages) < messages - 1:
        writer.add_turn()
    writer.messages.append({"role": "user", "content": "Please continue with the next step."})
    return writer.messages


def json_size(messages: list[Message]) -> int:
    """Bytes of the compact UTF-8 JSON encoding of a history."""
    return len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    history = generate_history(args.messages, args.seed)
    args.out.write_text(json.dumps(history, ensure_ascii=False), encoding="utf-8")
    print(json.dumps({"messages": len(history), "bytes": json_size(history)}))


if __name__ == "__main__":
    main()
