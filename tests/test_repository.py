"""The repository holds everything its tests read: no file refers to data outside the clone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers import REPO_ROOT, data_dir

# Spelt in pieces so that this file does not match its own rule. The data folder is found
# without its leading slash too, as prose that quotes it writes it.
FORBIDDEN = re.compile(
    "|".join([r"\.\./" + "shared", "NANOBOT_" + "SHARED_DATA", r"\bshared" + "/data"])
)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.decode()
    paths = [REPO_ROOT / name for name in listed.split("\0") if name]
    return [p for p in paths if p.is_file() and not p.is_relative_to(data_dir())]


def test_no_file_refers_to_data_outside_the_repository() -> None:
    """No tracked file outside tests/data names the old outside data folder or its variable."""
    offenders = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if FORBIDDEN.search(text):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []


def test_data_readme_lists_every_data_set_with_size_and_source() -> None:
    """tests/data/README.md has one row per data folder, each with a size in MB and a source."""
    readme = (data_dir() / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in readme.splitlines():
        match = re.match(r"\| \[([^/\]]+)/\]\([^)]*\) \| [^|]+ \| ([0-9.]+) \| ([^|]+) \|", line)
        if match:
            rows[match.group(1)] = (float(match.group(2)), match.group(3).strip())
    folders = sorted(p.name for p in data_dir().iterdir() if p.is_dir())
    assert sorted(rows) == folders
    for folder in folders:
        size_mb = (
            sum(f.stat().st_size for f in (data_dir() / folder).rglob("*") if f.is_file()) / 1e6
        )
        listed, source = rows[folder]
        assert abs(listed - size_mb) <= 0.1 + 0.1 * size_mb, folder
        assert source


def test_every_data_set_has_its_provenance_beside_it() -> None:
    """Each data folder holds a SOURCE.md naming its origin and licence."""
    for folder in (p for p in data_dir().iterdir() if p.is_dir()):
        source = (folder / "SOURCE.md").read_text(encoding="utf-8")
        assert "Origin" in source or "origin" in source, folder.name
        assert re.search(r"licen[cs]e", source, re.IGNORECASE), folder.name


def test_the_unreleased_changelog_has_each_kind_of_change_once() -> None:
    """The Unreleased part of CHANGELOG.md has one heading per kind of change."""
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    unreleased = text.split("## Unreleased\n", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### (.+)$", unreleased, flags=re.MULTILINE)
    assert headings, "no headings under Unreleased"
    assert sorted(headings) == sorted(set(headings)), headings
