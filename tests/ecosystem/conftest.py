"""Session fixtures: the test plugin projects built once and installed into a fresh venv."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ecosystem.envs import PROJECTS, VirtualEnv, build_core_wheel, build_wheels


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Wheels of nanobot-core and of every test plugin project, built once per session."""
    out = tmp_path_factory.mktemp("wheels")
    wheels = build_wheels(sorted(PROJECTS.iterdir()), out)
    wheels["nanobot-core"] = build_core_wheel(out)
    return wheels


@pytest.fixture(scope="session")
def plugin_env(tmp_path_factory: pytest.TempPathFactory, wheelhouse: dict[str, Path]) -> VirtualEnv:
    """A fresh venv with the core and all test plugins, installed out of sorted order."""
    venv = VirtualEnv(tmp_path_factory.mktemp("venv") / "env")
    venv.install(wheelhouse["nanobot-core"])
    # Install in reverse sorted order, one at a time, so that neither installation
    # order nor directory order can be what decides a clash.
    for name in sorted((n for n in wheelhouse if n != "nanobot-core"), reverse=True):
        venv.install(wheelhouse[name])
    return venv


# nanobot-ai's tools are tested in an environment of their own (nanobot-ai pins mcp<2):
# the `ecosystem` nox session runs that folder; the core suite leaves it alone.
collect_ignore = ["nanobot_ai"]
