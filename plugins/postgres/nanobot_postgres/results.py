"""Offloaded tool results in PostgreSQL, readable from every worker.

Governance offloads a huge result to the workspace cache
(``.nanobot/cache/tool-results/<sha256>.txt``) and tells the model to read it
with ``read_file``. With this store the text also goes into
``nanobot_results``, keyed by the same hash; on a machine that has no such
file, the plugin's ``nanobot_before_tool_call`` hook fetches it by its hash
before ``read_file`` runs (a read-through cache), checks the hash, and
writes the file. So the reference in the notice resolves on every worker.

The database holds the exact bytes of the cache file (``bytea``): a result may
hold U+0000, which a PostgreSQL text column refuses, and what is read back must
be the file byte for byte. Rows stored as text before (schema version 1, or a
worker of that version during an upgrade) are still read.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

from nanobot_core.errors import SessionError
from nanobot_core.governance.store import CACHE_DIR, default_store

from nanobot_postgres.store import PostgresSessionStore

__all__ = ["PostgresResultStore", "fetch_into_cache", "reference_hash"]

_REFERENCE = re.compile(r"(?:^|[/\\])\.nanobot[/\\]cache[/\\]tool-results[/\\]([0-9a-f]{64})\.txt$")
# Hashes known to be in the database, so a result offloaded again costs no round trip.
_REMEMBER = 4096


def reference_hash(path: str) -> str | None:
    """The SHA-256 a ``read_file`` path names, when it is an offloaded result's path."""
    match = _REFERENCE.search(path.strip())
    return match.group(1) if match else None


class PostgresResultStore:
    """The offload cache: the workspace's files, and every text also in the database."""

    def __init__(self, sessions: PostgresSessionStore, workspace: Path) -> None:
        self.sessions = sessions
        self.local = default_store(workspace)
        self._stored: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"PostgresResultStore({self.sessions.describe()!r})"

    def put(self, content: str) -> str:
        """Save `content` in the workspace cache and the database; return the path to read."""
        shown = self.local.put(content)
        # Encoded as the workspace cache encodes it (a lone surrogate becomes "?"), so the
        # text in the database has the hash the file is named by.
        data = content.encode("utf-8", "replace")
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self._stored:
            try:
                self.sessions.run(
                    "INSERT INTO nanobot_results (sha256, data, bytes) VALUES (%s, %s, %s) "
                    "ON CONFLICT (sha256) DO NOTHING",
                    (digest, data, len(data)),
                )
            except SessionError as exc:
                # The hook's contract: OSError makes governance truncate instead of offloading.
                raise OSError(str(exc)) from None
            self._stored[digest] = None
            if len(self._stored) > _REMEMBER:
                self._stored.popitem(last=False)
        return shown

    def get(self, digest: str) -> str | None:
        """The text stored under `digest`, if its hash checks out."""
        rows = self.sessions.run(
            "SELECT data, content FROM nanobot_results WHERE sha256 = %s", (digest,)
        )
        if not rows:
            return None
        data, content = rows[0]
        if data is not None:
            body = bytes(data)
        elif isinstance(content, str):  # stored as text before schema version 2
            body = content.encode("utf-8", "replace")
        else:
            return None
        if hashlib.sha256(body).hexdigest() != digest:
            return None
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:  # bytes that match the hash but are not UTF-8: not ours
            return None


def fetch_into_cache(store: PostgresResultStore, workspace: Path, path: Any) -> bool:
    """Write the offloaded result `path` names into the workspace cache if it is missing there."""
    if not isinstance(path, str):
        return False
    digest = reference_hash(path)
    if digest is None or (Path(workspace) / CACHE_DIR / f"{digest}.txt").is_file():
        return False
    content = store.get(digest)
    if content is None:
        return False
    store.local.put(content)
    return True
