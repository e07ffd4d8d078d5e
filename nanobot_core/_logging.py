"""structlog set-up for the CLI: every line on stderr, readable or JSON."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(*, log_format: str = "console", level: str = "warning") -> None:
    """Send structlog output to stderr, rendered for a terminal or as JSON lines."""
    renderer: Any
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A structlog logger for `name`; if the application configured nothing, logs go to stderr.

    structlog's own default prints to stdout, which would corrupt the JSON
    output of the CLI and of any program embedding the library.
    """
    if not structlog.is_configured():
        configure_logging()
    return structlog.get_logger(name)
