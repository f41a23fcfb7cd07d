"""What the benchmark scripts share: running one trial in a fresh subprocess and reading back
its result, and the medians and cells of their time-to-solve tables.

Every script runs each trial as ``python <script> --_trial ...`` so that no library inherits
another's threads, RNG state or caches; the child prints its result as one JSON line. A script's
own folder is first on ``sys.path``, so the scripts import this module by its bare name.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any


def run_json_trial(
    cmd: Sequence[str],
    base: Mapping[str, Any],
    *,
    timeout: float | None = None,
    failed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` and return ``base`` updated with the last JSON line it printed.

    A trial that prints none, exits with an error or outlives ``timeout`` seconds returns
    ``base``, then ``failed`` (what a failed trial counts as, e.g. unsolved), then ``error``: the
    exit status with the last 15 lines of its output, or the timeout.
    """
    lost = {**base, **(failed or {})}
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {**lost, "error": f"killed after {timeout:.0f} s (the cap and its grace)"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return {**base, **json.loads(line)}
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    return {**lost, "error": f"exit {proc.returncode}: {tail}"}


def finite(x: float | None) -> float | None:
    """``x`` as a float, or None where it is missing, infinite or NaN (JSON has no inf)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def median_seconds(results: Sequence[Mapping[str, Any]]) -> float | None:
    """Median seconds to solve over seeds, an unsolved trial counting as infinitely slow;
    None when there is no trial or every trial failed to run (an error, not a slow solve)."""
    if not results or all(r.get("error") for r in results):
        return None
    return statistics.median(r["seconds"] if r.get("solved") else math.inf for r in results)


def median_cell(m: float | None, cap: float) -> str:
    """A median for a table: ``error`` (every trial failed), ``>cap`` (unsolved) or seconds."""
    if m is None:
        return "error"
    return f">{cap:.0f}" if math.isinf(m) else f"{m:.1f}"


def gist(error: str) -> str:
    """The exception line of a trial's traceback, else its last line."""
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln):
            return ln
    return lines[-1] if lines else ""
