"""pytest plugin (entry point ``kornia_halfpatch``): apply the shim before any conftest runs.

Registered under ``pytest11`` as ``kornia_halfpatch``, so ``-p no:kornia_halfpatch`` removes it.
It acts in ``pytest_load_initial_conftests`` (tryfirst), the hook that runs before the rootdir
``conftest.py`` is imported: a conftest that imports kornia (kornia's own does) would otherwise
bind the unpatched functions first. Opt out per run with ``--no-kornia-halfpatch``, per project
with the ini option ``kornia_halfpatch = false``, per environment with
``KORNIA_HALFPATCH_DISABLE=1``. This module imports nothing heavy: kornia and torch are only
touched once kornia is imported by the code under test (the engine defers until then).
"""

from __future__ import annotations

import pytest

_REPORT_KEY = "kornia_halfpatch_report"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kornia_halfpatch", "kornia half-precision shim")
    group.addoption(
        "--no-kornia-halfpatch",
        action="store_true",
        dest="kornia_halfpatch_off",
        default=False,
        help="do not apply kornia_halfpatch for this run",
    )
    parser.addini("kornia_halfpatch", type="bool", default=True, help="apply kornia_halfpatch (default true)")


def _wanted(config: pytest.Config) -> bool:
    if getattr(config.known_args_namespace, "kornia_halfpatch_off", False):
        return False
    return bool(config.getini("kornia_halfpatch"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list) -> None:
    if not _wanted(early_config):
        return
    import kornia_halfpatch

    try:
        kornia_halfpatch.apply()
    except (ValueError, TypeError) as exc:
        # The user's own setting (KORNIA_HALFPATCH_FIXES naming no fix, a bad option value):
        # a usage error with the message, not a traceback out of a plugin hook.
        raise pytest.UsageError(f"kornia_halfpatch: {exc}") from exc
    setattr(early_config, _REPORT_KEY, True)


def pytest_report_header(config: pytest.Config) -> str:
    if not getattr(config, _REPORT_KEY, False):
        return "kornia_halfpatch: off"
    import kornia_halfpatch

    report = kornia_halfpatch.status()
    versions = f"kornia {report.kornia_version}, torch {report.torch_version}"
    if report.deferred:
        return f"kornia_halfpatch: {versions}; fixes go in when kornia is imported"
    applied = ", ".join(report.applied) or "none"
    targets = ", ".join(f"{count} {verdict.value}" for verdict, count in report.target_counts().items())
    return f"kornia_halfpatch: {versions}; applied: {applied}" + (f"; targets: {targets}" if targets else "")


@pytest.fixture
def kornia_unpatched():
    """Run the test on unpatched kornia; the shim's previous state is restored afterwards."""
    from kornia_halfpatch import testing

    with testing.isolated(only=()):
        yield


@pytest.fixture
def kornia_patched():
    """Run the test with every needed fix applied; the shim's previous state is restored after."""
    from kornia_halfpatch import testing

    with testing.isolated() as report:
        yield report
