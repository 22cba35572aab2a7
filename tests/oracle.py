"""Kornia 0.9.0's outputs computed on this machine, under this process's kernel conditions.

Outputs of convolutions, matmuls and reductions depend on the CPU's instruction set (see
``golden/kernel_conditions.py``), so they are never recorded: kornia 0.9.0, in its own
environment, computes them in the same run. Where from, in order:

1. ``$KORNIA_HALFPATCH_ORACLE_DIR/<name>-<conditions>.pt`` (default ``.tox/oracle-outputs``),
   written by ``tox -e oracle`` before the release environments run, or by an earlier test run;
2. otherwise ``tests/golden/generate.py --live`` run now by the oracle's python, inheriting this
   process's environment (so ``ATEN_CPU_CAPABILITY``/``ONEDNN_MAX_CPU_ISA`` apply to both):
   ``$KORNIA_HALFPATCH_ORACLE_PYTHON`` (tox sets it to its ``oracle`` environment), else
   ``.tox/oracle``'s python if a tox run created it, else this python if its kornia is 0.9.x;
3. otherwise the test is skipped, saying how to provide the oracle; with
   ``KORNIA_HALFPATCH_ORACLE_REQUIRED=1`` (CI) it fails instead, so CI cannot pass by skipping.

An oracle that runs but fails, or computes under other kernel conditions, is always an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import kernel_conditions
import pytest
import torch

from support import UPSTREAM_FIXED

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "tests" / "golden" / "generate.py"
ORACLE_PYTHON_VARIABLE = "KORNIA_HALFPATCH_ORACLE_PYTHON"
ORACLE_DIR_VARIABLE = "KORNIA_HALFPATCH_ORACLE_DIR"
ORACLE_REQUIRED_VARIABLE = "KORNIA_HALFPATCH_ORACLE_REQUIRED"

_loaded: Dict[str, dict] = {}
_unavailable_here: Dict[str, str] = {}


def _output_directory() -> Path:
    return Path(os.environ.get(ORACLE_DIR_VARIABLE) or ROOT / ".tox" / "oracle-outputs")


def _tox_oracle_python() -> Path:
    env = ROOT / ".tox" / "oracle"
    return env / "Scripts" / "python.exe" if sys.platform == "win32" else env / "bin" / "python"


def _unavailable(reason: str) -> None:
    if os.environ.get(ORACLE_REQUIRED_VARIABLE, "") not in ("", "0"):
        pytest.fail(f"{reason} ({ORACLE_REQUIRED_VARIABLE} is set)")
    pytest.skip(reason)


def oracle_python() -> str:
    """The python of a kornia 0.9.0 environment (skips, or fails if required, when there is none)."""
    explicit = os.environ.get(ORACLE_PYTHON_VARIABLE)
    if explicit:
        if not Path(explicit).exists():
            _unavailable(
                f"{ORACLE_PYTHON_VARIABLE}={explicit} does not exist: run `python -m tox -e oracle` first "
                "(a whole `python -m tox` run does that itself)"
            )
        return explicit
    if _tox_oracle_python().exists():
        return str(_tox_oracle_python())
    if UPSTREAM_FIXED:
        return sys.executable
    _unavailable(
        "kornia 0.9.0's outputs are computed on this machine (half convolutions round differently "
        "per CPU instruction set, so none are recorded) and no kornia 0.9.0 environment was found: "
        f"run `python -m tox -e oracle` once, or set {ORACLE_PYTHON_VARIABLE} to the python of an "
        f"environment with kornia 0.9.0 and torch {torch.__version__}"
    )


_torches: Dict[str, object] = {}


def _torch_of(python: str):
    """The torch version installed for ``python`` (None if it cannot be read), without importing it."""
    if python not in _torches:
        try:
            result = subprocess.run(
                [python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                capture_output=True, text=True, timeout=60,
            )
            _torches[python] = result.stdout.strip() if result.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            _torches[python] = None
    return _torches[python]


def kornia090_outputs(name: str) -> dict:
    """Kornia 0.9.0's live outputs of generator ``gen_<name>.py`` (skips if no oracle is available)."""
    if name in _loaded:
        return _loaded[name]
    if name in _unavailable_here:
        _unavailable(_unavailable_here[name])
    path = _output_directory() / kernel_conditions.output_name(name)
    if not path.exists():
        python = oracle_python()
        theirs = _torch_of(python)
        if theirs is not None and theirs != torch.__version__:
            # Another torch computes under other kernel conditions whatever it is given: running
            # its generator only to find that out cost up to a minute per generator per stack.
            _unavailable_here[name] = (
                f"the kornia 0.9.0 oracle ({python}) runs torch {theirs}, this process torch "
                f"{torch.__version__}: its outputs are not comparable"
            )
            _unavailable(_unavailable_here[name])
        # The oracle inherits this process's environment: the same kernel overrides and thread count.
        result = subprocess.run(
            [python, str(GENERATOR), "--live", str(_output_directory()), name],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            pytest.fail(f"the kornia 0.9.0 oracle ({python}) failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        if not path.exists():
            written = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
            theirs = written[0]["conditions"] if written else None
            _unavailable_here[name] = (
                "the kornia 0.9.0 oracle computes under other kernel conditions than this test process, so its "
                f"outputs are not comparable:\n  oracle: {theirs}\n  here:   {kernel_conditions.conditions()}"
            )
    if name in _unavailable_here:
        # A stack kornia 0.9.0 cannot run on (it needs Python >= 3.11 and torch >= 2.5.1) has no
        # oracle under its own conditions; tox's environments for such stacks say so by leaving
        # KORNIA_HALFPATCH_ORACLE_REQUIRED unset, and there the test skips.
        _unavailable(_unavailable_here[name])
    data = torch.load(path)
    assert data["__conditions__"] == kernel_conditions.conditions(), path
    _loaded[name] = data
    return data
