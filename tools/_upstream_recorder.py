"""pytest plugin used by tools/upstream_tests.py: one JSON line per test report, written as it happens.

Loaded with ``-p _upstream_recorder`` (tools/ on PYTHONPATH). Lines are flushed one by one, so a
run that dies (segfault, pytest-timeout's thread method calling ``os._exit``) still leaves every
finished test on disk and the started-but-unfinished test identifiable: the driver marks it as a
crash and restarts the run without it. Environment:

- ``UPSTREAM_RECORD``: the JSON-lines file to append to (required).
- ``UPSTREAM_EXCLUDE``: a file of node ids to deselect (already recorded, or crashed).
- ``UPSTREAM_ONLY``: a file of node ids; every other collected test is deselected.
- ``UPSTREAM_STACKS`` and ``UPSTREAM_TIMEOUT``: a test still running 2 s before the timeout gets
  its Python stack written there by ``faulthandler`` (a C watchdog thread: it works while the
  test holds the GIL in a kernel that never returns), so a hang is reported with its frames.
- ``UPSTREAM_AUTOCAST=float16|bfloat16``: every test's call phase runs inside
  ``torch.autocast("cpu", dtype=...)`` (kornia's float32 tests as an autocast user runs them:
  float32 tensors in, half matmuls and convolutions inside kornia). Its fixtures and setup do not.
- ``UPSTREAM_GRADCHECK=1``: ``torch.autograd.gradcheck``/``gradgradcheck`` are wrapped (before
  kornia's testing helpers import them) and each distinct set of floating dtypes a test passes
  them is recorded (``{"event": "gradcheck", ...}``): kornia's ``BaseTester.gradcheck`` casts its
  inputs to float64 unless told otherwise, so a test parametrized by a half dtype may check float64.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time

_KORNIA_FRAME_LIMIT = 6


def _ids(variable: str):
    path = os.environ.get(variable)
    if not path or not os.path.exists(path):
        return None
    with open(path) as handle:
        return {line.rstrip("\n") for line in handle if line.strip()}


def _write(entry: dict) -> None:
    with open(os.environ["UPSTREAM_RECORD"], "a") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()


_CURRENT = {"id": None, "seen": set()}


def _tensors(value):
    import torch
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _wrap_gradchecks() -> None:
    import torch.autograd

    def wrap(name, original):
        def checked(func, inputs, *args, **kwargs):
            try:
                dtypes = sorted({str(t.dtype).replace("torch.", "") for t in _tensors(inputs)
                                 if t.is_floating_point() or t.is_complex()})
                grad = sorted({str(t.dtype).replace("torch.", "") for t in _tensors(inputs) if t.requires_grad})
                key = (name, tuple(dtypes), tuple(grad))
                if _CURRENT["id"] is not None and key not in _CURRENT["seen"]:
                    _CURRENT["seen"].add(key)
                    _write({"event": "gradcheck", "id": _CURRENT["id"], "fn": name, "dtypes": dtypes,
                            "requires_grad_dtypes": grad})
            except Exception:  # recording must never change the test's outcome
                pass
            return original(func, inputs, *args, **kwargs)
        checked.__wrapped__ = original
        return checked

    for name in ("gradcheck", "gradgradcheck"):
        original = getattr(torch.autograd, name)
        if not hasattr(original, "__wrapped__"):
            setattr(torch.autograd, name, wrap(name, original))


if os.environ.get("UPSTREAM_GRADCHECK") == "1":
    _wrap_gradchecks()


import pytest  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    dtype_name = os.environ.get("UPSTREAM_AUTOCAST")
    if not dtype_name:
        yield
        return
    import torch

    with torch.autocast("cpu", dtype=getattr(torch, dtype_name)):
        yield


def pytest_collection_modifyitems(session, config, items):
    exclude = _ids("UPSTREAM_EXCLUDE") or set()
    only = _ids("UPSTREAM_ONLY")
    keep, drop = [], []
    for item in items:
        if item.nodeid in exclude or (only is not None and item.nodeid not in only):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session):
    kornia = sys.modules.get("kornia")
    # The entry point's name, or the module's where the shim is not installed (-p kornia_halfpatch.pytest_plugin)
    shim = session.config.pluginmanager.get_plugin("kornia_halfpatch") or session.config.pluginmanager.get_plugin(
        "kornia_halfpatch.pytest_plugin")
    header = shim.pytest_report_header(session.config) if shim is not None else "kornia_halfpatch: plugin not loaded"
    _write({
        "event": "session",
        "kornia_file": getattr(kornia, "__file__", None),
        "kornia_version": getattr(kornia, "__version__", None),
        "shim_header": header,
        "collected": len(session.items),
        "pid": os.getpid(),
    })


_STACKS = None


def pytest_runtest_logstart(nodeid, location):
    global _STACKS
    _CURRENT["id"], _CURRENT["seen"] = nodeid, set()
    _write({"event": "start", "id": nodeid, "t": round(time.time(), 1)})
    if os.environ.get("UPSTREAM_STACKS") and os.environ.get("UPSTREAM_TIMEOUT"):
        if _STACKS is None:
            _STACKS = open(os.environ["UPSTREAM_STACKS"], "w")
        _STACKS.seek(0)
        _STACKS.truncate()
        _STACKS.write(f"{nodeid}\n")
        _STACKS.flush()
        faulthandler.dump_traceback_later(max(1.0, float(os.environ["UPSTREAM_TIMEOUT"]) - 2.0), file=_STACKS)


def pytest_runtest_logfinish(nodeid, location):
    if _STACKS is not None:
        faulthandler.cancel_dump_traceback_later()


def _longrepr_facts(report) -> dict:
    longrepr = report.longrepr
    facts = {"message": "", "crash_at": None, "kornia_frames": []}
    if longrepr is None:
        return facts
    if isinstance(longrepr, tuple):  # skip: (path, lineno, reason)
        facts["message"] = str(longrepr[2])
        return facts
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        facts["message"] = crash.message
        facts["crash_at"] = f"{crash.path}:{crash.lineno}"
    else:
        facts["message"] = str(longrepr)[-4000:]
    traceback = getattr(longrepr, "reprtraceback", None)
    frames = []
    for entry in getattr(traceback, "reprentries", []) or []:
        location = getattr(entry, "reprfileloc", None)
        if location is None:
            continue
        path = str(location.path)
        if "kornia/" in path and "tests/" not in path and "kornia_halfpatch" not in path:
            frames.append(f"{path.split('kornia/', 1)[1] if path.startswith('/') else path}:{location.lineno}")
    facts["kornia_frames"] = frames[-_KORNIA_FRAME_LIMIT:]
    facts["message"] = facts["message"][:4000]
    return facts


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        entry = {"event": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
                 "duration": round(report.duration, 3)}
        if hasattr(report, "wasxfail"):
            entry["xfail"] = True
        if report.outcome != "passed":
            entry.update(_longrepr_facts(report))
        _write(entry)


def pytest_collectreport(report):
    if report.failed:
        entry = {"event": "collect_error", "id": report.nodeid}
        entry.update(_longrepr_facts(report))
        _write(entry)
