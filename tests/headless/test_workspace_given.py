"""The workspace a program gives `PluginManager` and `Runner` in code, checked when given.

A path no folder can be at is refused at once, naming it; a folder not made yet
is accepted by the manager (a program may make it next) and refused by a runner
built while it is still missing. Before, all of it was accepted, and each file
tool failed at its first call with a system error (``No such file or directory: .``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import Config, PluginManager, Runner, WorkspaceError
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, SectionContext
from nanobot_core.providers import OpenAIProvider
from nanobot_core.tools.executor import Executor
from nanobot_core.tools.registry import ToolRegistry
from tests.headless.conftest import provider_config
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply

#: A provider on this machine: built without a key, never called here.
LOOPBACK = "http://127.0.0.1:9/v1"


def _config() -> Config:
    return Config(provider=provider_config(LOOPBACK))


def _manager(workspace: Path | str) -> PluginManager:
    return PluginManager(_config(), workspace=workspace, autoload=False)


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("notes.txt", "is not a folder"),
        ("notes.txt/project", "is below a file, where no folder can be made"),
        ("loop", "cannot be used: Too many levels of symbolic links"),
    ],
)
def test_a_workspace_no_folder_can_be_at_is_refused_when_given_naming_it(
    tmp_path: Path, where: str, problem: str
) -> None:
    """A file, a path through one or a link loop: WorkspaceError at once, path and remedy said."""
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    given_path = tmp_path / where
    with pytest.raises(WorkspaceError) as refused:
        _manager(given_path)
    message = str(refused.value)
    assert message.startswith(f"PluginManager: workspace {str(given_path)!r}")
    assert f"{problem}: give the folder the agent works in" in message
    assert isinstance(refused.value, ValueError)


def test_a_relative_workspace_is_named_as_given_and_where_it_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path is named as the program wrote it, and where it led."""
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkspaceError, match=re.escape(f"'notes.txt' ({tmp_path.resolve()}")):
        _manager("notes.txt")


def test_a_folder_made_after_the_manager_is_the_runners_workspace(tmp_path: Path) -> None:
    """A missing folder is accepted by the manager; a runner is refused until it is made."""
    later = tmp_path / "later"
    pm = _manager(later).load()
    assert pm.context.workspace == later.resolve()
    with pytest.raises(WorkspaceError) as refused:
        Runner.prepare_from_plugins(pm)
    assert str(refused.value) == (
        f"Runner: the plugin manager's workspace {str(later.resolve())!r} does not exist: "
        "make the folder before building the runner, or give the folder the agent works in"
    )
    later.mkdir()
    build = Runner.prepare_from_plugins(pm)
    with JsonlSessionStore(later).open("s") as session:
        assert build(session).prompt_context.workspace == later.resolve()


def test_a_runner_given_a_prompt_context_whose_workspace_is_missing_is_refused(
    tmp_path: Path,
) -> None:
    """`Runner(...)` built part by part checks the workspace of its `prompt_context`."""
    config = Config()
    registry = ToolRegistry()
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    with JsonlSessionStore(sessions).open("s") as session:
        for context, problem in (
            (SectionContext(workspace=tmp_path / "typo"), "does not exist"),
            (SectionContext(workspace=sessions / ".nanobot"), None),
        ):
            try:
                Runner(
                    OpenAIProvider(provider_config(LOOPBACK)),
                    registry,
                    Executor(registry, default_timeout=5.0),
                    Governor(builtin_stages(), config=config.governance, workspace=tmp_path),
                    PromptBuilder([], config=config),
                    session,
                    prompt_context=context,
                )
            except WorkspaceError as exc:
                assert problem is not None, exc
                assert str(exc).startswith(
                    f"Runner: prompt_context.workspace {str(context.workspace)!r} {problem}: "
                )
            else:
                assert problem is None


#: What each part of a generated path is on disk: a folder, a file, or nothing yet.
_KINDS = st.lists(st.sampled_from(["folder", "file", "missing"]), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    kinds=_KINDS,
    name=st.text(
        st.characters(codec="utf-8", exclude_characters="/\x00", exclude_categories=("Cs",)),
        min_size=1,
        max_size=12,
    ).filter(lambda n: n not in {".", ".."}),
)
def test_a_workspace_is_accepted_exactly_when_a_folder_is_or_can_be_made_there(
    kinds: list[str], name: str
) -> None:
    """Whatever path a program gives: accepted iff a folder is there or `mkdir -p` could make
    it; refused otherwise, naming the path as given."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch).resolve()
        for depth, kind in enumerate(kinds):
            path = path / f"{name}{depth}"
            if kind == "folder" and path.parent.is_dir():
                path.mkdir()
            elif kind == "file" and path.parent.is_dir():
                path.write_text("x", encoding="utf-8")
        try:
            pm = _manager(path)
        except WorkspaceError as exc:
            assert str(exc).startswith(f"PluginManager: workspace {str(path)!r} ")
            with pytest.raises(OSError):
                os.makedirs(path, exist_ok=True)
        else:
            assert pm.context.workspace == path
            os.makedirs(path, exist_ok=True)  # a folder can be there


#: What each built-in tool is called with, as a model calls it.
_CALLS = [
    ("read_file", {"path": "notes.txt"}),
    ("write_file", {"path": "notes.txt", "content": "x"}),
    ("edit_file", {"path": "notes.txt", "old_text": "a", "new_text": "b"}),
    ("list_dir", {}),
    ("find_files", {"pattern": "**/*.txt"}),
    ("grep", {"pattern": "alpha"}),
]


def test_a_workspace_removed_during_a_session_is_what_each_tool_answers(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """The folder removed after the runner was built: the turn goes on to the model's answer,
    and every file tool's result says the workspace folder is gone, not where it was."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    config = Config(provider=provider_config(server.base_url))
    server.add(
        tool_call_reply(
            [(f"c{index}", name, json.dumps(args)) for index, (name, args) in enumerate(_CALLS)]
        ),
        text_reply("the workspace is gone"),
    )
    sessions = tmp_path / "sessions"  # kept apart: the session outlives the workspace
    sessions.mkdir()
    pm = PluginManager(config, workspace=workspace, autoload=False).load()
    with JsonlSessionStore(sessions).open("s") as session:
        runner = Runner.from_plugins(pm, session=session)
        shutil.rmtree(workspace)
        result = runner.run_turn("look at notes.txt")
    assert result.answer == "the workspace is gone" and result.stop_reason == "answer"
    assert [(call.name, call.is_error) for call in result.tool_calls] == [
        (name, True) for name, _ in _CALLS
    ]
    answers = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    gone = (
        "Error: the workspace folder is gone (removed, moved or replaced since the file tools "
        "were set up): no file can be read, written, listed or searched until it is back; "
        "tell the user\n\n"  # then the executor's advice on any error
    )
    assert [m["content"].startswith(gone) for m in answers] == [True] * len(_CALLS)
    assert not any(str(tmp_path) in m["content"] for m in answers)
