"""Sessions: tests, lint, types, ecosystem, bench. Each runs in a fresh virtual environment."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["tests", "ecosystem"]
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = False

ROOT = Path(__file__).resolve().parent
PLUGIN_PROJECTS = sorted(
    p for group in ("plugins", "contrib") for p in (ROOT / group).glob("*/pyproject.toml")
)
# nanobot-ai's own tools, tested in an environment of their own (nanobot-ai pins mcp<2).
NANOBOT_AI_TESTS = ROOT / "tests" / "ecosystem" / "nanobot_ai"


@nox.session
def tests(session: nox.Session) -> None:
    """The core's test suite, in a fresh venv without system site-packages."""
    session.install("-e", ".[test]")
    session.run("pytest", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict over the core package and over each first-party plugin's package."""
    editable = [arg for project in PLUGIN_PROJECTS for arg in ("-e", str(project.parent))]
    session.install("-e", ".[test]", "mypy", *editable)
    session.run("mypy")
    for project in PLUGIN_PROJECTS:
        for package in sorted(project.parent.glob("nanobot_*/__init__.py")):
            session.run("mypy", "--strict", str(package.parent))


@nox.session
def ecosystem(session: nox.Session) -> None:
    """Build every plugins/ and contrib/ project once, install with the core, test, list."""
    wheels = Path(session.create_tmp()) / "wheels"
    wheels.mkdir(exist_ok=True)
    session.install("pip", "hatchling")
    projects = [str(ROOT), *(str(p.parent) for p in PLUGIN_PROJECTS)]
    _build_wheels(session, wheels, projects)
    built = sorted(str(w) for w in wheels.glob("*.whl"))
    session.install(*built, *_test_requirements(PLUGIN_PROJECTS))
    for project in PLUGIN_PROJECTS:
        tests_dir = project.parent / "tests"
        if tests_dir.is_dir():
            session.run(
                "pytest",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(project.parent),
                str(tests_dir),
                env={"PYTHONPATH": ""},
            )
    workspace = Path(session.create_tmp()) / "workspace"
    workspace.mkdir(exist_ok=True)
    output = session.run(
        "nanobot-core",
        "--strict",
        "plugins",
        "--json",
        silent=True,
        env={"NANOBOT_PLUGINS": None},
        external=False,
    )
    rows = json.loads(str(output))
    not_loaded = [
        f"{r['name']} ({r['distribution']}): {r['status']} {r['error'] or ''}"
        for r in rows
        if r["status"] != "loaded"
    ]
    if not_loaded:
        session.error("plugins did not load:\n  " + "\n  ".join(not_loaded))
    session.log(f"{len(rows)} plugins loaded: " + ", ".join(r["name"] for r in rows))
    _nanobot_ai_tools(session, wheels)


def _build_wheels(session: nox.Session, into: Path, projects: list[str]) -> None:
    """Build each project into a wheel in `into`, in one pip process (hatchling installed)."""
    session.run(
        "python",
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(into),
        *projects,
    )


def _nanobot_ai_tools(session: nox.Session, wheels: Path) -> None:
    """nanobot-ai 0.3.5 from PyPI with the core and nbtest-hkuds, in a venv of their own."""
    own = Path(session.create_tmp()) / "nanobot-ai-wheels"
    own.mkdir(exist_ok=True)
    _build_wheels(session, own, [str(NANOBOT_AI_TESTS / "nbtest-hkuds")])
    session.install("uv")
    env_dir = Path(session.create_tmp()) / "nanobot-ai-env"
    interpreter = Path(str(session.virtualenv.location)) / "bin" / "python"
    session.run(
        "uv", "venv", "--quiet", "--allow-existing", "--python", str(interpreter), str(env_dir)
    )
    python = str(env_dir / "bin" / "python")
    core = sorted(wheels.glob("nanobot_core-*.whl"))
    hkuds = sorted(own.glob("nbtest_hkuds-*.whl"))
    session.run(
        "uv", "pip", "install", "--quiet", "--python", python, *map(str, core + hkuds), "pytest"
    )
    tests = str(NANOBOT_AI_TESTS)
    session.run(
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--confcutdir",
        tests,
        "--rootdir",
        tests,
        tests,
        external=True,
        env={"PYTHONPATH": "", "VIRTUAL_ENV": str(env_dir)},
    )


def _test_requirements(projects: list[Path]) -> list[str]:
    """The `test` extras of the plugin projects (installed beside their wheels)."""
    requirements: set[str] = set()
    for project in projects:
        with project.open("rb") as handle:
            extras = tomllib.load(handle)["project"].get("optional-dependencies", {})
        requirements.update(extras.get("test", []))
    return sorted(requirements)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against their baselines in the same run; writes bench/RESULTS.md."""
    # bpe-openai: the tokenizer plugin's encoder, for the session measured with its counter (the
    # plugin itself is read from plugins/tokenizer, not installed: nothing else loads it).
    session.install("-e", ".", "uv", "hatchling", "pip", "bpe-openai>=0.1.4,<0.2")
    session.run("python", "bench/run.py", *session.posargs)
