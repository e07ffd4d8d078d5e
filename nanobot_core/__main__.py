"""The ``nanobot-core`` command's entry point, and ``python -m nanobot_core``.

The CLI's modules (click, the command group, structlog) take a tenth of a
second or more to load; they are loaded here, inside `main`, so that a Ctrl-C
in that time ends as one during a command does (``Interrupted.``, exit 130)
rather than with Python's traceback. The exit statuses come from a module of
constants alone, loaded first.
"""

from __future__ import annotations

import sys

from nanobot_core._exit_codes import EXIT_INTERRUPTED

__all__ = ["main"]


def main() -> None:
    """Load the CLI and run it as the program (``nanobot_core.cli.main``)."""
    try:
        from nanobot_core.cli import main as command

        command()
    except KeyboardInterrupt:  # while loading, or in the few steps outside the CLI's handling
        sys.stderr.write("Interrupted.\n")
        raise SystemExit(EXIT_INTERRUPTED) from None


if __name__ == "__main__":
    main()
