"""What every benchmark script shares: timing a call, and worker interpreters spoken to over pipes.

A benchmark compares two kornia installations (the patched release here, kornia 0.9.0 in its own
environment) in one run, so each side runs in a worker process: `Worker` starts this machine's
python or the oracle environment's on the benchmark script with `--worker`, and exchanges one
JSON line per request. The worker side calls `serve(info, answer)`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

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
