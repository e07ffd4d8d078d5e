"""`nanobot-core run` with a plugin's provider that makes an author's honest mistake."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import install_plugin, plugin_env, run_cli

TIMEOUT = 60
PLUGIN = "mistaken"  # the module and distribution `install_plugin` writes, version 0.1
NAMED = f"plugin {PLUGIN!r} from {PLUGIN} 0.1"

# The provider's `complete` does what the MISTAKE environment variable says.
MISTAKEN = """
import os
from nanobot_core import ProviderError, hookimpl


class Provider:
    name = "mistaken"

    def __init__(self, config, progress=None):
        pass

    async def complete(self, messages, tools):
        mistake = os.environ["MISTAKE"]
        if mistake == "dict":
            return {"role": "assistant", "content": "hi"}
        if mistake == "str":
            return "hi"
        if mistake == "none":
            return None
        if mistake == "finish-list":
            from nanobot_core.providers import ProviderReply
            return ProviderReply({"role": "assistant", "content": "hi"}, finish_reason=["stop"])
        if mistake == "refused":
            from nanobot_core.providers import ProviderReply
            return ProviderReply({"role": "assistant", "content": "I can"}, finish_reason="refusal")
        if mistake == "provider-error":
            raise ProviderError("upstream said no")
        if mistake == "provider-error-named":
            raise ProviderError("provider 'mistaken' did not get an answer")
        if mistake == "provider-error-released":
            raise ProviderError("mistaken 0.1 sends no request: messages[1] is odd")
        raise AssertionError(mistake)


@hookimpl
def nanobot_providers(ctx):
    return [Provider]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mistaken plugin, installed in a folder put on PYTHONPATH."""
    return install_plugin(tmp_path_factory.mktemp("mistakes") / "site", PLUGIN, MISTAKEN)


def _run(site: Path, workspace: Path, mistake: str) -> subprocess.CompletedProcess[str]:
    env = plugin_env(site, PLUGIN, NANOBOT_PROVIDER__NAME="mistaken", MISTAKE=mistake)
    return run_cli("run", "hi", cwd=workspace, env=env, timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        ("dict", f"Error: provider 'mistaken' of {NAMED} returned a dict from complete, not a "),
        ("str", f"Error: provider 'mistaken' of {NAMED} returned a str from complete, not a "),
        ("none", f"Error: provider 'mistaken' of {NAMED} returned None from complete, not a "),
    ],
)
def test_a_reply_that_is_no_provider_reply_fails_the_run_naming_the_plugin(
    site: Path, tmp_path: Path, mistake: str, said: str
) -> None:
    """A `complete` that returns a message, a text or nothing is exit 1 naming the plugin."""
    result = _run(site, tmp_path, mistake)
    assert result.returncode == 1, result.stderr
    assert f"{said}nanobot_core.providers.ProviderReply" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        ("provider-error", f"Error: provider 'mistaken' of {NAMED}: upstream said no"),
        (
            "provider-error-named",
            f"Error: provider 'mistaken' of {NAMED} did not get an answer",
        ),
        (
            # A message naming the distribution and version, as a provider used on its own
            # must: they are said once.
            "provider-error-released",
            f"Error: provider 'mistaken' of {NAMED} sends no request: messages[1] is odd",
        ),
    ],
)
def test_a_provider_error_of_a_plugin_names_the_plugin_and_its_version(
    site: Path, tmp_path: Path, mistake: str, said: str
) -> None:
    """The ProviderError a plugin's provider raises reaches the user with its plugin named once."""
    result = _run(site, tmp_path, mistake)
    assert result.returncode == 1, result.stderr
    assert said in result.stderr.splitlines()
    assert "Traceback" not in result.stderr


def test_a_finish_reason_that_is_no_text_fails_the_run_naming_the_plugin(
    site: Path, tmp_path: Path
) -> None:
    """A ProviderReply whose finish_reason is a list is exit 1 naming the plugin, no traceback."""
    result = _run(site, tmp_path, "finish-list")
    assert result.returncode == 1, result.stderr
    assert f"Error: provider 'mistaken' of {NAMED} returned a finish_reason" in result.stderr
    assert "list" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_refused_reply_is_the_answer_and_stderr_says_it_may_be_partial(
    site: Path, tmp_path: Path
) -> None:
    """finish_reason 'refusal' keeps the text as the answer (exit 0) with a notice on stderr."""
    result = _run(site, tmp_path, "refused")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "I can\n"
    assert "stopped by the provider's safety system (finish_reason 'refusal')" in result.stderr
