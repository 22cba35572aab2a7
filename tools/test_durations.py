"""Per tox environment: its tests' counts, time and 25 slowest items (from the junit files the
environments write), then every failed test by environment, and one closing line with the totals
of the whole matrix (last, because CI keeps only the tail of what it prints).

    python tools/test_durations.py .tox [--top 25]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def read(path: Path):
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    cases = []
    failed = []
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        seconds += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            cases.append((float(case.get("time", 0.0)), name))
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                first_line = (problem.get("message") or "").strip().splitlines()[:1]
                failed.append(f"{name}: {first_line[0][:200] if first_line else problem.tag}")
    return counts, seconds, sorted(cases, reverse=True), failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("toxworkdir", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    found = sorted(args.toxworkdir.glob("*/log/junit.xml"))
    failures = []
    for path in found:
        counts, seconds, cases, failed_cases = read(path)
        failures += [f"{path.parent.parent.name}: {case}" for case in failed_cases]
        failed = counts["failures"] + counts["errors"]
        passed = counts["tests"] - failed - counts["skipped"]
        totals["passed"] += passed
        totals["failed"] += failed
        totals["skipped"] += counts["skipped"]
        print(f"\n== {path.parent.parent.name}: {passed} passed, {failed} failed, {counts['skipped']} skipped in {seconds:.0f} s; slowest:")
        for duration, name in cases[: args.top]:
            print(f"  {duration:8.2f}s  {name}")
    if failures:
        print(f"\nfailed ({len(failures)}):")
        for line in failures[:60]:
            print(f"  {line}")
        if len(failures) > 60:
            print(f"  ... and {len(failures) - 60} more")
    if not found:
        print(f"no junit files under {args.toxworkdir}/*/log/", file=sys.stderr)
        return 1
    print(f"\nmatrix: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
