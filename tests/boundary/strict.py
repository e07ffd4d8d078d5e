"""A strict JSON reader for outputs: UTF-8 only, no NaN or Infinity, no lone surrogate escape."""

from __future__ import annotations

import json
from typing import Any


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _check_text(value: Any) -> None:
    """Every string (and key) must be encodable as UTF-8: an escaped lone surrogate is not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8", "strict")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def strict_loads(data: bytes | str) -> Any:
    """Parse `data` as RFC 8259 JSON in UTF-8 (I-JSON: no lone surrogates); raise otherwise."""
    text = data.decode("utf-8", "strict") if isinstance(data, bytes) else data
    text.encode("utf-8", "strict")  # a raw lone surrogate in a str cannot be UTF-8
    value = json.loads(text, parse_constant=_refuse)
    _check_text(value)
    return value


def strict_lines(data: bytes) -> list[Any]:
    """Every non-empty line of `data`, each parsed strictly."""
    return [strict_loads(line) for line in data.split(b"\n") if line.strip()]
