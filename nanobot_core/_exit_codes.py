"""The exit statuses of the ``nanobot-core`` command (README, "CLI").

A module of constants alone: the entry point loads it before anything else,
in microseconds, so that a Ctrl-C while the CLI's modules load already has its
exit status.
"""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: Ctrl-C (SIGINT), as shells report a process a SIGINT ended: 128 + 2.
EXIT_INTERRUPTED = 130
