"""Workspace skills: folders under ``skills/`` with a ``SKILL.md`` that starts with front matter.

The front matter is a block of ``key: value`` lines between two ``---`` lines::

    ---
    name: weather
    description: Look up the weather forecast for a city.
    always: false
    ---
    (the skill's instructions)

This is deliberately not YAML: values are plain text on one line (matching
single or double quotes around a value are removed), an indented line
continues the value above it, and lines starting with ``#`` are comments.
Keys other than ``name``, ``description`` and ``always`` are allowed and
ignored. ``name`` defaults to the folder name and must be one line of
visible text (no control, line-breaking or invisible formatting character);
``description`` is required; ``always`` is ``true`` or ``false`` (default
``false``). A skill whose
front matter breaks these rules is skipped with a reason, never fatal.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import attrs

from nanobot_core._clip import quoted
from nanobot_core._logging import get_logger
from nanobot_core.config import DEFAULT_PROMPT_FILE_BYTES
from nanobot_core.errors import ConfigError, WorkspaceEscapeError
from nanobot_core.prompt.workspace_files import (
    binary_reason,
    cut_notice,
    read_workspace_file_start,
)

__all__ = [
    "SKILLS_DIR",
    "SKILL_FILE",
    "FrontMatterError",
    "Skill",
    "SkillProblem",
    "SkillScan",
    "parse_front_matter",
    "parse_skill",
    "scan_skills",
]

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"

log = get_logger("nanobot_core.prompt")

_FENCE = "---"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# YAML block-scalar indicators: the value then starts on the next, indented line.
_BLOCK_INDICATORS = frozenset({">", "|", ">-", "|-", ">+", "|+"})
_BOOLEANS = {"true": True, "false": False}
# Control and format characters (bidi overrides, zero-width ones), line and paragraph
# separators: in a name, each breaks its line of the prompt or makes it read as another.
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


class FrontMatterError(ConfigError, ValueError):
    """The front matter of a SKILL.md cannot be read; the message says why.

    A `ConfigError` (the front matter configures the skill) and, as before, a
    ``ValueError``.
    """


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """Split `text` into its front-matter fields and the body after the closing fence.

    Raises :class:`FrontMatterError` when the text does not start with a fence,
    the closing fence is missing, a line is not ``key: value``, or a key repeats.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].rstrip() != _FENCE:
        raise FrontMatterError("does not start with a '---' front-matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE)
    except StopIteration:
        raise FrontMatterError("front matter has no closing '---' line") from None
    fields: dict[str, str] = {}
    # The indented lines continuing each key's value, joined once at the end: joining
    # each onto the value so far copied it again per line, quadratic in a long field.
    continued: dict[str, list[str]] = {}
    last_key: str | None = None
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            if last_key is None:
                raise FrontMatterError(f"line {number}: indented line before any key")
            continued.setdefault(last_key, []).append(line.strip())
            continue
        key, colon, value = line.partition(":")
        key = key.strip()
        if not colon or not _KEY.fullmatch(key):
            raise FrontMatterError(
                f"line {number}: expected 'key: value', got {quoted(line.strip())}"
            )
        if key in fields:
            raise FrontMatterError(f"line {number}: key {quoted(key)} appears twice")
        value = value.strip()
        fields[key] = "" if value in _BLOCK_INDICATORS else _unquote(value)
        last_key = key
    for key, parts in continued.items():
        fields[key] = " ".join([fields[key], *parts]).strip()
    body = "\n".join(lines[end + 1 :]).strip()
    return fields, body


@attrs.frozen
class Skill:
    """A usable skill: its name, one-line description, whether it is always on, and its text."""

    name: str
    description: str
    always: bool
    path: str  # relative to the workspace, with '/' separators
    body: str


@attrs.frozen
class SkillProblem:
    """A skill folder that was skipped, and why."""

    path: str
    reason: str


@attrs.frozen
class SkillScan:
    """Every skill of a workspace, sorted by name, and the folders that were skipped."""

    skills: list[Skill]
    problems: list[SkillProblem]


def parse_skill(text: str, *, folder: str, path: str) -> Skill:
    """Build a :class:`Skill` from the text of its SKILL.md, or raise FrontMatterError."""
    fields, body = parse_front_matter(text)
    name = fields.get("name", folder).strip()
    if not name:
        raise FrontMatterError("'name' is empty")
    if any(unicodedata.category(char) in _UNSEEN_CATEGORIES for char in name):
        raise FrontMatterError(
            f"'name' {quoted(name)} holds a control character, a line break or an invisible "
            "formatting character; a skill name is one line of visible text"
        )
    description = " ".join(fields.get("description", "").split())
    if not description:
        raise FrontMatterError("'description' is missing or empty")
    always_text = fields.get("always", "false").strip().lower()
    if always_text not in _BOOLEANS:
        raise FrontMatterError(f"'always' must be true or false, got {quoted(fields['always'])}")
    return Skill(
        name=name, description=description, always=_BOOLEANS[always_text], path=path, body=body
    )


def scan_skills(workspace: Path, *, max_bytes: int = DEFAULT_PROMPT_FILE_BYTES) -> SkillScan:
    """Read every ``skills/<folder>/SKILL.md`` of `workspace`, in a stable order.

    Folders are visited in code-point order of their names (never directory
    order, which differs between file systems); hidden folders and folders
    without a SKILL.md are ignored. When two folders declare the same name, the
    first folder keeps it and the other is reported. A ``skills`` folder that
    cannot be listed is reported as a problem of its own, never raised.

    No more than `max_bytes` of each SKILL.md is read (``prompt.max_file_bytes``),
    so a workspace of many skills costs at most that much per skill: the body
    of a longer one ends with :func:`cut_notice` and a warning names the file,
    and its front matter must close within those bytes.
    """
    root = workspace / SKILLS_DIR
    try:
        folders = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return SkillScan([], [])
    except OSError as exc:
        # The workspace's, not a bug of the section: a problem like an unreadable SKILL.md.
        return SkillScan(
            [], [SkillProblem(SKILLS_DIR, f"cannot list: {type(exc).__name__}: {exc}")]
        )
    skills: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for folder in folders:
        if folder.startswith("."):
            continue
        relative = f"{SKILLS_DIR}/{folder}/{SKILL_FILE}"
        try:
            start = read_workspace_file_start(workspace, relative, max_bytes)
        except FileNotFoundError:
            continue
        except WorkspaceEscapeError as exc:
            problems.append(SkillProblem(relative, str(exc)))
            continue
        except OSError as exc:
            problems.append(SkillProblem(relative, f"cannot read: {type(exc).__name__}: {exc}"))
            continue
        if (binary := binary_reason(start)) is not None:
            problems.append(SkillProblem(relative, binary))
            continue
        text = start.data.decode("utf-8", errors="replace")
        try:
            skill = parse_skill(text, folder=folder, path=relative)
        except FrontMatterError as exc:
            reason = str(exc)
            if start.cut:
                reason += (
                    f" in its first {len(start.data):,} of {start.size:,} bytes, the most read "
                    "(prompt.max_file_bytes)"
                )
            problems.append(SkillProblem(relative, reason))
            continue
        if start.cut:
            log.warning(
                "skill file larger than prompt.max_file_bytes; only its start is read",
                path=str(workspace / relative),
                size=start.size,
                kept=len(start.data),
                max_file_bytes=max_bytes,
            )
            body = f"{skill.body}\n\n{cut_notice(relative, start)}".lstrip()
            skill = attrs.evolve(skill, body=body)
        if skill.name in skills:
            owner = skills[skill.name].path
            problems.append(SkillProblem(relative, f"name {skill.name!r} already used by {owner}"))
            continue
        skills[skill.name] = skill
    return SkillScan(sorted(skills.values(), key=lambda s: s.name), problems)
