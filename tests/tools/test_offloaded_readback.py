"""A big one-line result, offloaded by `govern`, read back whole with read_file and grep.

The result is a real 74 kB SchemaStore schema, minified to a single line, as
a web or API tool would return it; everything runs through the real CLI.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import clean_env, data_dir

SCHEMA = data_dir() / "schemastore-subset" / "schemas" / "abc-clinical-demand-forecast-5.0.0.json"
_NEXT = re.compile(r"\n\[Characters (\d+)-(\d+) of (\d+)\. Call read_file with start_char=(\d+)")


def _cli(workspace: Path, *args: str, code: int = 0) -> Any:
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args, "--json"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def minified() -> str:
    """The schema as one line of about 48 kB."""
    text = json.dumps(json.loads(SCHEMA.read_text(encoding="utf-8")), separators=(",", ":"))
    assert "\n" not in text and len(text) > 40_000
    return text


@pytest.fixture
def offloaded(tmp_path: Path, minified: str) -> tuple[Path, str]:
    """`govern` on a history holding the result: the workspace and the notice it left."""
    history = [
        {"role": "user", "content": "Fetch the issue-forms schema."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "web_fetch", "arguments": '{"url": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "web_fetch", "content": minified},
    ]
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(m) + "\n" for m in history), encoding="utf-8")
    governed = _cli(tmp_path, "govern", str(session), "--workspace", str(tmp_path))
    notice = governed["messages"][2]["content"]
    return tmp_path, notice


def test_the_notice_says_how_to_page_and_the_pages_give_the_result_back(
    offloaded: tuple[Path, str], minified: str
) -> None:
    """Following the notice and then each footer reads the whole result, character for character."""
    workspace, notice = offloaded
    found = re.search(r'read_file\(path="([^"]+)"\) and start_char=0', notice)
    assert found, notice
    path, start, pages = found.group(1), 0, []
    while True:
        arguments = json.dumps({"path": path, "start_char": start})
        page = _cli(workspace, "call", "read_file", arguments, "--workspace", str(workspace))
        assert page["ok"], page
        footer = _NEXT.search(page["result"])
        if footer is None:
            pages.append(page["result"])
            break
        assert int(footer.group(1)) == start and int(footer.group(3)) == len(minified)
        pages.append(page["result"][: footer.start()])
        start = int(footer.group(4))
    assert len(pages) > 2
    assert "".join(pages) == minified


def test_reading_lines_points_to_the_rest_of_a_cut_line(offloaded: tuple[Path, str]) -> None:
    """Line paging cuts the one long line and says which start_char shows the rest."""
    workspace, notice = offloaded
    path = re.search(r'read_file\(path="([^"]+)"\)', notice).group(1)  # type: ignore[union-attr]
    page = _cli(workspace, "call", "read_file", json.dumps({"path": path}))
    assert "line cut" in page["result"] and "read_file with start_char=2000" in page["result"]
    both = _cli(
        workspace,
        "call",
        "read_file",
        json.dumps({"path": path, "offset": 1, "start_char": 5}),
        code=1,
    )
    assert not both["ok"] and "not both" in both["result"]


def test_grep_finds_a_match_deep_in_a_long_line(offloaded: tuple[Path, str], minified: str) -> None:
    """grep shows the text around a match far into the line, and where read_file finds it."""
    workspace, notice = offloaded
    path = re.search(r'read_file\(path="([^"]+)"\)', notice).group(1)  # type: ignore[union-attr]
    needle = minified[-400:-360]
    at = minified.find(needle)
    assert at == minified.rfind(needle) and at > 40_000
    found = _cli(
        workspace, "call", "grep", json.dumps({"pattern": re.escape(needle), "path": path})
    )
    assert found["ok"], found
    assert needle in found["result"]
    assert f"the match is at start_char={at} for read_file" in found["result"]
    arguments = json.dumps({"path": path, "start_char": at, "max_chars": len(needle)})
    assert _cli(workspace, "call", "read_file", arguments)["result"].startswith(needle)
