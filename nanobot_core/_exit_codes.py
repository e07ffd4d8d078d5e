"""The exit statuses of the ``nanobot-core`` command (README, "CLI").

A module of constants alone: the entry point loads it before anything else,
in microseconds, so that a Ctrl-C while the CLI's modules load already has its
exit status.
"""

from __future__ import annotations

__all__ = [
    "EXIT_FAILED",
    "EXIT_HUNG_UP",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# As shells report a process a signal ended: 128 + the signal's number.
#: SIGHUP (a closed terminal): 128 + 1.
EXIT_HUNG_UP = 129
#: Ctrl-C (SIGINT): 128 + 2.
EXIT_INTERRUPTED = 130
#: SIGTERM (a service manager, ``docker stop``, ``kill``): 128 + 15.
EXIT_TERMINATED = 143
