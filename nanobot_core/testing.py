"""A pytest plugin for plugin authors (loaded automatically through the ``pytest11`` entry point)."""

from __future__ import annotations
