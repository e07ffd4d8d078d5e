"""The hook reference is generated from the hookspecs and kept in sync."""

from __future__ import annotations

from nanobot_core import hookspecs
from nanobot_core._hookdoc import hook_functions, render_hook_reference
from tests.helpers import REPO_ROOT

DESIGN_HOOKS = {
    "nanobot_tools",
    "nanobot_governance_stages",
    "nanobot_prompt_sections",
    "nanobot_runtime_context",
    "nanobot_token_counter",
    "nanobot_result_store",
    "nanobot_providers",
}


def test_every_hook_has_a_contract_docstring() -> None:
    """Each hook documents its arguments, return value and what happens when it raises."""
    for function in hook_functions():
        doc = (function.__doc__ or "").lower()
        assert len(doc) > 80, function.__name__
        assert "rais" in doc, f"{function.__name__} does not say what happens when it raises"
        assert "return" in doc, f"{function.__name__} does not document its return value"


def test_design_hooks_exist() -> None:
    """Every hook named in the design is a hookspec."""
    assert {f.__name__ for f in hook_functions()} >= DESIGN_HOOKS


def test_firstresult_hooks_are_marked() -> None:
    """The token counter and result store hooks are firstresult; collecting hooks are not."""
    spec = f"{hookspecs.PROJECT_NAME}_spec"
    for function in hook_functions():
        first = bool(getattr(function, spec).get("firstresult"))
        assert first == (function.__name__ in {"nanobot_token_counter", "nanobot_result_store"})


def test_docs_page_is_current() -> None:
    """docs/hooks.md equals what the generator renders now."""
    page = (REPO_ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    assert page == render_hook_reference(), "run: python -m nanobot_core._hookdoc > docs/hooks.md"
