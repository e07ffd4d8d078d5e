"""`[governance] low_watermark`: how far a needed cut goes, and how bad values are refused."""

from __future__ import annotations

import pytest

from nanobot_core.config import structure_config
from nanobot_core.errors import ConfigError
from nanobot_core.governance.stages import snip_history
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import context, run_pure, system, turn


@pytest.mark.parametrize("value", [0, -0.5, 1.5])
def test_a_watermark_outside_the_budget_is_refused_naming_the_key(value: float) -> None:
    """A share that is not above 0 and at most 1 is a config error naming the key."""
    with pytest.raises(ConfigError, match=r"governance\.low_watermark: expected a share"):
        structure_config({"governance": {"low_watermark": value}})


def test_the_default_watermark_is_seven_tenths() -> None:
    """Without configuration the watermark is 0.7 of the budget."""
    assert structure_config({}).governance.low_watermark == 0.7


@pytest.mark.parametrize("watermark", [0.5, 0.7, 0.9, 1.0])
def test_a_needed_cut_goes_down_to_the_cut_watermark_and_no_further(watermark: float) -> None:
    """Over budget, whole turns go until the request is within the watermark squared, no further."""
    history = [system()]
    for index in range(30):
        history += turn(index, "r" * 2_000)
    budget = count_request(None, history) // 2
    kept = run_pure(snip_history, history, context(budget=budget, low_watermark=watermark)).messages
    after = count_request(None, kept)
    low = int(budget * watermark * watermark)
    assert after <= low
    dropped = len(history) - len(kept)
    one_more_turn = [history[0], *history[len(history) - len(kept) + 1 - 4 : len(history)]]
    assert dropped > 0 and count_request(None, one_more_turn) > low


@pytest.mark.parametrize("value", [0.01, 0.999, 1, 1.0])
def test_a_watermark_above_0_and_at_most_1_is_taken(value: float) -> None:
    """Every share above 0, up to the whole budget, is accepted as it is."""
    config = structure_config({"governance": {"low_watermark": value}})
    assert config.governance.low_watermark == value
