"""`prompt.max_file_bytes`: the prompt reads at most that much of each workspace file."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import DEFAULT_PROMPT_FILE_BYTES, PromptConfig, load_config
from nanobot_core.errors import ConfigError, NotRegularFileError
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.builtin_sections import render_skills
from nanobot_core.prompt.skills import scan_skills
from nanobot_core.prompt.workspace_files import read_file_start, read_user_file


def _prompt(workspace: Path) -> str:
    """The system prompt for `workspace`, with the config loaded from its nanobot.toml."""
    config = load_config(cwd=workspace, environ={})
    return build_default_prompt_builder(config).build(SectionContext(workspace, config=config)).text


def _configure(workspace: Path, max_file_bytes: int) -> None:
    (workspace / "nanobot.toml").write_text(
        f"[prompt]\nmax_file_bytes = {max_file_bytes}\n", encoding="utf-8"
    )


def test_a_file_over_the_limit_is_cut_with_a_notice_through_the_config(tmp_path: Path) -> None:
    """An AGENTS.md over max_file_bytes (from nanobot.toml) goes in to the limit, then a notice."""
    _configure(tmp_path, 64)
    text = "".join(f"rule {n:03d}\n" for n in range(40))  # 360 bytes
    (tmp_path / "AGENTS.md").write_text(text, encoding="utf-8")
    (tmp_path / "USER.md").write_text("Short.", encoding="utf-8")
    with capture_logs() as logs:
        prompt = _prompt(tmp_path)
    notice = "[AGENTS.md was cut here: the prompt holds its first 64 of 360 bytes"
    assert f"## AGENTS.md\n\n{text[:64].strip()}\n\n{notice}" in prompt
    assert "(prompt.max_file_bytes). Read the file with read_file for the rest.]" in prompt
    assert "rule 010" not in prompt
    assert "## USER.md\n\nShort." in prompt  # the other files are untouched
    [warning] = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["path"] == str(tmp_path / "AGENTS.md")
    assert (warning["size"], warning["kept"], warning["max_file_bytes"]) == (360, 64, 64)


def test_a_file_of_exactly_the_limit_goes_in_whole(tmp_path: Path) -> None:
    """The limit is inclusive: a memory file of max_file_bytes has no notice, one byte more has."""
    _configure(tmp_path, 32)
    memory = tmp_path / "memory" / "MEMORY.md"
    memory.parent.mkdir()
    memory.write_bytes(b"m" * 32)
    prompt = _prompt(tmp_path)
    assert "m" * 32 in prompt and "was cut here" not in prompt
    memory.write_bytes(b"m" * 33)
    prompt = _prompt(tmp_path)
    assert "m" * 33 not in prompt and "first 32 of 33 bytes" in prompt


def test_a_huge_file_is_never_read_whole(tmp_path: Path) -> None:
    """A 64 MiB AGENTS.md costs about the limit in memory, not the file's size."""
    _configure(tmp_path, 4096)
    config = load_config(cwd=tmp_path, environ={})
    with (tmp_path / "AGENTS.md").open("wb") as handle:
        handle.write(b"Be brief. " * 1000)
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing is written past the start
    builder = build_default_prompt_builder(config)
    tracemalloc.start()
    try:
        prompt = builder.build(SectionContext(tmp_path, config=config)).text
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "first 4,096 of 67,108,864 bytes" in prompt
    assert peak < 1024 * 1024


def test_the_cut_falls_on_a_character_boundary(tmp_path: Path) -> None:
    """A limit inside a multi-byte character keeps the characters before it and no U+FFFD."""
    (tmp_path / "SOUL.md").write_text("é€😀" * 10, encoding="utf-8")  # 2 + 3 + 4 bytes each
    for limit, kept in ((1, 0), (2, 2), (3, 2), (4, 2), (5, 5), (8, 5), (9, 9), (10, 9)):
        start = read_file_start(tmp_path / "SOUL.md", limit)
        assert len(start.data) == kept and start.size == 90 and start.cut
        assert "\ufffd" not in start.data.decode("utf-8", errors="replace")


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
# No NUL: a file holding one is binary, left out whole (tests/prompt/test_hostile_workspace.py).
@given(
    text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=60),
    limit=st.integers(1, 80),
)
def test_whatever_the_text_the_prompt_holds_a_prefix_within_the_limit(
    tmp_path: Path, text: str, limit: int
) -> None:
    """Any file and limit give its first characters, at most `limit` bytes, a notice iff cut."""
    (tmp_path / "USER.md").write_bytes(text.encode("utf-8"))
    full = read_user_file(tmp_path, "USER.md", max_bytes=10_000)
    got = read_user_file(tmp_path, "USER.md", max_bytes=limit)
    size = len(text.encode("utf-8"))
    if size <= limit:
        assert got == full
        return
    assert got is not None
    kept, notice = got.rsplit("[USER.md was cut here: the prompt holds its first ", 1)
    held, _, rest = notice.partition(" of ")
    assert limit - 3 <= int(held.replace(",", "")) <= limit
    assert (
        rest
        == f"{size:,} bytes (prompt.max_file_bytes). Read the file with read_file for the rest.]"
    )
    kept = kept.strip()
    assert len(kept.encode("utf-8")) <= limit
    assert "\ufffd" not in kept
    assert (full or "").startswith(kept)


def test_an_always_on_skill_over_the_limit_is_cut_with_a_notice(tmp_path: Path) -> None:
    """An always-on SKILL.md longer than the limit shows its start and the notice in the prompt."""
    head = "---\ndescription: Deploy.\nalways: true\n---\n"
    path = tmp_path / "skills" / "deploy" / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(head + "step\n" * 100, encoding="utf-8")
    config = load_config(cwd=tmp_path, environ={"NANOBOT_PROMPT__MAX_FILE_BYTES": "100"})
    rendered = render_skills(SectionContext(tmp_path, config=config))
    assert rendered is not None
    assert "## Skill: deploy\n\nstep\n" in rendered
    assert rendered.count("step") == (100 - len(head)) // 5
    assert rendered.endswith(
        "[skills/deploy/SKILL.md was cut here: the prompt holds its first 100 of "
        f"{len(head) + 500} bytes (prompt.max_file_bytes). Read the file with read_file for the "
        "rest.]"
    )


def test_many_large_skill_files_cost_the_limit_each(tmp_path: Path) -> None:
    """Listing many SKILL.md files reads only the limit of each, and one whose front matter
    does not close within it is skipped saying so."""
    for n in range(20):
        path = tmp_path / "skills" / f"s{n:02d}" / "SKILL.md"
        path.parent.mkdir(parents=True)
        with path.open("wb") as handle:
            # Text past the bytes read, then holes: a NUL byte read would make it a binary file.
            handle.write(f"---\ndescription: Skill {n}.\n---\n{'Body.' * 200}\n".encode())
            handle.truncate(16 * 1024 * 1024)
    late = tmp_path / "skills" / "late" / "SKILL.md"
    late.parent.mkdir()
    late.write_text("---\n" + "# comment\n" * 100 + "description: x\n---\n", encoding="utf-8")
    tracemalloc.start()
    try:
        scan = scan_skills(tmp_path, max_bytes=512)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s.name for s in scan.skills] == [f"s{n:02d}" for n in range(20)]
    assert peak < 1024 * 1024
    [problem] = scan.problems
    assert problem.path == "skills/late/SKILL.md"
    assert problem.reason == (
        "front matter has no closing '---' line in its first 512 of 1,023 bytes, the most read "
        "(prompt.max_file_bytes)"
    )


def test_the_default_limit_takes_a_long_hand_written_file_whole(tmp_path: Path) -> None:
    """The default (1 MiB) keeps a 500 KB AGENTS.md whole and cuts a 2 MiB one."""
    assert PromptConfig().max_file_bytes == DEFAULT_PROMPT_FILE_BYTES == 1024 * 1024
    line = "Prefer small, reviewed changes.\n"
    (tmp_path / "AGENTS.md").write_text(line * (500_000 // len(line)), encoding="utf-8")
    assert "was cut here" not in _prompt(tmp_path)
    (tmp_path / "AGENTS.md").write_text(line * (2 * 1024 * 1024 // len(line)), encoding="utf-8")
    assert "first 1,048,576 of 2,097,152 bytes" in _prompt(tmp_path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "prompt.max_file_bytes: must be more than 0, got 0"),
        ("-5", "prompt.max_file_bytes: must be more than 0, got -5"),
        ('"1MB"', "prompt.max_file_bytes: expected an integer (int), got str '1MB'"),
        ("1.5", "prompt.max_file_bytes: expected an integer (int), got float 1.5"),
        ("true", "prompt.max_file_bytes: expected an integer (int), got bool True"),
    ],
)
def test_a_bad_limit_is_a_config_error_naming_the_key(
    tmp_path: Path, value: str, message: str
) -> None:
    """A limit that is not a positive integer is refused at load, naming the file and the key."""
    (tmp_path / "nanobot.toml").write_text(f"[prompt]\nmax_file_bytes = {value}\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    assert str(info.value) == f"{tmp_path / 'nanobot.toml'}: {message}"


def test_a_named_pipe_is_still_refused_without_reading(tmp_path: Path) -> None:
    """The bounded read keeps refusing what is not a regular file, at once, naming the path and
    what it is."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotRegularFileError) as info:
        read_file_start(tmp_path / "pipe", 10)
    assert str(info.value) == f"{tmp_path / 'pipe'} is a named pipe (FIFO), not a regular file"
