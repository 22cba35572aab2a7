"""Run kornia's own tests (from a checkout of the installed release's tag) with and without the shim.

The checkout is not part of this project (export it yourself, e.g.
``git --git-dir=<kornia mirror> archive v0.8.2 | tar -x -C ../upstream/v0.8.2`` (beside the clone); never commit
it). Run this script with the python of the environment whose installed kornia matches the tag.
The tests import the INSTALLED kornia and this worktree's shim: pytest runs with ``python -P``
and ``--import-mode=append`` (the checkout's own ``kornia/`` would otherwise shadow the installed
one), and the shim is put on ``PYTHONPATH`` through a directory that holds only
``kornia_halfpatch`` (this repository's ``conftest.py`` must not collide with kornia's).

Five commands (the first is the original one, kept):

    python tools/upstream_tests.py CHECKOUT TEST... [--dtype float32,float16,bfloat16]
        per dtype, passed/failed counts unpatched and patched, and the tests whose outcome
        changed; exit 1 if a float32/float64 test went from passed to failed.

    python tools/upstream_tests.py record CHECKOUT TEST... --out RUN.jsonl [--dtype ...]
            [--no-shim] [--timeout 120] [--only-ids IDS.txt] [-k EXPR] [--autocast float16|bfloat16]
        one run, every test report appended to RUN.jsonl as it happens. A run that dies
        (segfault, pytest-timeout, a hang caught by the watchdog) is resumed without the test
        that killed it, which is recorded as a crash. Appending to an existing file resumes it.

    python tools/upstream_tests.py report RUN.jsonl... --release 0.8.2 --markdown OUT.md
            --tsv OUT.tsv
        classifies every failure by its first error line (see ``classify``) and writes counts
        per class x directory x dtype, the messages per class, and a TSV of failing ids.

    python tools/upstream_tests.py summary 0.8.2=RUNS/0.8.2 0.8.3=RUNS/0.8.3 ...
        one table: failures per class for each release and half dtype (half-*.jsonl of each
        directory), with the number of tests run.

    python tools/upstream_tests.py compare A.jsonl[,A2.jsonl...] B.jsonl[,B2.jsonl...]
        per test: outcome and failure message (with assert_close's greatest differences) of run
        A versus run B (for float32 with and without the shim: they must be identical); exit 1
        if any differ.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
WATCHDOG_SLACK = 120.0  # seconds beyond the per-test timeout before the run is killed from outside

# ----------------------------------------------------------------------------------------------
# running


def _from_environment(path: str) -> str:
    """A path inside a virtual environment, from the environment's folder on (no machine paths)."""
    parts = Path(path).parts
    if "lib" in parts:
        return str(Path(*parts[parts.index("lib") - 1:]))
    return Path(path).name


def shim_path() -> Path:
    """A directory holding only a link to this repository's ``kornia_halfpatch``, one per checkout:
    a directory shared by every checkout of the user was re-pointed by a run from another worktree,
    so runs already going imported that worktree's shim."""
    checkout = hashlib.sha256(str(REPO.resolve()).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"kornia_halfpatch_shimpath_{os.getuid()}_{checkout}"
    path.mkdir(exist_ok=True)
    link = path / "kornia_halfpatch"
    if not link.is_symlink() or link.resolve() != (REPO / "kornia_halfpatch").resolve():
        if link.is_symlink():
            link.unlink()
        link.symlink_to(REPO / "kornia_halfpatch")
    return path


def _test_package_path(checkout: Path) -> list:
    """kornia 0.7.0 keeps its tests in a package named ``test``, which the standard library's own
    ``test`` package shadows under ``--import-mode=append`` ("No module named 'test.geometry'":
    every geometry test failed to import): a directory holding only a link named ``test`` to the
    checkout's, put before the standard library."""
    package = checkout / "test"
    if not (package / "__init__.py").exists():
        return []
    digest = hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"kornia_halfpatch_testpackage_{os.getuid()}_{digest}"
    path.mkdir(exist_ok=True)
    link = path / "test"
    if not link.is_symlink() or link.resolve() != package.resolve():
        if link.is_symlink():
            link.unlink()
        link.symlink_to(package.resolve())
    return [str(path)]


def _read(path: Path) -> list:
    if not path.exists():
        return []
    entries = []
    with open(path) as handle:
        for line in handle:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a killed process
                pass
    return entries


def _finished(entries: list) -> set:
    done = set()
    for entry in entries:
        if entry["event"] == "crash":
            done.add(entry["id"])
        elif entry["event"] == "report" and (entry["when"] == "teardown" or entry["outcome"] != "passed"
                                             or entry["when"] == "call"):
            done.add(entry["id"])
    return done


def record(checkout: Path, tests: list, out: Path, dtype: str, shim: bool = True, timeout: float = 120.0,
           python: str = sys.executable, only_ids: Path | None = None, keyword: str | None = None,
           max_restarts: int = 300, quiet: bool = False, autocast: str | None = None) -> list:
    """Run the tests once (resuming after crashes); return the recorded entries. ``autocast``
    (float16/bfloat16): every test runs inside ``torch.autocast("cpu", dtype=...)``."""
    out = Path(out).resolve()
    env = dict(os.environ)
    if autocast:
        env["UPSTREAM_AUTOCAST"] = autocast
    env["PYTHONPATH"] = os.pathsep.join(
        [str(shim_path()), str(TOOLS)] + _test_package_path(Path(checkout)) + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["UPSTREAM_RECORD"] = str(out)
    env.setdefault("OMP_NUM_THREADS", "1")
    if only_ids is not None:
        env["UPSTREAM_ONLY"] = str(Path(only_ids).resolve())
    command = [python, "-P", "-W", "ignore", "-m", "pytest", "--import-mode=append", "-p", "_upstream_recorder",
               *tests, "--dtype", dtype, "--device", "cpu", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--color=no", f"--timeout={timeout:g}", "--timeout-method=thread", "-o", "console_output_style=classic"]
    if keyword:
        command += ["-k", keyword]
    if not shim:
        command += ["-p", "no:kornia_halfpatch"]
    with tempfile.TemporaryDirectory() as tmp:
        exclude = Path(tmp) / "exclude.txt"
        env["UPSTREAM_EXCLUDE"] = str(exclude)
        stacks = Path(tmp) / "stacks.txt"
        env["UPSTREAM_STACKS"] = str(stacks)
        env["UPSTREAM_TIMEOUT"] = f"{timeout:g}"
        for attempt in range(max_restarts):
            entries = _read(out)
            exclude.write_text("\n".join(sorted(_finished(entries))) + "\n")
            size_before = len(entries)
            log = Path(tmp) / "stderr.txt"
            with open(log, "w") as stderr:
                process = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                           start_new_session=True)
                last_size, last_change, hung = -1, time.monotonic(), False
                while process.poll() is None:
                    time.sleep(2.0)
                    size = out.stat().st_size if out.exists() else 0
                    if size != last_size:
                        last_size, last_change = size, time.monotonic()
                    elif time.monotonic() - last_change > timeout + WATCHDOG_SLACK:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait()
                        hung = True
            returncode = process.returncode
            ended = time.time()
            entries = _read(out)
            done = _finished(entries)
            started = [e["id"] for e in entries[size_before:] if e["event"] == "start"]
            unfinished = [i for i in started if i not in done]
            if not unfinished and returncode in (0, 1, 5):
                return entries
            tail = log.read_text()[-3000:]
            # the test that was running when the process died; if every started test had reported,
            # the death came after the last report (a teardown): charge it to the last one started
            victim = unfinished[-1] if unfinished else (started[-1] if started else None)
            if victim is not None:
                began = next((e.get("t") for e in reversed(entries) if e["event"] == "start" and e["id"] == victim), None)
                if hung:
                    kind = "hang (killed by the watchdog)"
                elif "Timeout" in tail or (returncode == 1 and began is not None and ended - began >= timeout - 1):
                    # pytest-timeout's thread method dumps stacks into pytest's captured stderr and
                    # calls os._exit(1): the elapsed time is the reliable sign
                    kind = f"timeout after {timeout:g} s (pytest-timeout)"
                elif returncode < 0:
                    kind = f"killed by signal {signal.Signals(-returncode).name}"
                else:
                    kind = f"process exited with code {returncode}"
                hang_frames = []
                if stacks.exists() and stacks.read_text().startswith(victim + "\n"):
                    # faulthandler lists the innermost frame first
                    for line in stacks.read_text().splitlines():
                        match = re.search(r'File "([^"]*/kornia/[^"]*)", line (\d+)', line)
                        if match and "kornia_halfpatch" not in match.group(1):
                            hang_frames.append(f"{match.group(1).split('/kornia/', 1)[1]}:{match.group(2)}")
                    if hang_frames:
                        kind += f"; stack at {timeout - 2:g} s ends in " + " <- ".join(hang_frames[:3])
                with open(out, "a") as handle:
                    handle.write(json.dumps({"event": "crash", "id": victim, "message": kind, "kornia_frames": hang_frames[::-1],
                                             "stderr_tail": tail[-1500:]}) + "\n")
                if not quiet:
                    print(f"  crash: {victim}: {kind}; resuming", file=sys.stderr, flush=True)
                continue
            raise RuntimeError(f"pytest exited with {returncode} before any test ran:\n{tail}")
    raise RuntimeError(f"gave up after {max_restarts} restarts")


# ----------------------------------------------------------------------------------------------
# classifying

CLASSES = ("not-implemented-for-half", "dtype-refused", "dtype-mismatch", "non-finite", "crash",
           "tolerance-only", "other", "test-limitation", "needs-network", "needs-package")
# test-limitation: the test itself cannot run the dtype (numpy has no bfloat16; the test asserts its
# own dtype list; the test's own oracle calls a torch op without a half kernel, no kornia frame on
# the stack): no change to kornia can make these pass
# environment problems, not kornia's: excluded from the counts the issues target
ENVIRONMENT_CLASSES = ("needs-network", "needs-package")

_NETWORK = re.compile(r"urlopen error|URLError|HTTPError|Name or service not known|Temporary failure in name resolution|"
                      r"Max retries exceeded|ConnectionError|Connection refused|Network is unreachable|"
                      r"couldn't connect to 'https://huggingface.co'|LocalEntryNotFoundError|"
                      r"OfflineModeIsEnabled|nodename nor servname|getaddrinfo", re.I)
_PACKAGE = re.compile(r"reading from stdin while output is captured|No module named|is not installed|"
                      r"requires? .* to be installed|pip install", re.I)
_NO_KERNEL = re.compile(r"not implemented for '(Complex)?(Half|BFloat16)'|Low precision dtypes not supported|"
                        r"doesn't handle types other than float and double|Unsupported dtype (Half|BFloat16)|"
                        r"Expected both inputs to be Half, Float or Double tensors|"  # torch.complex: no complex bfloat16
                        r"MKL FFT doesn't support tensors of type: (Half|BFloat16)|"
                        r"input tensor must be either float or double|"
                        r"expected a tensor with 2 or more dimensions of float, double|"
                        r"(Half|BFloat16)' is not supported|does not support (half|bfloat16|float16)", re.I)
_TEST_LIMITATION = re.compile(r"Got unsupported ScalarType BFloat16|^assert torch\.(bfloat16|float16) in ")
_REFUSED = re.compile(r"Expected input of \[|KeyError: 'BFLOAT16'|Expected '.*' to be of type|^KORNIA_CHECK failed: .*dtype|Unknown data type|Invalid dtype|Unsupported (input )?dtype|"
                      r"dtype (must|should) be|not a floating point|Input dtype must|dtype .* not supported|"
                      r"only supports? (float32|float64|floating)|Expected .*dtype in|is not a valid dtype|"
                      r"Input type is not a torch.float|type must be torch.float", re.I)
_MISMATCH = re.compile(r"expected scalar type|Index put requires the source and destination dtypes match|expected (both|all) .*same dtype|must have the same dtype|"
                       r"found dtype|dtype mismatch|attribute 'dtype' do not match|"
                       r"Input type \(.*\) and (weight|bias) type|result type .* can't be cast|"
                       r"expected m1 and m2 to have the same dtype|Expected .* to have the same dtype|"
                       r"should be the same|have the same dtype|but got .*(Half|BFloat16|Float)", re.I)
_NONFINITE = re.compile(r"\bnan\b|\binf\b|isfinite|is_finite|not finite", re.I)
_NONFINITE_CLOSE = re.compile(r"absolute difference: -?(nan|inf)\b|got -?(nan|inf)\b|Expected -?(nan|inf)\b", re.I)
_ABS_DIFF = re.compile(r"(?:Greatest absolute|Absolute) difference: (\S+)(?: at index \(([^)]*)\))? \(up to (\S+) allowed\)")
_TOLERANCE = re.compile(r"Mismatched elements|Tensor-likes are not close|Scalars are not close|not close!", re.I)
# test_backward*::test_param: `(initial - parameter).sum() != 0` after one SGD step of a half
# parameter; fails when lr * grad is below half an ulp of the parameter (a tolerance below the
# dtype's resolution; tools/backward_param_steps.py replays them and checks each one).
_STEP_BELOW_ULP = re.compile(r"^AssertionError: assert tensor\(0\., dtype=torch\.b?float16\) != 0")


def classify(message: str) -> str:
    """The class of a failure from its error message (the exception line and what follows it)."""
    if message.startswith("[crash] "):
        return "crash"
    if _NETWORK.search(message):
        return "needs-network"
    if _PACKAGE.search(message):
        return "needs-package"
    if _NO_KERNEL.search(message):
        return "not-implemented-for-half"
    if _TEST_LIMITATION.search(message):
        return "test-limitation"
    if _REFUSED.search(message):
        return "dtype-refused"
    if "index -9223372036854775808" in message:
        return "non-finite"  # a NaN cast to int64 (INT64_MIN) used as a gather index
    if _MISMATCH.search(message):
        return "dtype-mismatch"
    if _STEP_BELOW_ULP.search(message):
        return "tolerance-only"
    if _TOLERANCE.search(message):
        # assert_close: only the absolute difference or the values themselves tell; a relative
        # difference of inf just means the expected value is 0
        return "non-finite" if _NONFINITE_CLOSE.search(message) else "tolerance-only"
    if message.startswith("AssertionError"):
        return "non-finite" if _NONFINITE.search(message) else "other"
    if message.startswith("assert "):  # a bare assert in the test, rewritten by pytest
        return "non-finite" if re.search(r"isinf|isnan|isfinite|\bnan\b|\binf\b", message) else "other"
    if _NONFINITE.search(message) and "Error" not in message.split(":", 1)[0].replace("AssertionError", ""):
        return "non-finite"
    return "other"


def first_line(message: str) -> str:
    return message.strip().splitlines()[0][:240] if message.strip() else ""


def dtype_of(name: str) -> str:
    match = re.search(r"\[(?:[^\]]*-)?(bfloat16|float16|float32|float64)(?:-[^\]]*)?\]", name)
    return match.group(1) if match else "other"


def directory_of(name: str) -> str:
    path = name.split("::", 1)[0]
    parts = path.split("/")[:-1]  # drop the file
    return "/".join(parts[:3]) if parts else path


def _kornia_root(entries: list):
    for entry in entries:
        if entry["event"] == "session" and entry.get("kornia_file"):
            return Path(entry["kornia_file"]).parent
    return None


def _source_line(root, frame: str) -> str:
    path, _, line = frame.rpartition(":")
    try:
        lines = (root / path).read_text().splitlines()
        index = int(line) - 1
        text = lines[index].strip()
        while text.count("(") > text.count(")") and index < int(line) + 6:  # a call spread over lines
            index += 1
            text += " " + lines[index].strip()
        return text[:200]
    except (OSError, ValueError, IndexError, TypeError):
        return ""


def _explain_check(test: dict, root) -> None:
    """KORNIA_CHECK(cond) without a message fails with 'False not true.': name the check instead."""
    frames = [f for f in test["where"] if not f.startswith("core/check.py")]
    if test["where"] and test["where"][-1].startswith("core/check.py") and frames:
        test["where"] = frames
        if test["message"].startswith(("Exception: False not true", "kornia.core.exceptions.BaseError: Validation condition failed")) \
                and root is not None:  # 0.7-0.8.2 / 0.8.3 wording of a bare KORNIA_CHECK
            test["message"] = f"KORNIA_CHECK failed: {_source_line(root, frames[-1])}"


def summarize(entries: list) -> dict:
    """Per test id: outcome (passed/failed/skipped/xfailed/xpassed/crashed) and, for failures, facts."""
    tests = {}
    root = _kornia_root(entries)
    for entry in entries:
        if entry["event"] not in ("report", "crash", "collect_error"):
            continue
        test = tests.setdefault(entry["id"], {"outcome": "passed", "message": "", "where": [], "when": None})
        if entry["event"] == "crash" and test.get("called"):
            # the test had reported its call already: the process died or hung after it (teardown,
            # interpreter exit); the test's own outcome stands
            test["after_call"] = entry["message"]
            continue
        if entry["event"] == "report" and entry["when"] == "call":
            test["called"] = True
        if entry["event"] == "crash":
            test.update(outcome="crashed", message="[crash] " + entry["message"], when="call",
                        where=entry.get("kornia_frames", []))
        elif entry["event"] == "collect_error":
            test.update(outcome="failed", message=entry.get("message", ""), where=entry.get("kornia_frames", []),
                        when="collect")
        elif entry.get("xfail"):
            if test["outcome"] == "passed":
                test["outcome"] = "xfailed" if entry["outcome"] == "skipped" else "xpassed"
        elif entry["outcome"] == "failed":
            if test["outcome"] != "failed":  # the first failure (setup or call) is the cause
                test.update(outcome="failed", message=entry.get("message", ""), where=entry.get("kornia_frames", []),
                            when=entry["when"])
        elif entry["outcome"] == "skipped" and test["outcome"] == "passed":
            test.update(outcome="skipped", message=entry.get("message", ""))
    for name, test in tests.items():
        _explain_check(test, root)
        test["dtype"] = dtype_of(name)
        test["dir"] = directory_of(name)
        test["class"] = classify(test["message"]) if test["outcome"] in ("failed", "crashed") else None
        if test["class"] == "not-implemented-for-half" and not test["where"] and test["when"] != "collect":
            test["class"] = "test-limitation"  # the test's own torch call (e.g. torch.inverse in the oracle) has no kernel
    return tests


# ----------------------------------------------------------------------------------------------
# reporting


def _session_facts(entries: list) -> list:
    return [e for e in entries if e["event"] == "session"]


def write_report(paths: list, release: str, markdown: Path, tsv: Path, title_note: str = "") -> None:
    entries = [e for path in paths for e in _read(Path(path))]
    tests = summarize(entries)
    sessions = _session_facts(entries)
    failing = {n: t for n, t in tests.items() if t["class"]}
    dtypes = sorted({t["dtype"] for t in tests.values()})
    lines = [f"# kornia {release}: its own tests in half precision, with the shim's plugin", ""]
    if title_note:
        lines += [title_note, ""]
    headers = sorted({s["shim_header"] for s in sessions})
    kornia_files = sorted({s["kornia_file"] for s in sessions})
    lines += ["Runs: " + ", ".join(f"`{Path(p).name}`" for p in paths), "",
              "Header line of every run: " + "; ".join(f"`{h}`" for h in headers), "",
              "kornia imported from: " + ", ".join(f"`{_from_environment(f)}`" for f in kornia_files), ""]
    after = {n: t["after_call"] for n, t in tests.items() if t.get("after_call")}
    if after:
        lines += ["The pytest process died or hung after these tests had reported their outcome (not counted as their "
                  "failure; the run was resumed): " + "; ".join(f"`{n}`: {m}" for n, m in sorted(after.items())), ""]
    outcome_counts = collections.Counter((t["dtype"], t["outcome"]) for t in tests.values())
    lines += ["## Outcomes per dtype", "", "| dtype | " + " | ".join(["passed", "failed", "crashed", "skipped", "xfailed", "xpassed"]) + " |",
              "|---|" + "---|" * 6]
    for dtype in dtypes:
        lines.append(f"| {dtype} | " + " | ".join(str(outcome_counts[(dtype, o)]) for o in
                                                  ["passed", "failed", "crashed", "skipped", "xfailed", "xpassed"]) + " |")
    lines.append("")
    class_counts = collections.Counter((t["dtype"], t["class"]) for t in failing.values())
    lines += ["## Failures per class", "", "| class | " + " | ".join(dtypes) + " | total |", "|---|" + "---|" * (len(dtypes) + 1)]
    for cls in CLASSES:
        row = [class_counts[(d, cls)] for d in dtypes]
        lines.append(f"| {cls} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    lines.append("")
    dirs = sorted({t["dir"] for t in failing.values()})
    lines += ["## Failures per directory, class and dtype", "",
              "Cells: float16 / bfloat16 (other dtypes, e.g. collection errors, are in the totals above).", "",
              "| directory | " + " | ".join(CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
    per_dir = collections.Counter((t["dir"], t["class"], t["dtype"]) for t in failing.values())
    for directory in dirs:
        cells = []
        for cls in CLASSES:
            a, b = per_dir[(directory, cls, "float16")], per_dir[(directory, cls, "bfloat16")]
            cells.append("" if a == b == 0 else f"{a} / {b}")
        lines.append(f"| {directory} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += ["## Messages per class", "",
              "First error line (numbers collapsed to N), the innermost kornia frame, and how many "
              "failing tests (float16 / bfloat16) end there. Every failing id is in "
              f"[`{tsv.name}`]({tsv.name}) (columns: class, dtype, id, innermost kornia frame, assert_close's greatest "
              "absolute difference and allowed tolerance when there is one, first error line).", ""]
    for cls in CLASSES:
        members = {n: t for n, t in failing.items() if t["class"] == cls}
        if not members:
            continue
        groups = collections.defaultdict(lambda: collections.Counter())
        for name, test in members.items():
            key = (_collapse(first_line(test["message"])), test["where"][-1] if test["where"] else "")
            groups[key][test["dtype"]] += 1
        lines += [f"<details><summary><b>{cls}</b>: {len(members)} tests, {len(groups)} distinct (message, frame)</summary>", "",
                  "| float16 | bfloat16 | kornia frame | first error line |", "|---|---|---|---|"]
        for (message, where), counts in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
            lines.append(f"| {counts['float16']} | {counts['bfloat16']} | `{where}` | {_cell(message)} |")
        lines += ["", "</details>", ""]
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text("\n".join(lines) + "\n")
    with open(tsv, "w") as handle:
        handle.write("class\tdtype\tid\tkornia_frame\tabs_diff\tallowed\tfirst_error_line\n")
        for name in sorted(failing, key=lambda n: (failing[n]["class"], n)):
            test = failing[name]
            where = test["where"][-1] if test["where"] else ""
            diff = _ABS_DIFF.search(test["message"])
            abs_diff, allowed = (diff.group(1), diff.group(3)) if diff else ("", "")
            handle.write(f"{test['class']}\t{test['dtype']}\t{name}\t{where}\t{abs_diff}\t{allowed}\t"
                         f"{first_line(test['message']).replace(chr(9), ' ')}\n")


def _collapse(message: str) -> str:
    message = re.sub(r"0x[0-9a-f]+", "0x…", message)
    message = re.sub(r"(?<![\w.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.])", "N", message)  # not inside names like float16
    return message


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def compare(path_a, path_b) -> int:
    """Each side: one JSON-lines file or several joined by commas (one run split by directory)."""
    def load(spec):
        return summarize([e for part in str(spec).split(",") if part for e in _read(Path(part))])
    a, b = load(path_a), load(path_b)
    path_a, path_b = Path(str(path_a).split(",")[0]), Path(str(path_b).split(",")[0])
    names = sorted(set(a) | set(b))
    differ = []
    for name in names:
        ta, tb = a.get(name), b.get(name)
        # the whole message (assert_close prints the greatest differences), addresses collapsed
        key_a = (ta["outcome"], re.sub(r"0x[0-9a-f]+", "0x…", ta["message"])) if ta else None
        key_b = (tb["outcome"], re.sub(r"0x[0-9a-f]+", "0x…", tb["message"])) if tb else None
        if key_a != key_b:
            differ.append((name, key_a, key_b))
    counts_a = collections.Counter(t["outcome"] for t in a.values())
    counts_b = collections.Counter(t["outcome"] for t in b.values())
    print(f"A ({path_a.name}...): {dict(sorted(counts_a.items()))}")
    print(f"B ({path_b.name}...): {dict(sorted(counts_b.items()))}")
    print(f"{len(names)} tests, {len(differ)} differ in outcome or failure message")
    for name, key_a, key_b in differ:
        print(f"  {name}\n    A: {str(key_a)[:300]}\n    B: {str(key_b)[:300]}")
    return 1 if differ else 0


# ----------------------------------------------------------------------------------------------
# the original command: passed/failed unpatched versus patched


def run(checkout: Path, tests, dtype: str, shim: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.jsonl"
        entries = record(checkout, list(tests), out, dtype, shim=shim, quiet=True)
    return {name: ("failed" if t["outcome"] == "crashed" else t["outcome"]) for name, t in summarize(entries).items()}


def legacy_main(argv) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout", type=Path)
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--dtype", default="float32,float16,bfloat16")
    args = parser.parse_args(argv)
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


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("record", "report", "compare", "summary"):
        return legacy_main(argv)
    command, argv = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog=f"upstream_tests.py {command}")
    if command == "record":
        parser.add_argument("checkout", type=Path)
        parser.add_argument("tests", nargs="+")
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--dtype", default="float16,bfloat16")
        parser.add_argument("--no-shim", action="store_true")
        parser.add_argument("--timeout", type=float, default=120.0)
        parser.add_argument("--python", default=sys.executable)
        parser.add_argument("--only-ids", type=Path)
        parser.add_argument("-k", dest="keyword")
        parser.add_argument("--autocast", choices=("float16", "bfloat16"),
                            help="run every test inside torch.autocast('cpu', dtype=...) (use with --dtype float32)")
        args = parser.parse_args(argv)
        started = time.monotonic()
        entries = record(args.checkout, args.tests, args.out, args.dtype, shim=not args.no_shim, timeout=args.timeout,
                         python=args.python, only_ids=args.only_ids, keyword=args.keyword, autocast=args.autocast)
        tests = summarize(entries)
        counts = collections.Counter(t["outcome"] for t in tests.values())
        print(f"{args.out}: {dict(sorted(counts.items()))} in {time.monotonic() - started:.0f} s")
        return 0
    if command == "summary":
        # python tools/upstream_tests.py summary 0.8.2=/runs/0.8.2 0.8.3=/runs/0.8.3 ...  (half-*.jsonl in each)
        parser.add_argument("releases", nargs="+", help="LABEL=DIRECTORY holding half-*.jsonl")
        args = parser.parse_args(argv)
        columns, counts = [], {}
        for item in args.releases:
            label, _, directory = item.partition("=")
            tests = summarize([e for path in sorted(Path(directory).glob("half-*.jsonl")) for e in _read(path)])
            for dtype in ("float16", "bfloat16"):
                columns.append((label, dtype))
                counts[(label, dtype)] = collections.Counter(t["class"] for t in tests.values() if t["dtype"] == dtype and t["class"])
                counts[(label, dtype)]["(tests run)"] = sum(1 for t in tests.values() if t["dtype"] == dtype)
        print("| class | " + " | ".join(f"{l} {d}" for l, d in columns) + " |")
        print("|---|" + "---|" * len(columns))
        for cls in ("(tests run)",) + CLASSES:
            print(f"| {cls} | " + " | ".join(str(counts[c][cls]) for c in columns) + " |")
        return 0
    if command == "report":
        parser.add_argument("runs", nargs="+", type=Path)
        parser.add_argument("--release", required=True)
        parser.add_argument("--markdown", type=Path, required=True)
        parser.add_argument("--tsv", type=Path, required=True)
        parser.add_argument("--note", default="")
        args = parser.parse_args(argv)
        write_report(args.runs, args.release, args.markdown, args.tsv, args.note)
        return 0
    parser.add_argument("a", help="RUN.jsonl or RUN1.jsonl,RUN2.jsonl,...")
    parser.add_argument("b", help="RUN.jsonl or RUN1.jsonl,RUN2.jsonl,...")
    args = parser.parse_args(argv)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
