"""Test helpers for plugin authors, also loaded as a pytest plugin (``pytest11`` entry point).

Fixtures:

- ``nanobot_manager``: an isolated :class:`~nanobot_core.PluginManager` with
  autoload off (no installed plugin leaks into the test) and the test's
  ``tmp_path`` as workspace.
- ``nanobot_register``: registers a plugin object with that manager for one
  test and returns its record (``status``, ``error``, ``contributions``).
- ``nanobot_workspace``: the test's ``tmp_path``, empty, made the working
  directory, with every ``NANOBOT_``, ``OPENAI_`` and ``ANTHROPIC_`` variable
  taken out of the environment (a developer's own settings), so that
  :func:`run_cli` and the config loader see only what the test writes there or
  sets; both are put back after the test.

Functions (usable without pytest too):

- :func:`check_tool_contract` / :func:`assert_tool_contract`: the rules every
  tool must follow (name pattern, description, a JSON Schema object for
  parameters, async ``execute``, consistent flags).
- :func:`run_tool`: one call through the same prepare-and-execute path the
  agent uses, so repairs, casting, validation and error results apply.
- :func:`govern_and_check`: governs a history with the built-in stages plus
  yours and asserts every governance invariant on the result.
- :func:`make_config`: a `Config` from a nested mapping shaped like
  ``nanobot.toml`` (errors name the key path).
- :func:`builtin_governor`: a governor over the built-in stages plus yours.
- :func:`run_cli`: ``nanobot-core ARGS`` in a child process, as a user runs it.
- :func:`run_cli_in_terminal`: the same with stdout and stderr on terminals
  (pseudo-terminals), their bytes exactly as written (what a user sees).
- :func:`block_network` (and the ``nanobot_no_network`` fixture): any
  connection or name lookup beyond the loopback interface fails the test.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nanobot_core.config import Config, GovernanceConfig
    from nanobot_core.governance import GovernanceResult, Governor, Stage
    from nanobot_core.kernel.manager import PluginManager
    from nanobot_core.kernel.records import PluginRecord
    from nanobot_core.tools.base import ToolResult

__all__ = [
    "TOOL_NAME_PATTERN",
    "TerminalRun",
    "assert_tool_contract",
    "block_network",
    "builtin_governor",
    "check_tool_contract",
    "govern_and_check",
    "make_config",
    "nanobot_manager",
    "nanobot_no_network",
    "nanobot_register",
    "nanobot_workspace",
    "run_cli",
    "run_cli_in_terminal",
    "run_tool",
]

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# The environment variables that configure nanobot-core or a first-party provider.
_SETTINGS_PREFIXES = ("NANOBOT_", "OPENAI_", "ANTHROPIC_")


def run_cli(
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess[str]:
    """``nanobot-core ARGS`` in a child process of this interpreter, as a user runs it.

    Its output is captured as text; the exit code is ``returncode``. `cwd` and
    `env` default to this process's (a test's ``monkeypatch`` shows), `stdin`
    is written to it when given.
    """
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@attrs.frozen
class TerminalRun:
    """What `run_cli_in_terminal` saw: the bytes on each terminal, and the exit code."""

    stdout: bytes
    stderr: bytes
    returncode: int


def run_cli_in_terminal(
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> TerminalRun:
    """``nanobot-core ARGS`` in a child process whose stdout and stderr are terminals.

    Each is a pseudo-terminal of its own in raw mode, so the bytes the command
    wrote come back exactly (no ``\r`` added before a newline). `cwd`, `env` and
    `stdin` as for `run_cli`; stdin is a pipe. A child still running after
    `timeout` seconds is killed and ``subprocess.TimeoutExpired`` raised.
    """
    import pty
    import selectors
    import time
    import tty

    masters: list[int] = []
    slaves: list[int] = []
    for _ in range(2):
        master, slave = pty.openpty()
        tty.setraw(slave)
        masters.append(master)
        slaves.append(slave)
    command = [sys.executable, "-m", "nanobot_core", *args]
    try:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE,
            stdout=slaves[0],
            stderr=slaves[1],
        )
    finally:
        for slave in slaves:
            os.close(slave)
    received: dict[int, bytearray] = {master: bytearray() for master in masters}
    deadline = time.monotonic() + timeout
    try:
        assert process.stdin is not None
        # A child that exits before reading stdin closes the pipe: nothing to write then.
        with contextlib.suppress(BrokenPipeError), process.stdin:
            process.stdin.write((stdin or "").encode("utf-8"))
        with selectors.DefaultSelector() as selector:
            for master in masters:
                selector.register(master, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(command, timeout)
                for key, _ in selector.select(min(left, 1.0)):
                    try:
                        chunk = os.read(key.fd, 65536)
                    except OSError:  # EIO: every holder of the terminal has closed it
                        chunk = b""
                    if chunk:
                        received[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
        returncode = process.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for master in masters:
            os.close(master)
    return TerminalRun(bytes(received[masters[0]]), bytes(received[masters[1]]), returncode)


def check_tool_contract(tool: Any) -> list[str]:
    """Return every way `tool` (a class or instance) breaks the tool contract; empty when fine."""
    from nanobot_core._containment import describe
    from nanobot_core.kernel.context import PluginContext
    from nanobot_core.schema import validate
    from nanobot_core.tools.base import as_tool

    problems: list[str] = []
    instance: Any = tool
    try:
        built = as_tool(tool, PluginContext.default())
    except Exception as exc:  # reported as a contract problem, with the rest below
        build_error: str | None = f"cannot be built as a tool: {describe(exc)}"
    else:
        build_error = None
        if built is None:
            return ["enabled(ctx) returned false, so the contract cannot be checked"]
        instance = built
    name = getattr(instance, "name", None)
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        problems.append(f"name {name!r} does not match {TOOL_NAME_PATTERN.pattern}")
    description = getattr(instance, "description", None)
    if not isinstance(description, str) or not description.strip():
        problems.append("description is missing or empty")
    parameters = getattr(instance, "parameters", None)
    if not isinstance(parameters, dict):
        problems.append(f"parameters must be a dict, got {type(parameters).__name__}")
    else:
        if parameters.get("type") != "object":
            problems.append('parameters must be a JSON Schema with "type": "object"')
        problems += [
            f"parameters are not a valid JSON Schema: {e}"
            for e in validate(_METASCHEMA, parameters)
        ]
    execute = getattr(tool, "execute", None)
    target = getattr(instance, "execute", execute)
    if not (inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(execute)):
        problems.append("execute must be an async function")
    flags = {f: getattr(instance, f, False) for f in ("read_only", "exclusive", "concurrency_safe")}
    problems += [
        f"flag {f} must be a bool, got {v!r}" for f, v in flags.items() if not isinstance(v, bool)
    ]
    if flags["concurrency_safe"] and flags["exclusive"]:
        problems.append("an exclusive tool cannot be concurrency_safe")
    if build_error is not None and not problems:
        problems.append(build_error)
    return problems


def assert_tool_contract(tool: Any) -> None:
    """Fail with every contract problem of `tool` listed."""
    problems = check_tool_contract(tool)
    if problems:
        raise AssertionError("tool contract broken:\n  " + "\n  ".join(problems))


def run_tool(
    tool: Any,
    raw_arguments: Any = None,
    *,
    name: str | None = None,
    workspace: Path | str | None = None,
    timeout: float = 30.0,
) -> ToolResult:
    """Run one call the way the agent does: prepare (parse, repair, validate, cast), then execute.

    `tool` is a tool (class, instance, @tool function) or a `ToolRegistry`;
    `raw_arguments` is what a model would send (a dict, JSON text, ``None``...).
    Errors of the call come back as a `ToolResult` with ``is_error`` set, never as
    exceptions. A tool whose schema the core would leave out at load (invalid, or too
    costly to check) raises `InvalidSchemaError` naming it, as `ToolRegistry.add` does.
    """
    from nanobot_core.kernel.context import PluginContext
    from nanobot_core.tools.base import as_tool
    from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls
    from nanobot_core.tools.registry import ToolRegistry

    if isinstance(tool, ToolRegistry):
        registry = tool
    else:
        registry = ToolRegistry()
        built = as_tool(tool, PluginContext.default(workspace))
        if built is None:
            raise AssertionError("enabled(ctx) returned false: the tool cannot run")
        registry.add(built)
    call_name = name or registry.names()[0]
    executor = Executor(registry, default_timeout=timeout)
    outcomes = run_calls(
        executor.run([ToolCallRequest(id="call_test", name=call_name, arguments=raw_arguments)])
    )
    return outcomes[0].result


def make_config(data: Mapping[str, Any] | None = None) -> Config:
    """A `Config` from a mapping shaped like ``nanobot.toml``, e.g. ``{"tools": {"disabled": []}}``.

    Raises `ConfigError` naming the key path when a value has the wrong type.
    """
    from nanobot_core.config import structure_config

    return structure_config(data or {}, source="make_config")


def builtin_governor(
    config: Config | GovernanceConfig | None = None,
    *,
    stages: Sequence[Stage] = (),
    counter: Any = None,
    workspace: Path | None = None,
) -> Governor:
    """A governor over the built-in stages plus `stages`, with `counter` (default: the estimate)."""
    from nanobot_core.governance import build_governor, builtin_stages

    return build_governor(config, workspace, [*builtin_stages(), *stages], counter=counter)


def govern_and_check(
    messages: Sequence[Any],
    *,
    stages: Sequence[Stage] = (),
    config: Config | GovernanceConfig | None = None,
    system: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
    workspace: Path | None = None,
) -> GovernanceResult:
    """Govern `messages` with the built-in stages plus `stages`, and assert every invariant.

    Also asserts that the input was not modified and that governing the output
    again changes nothing.
    """
    import copy

    from nanobot_core.config import Config, GovernanceConfig
    from nanobot_core.governance import Governor, builtin_stages
    from nanobot_core.governance.governor import checked_stages
    from nanobot_core.governance.invariants import check_invariants

    settings = config.governance if isinstance(config, Config) else config or GovernanceConfig()
    before = copy.deepcopy(list(messages))
    problems: list[str] = []
    probed = [
        attrs.evolve(stage, func=_purity_probe(stage, problems))
        for stage in checked_stages(stages, "govern_and_check")
    ]
    governor = Governor([*builtin_stages(), *probed], config=settings, workspace=workspace)
    result = governor.govern(messages, system=system, tools=tools)
    problems += check_invariants(result.messages, system=system, tools=tools)
    if list(messages) != before:
        problems.append("the input history was modified")
    again = governor.govern(result.messages, system=system, tools=tools)
    if again.messages != result.messages:
        problems.append("governing the output again changed it (not idempotent)")
    if problems:
        raise AssertionError("governance invariants broken:\n  " + "\n  ".join(problems))
    return result


def _purity_probe(stage: Stage, problems: list[str]) -> Callable[..., Any]:
    """Wrap a stage so that writing into the messages it was handed is reported."""
    import copy

    func = stage.func

    def probe(messages: list[Any], ctx: Any) -> Any:
        snapshot = copy.deepcopy(messages)
        returned = func(messages, ctx)
        if messages != snapshot:
            problems.append(
                f"stage {stage.name!r} modified the messages it was given; stages must be pure "
                "(return new dicts for what they change)"
            )
        return returned

    return probe


# Outside the NanobotError tree on purpose, and not public: it stands in for the
# ``OSError`` a real unreachable host gives, so the code under test must handle it
# exactly as that one (a NanobotError would pass through the runner unwrapped).
class NetworkBlockedError(OSError):
    """A test tried to reach something other than the loopback interface."""


def _is_loopback(host: Any) -> bool:
    import ipaddress

    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def block_network() -> Iterator[None]:
    """Within the block, connecting to or resolving anything but loopback raises.

    Unix-domain sockets and socket pairs are unaffected; only IP addresses and
    host names are checked. A numeric-only ``getaddrinfo`` (``AI_NUMERICHOST``),
    which reads an address without resolving anything, is let through.
    """
    import socket

    def guard(real: Callable[..., Any], host_of: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            host = host_of(*args, **kwargs)
            if host is not _UNIX and not _is_loopback(host):
                raise NetworkBlockedError(f"network access blocked in tests: {host!r}")
            return real(*args, **kwargs)

        return call

    def address_host(address: Any) -> Any:
        return address[0] if isinstance(address, tuple) else _UNIX

    def lookup_host(host: Any, *args: Any, **kwargs: Any) -> Any:
        # A numeric-only lookup (AI_NUMERICHOST) reads an address, and asks no one: it is
        # how a program checks that a value is an IP address the way the C library takes it.
        flags = args[4] if len(args) > 4 else kwargs.get("flags", 0)
        return _UNIX if int(flags) & socket.AI_NUMERICHOST else host

    patches = {
        (socket.socket, "connect"): guard(
            socket.socket.connect, lambda _s, a, *_, **__: address_host(a)
        ),
        (socket.socket, "connect_ex"): guard(
            socket.socket.connect_ex, lambda _s, a, *_, **__: address_host(a)
        ),
        (socket, "create_connection"): guard(socket.create_connection, lambda a, *_, **__: a[0]),
        (socket, "getaddrinfo"): guard(socket.getaddrinfo, lookup_host),
    }
    originals = {key: getattr(*key) for key in patches}
    try:
        for (owner, name), replacement in patches.items():
            setattr(owner, name, replacement)
        yield
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)


_UNIX = object()


@pytest.fixture
def nanobot_no_network() -> Iterator[None]:
    """Fail the test if it connects to or resolves anything beyond the loopback interface."""
    with block_network():
        yield


@pytest.fixture
def nanobot_manager(tmp_path: Path) -> PluginManager:
    """An isolated plugin manager: built-ins only, autoload off, workspace = tmp_path."""
    from nanobot_core.config import Config, PluginsConfig
    from nanobot_core.kernel.manager import PluginManager

    config = Config(plugins=PluginsConfig(disable_autoload=True))
    return PluginManager(config, workspace=tmp_path).load()


@pytest.fixture
def nanobot_register(nanobot_manager: PluginManager) -> Iterator[Callable[..., PluginRecord]]:
    """Register a plugin object with the isolated manager for this test only."""

    def register(plugin: object, name: str = "test-plugin", **info: str) -> PluginRecord:
        return nanobot_manager.register(plugin, name, **info)

    yield register


@pytest.fixture
def nanobot_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory with no NANOBOT_, OPENAI_ or ANTHROPIC_ variable set."""
    return _enter_workspace(tmp_path, monkeypatch)


def _enter_workspace(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make `folder` the working directory and take the settings variables out of the environment.

    `monkeypatch` puts both back when it is undone.
    """
    for name in list(os.environ):
        if name.startswith(_SETTINGS_PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.chdir(folder)
    return folder


# Enough of the JSON Schema meta-schema to catch broken parameter schemas; the
# full meta-schema is applied by the validator when the tool is registered.
_METASCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$ref": "https://json-schema.org/draft/2020-12/schema",
}
