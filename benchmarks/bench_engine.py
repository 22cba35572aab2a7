"""What the engine itself costs: apply(), revert(), an unpatched() block and status(), with the
current fixes and with 100 synthetic table rows on top (targets on kornia 0.8.2:
apply() with 100 rows <= 0.5 s, an unpatched() block <= 50 ms).

    python benchmarks/bench_engine.py [--rows 100] [--repeat 7]

(run it with a kornia 0.8.2 environment, e.g. `tox -e bench` or the kornia082 test env).
"First apply()" includes the behaviour probes, which run once per process; later calls reuse
their findings. Medians of --repeat runs, measured in this one process.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import statistics
import time
import warnings
from typing import Callable, List


def synthetic_rows(count: int) -> List[object]:
    """Promote rows on ``count`` public kornia functions that take a tensor first (so the
    generated wrapper is a real one), from modules kornia imports anyway."""
    from kornia_halfpatch._codegen import UnsupportedSignature, promote_wrapper
    from kornia_halfpatch._model import Promote

    rows = []
    seen = set()
    for module_name in (
        "kornia.color",
        "kornia.enhance",
        "kornia.filters",
        "kornia.geometry.conversions",
        "kornia.geometry.transform",
        "kornia.losses",
        "kornia.metrics",
        "kornia.morphology",
        "kornia.utils",
    ):
        module = importlib.import_module(module_name)
        for name, value in sorted(vars(module).items()):
            if not inspect.isfunction(value) or name.startswith("_") or id(value) in seen:
                continue
            if not value.__module__.startswith("kornia"):
                continue
            try:
                promote_wrapper(value)  # a row only where a wrapper can be generated
            except (UnsupportedSignature, TypeError, ValueError, NameError, SyntaxError):
                continue
            seen.add(id(value))
            rows.append(Promote(f"{value.__module__}:{value.__qualname__}", "synthetic benchmark row"))
            if len(rows) == count:
                return rows
    return rows


def median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def measure(label: str, repeat: int) -> None:
    import kornia_halfpatch

    kornia_halfpatch.revert()
    started = time.perf_counter()
    report = kornia_halfpatch.apply()
    first = 1000 * (time.perf_counter() - started)
    targets = sum(len(fix.target_statuses) for fix in report.fixes.values() if fix.applied)
    failed = [f"{name}: {fix.reason}" for name, fix in report.fixes.items() if fix.verdict.name == "FAILED"]
    if failed:
        raise SystemExit(f"a fix failed: {failed}")

    def cycle_apply() -> None:
        kornia_halfpatch.revert()
        kornia_halfpatch.apply()

    def unpatched_block() -> None:
        with kornia_halfpatch.unpatched():
            pass

    apply_and_revert = median_ms(cycle_apply, repeat)
    block = median_ms(unpatched_block, repeat)
    status = median_ms(kornia_halfpatch.status, repeat)
    print(
        f"{label:<28} targets {targets:>4}  first apply() {first:7.1f} ms  revert()+apply() {apply_and_revert:7.1f} ms"
        f"  unpatched() block {block:6.1f} ms  status() {status:6.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import kornia
    import torch

    from kornia_halfpatch import testing
    from kornia_halfpatch._model import Fix
    from kornia_halfpatch.fixes import load_fixes

    torch.set_num_threads(1)
    print(f"kornia {kornia.__version__}, torch {torch.__version__}")
    with testing.preserved():
        measure("current fixes", args.repeat)
        rows = synthetic_rows(args.rows)
        table = Fix(name="synthetic_rows", targets=tuple(rows))
        with testing.use_fixes(load_fixes() + [table]):
            measure(f"current + {len(rows)} synthetic rows", args.repeat)


if __name__ == "__main__":
    main()
