"""`nanobot-core new-plugin` makes projects that install, pass their tests, and get listed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.ecosystem.envs import VirtualEnv

pytestmark = pytest.mark.ecosystem


@pytest.fixture(scope="module")
def scaffold_env(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: dict[str, Path]
) -> VirtualEnv:
    """A fresh venv with the core and pytest, for scaffolded projects."""
    venv = VirtualEnv(tmp_path_factory.mktemp("scaffold") / "env")
    venv.install(wheelhouse["nanobot-core"], "pytest")
    return venv


@pytest.mark.parametrize(
    ("kind", "name", "directory"),
    [
        ("tool", "acme-tool-plugin", None),
        ("stage", "acme-stage-plugin", None),
        ("section", "acme-section-plugin", None),
        # A package named like a build folder, in a folder a shell must be given quoted.
        ("tool", "build", "it's a $HOME dir"),
    ],
)
def test_scaffolded_project_installs_and_passes(
    scaffold_env: VirtualEnv, tmp_path: Path, kind: str, name: str, directory: str | None
) -> None:
    """Right after `pip install -e`, the project's own tests pass and `plugins` lists it."""
    where = ["--directory", directory] if directory else []
    created = scaffold_env.cli("new-plugin", name, "--kind", kind, *where, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    project = tmp_path / (directory or name)
    assert (project / "pyproject.toml").is_file() and (project / "README.md").is_file()
    scaffold_env.install("-e", str(project))
    tests = subprocess.run(
        [
            str(scaffold_env.python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(project / "tests"),
        ],
        capture_output=True,
        text=True,
        cwd=project,
        env=scaffold_env.env(),
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout
    listed = scaffold_env.cli("--strict", "plugins", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["distribution"]: row for row in json.loads(listed.stdout)}
    assert rows[name]["status"] == "loaded"
    assert rows[name]["contributions"][0]["kind"] == kind


def test_bad_name_and_existing_directory_are_usage_errors(
    scaffold_env: VirtualEnv, tmp_path: Path
) -> None:
    """An invalid name or an existing target directory exits 2 without writing anything."""
    bad = scaffold_env.cli("new-plugin", "9lives!", cwd=tmp_path)
    assert bad.returncode == 2 and "9lives!" in bad.stderr
    (tmp_path / "taken").mkdir()
    taken = scaffold_env.cli("new-plugin", "taken", cwd=tmp_path)
    assert taken.returncode == 2 and "already exists" in taken.stderr
    assert list((tmp_path / "taken").iterdir()) == []
