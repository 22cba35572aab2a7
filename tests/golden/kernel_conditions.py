"""What decides the bits of a convolution, matmul or reduction on this machine.

Half (and float32) convolutions, matmuls and reductions go through oneDNN, BLAS and ATen's
vectorised kernels, which pick a code path per instruction set (AVX-512 FP16, AVX-512, AVX2,
SSE4.1, NEON, ...), per thread count, and per environment override (``ATEN_CPU_CAPABILITY``,
``ONEDNN_MAX_CPU_ISA``). Two paths sum in different orders and round differently, so kornia
0.9.0's outputs are only an oracle for a test computed under the same conditions. Live oracle
outputs are stored under a name that hashes these conditions together with the generator's inputs;
the test process and the kornia 0.9.0 process each compute the name, and a test only ever reads a
file whose conditions equal its own.

Imports nothing but torch and the standard library: it runs in the kornia 0.9.0 environment and in
every release's test environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent

# Environment variables that change which CPU kernels run (or how many threads split them).
KERNEL_ENVIRONMENT_PREFIXES = ("ATEN_", "ONEDNN_", "DNNL_", "MKL_", "MKLDNN_", "OMP_", "KMP_", "OPENBLAS_", "GOTO")
# How idle OpenMP threads wait (spin or sleep): neither which kernels run nor how they split work.
# The quick run's xdist workers wait passively (conftest.py), and share the oracle's outputs.
NOT_KERNEL_ENVIRONMENT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def _cpu_identity() -> str:
    """The CPU model and its feature flags (Linux), else whatever the platform reports."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.processor()} {platform.platform()}"
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags", "Features", "CPU implementer", "CPU part") and key not in fields:
            fields[key] = " ".join(sorted(value.split())) if key in ("flags", "Features") else value.strip()
    return json.dumps(fields, sort_keys=True)


def conditions() -> Dict[str, object]:
    """Everything that selects the CPU kernels of this process, as plain JSON data."""
    import torch

    return {
        "torch": str(torch.__version__),
        "machine": platform.machine(),
        "cpu": hashlib.sha256(_cpu_identity().encode()).hexdigest()[:16],
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "environment": {
            k: v for k, v in sorted(os.environ.items())
            if k.startswith(KERNEL_ENVIRONMENT_PREFIXES) and k not in NOT_KERNEL_ENVIRONMENT
        },
    }


def inputs_digest(name: str) -> str:
    """The generator's source and its recorded inputs: editing either makes old outputs stale."""
    digest = hashlib.sha256()
    for path in (HERE / f"gen_{name}.py", HERE / f"{name}.pt", Path(__file__)):
        if path.exists():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def output_name(name: str) -> str:
    """File name of kornia 0.9.0's live outputs for generator ``name`` under this process's conditions."""
    key = json.dumps({"conditions": conditions(), "inputs": inputs_digest(name)}, sort_keys=True)
    return f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.pt"
