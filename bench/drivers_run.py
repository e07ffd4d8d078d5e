"""Running driver scripts in their environments and reading back their JSON figures."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DRIVERS = Path(__file__).resolve().parent / "drivers"


def run_driver(
    python: Path | str, script: str, args: Sequence[str | Path], timeout: float = 600
) -> dict[str, Any]:
    """Run ``drivers/<script>`` with `python` and return the JSON it wrote."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "figures.json"
        cmd = [str(python), str(DRIVERS / script), "--out", str(out), *map(str, args)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"driver {script} failed ({result.returncode}): {' '.join(cmd)}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )
        figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return figures
