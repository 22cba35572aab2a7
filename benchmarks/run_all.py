"""Run every benchmark script with this interpreter (an old kornia), one after another.

    python benchmarks/run_all.py [--oracle-python PATH-TO-KORNIA-0.9.0-PYTHON]

Scripts that compare against kornia 0.9.0 get ``--oracle-python`` (``tox -e bench`` passes the
``bench-oracle`` environment's python); without it they report patched/unpatched ratios only.
"""

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAKES_ORACLE = {"bench_feature_descriptors.py", "bench_warp_sampling.py", "bench_torch_ops.py", "bench_feature_patches.py"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--oracle-python")
    args = parser.parse_args()
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        command = [sys.executable, str(script)]
        if args.oracle_python and script.name in TAKES_ORACLE:
            command += ["--oracle-python", args.oracle_python]
        print(f"=== {script.name}", flush=True)
        if subprocess.run(command).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
