"""Session stores go by the kernel's one name-clash rule, as tools, stages and sections do."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import Config, PluginsConfig, SessionsConfig
from nanobot_core.hookspecs import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import PluginRecord
from nanobot_core.sessions import select_session_store, session_stores
from tests.helpers import clean_env, install_plugin, run_cli

TIMEOUT = 60
CLASH = "name clash: first contribution wins"


class _Shared(JsonlSessionStore):
    """A file store under the name ``shared``, in a folder of the workspace of its own."""

    name = "shared"


class _Offers:
    """A plugin whose ``nanobot_session_stores`` returns what it is given, as it is."""

    def __init__(self, *stores: Any) -> None:
        self.stores: Any = list(stores)

    @hookimpl
    def nanobot_session_stores(self, ctx: object) -> Any:
        return self.stores


def _manager(tmp_path: Path, store: str = "jsonl", **plugins: Any) -> PluginManager:
    config = Config(sessions=SessionsConfig(store=store), plugins=PluginsConfig(**plugins))
    return PluginManager(config, workspace=tmp_path, autoload=False).load()


def _record(manager: PluginManager, name: str) -> PluginRecord:
    (record,) = [r for r in manager.records() if r.info.name == name]
    return record


def _warned(logs: list[dict[str, Any]], event: str) -> dict[str, Any]:
    (entry,) = [e for e in logs if e["event"] == event]
    return entry


def test_two_plugins_offering_one_store_name_the_first_distribution_wins(tmp_path: Path) -> None:
    """Of two plugins' ``shared`` stores, the first by distribution is chosen; the other is
    warned about with both versions and listed as shadowed."""
    manager = _manager(tmp_path, store="shared")
    winner, loser = _Shared(tmp_path / "a"), _Shared(tmp_path / "b")
    manager.register(_Offers(loser), "b", distribution="nanobot-b", version="2.0")
    manager.register(_Offers(winner), "a", distribution="nanobot-a", version="1.0")
    with capture_logs() as logs:
        chosen = select_session_store(manager)
    assert chosen.store is winner
    assert chosen.owner == "plugin 'a' from nanobot-a 1.0"
    clash = _warned(logs, CLASH)
    assert (clash["kind"], clash["name"]) == ("store", "shared")
    assert clash["winner"] == "plugin 'a' from nanobot-a 1.0"
    assert clash["loser"] == "plugin 'b' from nanobot-b 2.0"
    assert [c.to_json() for c in _record(manager, "a").contributions] == [
        {"kind": "store", "name": "shared"}
    ]
    assert [c.to_json() for c in _record(manager, "b").contributions] == [
        {"kind": "store", "name": "shared", "shadowed_by": "a"}
    ]


def test_a_plugin_store_named_jsonl_is_shadowed_by_the_builtin(tmp_path: Path) -> None:
    """A plugin's store named ``jsonl`` loses to the built-in, with a warning saying so."""
    manager = _manager(tmp_path)
    manager.register(_Offers(JsonlSessionStore(tmp_path / "x")), "p", distribution="p", version="3")
    with capture_logs() as logs:
        chosen = select_session_store(manager)
    assert chosen.owner.startswith("built-in plugin 'builtin:sessions' from nanobot-core ")
    clash = _warned(logs, CLASH)
    assert clash["loser"] == "plugin 'p' from p 3"
    assert clash["reason"] == "built-in names are protected"
    assert _record(manager, "p").contributions[0].shadowed_by == "builtin:sessions"


def test_overrides_hand_the_jsonl_name_to_the_plugin_named(tmp_path: Path) -> None:
    """``[plugins] overrides`` lets a plugin take ``jsonl``, as it does a built-in tool's name."""
    manager = _manager(tmp_path, overrides={"nanobot-files": ["jsonl"]})
    own = JsonlSessionStore(tmp_path / "own")
    manager.register(_Offers(own), "files", distribution="nanobot-files", version="1.0")
    assert select_session_store(manager).store is own
    assert _record(manager, "builtin:sessions").contributions[0].shadowed_by == "files"


_NOT_STORES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(junk=st.lists(_NOT_STORES, min_size=1, max_size=4), at=st.integers(0, 4))
@settings(max_examples=30, deadline=None, database=None)
def test_items_that_are_not_stores_are_left_out_alone_and_listed(junk: list[Any], at: int) -> None:
    """Whatever else a plugin returns beside its store, the store is kept and each other item
    is listed among the plugin's problems; the plugin stays loaded."""
    with tempfile.TemporaryDirectory() as folder:
        store = _Shared(Path(folder))
        items = [*junk]
        items.insert(min(at, len(items)), store)
        manager = _manager(Path(folder), store="shared")
        manager.register(_Offers(*items), "mixed", distribution="nanobot-mixed", version="0.2")
        assert select_session_store(manager).store is store
        record = _record(manager, "mixed")
    assert record.status == "loaded"
    assert len(record.problems) == len(junk)
    assert all(
        p.startswith("nanobot_session_stores item ")
        and p.endswith("left out: not a SessionStore with a name")
        for p in record.problems
    )


def test_a_store_hook_returning_no_list_fails_its_plugin(tmp_path: Path) -> None:
    """A store hook returning something other than a list fails its plugin, as any
    collecting hook does, instead of being ignored."""
    manager = _manager(tmp_path)
    plugin = _Offers()
    plugin.stores = _Shared(tmp_path)  # one store, not a list of them
    manager.register(plugin, "odd", distribution="nanobot-odd", version="0.1")
    assert sorted(session_stores(manager)) == ["jsonl"]
    record = _record(manager, "odd")
    assert record.status == "failed"
    assert record.error == "nanobot_session_stores returned _Shared, expected a list"


# Two installed distributions (each version 0.1) offering a store named "shared", each
# over a folder of the workspace named after the plugin.
STORE_PLUGIN = """
from pathlib import Path

from nanobot_core import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore


class Shared(JsonlSessionStore):
    name = "shared"


@hookimpl
def nanobot_session_stores(ctx):
    return [Shared(Path(ctx.workspace) / __name__)]
"""


def test_the_cli_lists_the_losing_store_as_shadowed_and_uses_the_winner(tmp_path: Path) -> None:
    """``plugins --json`` marks the second distribution's store shadowed, the warning names
    both with versions, and ``sessions`` with that store name reads the winner's."""
    sites = [
        install_plugin(tmp_path / f"site_{name}", name, STORE_PLUGIN)
        for name in ("store_b", "store_a")
    ]
    env = clean_env(
        PYTHONPATH=os.pathsep.join(
            [*map(str, sites), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        ),
        NANOBOT_PLUGINS="store_a,store_b",
        NANOBOT_SESSIONS__STORE="shared",
    )
    workspace = tmp_path / "ws"
    for name in ("store_a", "store_b"):
        store = JsonlSessionStore(workspace / name)
        lease = store.lease(f"in_{name}")
        try:
            lease.append(['{"role":"user","content":"hi"}'], expected_seq=lease.load().seq)
        finally:
            lease.release()

    listed = _cli(workspace, env, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["store_a"]["contributions"] == [{"kind": "store", "name": "shared"}]
    assert rows["store_b"]["contributions"] == [
        {"kind": "store", "name": "shared", "shadowed_by": "store_a"}
    ]
    assert {"kind": "store", "name": "jsonl"} in rows["builtin:sessions"]["contributions"]
    assert CLASH in listed.stderr
    assert "plugin 'store_a' from store_a 0.1" in listed.stderr
    assert "plugin 'store_b' from store_b 0.1" in listed.stderr
    assert "Traceback" not in listed.stderr

    sessions = _cli(workspace, env, "sessions", "--json")
    assert sessions.returncode == 0, sessions.stderr
    assert [s["name"] for s in json.loads(sessions.stdout)] == ["in_store_a"]


def _cli(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=workspace, env=env, timeout=TIMEOUT)
