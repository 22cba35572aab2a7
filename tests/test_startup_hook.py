"""KORNIA_HALFPATCH_AUTO and ``kornia-halfpatch run``: the shim in processes the user does not write.

Real subprocesses throughout. The worker tests need the start-up hook installed in this
interpreter's site-packages (tox installs the package, hook included, into every environment and
sets KORNIA_HALFPATCH_EXPECT_HOOK=1, so there a missing hook fails); elsewhere they skip and say
why. The install-kind tests build the wheel and the editable wheel from a copy of the source and
install them into throwaway virtual environments.
"""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from kornia_halfpatch._launcher import STARTUP_HOOK, startup_hook_path
from support import UPSTREAM_FIXED

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).with_name("startup_hook_workers.py")
HOOK_MODULE = "_kornia_halfpatch_autostart"
EXPECT_HOOK = os.environ.get("KORNIA_HALFPATCH_EXPECT_HOOK", "") not in ("", "0")

if startup_hook_path() is None and EXPECT_HOOK:
    raise AssertionError(f"KORNIA_HALFPATCH_EXPECT_HOOK is set but {sys.prefix} has no {STARTUP_HOOK} in site-packages")
needs_installed_hook = pytest.mark.skipif(
    startup_hook_path() is None,
    reason=f"the start-up hook {STARTUP_HOOK} is not installed in {sys.prefix}'s site-packages "
    "(tox installs it; outside tox run `pip install .` or `pip install -e .` in this environment)",
)
# Real interpreters, wheels and virtual environments; what they test (the start-up hook, the
# launcher, packaging) is the same on every kornia release.
pytestmark = [pytest.mark.slow, pytest.mark.release_independent]
BROKEN_UNPATCHED = "NotImplementedError"  # "avg_pool3d_out_frame" not implemented for 'Half'


def environment(**settings: str) -> dict:
    """This process's environment without any KORNIA_HALFPATCH_* switch, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in ("KORNIA_HALFPATCH_AUTO", "KORNIA_HALFPATCH_DISABLE")}
    env.update(settings)
    return env


def run_workers(tmp_path: Path, env: dict, *mechanisms: str, launcher: bool = False) -> dict:
    out = tmp_path / "results.json"
    command = [sys.executable, str(WORKERS), str(out), *mechanisms]
    if launcher:
        command = [sys.executable, "-m", "kornia_halfpatch", "run", "--", *command]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(out.read_text())


# --------------------------------------------------------------------------------------------
# Spawned workers: broken unset, fixed set, and KORNIA_HALFPATCH_DISABLE wins


@needs_installed_hook
@pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0 runs SOSNet in float16 unpatched: nothing is broken to show")
@pytest.mark.parametrize(
    "settings", [{}, {"KORNIA_HALFPATCH_AUTO": "1", "KORNIA_HALFPATCH_DISABLE": "1"}], ids=["unset", "disable-wins"]
)
def test_spawned_workers_stay_broken_without_the_variable(tmp_path, settings):
    results = run_workers(tmp_path, environment(**settings))
    assert not results.pop("parent_imported_kornia")
    for mechanism, result in results.items():
        assert result["outcome"].startswith(BROKEN_UNPATCHED), (mechanism, result)
        assert "avg_pool3d" in result["outcome"], (mechanism, result)
        assert result["applied"] is None, (mechanism, result)  # the hook imported nothing


@needs_installed_hook
def test_spawned_workers_apply_the_shim_with_the_variable(tmp_path):
    results = run_workers(tmp_path, environment(KORNIA_HALFPATCH_AUTO="1"))
    assert not results.pop("parent_imported_kornia")  # so only the workers' own hook can have applied it
    assert set(results) == {"dataloader", "mp.spawn", "executor"}
    for mechanism, result in results.items():
        assert result["outcome"] == "finite", (mechanism, result)
        assert not result["shim_imported_before_kornia"], (mechanism, result)  # deferred until kornia
        if UPSTREAM_FIXED:
            assert result["applied"] == [], (mechanism, result)  # harmless: nothing patched on 0.9.0
        else:
            assert "feature_descriptors" in result["applied"], (mechanism, result)


@needs_installed_hook
def test_launcher_reaches_the_workers_of_the_command_it_runs(tmp_path):
    results = run_workers(tmp_path, environment(), "executor", launcher=True)
    assert results["executor"]["outcome"] == "finite", results
    if UPSTREAM_FIXED:
        assert results["executor"]["applied"] == [], results
    else:
        assert "feature_descriptors" in results["executor"]["applied"], results


@needs_installed_hook
@pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0 runs SOSNet in float16 unpatched: nothing is broken to show")
def test_launcher_does_not_override_disable(tmp_path):
    results = run_workers(tmp_path, environment(KORNIA_HALFPATCH_DISABLE="1"), "executor", launcher=True)
    assert results["executor"]["outcome"].startswith(BROKEN_UNPATCHED), results


# --------------------------------------------------------------------------------------------
# What the hook costs at start-up


def imported_modules(env: dict, code: str = "pass") -> set:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


@needs_installed_hook
def test_hook_imports_nothing_when_unset_and_only_itself_until_kornia_is_imported():
    unset = imported_modules(environment())
    assert HOOK_MODULE not in unset and "kornia_halfpatch" not in unset
    auto = imported_modules(environment(KORNIA_HALFPATCH_AUTO="1"))
    assert HOOK_MODULE in auto
    assert not {"kornia_halfpatch", "wrapt", "torch", "kornia"} & auto
    disabled = imported_modules(environment(KORNIA_HALFPATCH_AUTO="1", KORNIA_HALFPATCH_DISABLE="1"))
    assert "kornia_halfpatch" not in disabled


@needs_installed_hook
@pytest.mark.parametrize(
    "settings,applies",
    [({"KORNIA_HALFPATCH_AUTO": "1"}, True), ({"KORNIA_HALFPATCH_AUTO": "0"}, False), ({}, False)],
    ids=["auto=1", "auto=0", "unset"],
)
def test_hook_applies_right_after_kornia_is_imported_and_user_bindings_are_patched(settings, applies):
    # The user's first kornia line already sees the patched class (apply() ran inside the import).
    code = (
        "import sys; from kornia.feature import SOSNet; "
        "shim = sys.modules.get('kornia_halfpatch'); "
        "print(shim is not None, shim is not None and shim.is_patched(SOSNet.forward))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment(**settings), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported, patched = result.stdout.split()
    assert imported == str(applies), result.stdout + result.stderr
    assert patched == str(applies and not UPSTREAM_FIXED), result.stdout + result.stderr


@needs_installed_hook
def test_hook_survives_a_look_up_of_kornia_before_its_import():
    # "Is kornia installed?" (importlib.util.find_spec, as libraries and engines ask it) returns a
    # spec without importing; the import that follows must still be patched.
    code = (
        "import importlib.util, sys; assert importlib.util.find_spec('kornia') is not None; "
        "assert 'kornia' not in sys.modules and 'kornia_halfpatch' not in sys.modules; "
        "from kornia.feature import SOSNet; shim = sys.modules.get('kornia_halfpatch'); "
        "print(shim is not None, shim is not None and shim.is_patched(SOSNet.forward), "
        "any(type(f).__name__ == '_ApplyWhenKorniaIsImported' for f in sys.meta_path))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment(KORNIA_HALFPATCH_AUTO="1"), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported, patched, finder_left = result.stdout.split()
    assert imported == "True", result.stdout + result.stderr
    assert patched == str(not UPSTREAM_FIXED), result.stdout + result.stderr
    assert finder_left == "False", result.stdout  # gone once kornia was imported


@needs_installed_hook
def test_hook_never_breaks_a_process_that_does_not_import_kornia():
    # A worker with the variable set that never imports kornia: its own imports, a look-up of
    # kornia, a module that does not exist, and a clean exit; nothing of the shim imported.
    code = (
        "import importlib.util, json, sys, sqlite3, email.mime.text; "
        "importlib.util.find_spec('kornia'); "
        "exec('try:\\n import no_such_module_khp\\nexcept ImportError: pass'); "
        "print(json.dumps(sorted(m for m in ('kornia', 'kornia_halfpatch', 'torch', 'wrapt') if m in sys.modules)))"
    )
    for settings in ({"KORNIA_HALFPATCH_AUTO": "1"}, {"KORNIA_HALFPATCH_AUTO": "1", "KORNIA_HALFPATCH_DISABLE": "1"}):
        result = subprocess.run(
            [sys.executable, "-c", code], env=environment(**settings), capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0 and result.stderr == "", (settings, result.stderr[-3000:])
        assert json.loads(result.stdout) == [], (settings, result.stdout)


# --------------------------------------------------------------------------------------------
# The launcher itself (no hook needed)


def launch(*command: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kornia_halfpatch", "run", *command],
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_launcher_sets_the_variable_for_the_command_and_passes_its_exit_code():
    code = "import os, sys; print(os.environ.get('KORNIA_HALFPATCH_AUTO')); sys.exit(7)"
    result = launch("--", sys.executable, "-c", code)
    assert result.returncode == 7, result.stderr
    assert result.stdout.strip() == "1"


def test_launcher_keeps_the_users_disable_switch():
    code = "import os; print(os.environ.get('KORNIA_HALFPATCH_DISABLE'))"
    result = launch("--", sys.executable, "-c", code, env=environment(KORNIA_HALFPATCH_DISABLE="1"))
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr


def test_launcher_reports_a_missing_command_and_usage():
    missing = launch("--", "no-such-command-kornia-halfpatch")
    assert missing.returncode == 127, missing.stderr
    assert "kornia-halfpatch run: command not found: no-such-command-kornia-halfpatch" in missing.stderr
    for nothing in ((), ("--",), ("--", "")):
        usage = launch(*nothing)
        assert usage.returncode == 2, (nothing, usage.stderr)
        assert "kornia-halfpatch run: no command given" in usage.stderr, (nothing, usage.stderr)
        assert "usage: kornia-halfpatch run" in usage.stderr, (nothing, usage.stderr)
        assert usage.stdout == "", (nothing, usage.stdout)


def test_launcher_reports_a_command_it_cannot_execute(tmp_path):
    not_executable = tmp_path / "data.txt"
    not_executable.write_text("not a program\n")
    for target in (tmp_path, not_executable):  # a directory; a file without the executable bit
        result = launch("--", str(target))
        assert result.returncode == 126, (target, result.stderr)
        assert "kornia-halfpatch run: " in result.stderr and str(target) in result.stderr, result.stderr


# --------------------------------------------------------------------------------------------
# Install kinds: wheel (= `pip install .`), editable, uninstall; in throwaway environments

SOURCE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", STARTUP_HOOK, f"{HOOK_MODULE}.py")


def build(source: Path, hook: str, out: Path) -> Path:
    """A PEP 517 hook of setuptools (``build_wheel`` or ``build_editable``), run with this python."""
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    result = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=300)
    if result.returncode != 0 and "No module named" in result.stderr:
        pytest.skip(f"building needs setuptools >= 70.1 (or setuptools and wheel) in {sys.prefix}: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    return out / result.stdout.strip().splitlines()[-1]


def isolated_environment(**settings: str) -> dict:
    """For the throwaway environment: no PYTHONPATH (a source checkout on it looks installed)."""
    env = environment(**settings)
    env.pop("PYTHONPATH", None)
    return env


def pip(target_python: Path, *args: str) -> None:
    command = [sys.executable, "-m", "pip", "--python", str(target_python), "--disable-pip-version-check", *args]
    result = subprocess.run(command, env=isolated_environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCE_FILES:
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "kornia_halfpatch", source / "kornia_halfpatch", ignore=shutil.ignore_patterns("__pycache__"))
    return source


@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_install_puts_the_hook_in_site_packages_and_uninstall_removes_it(tmp_path, source_copy, kind):
    wheel = build(source_copy, "build_wheel" if kind == "wheel" else "build_editable", tmp_path)
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            env=isolated_environment(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    pip(python, "install", "--no-index", "--no-deps", str(wheel))
    hook = purelib / STARTUP_HOOK
    assert hook.read_text() == (ROOT / STARTUP_HOOK).read_text()
    record = next(purelib.glob("kornia_halfpatch-*.dist-info")) / "RECORD"
    assert f"{STARTUP_HOOK}," in record.read_text()  # what pip uninstall removes

    # The hook runs in that interpreter and finds its module (in site-packages, or through the
    # editable finder): with the variable set it waits for kornia on sys.meta_path.
    check = "import sys; print(sorted({type(f).__name__ for f in sys.meta_path}))"
    for settings, expected in (({}, False), ({"KORNIA_HALFPATCH_AUTO": "1"}, True)):
        env = isolated_environment(**settings)
        finders = subprocess.run([str(python), "-c", check], env=env, capture_output=True, text=True, timeout=60)
        assert finders.returncode == 0 and finders.stderr == "", finders.stderr
        assert ("_ApplyWhenKorniaIsImported" in finders.stdout) is expected, finders.stdout

    pip(python, "uninstall", "--yes", "kornia-halfpatch")
    assert not hook.exists()
    assert not list(purelib.glob("*kornia_halfpatch*")), list(purelib.glob("*kornia_halfpatch*"))
