"""A failed provider call leaves the user message persisted; the next turn still alternates."""

from __future__ import annotations

from pathlib import Path

from tests.headless.fake_server import FakeChatServer, error_reply, text_reply
from tests.headless.test_cli_run import _cli, _session_lines


def test_the_turn_after_a_failed_call_sends_one_user_message(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """[system, user, user] is never sent: the two turns reach the model as one message."""
    workspace = tmp_path
    server.add(error_reply(400, "context length exceeded"), text_reply("Both done."))
    failed = _cli(server, workspace, "run", "first question")
    assert failed.returncode == 1
    answered = _cli(server, workspace, "run", "second question")
    assert answered.returncode == 0, answered.stderr
    assert "Both done." in answered.stdout
    sent = server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    text = sent[1]["content"]
    assert text.index("first question") < text.index("second question")
    assert text.count("[Runtime Context") == 1 and text.rstrip().endswith("[/Runtime Context]")
    # The session keeps both user messages as they were: only the model copy is merged.
    stored = [line for line in _session_lines(workspace) if line.get("role") == "user"]
    assert len(stored) == 2
