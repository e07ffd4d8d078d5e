"""The benchmark's own virtual environments, created on demand under ``bench/.envs/``.

- ``nanobot-ai``: nanobot-ai 0.3.5 from PyPI, the comparison side (kept between runs).
- ``core-plugins``: nanobot-core built as a wheel from this tree plus thirty trivial
  plugin wheels (rebuilt every run, so it always measures the current code).

uv is used when it can be found, else ``python -m venv`` and pip. Only the package
index is contacted; plugin and core wheels are built locally without isolation
when hatchling is importable here.

Both environments hold compiled byte code: a machine that sets
``PYTHONDONTWRITEBYTECODE`` would otherwise make every process of the start-up
benchmarks compile its imports from source, on both sides.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from plugin_projects import write_plugin_projects

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
ENVS_DIR = BENCH_DIR / ".envs"
NANOBOT_AI_REQUIREMENT = "nanobot-ai==0.3.5"
NANOBOT_AI_VERSION = "0.3.5"


def run(
    cmd: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run a command, raising with its output if it fails."""
    result = subprocess.run(
        [str(part) for part in cmd],
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"command failed ({result.returncode}): {' '.join(map(str, cmd))}\n"
            f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
        )
    return result


def find_uv() -> str | None:
    """The uv executable: on PATH, next to this interpreter, or from the ``uv`` package."""
    beside = Path(sys.executable).parent / "uv"
    for candidate in (shutil.which("uv"), str(beside) if beside.exists() else None):
        if candidate:
            return candidate
    if importlib.util.find_spec("uv") is not None:
        from uv import find_uv_bin

        return str(find_uv_bin())
    return None


@dataclass(frozen=True)
class VirtualEnv:
    """A virtual environment on disk."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def exists(self) -> bool:
        return self.python.exists()

    def clean_environ(self, home: Path | None = None) -> dict[str, str]:
        """os.environ without NANOBOT_* or another venv, this env's bin first on PATH."""
        environ = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("NANOBOT_")
            and key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
        }
        environ["PATH"] = f"{self.bin}{os.pathsep}{environ.get('PATH', '')}"
        if home is not None:
            environ["HOME"] = str(home)
        return environ


def create(env: VirtualEnv) -> None:
    """Create (or replace) the environment with this interpreter's Python version."""
    if env.root.exists():
        shutil.rmtree(env.root)
    uv = find_uv()
    if uv:
        run([uv, "venv", "--quiet", "--python", sys.executable, env.root])
    else:
        run([sys.executable, "-m", "venv", env.root])


def install(env: VirtualEnv, *requirements: str | Path, reinstall: Sequence[str] = ()) -> None:
    """Install requirements (names or wheel paths) into the environment from the index."""
    uv = find_uv()
    if uv:
        extra = [arg for name in reinstall for arg in ("--reinstall-package", name)]
        command = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", env.python]
        run([*command, *extra, *requirements])
    else:
        extra = ["--force-reinstall"] if reinstall else []
        run(
            [
                env.python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--compile",
                "--disable-pip-version-check",
                *extra,
                *requirements,
            ]
        )
    _mark_compiled(env)


def build_wheels(projects: Sequence[Path], out: Path) -> list[Path]:
    """Build each project into a wheel in `out` and return the wheels, in project order."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.whl"):
        stale.unlink()
    can_build_here = (
        importlib.util.find_spec("hatchling") is not None
        and importlib.util.find_spec("pip") is not None
    )
    if can_build_here:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "--wheel-dir",
                out,
                *projects,
            ]
        )
    else:
        uv = find_uv()
        if uv is None:
            raise RuntimeError("building wheels needs hatchling and pip, or uv")
        for project in projects:
            run([uv, "build", "--quiet", "--wheel", "--out-dir", out, project])
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != len(projects):
        raise RuntimeError(f"expected {len(projects)} wheels in {out}, found {len(wheels)}")
    return wheels


_COMPILED_MARK = ".bytecode-compiled"


def _mark_compiled(env: VirtualEnv) -> None:
    (env.root / _COMPILED_MARK).write_text("site-packages compiled at install\n", encoding="utf-8")


def ensure_compiled(env: VirtualEnv) -> None:
    """Compile the environment's site-packages once (for one installed before this was done)."""
    if (env.root / _COMPILED_MARK).exists():
        return
    # Not `run`: a package may ship a file that is not valid Python (a template, a test
    # fixture); compileall then exits 1 having compiled everything else, which is all we need.
    subprocess.run(
        [str(env.python), "-m", "compileall", "-q", "-j", "0", *map(str, _site_packages(env))],
        capture_output=True,
        timeout=1800,
        check=False,
    )
    _mark_compiled(env)


def _site_packages(env: VirtualEnv) -> list[Path]:
    return sorted(path for path in env.root.glob("lib*/python*/site-packages") if path.is_dir())


def _nanobot_ai_ready(env: VirtualEnv) -> bool:
    if not env.exists():
        return False
    probe = subprocess.run(
        [str(env.python), "-c", "import importlib.metadata as m; print(m.version('nanobot-ai'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == NANOBOT_AI_VERSION


def ensure_nanobot_ai() -> VirtualEnv:
    """nanobot-ai 0.3.5 in its own environment, created only when missing or wrong."""
    env = VirtualEnv(ENVS_DIR / "nanobot-ai")
    if not _nanobot_ai_ready(env):
        create(env)
        if find_uv() is None:
            run([env.python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
        install(env, NANOBOT_AI_REQUIREMENT)
    ensure_compiled(env)
    return env


def build_core_plugins() -> VirtualEnv:
    """A fresh environment with this tree's nanobot-core wheel and thirty plugin wheels."""
    env = VirtualEnv(ENVS_DIR / "core-plugins")
    projects = write_plugin_projects(ENVS_DIR / "plugin-projects")
    plugin_wheels = build_wheels(projects, ENVS_DIR / "wheels" / "plugins")
    (core_wheel,) = build_wheels([REPO_ROOT], ENVS_DIR / "wheels" / "core")
    create(env)
    install(env, core_wheel, *plugin_wheels)
    return env
