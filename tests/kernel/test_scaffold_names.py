"""`new-plugin` names: whatever the user types, it is refused or makes a project that imports."""

from __future__ import annotations

import ast
import keyword
import shlex
import sys
import types
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._commands.new_plugin import next_steps
from nanobot_core.governance.stages import builtin_stages
from nanobot_core.scaffold import (
    KINDS,
    PluginProject,
    name_taken,
    render_project,
    shadowed_builtin,
    validate_name,
)
from nanobot_core.testing import govern_and_check

# Names a user may well type: keywords, standard-library modules of any platform, build folders.
_HOSTILE = [
    *keyword.kwlist,
    "winreg",
    "msvcrt",
    "winsound",
    "nt",
    "snip_history",
    "sanitize_content",
    "dist",
    "Dist",
    "os",
    "tests",
    "acme-tool",
    "acme\n",
    "acme-tool\n",
]


def _refusal(name: str) -> str | None:
    return validate_name(name) or name_taken(name)


def _check_project(name: str) -> None:
    """Every file stays inside the project, and every Python file compiles."""
    for kind in KINDS:
        project = PluginProject(distribution=name, kind=kind)
        assert project.package.isidentifier()
        assert not keyword.iskeyword(project.package)
        for relative, content in render_project(project).items():
            path = PurePosixPath(relative)
            assert not path.is_absolute() and ".." not in path.parts
            assert path.parts[0] != "dist"
            if relative.endswith(".py"):
                ast.parse(content, filename=relative)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("class", "is a Python keyword: its package 'class' could not be imported"),
        ("lambda", "is a Python keyword: its package 'lambda' could not be imported"),
        ("winreg", "is the name of the standard library module 'winreg'"),
        ("msvcrt", "is the name of the standard library module 'msvcrt'"),
        ("dist", "would install the package 'dist', a folder hatchling leaves out of the wheel"),
        ("DIST", "would install the package 'dist', a folder hatchling leaves out of the wheel"),
    ],
)
def test_a_name_whose_project_cannot_work_is_refused(name: str, reason: str) -> None:
    """Keywords, standard-library modules of any platform and `dist` are refused, saying why."""
    assert _refusal(name) == reason


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.one_of(
        st.sampled_from(_HOSTILE),
        st.text(max_size=80),
        st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,12}(?:[-_][A-Za-z0-9]{1,8}){0,3}", fullmatch=True),
    )
)
def test_an_accepted_name_makes_a_project_that_compiles(name: str) -> None:
    """Any name is refused with a reason, or every file of its projects is safe and compiles."""
    if _refusal(name) is None:
        _check_project(name)


@settings(derandomize=True, deadline=None, max_examples=100)
@given(
    st.one_of(
        st.sampled_from([stage.name for stage in builtin_stages()]),
        st.from_regex(r"[a-z][a-z0-9]{0,8}(?:_[a-z0-9]{1,8}){0,2}", fullmatch=True),
    )
)
def test_a_stage_project_that_is_not_refused_does_its_work(name: str) -> None:
    """A stage project new-plugin would write trims user text, as its own test expects."""
    project = PluginProject(distribution=name, kind="stage")
    if _refusal(name) is not None or shadowed_builtin(project) is not None:
        return
    namespace: dict[str, Any] = {}
    source = render_project(project)[f"{project.package}/__init__.py"]
    exec(compile(source, f"{project.package}/__init__.py", "exec"), namespace)
    stages = namespace["nanobot_governance_stages"](None)
    result = govern_and_check([{"role": "user", "content": "hello   "}], stages=stages)
    assert result.messages[-1]["content"] == "hello"


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("weather", "WeatherTool"),
        ("weather-tool", "WeatherTool"),
        ("weather_tool", "WeatherTool"),
        ("Weather-Tools", "WeatherTool"),
        ("weather-tool-plugin", "WeatherTool"),
        ("acme-weather-plugin", "AcmeWeatherTool"),
        ("tool-box", "ToolBoxTool"),
        ("tool", "ToolTool"),
        ("tool-plugin", "ToolTool"),
    ],
)
def test_the_tool_class_name_does_not_say_tool_twice(name: str, class_name: str) -> None:
    """A name ending in "tool" (or "plugin") gives `WeatherTool`, never `WeatherToolTool`."""
    project = PluginProject(distribution=name, kind="tool")
    assert project.class_name == class_name
    files = render_project(project)
    assert f"class {class_name}(Tool):" in files[f"{project.package}/__init__.py"]
    assert f'{project.package} = "{project.package}:{class_name}"' in files["pyproject.toml"]
    assert f"from {project.package} import {class_name}\n" in files["tests/test_tool.py"]


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("myHTTP-tool", "MyHTTPTool"),
        ("myHTTP", "MyHTTPTool"),
        ("acme-JSONPath", "AcmeJSONPathTool"),
        ("WEATHER-TOOL", "WEATHERTool"),
        ("weatherTool", "WeatherTool"),
        ("weatherPlugin", "WeatherTool"),
        ("HTTPTools", "HTTPTool"),
    ],
)
def test_the_tool_class_name_keeps_the_case_written_inside_each_word(
    name: str, class_name: str
) -> None:
    """Only each word's first letter is raised (`myHTTP-tool` gives `MyHTTPTool`), and a
    last "Tool" or "Plugin" the case shows to be a word is not said twice."""
    project = PluginProject(distribution=name, kind="tool")
    assert project.class_name == class_name
    assert f"class {class_name}(Tool):" in render_project(project)[f"{project.package}/__init__.py"]


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("weathertool", "Weathertool"),
        ("weathertools", "Weathertools"),
        ("stool", "Stool"),
        ("acme-footstool", "AcmeFootstool"),
        ("weatherplugin", "WeatherpluginTool"),
        ("tools", "ToolsTool"),
    ],
)
def test_a_word_ending_in_tool_is_kept_whole_without_a_second_suffix(
    name: str, class_name: str
) -> None:
    """A last word ending in "tool" with no boundary written is not cut (`stool` is no
    "s tool"), and already ends in "tool", so it gets no `Tool` suffix after it."""
    project = PluginProject(distribution=name, kind="tool")
    assert project.class_name == class_name
    files = render_project(project)
    assert f'{project.package} = "{project.package}:{class_name}"' in files["pyproject.toml"]


def test_the_stage_project_declares_its_work_and_its_own_tests_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stage new-plugin writes is per message with a prefilter, as docs/governance.md asks."""
    project = PluginProject(distribution="acme-trim", kind="stage")
    files = render_project(project)
    package = types.ModuleType(project.package)
    exec(compile(files["acme_trim/__init__.py"], "acme_trim/__init__.py", "exec"), package.__dict__)
    (stage,) = package.nanobot_governance_stages(None)
    assert stage.per_message is True
    assert stage.prefilter is not None
    assert stage.prefilter("bye  ") and not stage.prefilter("bye")
    monkeypatch.setitem(sys.modules, project.package, package)
    tests: dict[str, Any] = {}
    exec(compile(files["tests/test_stage.py"], "tests/test_stage.py", "exec"), tests)
    ran = [name for name in tests if name.startswith("test_")]
    for name in ran:
        tests[name]()
    assert len(ran) == 2


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.text(st.characters(blacklist_characters="\x00"), min_size=1, max_size=40))
def test_the_next_steps_line_names_any_folder_as_one_word(folder: str) -> None:
    """Whatever the --directory, the shell reads the "next:" line as pip and pytest on it."""
    shown = str(Path(folder))
    if shown.startswith("-"):
        shown = f"./{shown}"
    words = shlex.split(next_steps(Path(folder)))
    assert words == [
        *("pip", "install", "-e", f"{shown}[test]", "&&"),
        *("nanobot-core", "plugins", "&&", "pytest", shown),
    ]
    assert Path(words[-1]) == Path(folder)
