"""Helpers shared by the test suite."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from nanobot_core import testing
from nanobot_core.testing_sessions import restore_stop_signals

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"


def data_dir() -> Path:
    """The repository's folder of third-party test data (see ``tests/data/README.md``)."""
    return TEST_DATA


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without its NANOBOT_/OPENAI_/ANTHROPIC_ settings (a developer's own),
    plus `extra`: the variables the ``nanobot_workspace`` fixture takes out, by the same list."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(testing._SETTINGS_PREFIXES)}
    env.update(extra)
    return env


@overload
def run_python(
    code: str,
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[str]: ...


@overload
def run_python(
    code: str,
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes,
    timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[bytes]: ...


def run_python(
    code: str,
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | bytes | None = None,
    timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``python -c CODE ARGS`` in a child process, its output captured: text, bytes when
    `stdin` is bytes; with `check`, a non-zero exit fails the test with the child's stderr."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        input=stdin,
        capture_output=True,
        text=not isinstance(stdin, bytes),
        timeout=timeout,
        check=False,
    )
    # Said here rather than by CalledProcessError, whose message leaves out what the
    # child printed: the traceback that says why is on its stderr.
    assert not check or result.returncode == 0, (
        f"the child exited {result.returncode}; its stderr:\n{result.stderr!s}"
    )
    return result


def run_cli(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    program: Sequence[str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``nanobot-core ARGS`` in a child process (`program`, else ``python -m nanobot_core``),
    reading `stdin` when given."""
    if program is None:
        return testing.run_cli(*args, cwd=cwd, env=env, stdin=stdin, timeout=timeout)
    return subprocess.run(
        [*program, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def cli_process(
    *args: str, cwd: Path, env: Mapping[str, str], ignoring: Sequence[int] = ()
) -> Iterator[subprocess.Popen[str]]:
    """``python -m nanobot_core ARGS`` started in a child process, stdout and stderr piped (text).

    The test signals it, waits for it, reads it; a child still running when the block is left
    (a failed assertion, a `communicate` that timed out) is killed and waited for, so that no
    test leaves one behind. The child starts with the signals `ignoring` ignored, as a job a
    shell starts in the background ignores SIGINT, and one under ``nohup`` SIGHUP.
    """

    def start() -> None:
        # The stop signals act on the child as on a user's command, even where the suite
        # ignores them; then the ones the test asks for are ignored.
        restore_stop_signals()
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)

    with subprocess.Popen(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=start,
    ) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def install_plugin(
    folder: Path, name: str, source: str, *, plugin: str | None = None, version: str = "0.1"
) -> Path:
    """Write module `name` and distribution `name` `version`, naming the module a
    ``nanobot.plugins`` entry point called `plugin` (by default `name`)."""
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[nanobot.plugins]\n{plugin or name} = {name}\n", encoding="utf-8"
    )
    return folder


def plugin_env(site: Path, name: str, **extra: str) -> dict[str, str]:
    """This environment without a developer's settings (`clean_env`), `site` first on PYTHONPATH.

    Of whatever is installed, only the plugin `name` (installed in `site`) is loaded.
    """
    env = clean_env()
    path = [str(site), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONPATH=os.pathsep.join(path), NANOBOT_PLUGINS=name, **extra)
    return env


class ReprRaises:
    """A value a plugin hands back whose repr and str are broken."""

    def __repr__(self) -> str:
        raise RuntimeError("repr called")

    __str__ = __repr__


def plugin_values() -> Any:
    """A hypothesis strategy of values plugin code may hand back, JSON or not: huge ints,
    bytes, sets, objects whose repr raises, containers of them with keys of any type."""
    from hypothesis import strategies as st

    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text()
        | st.binary()
        | st.builds(ReprRaises)
        | st.builds(pow, st.just(10), st.just(5000))
        | st.builds(frozenset, st.lists(st.integers(), max_size=2))
        | st.sampled_from([object()]),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.tuples(inner, inner)
            | st.dictionaries(
                st.text() | st.integers() | st.none() | st.floats(), inner, max_size=4
            )
        ),
        max_leaves=25,
    )
