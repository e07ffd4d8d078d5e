"""Argument repair on adversarial input: seconds to parse 1 MB and 2 MB of broken arguments.

Run in the bench environment. Each kind of input is what makes a repair slow: a value
cut off after a long string full of escapes, a cut-off structure dense with brackets and
strings, and long breakage that is not a cut-off (refused past the documented limit).
Sizes alternate within each repetition (in the other order every other repetition), so
a slow spell of the machine hits both; each call is timed in CPU time
(``time.process_time``), which leaves out the time other processes hold the CPU.
"""

from __future__ import annotations

import gc
import time

from _common import parser, silence_structlog, write

SIZES = (1_000_000, 2_000_000)


def _inputs(size: int) -> dict[str, str]:
    escaped = ('x\\"y \\\\ z\\n' * (size // 10 + 1))[:size]
    dense = '{"k": [1, {"z": "q"}]}, ' * (size // 24 + 1)
    return {
        "cut-off string full of escapes": '{"path": "a.txt", "content": "' + escaped,
        "cut-off structure dense with brackets": '{"a": [' + dense[:size],
        "long breakage that is not a cut-off": "{'a': '" + "x" * size + "'}",
    }


def main() -> None:
    options = parser(__doc__ or "").parse_args()
    silence_structlog()
    from nanobot_core.tools.registry import parse_arguments

    inputs = {size: _inputs(size) for size in SIZES}
    seconds: dict[str, dict[str, list[float]]] = {}
    outcomes: dict[str, str] = {}
    for index in range(options.reps):
        for size in SIZES if index % 2 == 0 else reversed(SIZES):
            for kind, text in inputs[size].items():
                # As every driver does: the collector's count starts afresh, so that a
                # collection the previous calls' objects were due lands on neither size.
                gc.collect()
                started = time.process_time()
                parsed = parse_arguments(text)
                elapsed = time.process_time() - started
                seconds.setdefault(kind, {}).setdefault(str(size), []).append(elapsed)
                if size == SIZES[-1]:  # the outcome the notes give is the larger size's
                    outcomes[kind] = "error: " + parsed.error if parsed.error else "repaired"
    write(options.out, {"seconds": seconds, "outcomes": outcomes, "sizes": list(SIZES)})


if __name__ == "__main__":
    main()
