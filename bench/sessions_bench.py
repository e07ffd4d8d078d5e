"""Session stores under load: turns per second, append and lease latency, 1/4/8 workers.

Run in an environment with nanobot-core and nanobot-postgres installed (with its
``test`` extra, which brings the server binaries when the system has none)::

    python bench/sessions_bench.py            # writes its section of bench/RESULTS.md
    python bench/sessions_bench.py --quick    # a smoke run, prints only

Each scenario starts N worker processes (``python -m nanobot_postgres.loadtest``)
that share 24 sessions per worker of 3 turns each, every turn with two tool
calls, against a scripted model server on 127.0.0.1 that answers every request
after 50 ms. The workers start together (after they have connected), and turns
per second is all turns over the wall time from that start to the last worker's
end. Appends and leases are timed inside the workers, around the store's own
calls. PostgreSQL runs with its durable defaults (fsync, synchronous commit) in a
temporary folder; the JSONL store writes and fsyncs files in a temporary
workspace. Targets: 8 PostgreSQL workers reach at least 6x the turns per second
of 1, and the p99 append with 8 workers stays under 25 ms.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.testserver import TemporaryPostgres
from report import SESSIONS_END, SESSIONS_START, machine_lines

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
START = SESSIONS_START
END = SESSIONS_END
MODEL_DELAY = 0.05


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def scenario(
    store: str, workers: int, *, dsn: str, base_url: str, turns: int, per_worker: int
) -> dict[str, Any]:
    """Run `workers` load-test workers on `store`; their pooled figures."""
    root = Path(tempfile.mkdtemp(prefix=f"nanobot-bench-{store}-{workers}-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI_"))}
    env.update(
        NANOBOT_BASE_URL=base_url,
        NANOBOT_API_KEY="bench",
        NANOBOT_MODEL="scripted",
        NANOBOT_SESSIONS__STORE=store,
        NANOBOT_POSTGRES_DSN=dsn,
        NANOBOT_SESSIONS__POSTGRES__POOL_SIZE="2",
    )
    start_file = root / "go"
    sessions = per_worker * workers
    procs = []
    for index in range(workers):
        # JSONL: one shared workspace, as workers on one machine would share it.
        workspace = root / ("workspace" if store == "jsonl" else f"worker{index}")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nanobot_postgres.loadtest",
                    "--workspace",
                    str(workspace),
                    "--sessions",
                    str(sessions),
                    "--turns",
                    str(turns),
                    "--seed",
                    str(index),
                    "--workers",
                    str(workers),
                    "--stats",
                    str(root / f"stats{index}.json"),
                    "--start-file",
                    str(start_file),
                ],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"worker did not start: {line!r}")
    start_file.write_text("go")
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.read()
        if proc.wait(timeout=900) != 0:
            raise RuntimeError(f"worker failed with {proc.returncode}")
    stats = [json.loads((root / f"stats{i}.json").read_text()) for i in range(workers)]
    total = sum(s["turns"] for s in stats)
    wall = max(s["ended_at"] for s in stats) - min(s["started_at"] for s in stats)
    appends = [a for s in stats for a in s["appends"]]
    leases = [a for s in stats for a in s["leases"]]
    return {
        "store": store,
        "workers": workers,
        "turns": total,
        "seconds": wall,
        "turns_per_second": total / wall,
        "append_p50_ms": 1000 * statistics.median(appends),
        "append_p99_ms": 1000 * _percentile(appends, 0.99),
        "lease_p50_ms": 1000 * statistics.median(leases),
        "lease_p99_ms": 1000 * _percentile(leases, 0.99),
        "appends": len(appends),
        "busy": sum(s["busy"] for s in stats),
    }


def render(results: list[dict[str, Any]], server_version: str, load: tuple[float, float]) -> str:
    """The RESULTS.md section."""
    one = next(r for r in results if r["store"] == "postgres" and r["workers"] == 1)
    eight = next(r for r in results if r["store"] == "postgres" and r["workers"] == 8)
    speedup = eight["turns_per_second"] / one["turns_per_second"]
    lines = [
        START,
        "## Session stores: turns per second, append and lease latency",
        "",
        f"Run {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} by "
        "`python bench/sessions_bench.py`, on:",
        "",
        *machine_lines(),
        f"- PostgreSQL: {server_version} (temporary folder, durable defaults)",
        f"- Load average (1 min) at the start and end of the run: {load[0]:.1f}, {load[1]:.1f} "
        "(anything above the core count means other work was competing for the CPU)",
        "",
        f"Model server answering every request after {MODEL_DELAY * 1000:.0f} ms; each turn is "
        "two model calls (tool calls, then the answer) with two tool calls between them, and "
        "four appends (user message, assistant, both results as one batch, answer). Latencies "
        "are pooled over all workers' calls.",
        "",
        "| store | workers | turns | turns/s | append p50 | append p99 | lease p50 | lease p99 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['store']} | {r['workers']} | {r['turns']} | {r['turns_per_second']:.1f} | "
            f"{r['append_p50_ms']:.2f} ms | {r['append_p99_ms']:.2f} ms | "
            f"{r['lease_p50_ms']:.2f} ms | {r['lease_p99_ms']:.2f} ms |"
        )
    met_speedup = speedup >= 6
    met_append = eight["append_p99_ms"] < 25
    lines += [
        "",
        f"- 8 PostgreSQL workers / 1: **{speedup:.1f}x** turns per second "
        f"(target at least 6x): {'met' if met_speedup else 'NOT met'}.",
        f"- p99 append with 8 PostgreSQL workers: **{eight['append_p99_ms']:.1f} ms** "
        f"(target under 25 ms): {'met' if met_append else 'NOT met'}.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(section: str, path: Path = RESULTS) -> None:
    """Replace this benchmark's section of RESULTS.md (or append it), leaving the rest."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run; prints, writes nothing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    turns, per_worker = (2, 4) if args.quick else (3, 24)
    plan = [("jsonl", 1), ("postgres", 1), ("postgres", 4), ("postgres", 8)]
    results = []
    load_before = os.getloadavg()[0]
    with (
        TemporaryPostgres(fast=False) as server,
        ScriptedChatServer(delay=MODEL_DELAY, record=False) as model,
    ):
        import psycopg

        with psycopg.connect(server.dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            version = str(row[0]) if row else "?"
        for number, (store, workers) in enumerate(plan):
            dsn = server.create_database(f"bench{number}")
            started = time.perf_counter()
            result = scenario(
                store, workers, dsn=dsn, base_url=model.base_url, turns=turns, per_worker=per_worker
            )
            print(
                f"{store} x{workers}: {result['turns_per_second']:.1f} turns/s, append p99 "
                f"{result['append_p99_ms']:.2f} ms, lease p99 {result['lease_p99_ms']:.2f} ms "
                f"({time.perf_counter() - started:.0f}s)",
                file=sys.stderr,
            )
            results.append(result)
    section = render(results, version, (load_before, os.getloadavg()[0]))
    print(section)
    if not args.quick:
        write_section(section, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
