"""The subprocess side of test_startup_hook.py: kornia calls in processes a user does not write.

    python startup_hook_workers.py OUT.json [dataloader] [mp.spawn] [executor]

Starts workers with the ``spawn`` method (a fresh interpreter each, as on macOS and Windows) in
three ways: a DataLoader worker, a ``torch.multiprocessing.spawn`` process and a
``ProcessPoolExecutor`` process. Each worker runs SOSNet in float16 on CPU (on kornia 0.7-0.8
unpatched: ``NotImplementedError: "avg_pool3d_out_frame" not implemented for 'Half'``) and reports
what happened. Nothing here imports kornia_halfpatch, and this parent process never imports
kornia: a fixed result can only come from the start-up hook in the worker.
"""

import json
import multiprocessing
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

MECHANISMS = ("dataloader", "mp.spawn", "executor")


def describe_once() -> dict:
    """SOSNet float16 on two random patches: "finite", "non-finite" or the exception raised."""
    shim_imported_before_kornia = "kornia_halfpatch" in sys.modules
    import torch

    import kornia.feature as KF

    torch.manual_seed(0)
    model = KF.SOSNet(pretrained=False).half().eval()
    try:
        with torch.no_grad():
            out = model(torch.rand(2, 1, 32, 32).half())
        outcome = "finite" if bool(torch.isfinite(out).all()) and out.dtype == torch.float16 else f"bad output {out.dtype}"
    except Exception as error:  # noqa: BLE001  (the broken case is the point)
        outcome = f"{type(error).__name__}: {error}"[:300]
    shim = sys.modules.get("kornia_halfpatch")
    return {
        "outcome": outcome,
        "shim_imported_before_kornia": shim_imported_before_kornia,
        "applied": list(shim.applied_fixes()) if shim is not None else None,
    }


class HalfDescriptorDataset:
    """A map-style dataset whose one item is :func:`describe_once` run in the worker."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict:
        return describe_once()


def spawn_entry(rank: int, path: str) -> None:
    Path(path).write_text(json.dumps(describe_once()))


def main(out: str, mechanisms) -> None:
    import torch

    # Referenced through the module, not __main__, so that spawned workers unpickle them by name.
    import startup_hook_workers as workers

    results = {}
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        # The three workers start together (each imports torch and kornia), then are collected.
        spawn_result = Path(tmp, "result.json")
        pending = pool.submit(workers.describe_once) if "executor" in mechanisms else None
        spawned = None
        if "mp.spawn" in mechanisms:
            spawned = torch.multiprocessing.spawn(workers.spawn_entry, args=(str(spawn_result),), nprocs=1, join=False)
        if "dataloader" in mechanisms:
            loader = torch.utils.data.DataLoader(
                workers.HalfDescriptorDataset(), batch_size=None, num_workers=1, multiprocessing_context="spawn"
            )
            results["dataloader"] = next(iter(loader))
        if spawned is not None:
            while not spawned.join():
                pass
            results["mp.spawn"] = json.loads(spawn_result.read_text())
        if pending is not None:
            results["executor"] = pending.result()
    results["parent_imported_kornia"] = "kornia" in sys.modules
    Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or MECHANISMS)
