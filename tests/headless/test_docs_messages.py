"""The messages docs/headless.md shows for `run` are what `run` prints, word for word.

Each example block is taken from the doc as written: its wrapped lines joined,
its server URL replaced by the fake server's, and ``...`` matching anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer
from tests.headless.conftest import cli_env
from tests.headless.fake_server import FakeChatServer, Reply, error_reply, text_reply
from tests.helpers import REPO_ROOT, run_cli

DOC = REPO_ROOT / "docs" / "headless.md"
#: The server URLs the examples name, each standing for the server the test runs.
DOC_URLS = ("http://localhost:8000/v1", "https://api.cohere.com/v2")
#: How the examples of a refusal begin, up to the status.
_REFUSAL_START = (
    "Error: provider 'openai': http://localhost:8000/v1/chat/completions refused the request:\n"
)


def _example(start: str) -> str:
    """The one example block of the doc that begins with `start`, its wrapped lines joined."""
    blocks = re.findall(r"```\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    (block,) = [b for b in blocks if b.startswith(start)]
    return " ".join(line.strip() for line in block.splitlines() if line.strip())


def _pattern(example: str, numbers: dict[str, str] | None = None) -> re.Pattern[str]:
    """`example` as a regular expression: its URLs any base URL, ``...`` anything, and each
    text of `numbers` (a number as the doc writes it) the pattern given for it."""
    escaped = re.escape(example)
    for url in DOC_URLS:
        escaped = escaped.replace(re.escape(url), r"http://127\.0\.0\.1:\d+/v1")
    for text, pattern in (numbers or {}).items():
        escaped = escaped.replace(re.escape(text), pattern)
    return re.compile(escaped.replace(re.escape("..."), ".*"))


def _stderr_lines(stderr: str, start: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(start)]


def _run(server_url: str, workspace: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    result = run_cli("run", "hi", *args, cwd=workspace, env=env, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr


def test_the_retry_line_is_the_documented_one(server: FakeChatServer, tmp_path: Path) -> None:
    """A 503 with the default four retries is announced as the doc's retry line shows it."""
    server.add(Reply(status=503, body={"error": {"message": "overloaded"}}), text_reply("ready"))
    env = {**cli_env(server), "NANOBOT_PROVIDER__MAX_RETRIES": "4"}
    code, stderr = _run(server.base_url, tmp_path, env)
    assert code == 0, stderr
    expected = _pattern(_example("nanobot: provider:"), {"0.41": r"\d+\.\d\d"})
    (line,) = _stderr_lines(stderr, "nanobot: provider:")
    assert expected.fullmatch(line), (expected.pattern, line)


def test_a_refused_request_is_reported_as_documented(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """vLLM's 400 for a tool choice it was not started for gives the doc's error, exit 1."""
    server.add(
        error_reply(
            400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'
        )
    )
    code, stderr = _run(server.base_url, tmp_path, cli_env(server))
    assert code == 1
    expected = _pattern(_example(_REFUSAL_START + "HTTP 400"))
    (line,) = _stderr_lines(stderr, "Error:")
    assert expected.fullmatch(line), (expected.pattern, line)
    assert len(server.requests) == 1


def test_a_model_the_server_does_not_have_is_reported_as_documented(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """vLLM's 404 for a model it does not serve gives the doc's error, naming the settings."""
    vllm = {
        "object": "error",
        "message": "The model `qwen3:8` does not exist.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    server.add(Reply(status=404, body=vllm))
    code, stderr = _run(server.base_url, tmp_path, cli_env(server), "--model", "qwen3:8")
    assert code == 1
    expected = _pattern(_example(_REFUSAL_START + "HTTP 404"))
    (line,) = _stderr_lines(stderr, "Error:")
    assert expected.fullmatch(line), (expected.pattern, line)
    assert len(server.requests) == 1


def test_a_reply_over_the_size_limit_is_reported_as_documented(tmp_path: Path) -> None:
    """A chunked 200 body past provider.max_reply_bytes gives the doc's error, tried once."""
    requests: list[LoopbackRequest] = []

    def endless() -> Iterator[bytes]:
        while True:
            yield b"[{}," * 256

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        requests.append(request)
        return LoopbackResponse(200, chunks=endless())

    with LoopbackServer(answer) as loopback, FakeChatServer() as unused:
        env = {
            **cli_env(unused),
            "NANOBOT_BASE_URL": f"{loopback.url}/v1",
            "NANOBOT_PROVIDER__MAX_REPLY_BYTES": "4096",
        }
        code, stderr = _run(loopback.url, tmp_path, env)
    assert code == 1
    expected = _pattern(_example("Error: provider 'openai': the reply from"), {"67108864": "4096"})
    (line,) = _stderr_lines(stderr, "Error:")
    assert expected.fullmatch(line), (expected.pattern, line)
    assert len(requests) == 1


def test_a_reply_of_another_api_is_reported_as_documented(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """Cohere's v2 chat body (no `choices`) gives the doc's error naming its keys, exit 1."""
    cohere = {
        "id": "c0ffee",
        "finish_reason": "COMPLETE",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        "usage": {"tokens": {"input_tokens": 3, "output_tokens": 1}},
    }
    server.add(Reply(body=cohere))
    code, stderr = _run(server.base_url, tmp_path, cli_env(server))
    assert code == 1
    expected = _pattern(_example("Error: provider 'openai': https://api.cohere.com"))
    (line,) = _stderr_lines(stderr, "Error:")
    assert expected.fullmatch(line), (expected.pattern, line)


def test_a_legacy_completion_names_the_keys_of_its_choice(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A `choices[0].text` reply is exit 1 with the choice's keys in the doc's words."""
    text = DOC.read_text(encoding="utf-8")
    (quoted,) = re.findall(r"\(`(no 'message' object in choices\[0\]:[^`]*)`\)", text)
    quoted = " ".join(quoted.split())
    legacy = {"choices": [{"index": 0, "text": "hello", "finish_reason": "stop"}]}
    server.add(Reply(body={"id": "cmpl-1", "object": "text_completion", **legacy}))
    code, stderr = _run(server.base_url, tmp_path, cli_env(server))
    assert code == 1
    (line,) = _stderr_lines(stderr, "Error:")
    assert "not a chat completion" in line
    assert re.sub(r"[()]", "", line).endswith(quoted), (quoted, line)
