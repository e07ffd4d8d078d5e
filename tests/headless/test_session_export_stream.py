"""`sessions export` of a large store: one session in memory at a time, and a reader that
goes away ends it as it ends any command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from nanobot_core.cli import cli
from nanobot_core.jsonl_store import JsonlSessionStore
from tests.helpers import clean_env

# Every session the same: 10 lines of about 1 KB, 10 KB a session.
_SESSION = (json.dumps({"role": "user", "content": "x" * 1_000}) + "\n") * 10


def _workspace(root: Path, count: int) -> Path:
    """A workspace whose JSONL store holds `count` sessions, each `_SESSION`."""
    store = JsonlSessionStore(root)
    store.directory.mkdir(parents=True)
    for n in range(count):
        store.path(f"s{n:05d}").write_text(_SESSION, encoding="utf-8")
    return root


def _export_peak(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """The most memory `sessions export --output FILE` of `workspace` took at once, in bytes."""
    monkeypatch.chdir(workspace)
    tracemalloc.start()
    try:
        result = CliRunner().invoke(cli, ["sessions", "export", "--output", "../out.jsonl"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    return peak


def test_export_memory_does_not_grow_with_the_size_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exporting 2,000 sessions takes about the memory 200 of the same size take (a listing
    entry more a session), far less than what they hold: each is read when it is written."""
    small = _workspace(tmp_path / "small" / "ws", 200)
    large = _workspace(tmp_path / "large" / "ws", 2_000)
    _export_peak(small, monkeypatch)  # the modules the command imports on its first run
    peak_small = _export_peak(small, monkeypatch)
    peak_large = _export_peak(large, monkeypatch)
    held = 2_000 * len(_SESSION)
    assert (tmp_path / "large" / "out.jsonl").stat().st_size > held
    # 1,800 sessions more: 1 KB of listing each at most, against the 10 KB each holds.
    assert peak_large < peak_small + 1_800 * 1_024, (peak_small, peak_large)
    assert peak_large < held / 8, (peak_small, peak_large)


@pytest.mark.parametrize(
    "output",
    [
        "-",
        pytest.param(
            "/dev/stdout",
            marks=pytest.mark.skipif(
                not Path("/dev/stdout").exists(), reason="no /dev/stdout on this system"
            ),
        ),
    ],
)
def test_an_export_whose_reader_goes_away_ends_quietly_with_exit_1(
    tmp_path: Path, output: str
) -> None:
    """`sessions export -o - | head -1` (or `-o /dev/stdout`, the same pipe as a file): the
    reader closes the pipe after the first line; the export stops there, as any command whose
    reader went away: exit 1, no traceback, nothing on stderr (the summary of an export not
    finished is not printed)."""
    workspace = _workspace(tmp_path / "ws", 300)  # 3 MB, many times what a pipe buffers
    process = subprocess.Popen(
        [sys.executable, "-m", "nanobot_core", "sessions", "export", "-o", output],
        cwd=workspace,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # what `head -1` does once it has its line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1, stderr
    assert json.loads(first) == {"nanobot_sessions_export": 1}
    assert stderr == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_an_export_into_a_named_pipe_whose_reader_goes_away_ends_quietly_with_exit_1(
    tmp_path: Path,
) -> None:
    """`sessions export -o FIFO` whose reader closes the pipe after one line ends as one into
    standard output does: exit 1, nothing on stderr."""
    workspace = _workspace(tmp_path / "ws", 300)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        [sys.executable, "-m", "nanobot_core", "sessions", "export", "-o", str(fifo)],
        cwd=workspace,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    with fifo.open("rb") as reader:  # opened once the export opens it to write
        first = reader.readline()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1, stderr
    assert json.loads(first) == {"nanobot_sessions_export": 1}
    assert stderr == ""
