"""A throwaway PostgreSQL server in a temporary folder, for tests and benchmarks.

It runs the system's PostgreSQL binaries when they are installed (Debian puts
them in ``/usr/lib/postgresql/<version>/bin``), else those shipped inside the
``pgserver`` wheel (installed with this project's ``test`` extra), so a fresh
machine needs nothing but pip. ``NANOBOT_PG_BIN`` names another ``bin``
folder. PostgreSQL refuses to run as root: under root the server runs as
the unprivileged ``nobody`` user, which owns the temporary folder (and a copy
of the binaries when the originals are not readable to it). It listens on
127.0.0.1 only, on a free port, with password authentication.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

__all__ = ["TemporaryPostgres", "find_binaries"]

_UNPRIVILEGED_USER = "nobody"
_TIMEOUT = 120


def find_binaries() -> Path:
    """The ``bin`` folder holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    override = os.environ.get("NANOBOT_PG_BIN")
    candidates = [override] if override else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version(p), reverse=True
    )
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for candidate in candidates:
        if all((Path(candidate) / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(candidate)
    try:
        # Untyped where installed, absent where the system's binaries serve: either is fine.
        import pgserver  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise RuntimeError(
            "no PostgreSQL binaries: install PostgreSQL (e.g. apt-get install postgresql) "
            "or `pip install pgserver`"
        ) from None
    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def _version(path: str) -> int:
    part = Path(path).parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TemporaryPostgres:
    """Start with :meth:`start` (or ``with``); :attr:`dsn` connects as the superuser."""

    def __init__(self, *, fast: bool = True, max_connections: int = 120) -> None:
        self.fast = fast
        self.max_connections = max_connections
        self.user = "nanobot"
        self.password = "pw-" + secrets.token_hex(8)
        self.database = "nanobot"
        self.port = 0
        self.root: Path | None = None
        self._uid: int | None = None
        self._gid: int | None = None
        self._bin = Path()
        self._options = ""

    @property
    def dsn(self) -> str:
        """A libpq URL for the server's superuser, password included."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str | Path) -> None:
        result = subprocess.run(
            [str(a) for a in args],
            user=self._uid,
            group=self._gid,
            extra_groups=[] if self._uid is not None else None,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
            cwd=self.root,
            env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
        )
        if result.returncode != 0:
            log = self.root / "server.log" if self.root else None
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(
                f"{Path(str(args[0])).name} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\n{tail}"
            )

    def start(self) -> TemporaryPostgres:
        """initdb, then start the server and wait until it accepts connections."""
        self.root = Path(tempfile.mkdtemp(prefix="nanobot-pg-"))
        binaries = find_binaries()
        if os.geteuid() == 0:
            entry = pwd.getpwnam(_UNPRIVILEGED_USER)
            self._uid, self._gid = entry.pw_uid, entry.pw_gid
            os.chown(self.root, self._uid, self._gid)
            if not _readable_by_others(binaries):
                # A venv under a private home: copy the binaries where the user can run them.
                copy = self.root / "pginstall"
                shutil.copytree(binaries.parent, copy, symlinks=True)
                binaries = copy / "bin"
        self._bin = binaries
        password_file = self.root / "password"
        password_file.write_text(self.password + "\n")
        if self._uid is not None:
            os.chown(password_file, self._uid, self._gid or 0)
        data = self.root / "data"
        self._run(
            binaries / "initdb",
            "-D",
            data,
            "-U",
            self.user,
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "-E",
            "UTF8",
            "--no-locale",
        )
        password_file.unlink()
        self.port = _free_port()
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-p {self.port}",
            f"-k {self.root}",
            f"-c max_connections={self.max_connections}",
        ]
        if self.fast:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._options = " ".join(options)
        self.start_server()
        self._create_database()
        return self

    def start_server(self) -> None:
        """Start the initialised server (again, after :meth:`stop_server`) on the same port."""
        assert self.root is not None, "start() first"
        self._run(
            self._bin / "pg_ctl",
            "-D",
            self.root / "data",
            "-l",
            self.root / "server.log",
            "-o",
            self._options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop_server(self, *, mode: str = "fast") -> None:
        """Stop the server, keeping its data: as an administrator would (``pg_ctl stop -m
        fast``), or as a crash would (`mode` ``"immediate"``: no checkpoint, recovery on start).
        """
        assert self.root is not None, "start() first"
        self._run(self._bin / "pg_ctl", "-D", self.root / "data", "-m", mode, "-w", "stop")

    def _create_database(self) -> None:
        import psycopg

        url = f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def create_database(self, name: str, *, owner: str | None = None) -> str:
        """A new empty database on the server, of `owner` (a role) when given; returns its DSN
        (the superuser's). Any name is taken: quoted in the statement, percent-encoded in the
        URL (a space, a quote, a ``/`` in it made either wrong)."""
        import psycopg
        from psycopg import sql

        url = f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if owner is not None:
            statement = sql.SQL("{} OWNER {}").format(statement, sql.Identifier(owner))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement)
        return (
            f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{quote(name, safe='')}"
        )

    def stop(self) -> None:
        """Stop the server at once and delete its folder (idempotent)."""
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run(self._bin / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _readable_by_others(binaries: Path) -> bool:
    """Whether every folder up to `binaries` lets other users in, and the server runs for them."""
    path = binaries.resolve()
    for folder in [path, *path.parents]:
        if not folder.stat().st_mode & 0o001:
            return False
    return bool((path / "postgres").stat().st_mode & 0o005 == 0o005)
