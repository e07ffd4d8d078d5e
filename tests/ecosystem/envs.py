"""Real distributions in real environments: build wheels once, install them into fresh venvs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tests.helpers import REPO_ROOT, clean_env

PROJECTS = Path(__file__).resolve().parent / "projects"


def _run(cmd: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise RuntimeError(
            f"command failed ({result.returncode}): {' '.join(map(str, cmd))}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def build_wheels(projects: Iterable[Path], out: Path) -> dict[str, Path]:
    """Build each project into a wheel in `out` (one pip process), keyed by distribution name."""
    projects = list(projects)
    out.mkdir(parents=True, exist_ok=True)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            *map(str, projects),
        ]
    )
    wheels: dict[str, Path] = {}
    for project in projects:
        with (project / "pyproject.toml").open("rb") as handle:
            distribution = tomllib.load(handle)["project"]["name"]
        stem = re.sub(r"[-_.]+", "_", distribution).lower()
        matches = sorted(out.glob(f"{stem}-*.whl"))
        if not matches:
            raise RuntimeError(f"no wheel was built for {project}")
        wheels[distribution] = matches[-1]
    return wheels


def build_core_wheel(out: Path) -> Path:
    """Build nanobot-core itself into a wheel."""
    return build_wheels([REPO_ROOT], out)["nanobot-core"]


class VirtualEnv:
    """A fresh virtual environment (no system site-packages) with wheels installed by uv."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.python = self.bin / "python"
        _run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, str(root)])

    def install(self, *requirements: Path | str) -> None:
        """Install wheels or requirement strings, resolving dependencies from the index."""
        _run(
            [
                sys.executable,
                "-m",
                "uv",
                "pip",
                "install",
                "--quiet",
                "--python",
                str(self.python),
                *map(str, requirements),
            ]
        )

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean process environment: no developer's settings (`clean_env`) and no outer
        VIRTUAL_ENV or PYTHONPATH leak in from outside."""
        base = clean_env()
        base.pop("VIRTUAL_ENV", None)
        base.pop("PYTHONPATH", None)
        base["PATH"] = f"{self.bin}{os.pathsep}{base.get('PATH', '')}"
        base.update(extra or {})
        return base

    def cli(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run this environment's ``nanobot-core`` console script."""
        return subprocess.run(
            [str(self.bin / "nanobot-core"), *args],
            capture_output=True,
            text=True,
            env=self.env(env),
            cwd=cwd,
            input=input,
            timeout=timeout,
            check=False,
        )
