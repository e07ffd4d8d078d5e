"""Whether an integer converts to a float: the one test, for config values and tool timeouts."""

from __future__ import annotations

__all__ = ["fits_float"]


def fits_float(value: int) -> bool:
    """Whether `value` converts to a float: some ints of 1024 bits do, some do not.

    A TOML integer or a tool's timeout may have any size; where a float of
    seconds is wanted, one past the largest float is refused, not an OverflowError.
    """
    try:
        float(value)
    except OverflowError:
        return False
    return True
