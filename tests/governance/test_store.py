"""The offload store distrusts the disk: content checked, links refused, size and age bounded."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nanobot_core.config import Config, StoreConfig, load_config
from nanobot_core.errors import ConfigError
from nanobot_core.governance import default_store
from nanobot_core.governance.store import CACHE_DIR, RECENT_SECONDS, DirectoryResultStore

_DAY = 86_400


def _name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest() + ".txt"


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_planted_file_of_the_right_size_is_replaced(tmp_path: Path) -> None:
    """A file under the content's name holding other bytes of the same length is rewritten."""
    cache = tmp_path / CACHE_DIR
    cache.mkdir(parents=True)
    content = "the real result " * 100
    planted = cache / _name(content)
    planted.write_text("X" * len(content), encoding="utf-8")
    shown = default_store(tmp_path).put(content)
    assert shown == (CACHE_DIR / _name(content)).as_posix()
    assert (tmp_path / shown).read_text(encoding="utf-8") == content


def test_a_planted_file_replaced_after_a_write_is_noticed(tmp_path: Path) -> None:
    """Swapping the file for another of the same size after it was written makes put write again."""
    store = default_store(tmp_path)
    content = "abc" * 500
    path = tmp_path / store.put(content)
    replacement = path.with_name("other")
    replacement.write_text("z" * len(content), encoding="utf-8")
    os.replace(replacement, path)
    store.put(content)
    assert path.read_text(encoding="utf-8") == content


def test_a_planted_symlink_in_place_of_an_entry_is_replaced_not_followed(tmp_path: Path) -> None:
    """An entry that is a link to an outside file is replaced by a file; the outside stays."""
    outside = tmp_path / "outside.txt"
    content = "payload " * 200
    outside.write_text(content, encoding="utf-8")
    workspace = tmp_path / "ws"
    cache = workspace / CACHE_DIR
    cache.mkdir(parents=True)
    (cache / _name(content)).symlink_to(outside)
    shown = default_store(workspace).put(content)
    entry = workspace / shown
    assert not entry.is_symlink()
    assert entry.read_text(encoding="utf-8") == content
    assert outside.read_text(encoding="utf-8") == content


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_planted_named_pipe_in_place_of_an_entry_is_replaced_not_waited_on(
    tmp_path: Path,
) -> None:
    """An entry that is a named pipe is replaced by the file at once: checking what it holds
    does not wait for something to write to the pipe."""
    cache = tmp_path / CACHE_DIR
    cache.mkdir(parents=True)
    content = "the real result " * 100
    os.mkfifo(cache / _name(content))
    shown: list[str] = []
    putting = threading.Thread(
        target=lambda: shown.append(default_store(tmp_path).put(content)), daemon=True
    )
    putting.start()
    putting.join(5)
    if putting.is_alive():
        os.close(os.open(cache / _name(content), os.O_WRONLY | os.O_NONBLOCK))  # let it go
        putting.join(5)
        pytest.fail("put waited on the named pipe planted under the entry's name")
    assert shown == [(CACHE_DIR / _name(content)).as_posix()]
    assert (tmp_path / shown[0]).read_text(encoding="utf-8") == content


def test_paths_follow_the_root_and_workspace_the_store_has_now(tmp_path: Path) -> None:
    """A store given another root or workspace after writing writes and shows paths there."""
    content = "a result " * 300
    store = DirectoryResultStore(tmp_path / "ws" / "cache", relative_to=tmp_path / "ws")
    assert store.put(content) == f"cache/{_name(content)}"
    store.root = tmp_path / "elsewhere"
    shown = store.put(content)
    assert shown == str(tmp_path / "elsewhere" / _name(content))  # outside the workspace
    assert Path(shown).read_text(encoding="utf-8") == content
    store.relative_to = tmp_path
    assert store.put(content + ".") == f"elsewhere/{_name(content + '.')}"
    assert DirectoryResultStore(tmp_path / "ws" / "cache").put(content) == str(
        tmp_path / "ws" / "cache" / _name(content)
    )


@pytest.mark.parametrize("linked", [".nanobot", ".nanobot/cache", ".nanobot/cache/tool-results"])
def test_a_symlinked_cache_folder_is_refused(tmp_path: Path, linked: str) -> None:
    """A linked folder on the way to the cache makes put raise; nothing is written outside."""
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    link = workspace / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link or not a folder"):
        default_store(workspace).put("x" * 1000)
    assert list(outside.rglob("*")) == []


def test_prune_removes_entries_unused_for_longer_than_max_age(tmp_path: Path) -> None:
    """Entries older than max_age_days go; a fresh entry stays."""
    cache = tmp_path / CACHE_DIR
    cache.mkdir(parents=True)
    old = cache / _name("old")
    old.write_text("old", encoding="utf-8")
    _age(old, 3 * _DAY)
    young = cache / _name("young")
    young.write_text("young", encoding="utf-8")
    _age(young, 2 * RECENT_SECONDS)
    store = default_store(tmp_path, StoreConfig(max_age_days=2, max_bytes=1 << 20))
    store.put("new")
    assert sorted(p.name for p in cache.iterdir()) == sorted([_name("young"), _name("new")])
    assert store.last_prune is not None and store.last_prune.removed == 1


def test_prune_by_size_removes_least_recently_used_first(tmp_path: Path) -> None:
    """Over max_bytes, the entries used longest ago are removed until the rest fits."""
    cache = tmp_path / CACHE_DIR
    cache.mkdir(parents=True)
    for index, text in enumerate(["a" * 400, "b" * 400, "c" * 400]):
        path = cache / _name(text)
        path.write_text(text, encoding="utf-8")
        _age(path, (3 - index) * 2 * RECENT_SECONDS)  # "a" oldest, "c" newest
    store = default_store(tmp_path, StoreConfig(max_bytes=1_000))
    report = store.prune()
    assert sorted(p.name for p in cache.iterdir()) == sorted([_name("b" * 400), _name("c" * 400)])
    assert (report.removed, report.freed_bytes, report.kept) == (1, 400, 2)


def test_prune_never_removes_entries_in_use(tmp_path: Path) -> None:
    """Entries this store served, and entries used within the last hour, survive any limit."""
    cache = tmp_path / CACHE_DIR
    store = default_store(tmp_path, StoreConfig(max_age_days=0.001, max_bytes=1))
    used = tmp_path / store.put("in use " * 100)
    _age(used, 10 * _DAY)
    recent = cache / _name("recent")
    recent.write_text("recent", encoding="utf-8")
    stale = cache / _name("stale")
    stale.write_text("stale", encoding="utf-8")
    _age(stale, 10 * _DAY)
    store.prune()
    assert used.exists() and recent.exists() and not stale.exists()


def test_prune_leaves_other_files_and_young_temporaries_alone(tmp_path: Path) -> None:
    """Only entries are pruned: a concurrent writer's fresh temporary and other files stay."""
    cache = tmp_path / CACHE_DIR
    cache.mkdir(parents=True)
    temporary = cache / ".tmp-0123.txt"
    temporary.write_text("half", encoding="utf-8")
    notes = cache / "README"
    notes.write_text("mine", encoding="utf-8")
    _age(notes, 100 * _DAY)
    default_store(tmp_path, StoreConfig(max_age_days=1, max_bytes=1)).prune()
    assert temporary.exists() and notes.exists()


def test_a_store_outside_the_workspace_refuses_a_linked_root(tmp_path: Path) -> None:
    """A store directory given as a link is refused even without a workspace."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        DirectoryResultStore(tmp_path / "link").put("text")


def test_store_limits_come_from_governance_store_config(tmp_path: Path) -> None:
    """``[governance.store]`` max_age_days and max_bytes are read from nanobot.toml."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance.store]\nmax_age_days = 7\nmax_bytes = 1000000\n", encoding="utf-8"
    )
    config = load_config(cwd=tmp_path, environ={})
    assert config.governance.store == StoreConfig(max_age_days=7, max_bytes=1_000_000)
    assert Config().governance.store == StoreConfig(max_age_days=30, max_bytes=1 << 30)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[governance]\nmax_tool_result_chars = 0\n", "governance.max_tool_result_chars"),
        ("[governance]\nmax_tool_result_chars = 499\n", "governance.max_tool_result_chars"),
        ("[governance.store]\nmax_age_days = 0\n", "governance.store.max_age_days"),
        ("[governance.store]\nmax_bytes = -1\n", "governance.store.max_bytes"),
    ],
)
def test_limits_that_would_lose_data_are_config_errors(tmp_path: Path, toml: str, key: str) -> None:
    """A limit that would drop whole results or the whole cache is refused, naming the key."""
    (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(cwd=tmp_path, environ={})


def test_max_tool_result_chars_zero_exits_2_without_traceback(tmp_path: Path) -> None:
    """The CLI reports ``max_tool_result_chars = 0`` as a configuration error, exit 2."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance]\nmax_tool_result_chars = 0\n", encoding="utf-8"
    )
    done = subprocess.run(
        ["nanobot-core", "tools"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "governance.max_tool_result_chars" in done.stderr
    assert "Traceback" not in done.stderr
