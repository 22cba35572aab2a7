"""kornia's own gradient tests in half precision, before (no plugin) and after (the shim's plugin).

Two commands, around ``tools/upstream_tests.py record`` (which runs them):

    python tools/upstream_grad_half.py ids CHECKOUT --out IDS.txt [--dtype float16,bfloat16]
        collects the checkout's tests (with the installed kornia, like ``record``) and keeps the
        gradient tests: the test function's own name mentions ``grad`` (not ``gradual``) or
        ``backward``, or its module is ``test_backward*.py`` (the augmentations' learnable-parameter
        tests, ``test_param``: forward, backward and one SGD step in the test's dtype). A ``-k``
        expression would also match class and module names (``TestSpatialGradient::test_smoke``,
        every test of ``morphology/test_gradient.py``). Tests kornia marks ``@pytest.mark.grad`` are
        added whatever their name. ``test_dynamo``/``compile`` are left out.
        Prints the files to pass to ``record`` with ``--only-ids IDS.txt``.

    python tools/upstream_grad_half.py table 0.8.3=RUNS/0.8.3 ... [--markdown OUT.md]
        per release and dtype, from ``half-noshim.jsonl`` (before) and ``half-shim.jsonl`` (after)
        in each directory: tests run, passed before/after, fixed, regressed, left failing per class
        (``upstream_tests.classify``); then what the gradcheck tests really checked in half (the
        dtypes recorded with ``UPSTREAM_GRADCHECK=1``), and every fixed and regressed id.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream_tests as ut  # noqa: E402

# directories that cannot be collected without optional packages or that hold no kernel tests
IGNORE = ("integration", "onnx", "io/test_io_image.py", "benchmark.py", "performance", "smoke_test.py")
GRAD_NAME = re.compile(r"grad(?!ual)|backward", re.I)


def is_gradient_test(node_id: str) -> bool:
    path, _, rest = node_id.partition("::")
    function = rest.split("::")[-1].split("[", 1)[0]
    if re.search(r"dynamo|compile", function, re.I):
        return False
    return bool(GRAD_NAME.search(function)) or Path(path).name.startswith("test_backward")


def _collect(checkout: Path, dtype: str, python: str, selection: list) -> list:
    # -o addopts= : 0.8.3 adds -v there, which would turn -q's node ids into a tree
    root = "tests" if (checkout / "tests").is_dir() else "test"  # 0.7.0 keeps its tests in test/
    command = [python, "-P", "-W", "ignore", "-m", "pytest", "--import-mode=append", root, "--collect-only", "-q",
               "-o", "addopts=", "--dtype", dtype, "--device", "cpu", "-p", "no:cacheprovider", "-p",
               "no:kornia_halfpatch", "--color=no", *selection]
    command += [f"--ignore={root}/{path}" for path in IGNORE if (checkout / root / path).exists()]
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True)
    ids = [line.strip() for line in result.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        raise RuntimeError(f"nothing collected (exit {result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
    return ids


def collect_ids(checkout: Path, dtype: str, python: str = sys.executable) -> list:
    """Gradient tests by their function's or module's name, and those kornia marks ``grad``."""
    named = [i for i in _collect(checkout, dtype, python, ["-k", "grad or backward"]) if is_gradient_test(i)]
    marked = [i for i in _collect(checkout, dtype, python, ["-m", "grad"])
              if not re.search(r"dynamo|compile", i.split("::")[-1].split("[", 1)[0], re.I)]
    return named + sorted(set(marked) - set(named))


def _load(path: Path) -> tuple:
    entries = ut._read(path)
    gradchecks = collections.defaultdict(list)
    for entry in entries:
        if entry["event"] == "gradcheck":
            gradchecks[entry["id"]].append(entry)
    return ut.summarize(entries), gradchecks


HALF = ("float16", "bfloat16")
LEFT = ("tolerance-only: SGD step below half an ulp", "tolerance-only: assert_close", "non-finite", "not-implemented-for-half", "dtype-refused", "dtype-mismatch", "crash",
        "test-limitation", "other", "environment")


def _left_class(test: dict) -> str:
    """The test's class; tolerance-only split into test_param's unchanged half parameter and the rest."""
    cls = test["class"]
    if cls == "tolerance-only":
        step = ut._STEP_BELOW_ULP.search(test["message"])
        return "tolerance-only: SGD step below half an ulp" if step else "tolerance-only: assert_close"
    return "environment" if cls in ut.ENVIRONMENT_CLASSES else cls


def _dtype_row(name: str) -> str:
    dtype = ut.dtype_of(name)
    return "no dtype parameter" if dtype == "other" else dtype


def _ok(runs: dict, name: str) -> bool:
    return name in runs and runs[name]["outcome"] in ("passed", "xfailed")


def table(releases: list) -> str:
    rows, details, checked, before_where = [], [], [], {}
    for item in releases:
        label, _, directory = item.partition("=")
        before, _ = _load(Path(directory) / "half-noshim.jsonl")
        before_where.update({(label, n): (t["where"] or [""])[-1] for n, t in before.items()})
        after, gradchecks = _load(Path(directory) / "half-shim.jsonl")
        for dtype in HALF + ("no dtype parameter",):
            names = sorted(n for n in set(before) | set(after) if _dtype_row(n) == dtype)
            if not names:
                continue
            ran = [n for n in names if n in after and after[n]["outcome"] != "skipped"]
            fixed = [n for n in names if _ok(after, n) and n in before and not _ok(before, n)]
            regressed = [n for n in names if _ok(before, n) and not _ok(after, n)]
            left = collections.Counter(_left_class(after[n]) for n in names if n in after and after[n]["class"])
            rows.append((label, dtype, len(names), len(names) - len(ran), len(ran), sum(_ok(before, n) for n in names),
                         sum(_ok(after, n) for n in names), len(fixed), len(regressed), left))
            for kind, members in (("fixed", fixed), ("regressed", regressed)):
                for name in members:
                    failing = after if kind == "regressed" else before
                    details.append((label, kind, name, before.get(name, {}).get("outcome"),
                                    after.get(name, {}).get("outcome"),
                                    failing.get(name, {}).get("class") or "",
                                    ut.first_line(failing.get(name, {}).get("message", ""))))
            gc = [n for n in ran if n in gradchecks]
            half = [n for n in gc if any(set(e["requires_grad_dtypes"]) & set(HALF) for e in gradchecks[n])]
            f64 = [n for n in gc if all(set(e["requires_grad_dtypes"]) <= {"float64", "complex128"} for e in gradchecks[n])]
            checked.append((label, dtype, len(ran), len(gc), len(f64), len(half), len(ran) - len(gc)))
    lines = ["| release | dtype | collected | skipped | run | passed without shim | passed with shim | fixed | regressed | "
             + " | ".join(f"left failing: {c}" for c in LEFT) + " |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * len(LEFT)]
    for label, dtype, total, skipped, ran, passed_before, passed_after, fixed, regressed, left in rows:
        lines.append(f"| {label} | {dtype} | {total} | {skipped} | {ran} | {passed_before} | {passed_after} | {fixed} | "
                     f"{regressed} | " + " | ".join(str(left[c]) for c in LEFT) + " |")
    lines += ["", "What the tests that ran gave torch.autograd.gradcheck/gradgradcheck (inputs that require grad, "
              "recorded in the run with the shim):", "",
              "| release | dtype | run | called gradcheck | gradcheck in float64 only | gradcheck with a half input | "
              "no gradcheck call (backward, SGD-step, grad-flow tests) |",
              "|---|---|---|---|---|---|---|"]
    for row in checked:
        lines.append("| " + " | ".join(map(str, row)) + " |")
    fixed_groups = collections.Counter()
    for label, kind, name, b, a, cls, message in details:
        if kind == "fixed":
            where = before_where.get((label, name), "")
            fixed_groups[(label, ut.dtype_of(name), cls, where, ut._collapse(message)[:150])] += 1
    if fixed_groups:
        lines += ["", "Fixed by the shim, grouped by the failure without it (class, innermost kornia frame, first error "
                  "line with numbers collapsed to N):", "",
                  "| release | dtype | tests | class without the shim | kornia frame | first error line without the shim |",
                  "|---|---|---|---|---|---|"]
        for (label, dtype, cls, where, message), count in sorted(fixed_groups.items(), key=lambda kv: (kv[0][0], -kv[1])):
            lines.append(f"| {label} | {dtype} | {count} | {cls} | `{where}` | {ut._cell(message)} |")
    regressions = [d for d in details if d[1] == "regressed"]
    lines += ["", f"Regressed (passed without the shim, not with it): {len(regressions)}.", ""]
    if regressions:
        lines += ["| release | test | without | with | class | message |", "|---|---|---|---|---|---|"]
        for label, kind, name, b, a, cls, message in regressions:
            lines.append(f"| {label} | `{name}` | {b} | {a} | {cls} | {ut._cell(message)[:160]} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ids")
    p.add_argument("checkout", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dtype", default="float16,bfloat16")
    p.add_argument("--python", default=sys.executable)
    p = sub.add_parser("table")
    p.add_argument("releases", nargs="+")
    p.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.command == "ids":
        ids = collect_ids(args.checkout, args.dtype, args.python)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(ids) + "\n")
        files = sorted({i.split("::", 1)[0] for i in ids})
        print(f"{len(ids)} gradient tests in {len(files)} files", file=sys.stderr)
        print(" ".join(files))
        return 0
    text = table(args.releases)
    if args.markdown:
        args.markdown.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
