"""A strict JSON reader for outputs: UTF-8 only, no NaN or Infinity, no lone surrogate escape."""

from __future__ import annotations

import json
import re
from typing import Any

# A high surrogate escape not followed by a low one, or a low one not preceded by a high one.
_LONE_ESCAPE = re.compile(
    r"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<![0-9a-fA-F]{2}\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def strict_loads(data: bytes | str) -> Any:
    """Parse `data` as RFC 8259 JSON in UTF-8 (I-JSON: no lone surrogates); raise otherwise."""
    text = data.decode("utf-8", "strict") if isinstance(data, bytes) else data
    text.encode("utf-8", "strict")  # a raw lone surrogate in a str cannot be UTF-8
    if _LONE_ESCAPE.search(text):
        raise ValueError("an escaped lone surrogate")
    return json.loads(text, parse_constant=_refuse)


def strict_lines(data: bytes) -> list[Any]:
    """Every non-empty line of `data`, each parsed strictly."""
    return [strict_loads(line) for line in data.split(b"\n") if line.strip()]
