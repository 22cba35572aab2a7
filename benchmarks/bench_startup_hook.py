"""Start-up cost of the hook kornia_halfpatch_autostart.pth, measured in one run (interleaved, medians).

    python benchmarks/bench_startup_hook.py [--rounds 60]

Builds two throwaway virtual environments from this interpreter (no pip, nothing installed): a
bare one, and one holding the hook's two files in site-packages exactly as the wheel installs
them (``kornia_halfpatch_autostart.pth`` and ``_kornia_halfpatch_autostart.py``). Then, round by
round in rotating order, times ``python -c pass`` in:

* bare                              (no hook)
* hook, ``KORNIA_HALFPATCH_AUTO`` unset
* hook, ``KORNIA_HALFPATCH_AUTO=1`` (imports the stdlib-only hook module, installs a finder; no
  kornia is imported, so nothing else happens)

and prints medians, minima and differences to bare. Process start-up jitter (milliseconds on a
shared machine) is far larger than the unset cost, so it also times what site.py does with the .pth file
(``site.addpackage``) with ``timeit`` and lists the modules each case imports (``-X importtime``):
unset, the hook imports nothing.

If this interpreter's own environment has the hook and kornia installed, it also times
``import kornia`` with the variable unset and set: that difference is ``apply()`` on import.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOK_FILES = ("kornia_halfpatch_autostart.pth", "_kornia_halfpatch_autostart.py")
AUTO = "KORNIA_HALFPATCH_AUTO"


def make_environment(directory: Path, with_hook: bool) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(directory)
    python = directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if with_hook:
        for name in HOOK_FILES:
            shutil.copy(ROOT / name, Path(purelib) / name)
        # pip byte-compiles what it installs; without this every start would compile the module.
        subprocess.run([str(python), "-m", "py_compile", str(Path(purelib) / HOOK_FILES[1])], check=True)
    return python


def clean_environment(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (AUTO, "PYTHONPATH", "PYTHONSTARTUP")}
    env.update(extra)
    return env


def start_seconds(python: Path, env: dict, code: str = "pass") -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", code], env=env, check=True)
    return time.perf_counter() - started


def imported_modules(python: Path, env: dict) -> set:
    result = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True)
    return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def pth_file_seconds(auto: bool) -> float:
    """What site.py spends on the .pth file at start-up: open, read, run its import line."""
    import site

    saved = os.environ.pop(AUTO, None)
    saved_path, saved_meta = list(sys.path), list(sys.meta_path)
    sys.path.insert(0, str(ROOT))
    try:
        if auto:
            os.environ[AUTO] = "1"
        number = 2000
        runs = timeit.repeat(lambda: site.addpackage(str(ROOT), HOOK_FILES[0], set()), number=number, repeat=5)
        return min(runs) / number
    finally:
        os.environ.pop(AUTO, None)
        if saved is not None:
            os.environ[AUTO] = saved
        sys.path[:], sys.meta_path[:] = saved_path, saved_meta


def report(label: str, samples, baseline=None) -> None:
    # The minimum is the run least disturbed by other processes; the median shows the typical one.
    median, fastest = statistics.median(samples) * 1e3, min(samples) * 1e3
    text = f"  {label:<42} median {median:8.2f} ms  min {fastest:8.2f} ms"
    if baseline is not None:
        text += f"   vs bare: median {median - statistics.median(baseline) * 1e3:+6.2f} ms, min {fastest - min(baseline) * 1e3:+6.2f} ms"
    print(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-startup-hook-") as tmp:
        bare = make_environment(Path(tmp, "bare"), with_hook=False)
        hooked = make_environment(Path(tmp, "hooked"), with_hook=True)
        cases = {
            "bare (no hook)": (bare, clean_environment()),
            "hook installed, variable unset": (hooked, clean_environment()),
            f"hook installed, {AUTO}=1": (hooked, clean_environment(**{AUTO: "1"})),
        }
        times = {label: [] for label in cases}
        labels = list(cases)
        for label in labels:  # warm the file cache
            start_seconds(*cases[label])
        for round_index in range(args.rounds):
            order = labels[round_index % len(labels):] + labels[: round_index % len(labels)]
            for label in order:
                times[label].append(start_seconds(*cases[label]))

        print(f"interpreter start-up, `python -c pass`, {args.rounds} interleaved rounds ({sys.version.split()[0]}, {sysconfig.get_platform()})")
        for label in labels:
            report(label, times[label], None if label == labels[0] else times[labels[0]])

        bare_modules = imported_modules(*cases[labels[0]])
        for label in labels[1:]:
            extra = sorted(imported_modules(*cases[label]) - bare_modules)
            print(f"  modules imported beyond bare, {label}: {extra or 'none'}")

    print("site.py processing the .pth file (site.addpackage, timeit, best of 5):")
    print(f"  variable unset: {pth_file_seconds(auto=False) * 1e6:7.1f} us")
    print(f"  {AUTO}=1:  {pth_file_seconds(auto=True) * 1e6:7.1f} us (hook module already imported by the first call)")

    try:
        from kornia_halfpatch._launcher import startup_hook_path
    except ImportError:
        return 0
    import importlib.util

    if startup_hook_path() is None or importlib.util.find_spec("kornia") is None:
        print("this environment has no installed hook or no kornia: `import kornia` not timed")
        return 0
    import_rounds = max(5, args.rounds // 6)
    unset, auto = [], []
    for _ in range(import_rounds):
        unset.append(start_seconds(Path(sys.executable), clean_environment(), "import kornia"))
        auto.append(start_seconds(Path(sys.executable), clean_environment(**{AUTO: "1"}), "import kornia"))
    print(f"`python -c 'import kornia'` in this environment, {import_rounds} interleaved rounds:")
    report("variable unset", unset)
    report(f"{AUTO}=1 (apply() on import)", auto)
    print(f"  difference: {(statistics.median(auto) - statistics.median(unset)) * 1e3:+.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
