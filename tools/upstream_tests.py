"""Run kornia's own tests (from a checkout of the installed release's tag) with and without the shim.

    python tools/upstream_tests.py /path/to/kornia-checkout tests/utils/test_grid.py ... \
        [--dtype float32,float16,bfloat16]

The checkout is not part of this project (fetch it yourself; never commit it). Prints, per
dtype, passed/failed counts unpatched and patched, and the tests whose outcome changed.
"""

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path


def run(checkout: Path, tests, dtype: str, shim: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", *tests, "--dtype", dtype, "--device", "cpu", "-q",
                   "-p", "no:cacheprovider", f"--junitxml={report}"]
        if not shim:
            command += ["-p", "no:kornia_halfpatch"]
        subprocess.run(command, cwd=checkout, capture_output=True, text=True)
        outcomes = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            if case.find("failure") is not None or case.find("error") is not None:
                outcomes[name] = "failed"
            elif case.find("skipped") is not None:
                outcomes[name] = "skipped"
            else:
                outcomes[name] = "passed"
        return outcomes


def dtype_of(name: str) -> str:
    match = re.search(r"(bfloat16|float16|float32|float64)", name)
    return match.group(1) if match else "other"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout", type=Path)
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--dtype", default="float32,float16,bfloat16")
    args = parser.parse_args()
    before = run(args.checkout, args.tests, args.dtype, shim=False)
    after = run(args.checkout, args.tests, args.dtype, shim=True)
    table = collections.defaultdict(collections.Counter)
    for name in set(before) | set(after):
        table[dtype_of(name)][("unpatched", before.get(name))] += 1
        table[dtype_of(name)][("patched", after.get(name))] += 1
    for dtype in sorted(table):
        counts = table[dtype]
        print(f"{dtype:<9} unpatched {counts[('unpatched', 'passed')]:4d} passed {counts[('unpatched', 'failed')]:4d} failed"
              f"   patched {counts[('patched', 'passed')]:4d} passed {counts[('patched', 'failed')]:4d} failed")
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    for name in changed:
        print(f"  {before.get(name)} -> {after.get(name)}  {name}")
    regressions = [n for n in changed if before.get(n) == "passed" and after.get(n) == "failed"]
    print(f"{len(changed)} changed, {len(regressions)} passed->failed")
    return 1 if any(dtype_of(n) in ("float32", "float64", "other") for n in regressions) else 0


if __name__ == "__main__":
    sys.exit(main())
