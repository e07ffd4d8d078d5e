"""The ``nanobot-core`` command's entry point, and ``python -m nanobot_core``.

The CLI's modules (click, the command group, structlog) take a tenth of a
second or more to load; they are loaded here, inside `main`, so that a Ctrl-C
in that time ends as one during a command does (``Interrupted.``, exit 130)
rather than with Python's traceback. So do SIGTERM and SIGHUP (exit 143 and
129, `nanobot_core._stop_signals`), whose handlers are set first. The exit
statuses come from a module of constants alone, loaded first.
"""

from __future__ import annotations

from nanobot_core import _stop_signals

__all__ = ["main"]


def main() -> None:
    """Load the CLI and run it as the program (``nanobot_core.cli.main``)."""
    _stop_signals.install()
    try:
        from nanobot_core.cli import main as command

        command()
    except KeyboardInterrupt as interrupt:  # while loading, or in the steps outside the CLI's
        raise SystemExit(_stop_signals.say_interrupted(interrupt)) from None


if __name__ == "__main__":
    main()
