"""What every benchmark script shares: timing a call, worker interpreters spoken to over pipes, and
the interleaved rounds that compare patched, unpatched and kornia 0.9.0 in one run.

A benchmark compares two kornia installations (the patched release here, kornia 0.9.0 in its own
environment) in one run, so each side runs in a worker process: `Worker` starts this machine's
python or the oracle environment's on the benchmark script with `--worker`, and exchanges one
JSON line per request. The worker side calls `serve(info, answer)`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]


def timed(call: Callable[[], Any], reps: int) -> List[float]:
    """Seconds per call, after one untimed warm-up call (allocator and oneDNN primitive caches)."""
    call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def serve(info: Dict[str, Any], answer: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """The worker's loop: announce `info`, then answer each request line with one JSON line."""
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)


class Worker:
    """A benchmark script running with `--worker` under another (or this) python."""

    def __init__(self, script: str, python: str, threads: int, *extra: str) -> None:
        command = [python, str(Path(script).resolve()), "--worker", "--threads", str(threads), *extra]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.info = self._read()

    def _read(self) -> Dict[str, Any]:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("benchmark worker exited")
            if line.startswith("{"):  # libraries may print other lines (warnings) on stdout
                return json.loads(line)

    def request(self, **fields: Any) -> Dict[str, Any]:
        self.process.stdin.write(json.dumps(fields) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


ORACLE = "kornia 0.9.0"
HALF = ("float16", "bfloat16")
Variant = Tuple[str, str, str]  # (case, who: "patched" | "unpatched" | ORACLE, dtype)


def variants(
    names: Sequence[str],
    with_oracle: bool,
    oracle_float32: bool = False,
    oracle_skips: Callable[[str, str], bool] = lambda name, dtype: False,
) -> List[Variant]:
    """Per case: float32 patched and unpatched (and 0.9.0's float32 with ``oracle_float32``), then
    each half dtype patched and, unless ``oracle_skips(name, dtype)``, under 0.9.0."""
    chosen: List[Variant] = []
    for name in names:
        chosen += [(name, "patched", "float32"), (name, "unpatched", "float32")]
        if with_oracle and oracle_float32:
            chosen.append((name, ORACLE, "float32"))
        for dtype in HALF:
            chosen.append((name, "patched", dtype))
            if with_oracle and not oracle_skips(name, dtype):
                chosen.append((name, ORACLE, dtype))
    return chosen


def interleaved_rounds(
    chosen: List[Variant], local: Worker, oracle: Optional[Worker], rounds: int, reps: int
) -> Tuple[Dict[Variant, float], Dict[Variant, str]]:
    """Every variant ``reps`` calls per round, the rounds alternating forward and reverse order,
    so that a drift in the machine's load falls on every variant alike. Returns the median
    seconds per call of each variant that ran, and the error of each that raised (not asked
    again). Closes the workers."""
    samples: Dict[Variant, List[float]] = {v: [] for v in chosen}
    errors: Dict[Variant, str] = {}
    try:
        for index in range(rounds):
            for variant in (chosen if index % 2 == 0 else chosen[::-1]):
                name, who, dtype = variant
                if variant in errors:
                    continue
                source = oracle if who == ORACLE else local
                answer = source.request(case=name, dtype=dtype, patched=who != "unpatched", reps=reps)
                if "error" in answer:
                    errors[variant] = answer["error"]
                else:
                    samples[variant] += answer["times"]
    finally:
        local.close()
        if oracle is not None:
            oracle.close()
    return {v: statistics.median(s) for v, s in samples.items() if s}, errors


def half_against_oracle(row: Dict[str, Any], name: str, dtype: str, median: Dict[Variant, float],
                        errors: Dict[Variant, str]) -> None:
    """A row's half columns: the patched time, and its ratio to 0.9.0 (or what 0.9.0 raised)."""
    patched = (name, "patched", dtype)
    oracle = (name, ORACLE, dtype)
    if patched in median:
        row[f"{dtype} patched ms"] = median[patched] * 1e3
    if oracle in median and patched in median:
        row[f"{dtype} patched/0.9.0"] = median[patched] / median[oracle]
    elif oracle in errors:
        row[f"{dtype} patched/0.9.0"] = f"0.9.0 raises {errors[oracle]}"
