"""``kornia-halfpatch`` / ``python -m kornia_halfpatch``: what the shim does on this machine.

Prints the environment and the status of every fix, then runs each applied fix's live
before/after demonstration. Exits 1 if a fix that should hold does not. ``--options`` lists
every setting (kornia_halfpatch._options) with its value in this environment; a bad value is
reported by the apply() the status runs, as in a program.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        from ._launcher import run

        return run(argv[1:])
    from . import _options

    parser = argparse.ArgumentParser(
        prog="kornia-halfpatch",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="kornia-halfpatch run -- COMMAND [ARGS...]: run COMMAND with the shim applied in every Python process it starts\n\n"
        "settings (apply() keyword / environment variable):\n"
        + "\n".join(f"  {_options.describe(option)}" for option in _options.OPTIONS),
    )
    parser.add_argument("--only", action="append", help="demonstrate only this fix (repeatable)")
    parser.add_argument("--no-demo", action="store_true", help="print the status only")
    parser.add_argument("--options", action="store_true", help="list every setting and its value here, then exit")
    args = parser.parse_args(argv)
    if args.options:
        for option in _options.OPTIONS:
            print(_options.describe(option))
        return 0

    import kornia  # noqa: F401  (the shim patches kornia as it is imported)
    import torch

    import kornia_halfpatch
    from kornia_halfpatch.fixes import load_fixes

    torch.manual_seed(0)
    report = kornia_halfpatch.apply()
    print(f"kornia-halfpatch {kornia_halfpatch.__version__} on {sys.platform}, python {sys.version.split()[0]}")
    print(report)
    if args.no_demo:
        return 0

    chosen = set(args.only) if args.only else None
    failures = []
    for fix in load_fixes():
        if chosen is not None and fix.name not in chosen:
            continue
        print()
        if fix.name not in report.applied:
            print(f"[{fix.name}] not applied here: {report.fixes[fix.name].reason}")
            continue
        if fix.demonstration is None:
            print(f"[{fix.name}] no demonstration")
            continue
        started = time.perf_counter()
        try:
            demo = fix.demonstrate()
        except Exception as exc:  # noqa: BLE001 - one demonstration's failure is reported, the others still run
            message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            print(f"[{fix.name}] the demonstration raised {type(exc).__name__}: {message}")
            failures.append(fix.name)
            continue
        elapsed = time.perf_counter() - started
        verdict = "holds" if demo.holds else "DOES NOT HOLD"
        print(f"[{fix.name}] {demo.title}  ({verdict}, {elapsed:.1f} s)")
        width = max([len(row[0]) for row in demo.cases] + [10])
        print(f"    {'case':<{width}}  {'unpatched':<24}  patched")
        for what, before, after in demo.cases:
            print(f"    {what:<{width}}  {before:<24}  {after}")
        if demo.note:
            print(f"    {demo.note}")
        if not demo.holds:
            failures.append(fix.name)
    print()
    if failures:
        print(f"FAILED: {', '.join(failures)} did not hold on this machine")
        return 1
    print("every applied fix holds on this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
