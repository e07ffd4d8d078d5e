"""The Section value type rejects what could never render."""

from __future__ import annotations

import pytest

from nanobot_core.prompt import Section


def _text(ctx: object) -> str:
    return "text"


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_section_name_must_be_a_non_empty_string(name: object) -> None:
    """A section without a usable name cannot be created."""
    with pytest.raises(ValueError, match="name"):
        Section(name=name, order=1, render=_text)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [True, float("nan"), float("inf"), "100", None])
def test_section_order_must_be_a_finite_number(order: object) -> None:
    """Booleans, NaN, infinities and strings are refused as order keys."""
    with pytest.raises(ValueError, match="order"):
        Section(name="x", order=order, render=_text)  # type: ignore[arg-type]


def test_section_render_must_be_callable() -> None:
    """A render that is not callable is refused when the section is created."""
    with pytest.raises(TypeError, match="callable"):
        Section(name="x", order=1, render="text")  # type: ignore[arg-type]


def test_integer_order_is_accepted() -> None:
    """An int order key is fine (plugins write order=250)."""
    assert Section(name="x", order=250, render=_text).order == 250
