"""The CLI in a hostile environment: unusable paths and broken standard streams.

Whatever is wrong, the command names what and where on stderr and exits 1 or 2,
never with a Python traceback.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_cli, run_python
from tests.kernel.test_readme_cli import _commands

# One path component longer than any file system allows (NAME_MAX is 255): every
# look at such a path fails with ENAMETOOLONG, for root as for anyone.
TOO_LONG = "n" * 300


def _env() -> dict[str, str]:
    return clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=_env(), timeout=60)


def _history(folder: Path) -> Path:
    path = folder / "history.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    return path


def _workspace_commands(folder: Path) -> tuple[list[str], ...]:
    """Every command that takes --workspace, with the arguments it needs (a history in `folder`)."""
    history = _history(folder)
    return (
        ["tools"],
        ["plugins"],
        ["prompt"],
        ["init"],
        ["call", "read_file", "{}"],
        ["govern", str(history)],
        ["run", "hi"],
        ["sessions"],
        ["sessions", "show", "default"],
        ["sessions", "export", "--output", str(folder / "out.jsonl")],
        ["sessions", "import", str(history)],
    )


def _output_commands(folder: Path) -> tuple[list[str], ...]:
    """Every command with an --output option, ready for ``--output PATH``."""
    return (["govern", str(_history(folder))], ["sessions", "export"])


def test_a_workspace_that_cannot_be_looked_at_is_a_usage_error(tmp_path: Path) -> None:
    """A --workspace whose name is too long or that loops exits 2 naming it, no traceback."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for workspace in (str(tmp_path / TOO_LONG), str(tmp_path / "loop" / "inside")):
        for command in (["tools"], ["plugins"], ["sessions"], ["prompt"]):
            result = _cli(*command, "--workspace", workspace, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert "Traceback" not in result.stderr
            assert "--workspace" in result.stderr
            assert "cannot be used" in result.stderr


def test_a_workspace_that_is_a_link_loop_says_so(tmp_path: Path) -> None:
    """A --workspace that is a symbolic link loop is exit 2 saying so, for every command."""
    (tmp_path / "loop").symlink_to("loop")
    loop = os.strerror(errno.ELOOP)  # "Too many levels of symbolic links"
    commands = _workspace_commands(tmp_path)
    for command in commands:
        for workspace in ("loop", "loop/inside"):
            result = _cli(*command, "--workspace", workspace, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert result.stderr.endswith(
                f"Error: Invalid value for '--workspace': {workspace} cannot be used: {loop}\n"
            ), (command, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl", "loop"]


def test_a_workspace_that_is_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    """A --workspace that is a regular file is exit 2 in the CLI's words, for every command."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    commands = _workspace_commands(tmp_path)
    for command in commands:
        result = _cli(*command, "--workspace", "a-file", cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.endswith(
            "Error: Invalid value for '--workspace': a-file is not a directory\n"
        ), (command, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "history.jsonl"]


def test_an_output_or_directory_under_a_link_loop_says_so(tmp_path: Path) -> None:
    """--output and --directory in a symbolic link loop are exit 2 saying so, not missing."""
    (tmp_path / "loop").symlink_to("loop")
    loop = os.strerror(errno.ELOOP)
    for command in _output_commands(tmp_path):
        result = _cli(*command, "--output", "loop/out.jsonl", cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.endswith(
            f"Error: Invalid value for '--output': the folder loop cannot be used: {loop}\n"
        ), (command, result.stderr)
    inside = _cli("new-plugin", "nanobot-hostile", "--directory", "loop/inside", cwd=tmp_path)
    assert inside.returncode == 2, inside.stderr
    assert inside.stderr.endswith(
        f"Error: cannot use loop/inside: {loop}; choose another --directory\n"
    )
    taken = _cli("new-plugin", "nanobot-hostile", "--directory", "loop", cwd=tmp_path)
    assert taken.returncode == 2, taken.stderr
    assert taken.stderr.endswith("Error: loop already exists; choose another --directory\n")


def test_an_input_file_that_is_a_link_loop_says_so(tmp_path: Path) -> None:
    """The file govern and sessions import read, as a link loop, is exit 2 saying so."""
    (tmp_path / "loop").symlink_to("loop")
    loop = os.strerror(errno.ELOOP)
    for command in (["govern", "loop"], ["sessions", "import", "loop"]):
        result = _cli(*command, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.endswith(f"Error: cannot read loop: {loop}\n"), (
            command,
            result.stderr,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


def test_an_output_link_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    """--output through a link to a file, or to nothing, writes that file as cp would."""
    for command in _output_commands(tmp_path):
        assert _cli(*command, "--output", "plain.jsonl", cwd=tmp_path).returncode == 0
        expected = (tmp_path / "plain.jsonl").read_bytes()
        (tmp_path / "real.jsonl").write_bytes(b"old\n")
        for link, target in (("to-file", "real.jsonl"), ("to-nothing", "new.jsonl")):
            (tmp_path / link).symlink_to(target)
            result = _cli(*command, "--output", link, cwd=tmp_path)
            assert result.returncode == 0, (command, result.stderr)
            assert os.readlink(tmp_path / link) == target
            assert (tmp_path / target).read_bytes() == expected, command
            (tmp_path / link).unlink()
        for name in ("plain.jsonl", "real.jsonl", "new.jsonl"):
            (tmp_path / name).unlink()


def test_an_output_link_that_cannot_be_written_through_is_a_usage_error(tmp_path: Path) -> None:
    """--output as a link loop, or a link to nothing in a missing folder, is exit 2, link kept."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "astray").symlink_to("gone/out.jsonl")
    loop = os.strerror(errno.ELOOP)
    gone = tmp_path / "gone"
    for command in _output_commands(tmp_path):
        result = _cli(*command, "--output", "loop", cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.endswith(
            f"Error: Invalid value for '--output': loop cannot be used: {loop}\n"
        ), (command, result.stderr)
        result = _cli(*command, "--output", "astray", cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.endswith(
            f"Error: Invalid value for '--output': astray links to {gone / 'out.jsonl'}, "
            f"and the folder {gone} does not exist\n"
        ), (command, result.stderr)
    assert os.readlink(tmp_path / "loop") == "loop"
    assert os.readlink(tmp_path / "astray") == "gone/out.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["astray", "history.jsonl", "loop"]


def test_every_output_option_is_among_the_output_commands(tmp_path: Path) -> None:
    """The commands the --output tests run are every command that has an --output option."""
    with_output = {
        path
        for path, command in _commands().items()
        if any("--output" in param.opts for param in command.params)
    }
    tested = {
        " ".join(word for word in command if not word.startswith(str(tmp_path)))
        for command in _output_commands(tmp_path)
    }
    assert with_output == tested


def test_an_output_that_is_a_directory_says_so(tmp_path: Path) -> None:
    """--output naming a directory, or a link to one, is exit 2 in the CLI's words."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "to-dir").symlink_to("adir")
    for command in _output_commands(tmp_path):
        for output in ("adir", "to-dir", "adir/"):
            result = _cli(*command, "--output", output, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert result.stderr.endswith(
                f"Error: Invalid value for '--output': {output} is a directory\n"
            ), (command, result.stderr)
            assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "history.jsonl", "to-dir"]
    assert list((tmp_path / "adir").iterdir()) == []


def test_an_output_ending_with_a_slash_is_never_written_as_a_file(tmp_path: Path) -> None:
    """--output FILE/ or NEW/ names a folder: exit 2 before any work, FILE kept, NEW not made."""
    (tmp_path / "a-file").write_bytes(b"old\n")
    expected = {
        "a-file/": f"a-file/ cannot be used: {os.strerror(errno.ENOTDIR)}",
        "new/": "new/ names a folder (it ends with a slash), and the output is a file",
    }
    for command in _output_commands(tmp_path):
        for output, problem in expected.items():
            result = _cli(*command, "--output", output, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert result.stderr.endswith(f"Error: Invalid value for '--output': {problem}\n"), (
                command,
                result.stderr,
            )
            assert result.stdout == ""
    assert (tmp_path / "a-file").read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "history.jsonl"]


# A regular file that nobody may write, root included: the kernel checks the mode
# bits of a /proc/sys file itself. Its folder cannot be written either.
READ_ONLY_FILE = "/proc/sys/kernel/osrelease"


def test_an_output_that_is_not_writable_is_refused_before_any_work(tmp_path: Path) -> None:
    """--output naming a file, or a link to one, that cannot be written is exit 2 before work."""
    (tmp_path / "to-read-only").symlink_to(READ_ONLY_FILE)
    expected = {
        READ_ONLY_FILE: f"{READ_ONLY_FILE} is not writable",
        "to-read-only": f"to-read-only links to {READ_ONLY_FILE}, which is not writable",
    }
    for command in _output_commands(tmp_path):
        for output, problem in expected.items():
            result = _cli(*command, "--output", output, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert result.stderr.endswith(f"Error: Invalid value for '--output': {problem}\n"), (
                command,
                result.stderr,
            )
            assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl", "to-read-only"]


def test_an_output_in_a_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    """A file replaced atomically needs a writable folder: exit 2 naming it, before any work."""
    # /proc/self is a folder no one can make a file in, root included; the command's
    # own /proc/self/comm is a file it may write. The link resolves in the command.
    (tmp_path / "to-comm").symlink_to("/proc/self/comm")
    why = "is not writable: the output is replaced atomically, by a new file made in that folder"
    expected = {
        "/proc/self/new.jsonl": re.escape(f"the folder /proc/self {why}"),
        "to-comm": r"to-comm links to /proc/(\d+)/comm, and the folder /proc/\1 " + re.escape(why),
    }
    for command in _output_commands(tmp_path):
        for output, problem in expected.items():
            result = _cli(*command, "--output", output, cwd=tmp_path)
            assert result.returncode == 2, (command, result.stderr)
            assert re.search(
                f"Error: Invalid value for '--output': {problem}\n\\Z", result.stderr
            ), (command, result.stderr)
            assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl", "to-comm"]


def test_a_deleted_working_directory_is_a_usage_error(tmp_path: Path) -> None:
    """Run from a folder that was removed, a command exits 2 saying so, no traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, runpy, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
    script += "sys.argv = ['nanobot-core', 'tools']; runpy.run_module('nanobot_core', "
    script += "run_name='__main__')"
    result = run_python(script, env=_env())
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "the working directory cannot be used" in result.stderr


def test_an_output_path_that_cannot_be_looked_at_is_an_error(tmp_path: Path) -> None:
    """govern --output in a folder or with a name too long exits 2 naming it, no traceback."""
    history = _history(tmp_path)
    for output in (tmp_path / TOO_LONG / "out.jsonl", tmp_path / TOO_LONG):
        result = _cli("govern", str(history), "--output", str(output), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "File name too long" in result.stderr
        assert "--output" in result.stderr


def test_new_plugin_into_a_directory_that_cannot_be_looked_at(tmp_path: Path) -> None:
    """new-plugin --directory with a name too long exits 2 naming it, no traceback."""
    target = tmp_path / TOO_LONG
    result = _cli("new-plugin", "nanobot-hostile", "--directory", str(target), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "File name too long" in result.stderr
    assert "--directory" in result.stderr


def _with_stdout_closed(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``nanobot-core ARGS`` started with no file descriptor 1 at all (``>&-`` in a shell)."""
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=_env(),
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.close(1),
    )


def test_a_closed_stdout_discards_the_output_without_a_traceback(tmp_path: Path) -> None:
    """With stdout closed, the command runs, its output goes nowhere, its exit code stands."""
    history = _history(tmp_path)
    for args in (["tools"], ["tools", "--json"], ["govern", str(history), "--json"]):
        result = _with_stdout_closed(*args, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stderr == "", args
    failed = _with_stdout_closed("govern", str(tmp_path / "missing.jsonl"), cwd=tmp_path)
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr
    assert "cannot read" in failed.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_stdout_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    """Output to a full disk exits 1 with one line naming stdout and why, no traceback."""
    history = _history(tmp_path)
    for args in (["tools"], ["--version"], ["govern", str(history), "--json"]):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                [sys.executable, "-m", "nanobot_core", *args],
                cwd=tmp_path,
                env=_env(),
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr == "Error: cannot write to stdout: No space left on device\n", args


def _strict_utf8(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``nanobot-core ARGS`` with the strict UTF-8 stdin and stdout of a locale like en_US.UTF-8.

    Python makes them strict in any UTF-8 locale but C.UTF-8; PYTHONIOENCODING
    gives the same streams on a machine that has no such locale installed.
    """
    env = {**_env(), "PYTHONIOENCODING": "utf-8:strict"}
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_bytes_on_stdin_that_are_not_utf8_are_no_traceback(tmp_path: Path) -> None:
    """`call TOOL -` and `run -` read arguments and prompt that are not UTF-8 as any other."""
    called = _strict_utf8("call", "find_files", "-", cwd=tmp_path, stdin=b'{"pattern": "\xff"}')
    assert called.returncode == 0, called.stderr
    assert b"Traceback" not in called.stderr
    assert b"No files match" in called.stdout
    # A remote server and no API key: exit 2 once the prompt is read, before any request.
    ran = _strict_utf8(
        "run", "-", "--base-url", "https://example.invalid/v1", cwd=tmp_path, stdin=b"hi \xff"
    )
    assert ran.returncode == 2, ran.stderr
    assert b"Traceback" not in ran.stderr
    assert b"provider.api_key is not set" in ran.stderr


def test_file_names_that_are_not_utf8_are_printed_as_they_are(tmp_path: Path) -> None:
    """A file name's undecodable bytes reach stdout unchanged, as `ls` prints them."""
    name = os.fsdecode(b"h\xff.jsonl")
    (tmp_path / name).write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    governed = _strict_utf8("govern", name, cwd=tmp_path)
    assert governed.returncode == 0, governed.stderr
    assert b"h\xff.jsonl: 1 -> 1 messages" in governed.stdout
    found = _strict_utf8("call", "find_files", '{"pattern": "*"}', cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert b"h\xff.jsonl" in found.stdout.splitlines()


def _with_small_input_limit(
    *args: str, cwd: Path, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    """``nanobot-core ARGS`` reading at most 1000 bytes of one input (not 1 GiB: a quick test)."""
    script = "import sys; import nanobot_core.cli as cli; cli.MAX_INPUT_BYTES = 1000; "
    script += "cli.main(sys.argv[1:])"
    return run_python(script, *args, cwd=cwd, env=_env(), stdin=stdin)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_input_is_refused_at_the_limit(tmp_path: Path) -> None:
    """/dev/zero as a history or export, or a flood on stdin, is refused, not read forever."""
    for args in (["govern", "/dev/zero"], ["sessions", "import", "/dev/zero"]):
        result = _with_small_input_limit(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.decode() == (
            "Error: cannot read /dev/zero: more than 1000 bytes, the most read of one input "
            "(stopped reading there)\n"
        )
    flood = b"y\n" * 1000
    governed = _with_small_input_limit("govern", "-", cwd=tmp_path, stdin=flood)
    assert governed.returncode == 2
    assert b"Error: cannot read stdin: more than 1000 bytes" in governed.stderr
    for args in (["run", "-"], ["call", "read_file", "-"]):
        result = _with_small_input_limit(*args, cwd=tmp_path, stdin=flood)
        assert result.returncode == 2, (args, result.stderr)
        assert b"stdin gave more than 1000 characters" in result.stderr
        assert b"Traceback" not in result.stderr


def test_an_input_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    """Reading in pieces changes nothing for an input below the limit."""
    history = _history(tmp_path)
    result = _with_small_input_limit("govern", str(history), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert b'"content": "hi"' in result.stdout


def test_a_global_option_without_its_value_after_the_subcommand(tmp_path: Path) -> None:
    """`tools --config` says --config needs a value, not that the command is missing."""
    for option in ("--config", "--log-format", "--log-level"):
        result = _cli("tools", option, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"Error: Option '{option}' requires an argument." in result.stderr


def _capped_address_space() -> None:
    import resource

    # Far above what the command needs (about 300 MiB here), far below the 1 GiB limit.
    cap = 768 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_arguments_on_stdin_are_read_where_the_address_space_is_capped(tmp_path: Path) -> None:
    """`call TOOL -` under a capped address space reads its few bytes, not room for 1 GiB."""
    result = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "call", "list_dir", "-", "--json"],
        input='{"path": "."}',
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=60,
        preexec_fn=_capped_address_space,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"ok": true' in result.stdout
    assert "MemoryError" not in result.stderr


def test_running_out_of_memory_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A history larger than the capped address space ends with exit 1 and one message."""
    history = tmp_path / "huge.jsonl"
    with history.open("wb") as handle:
        handle.truncate(900 * 1024 * 1024)  # sparse: no disk used; under the 1 GiB input limit
    result = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "govern", str(history), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=120,
        preexec_fn=_capped_address_space,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("Error: out of memory"), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
