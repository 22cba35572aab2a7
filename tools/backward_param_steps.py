"""Replay kornia's ``test_backward*.py::*::test_param`` in float16/bfloat16 with the shim applied,
and say for each failure whether it is the tests' resolution limit.

The tests make a learnable range (``nn.Parameter``) in the half dtype, take one SGD step with
lr=10 and assert that the parameter changed. A failure is counted as "step below half an ulp"
when a parameter did not move although the same step in float32 moves the widened parameter: the
gradient is there (the float32 gradient, narrowed once, with the shim), the half dtype cannot hold
the change. Anything else is counted as "other".

    .tox/kornia082/bin/python tools/backward_param_steps.py ../upstream/v0.8.2

Run it with the python of the environment whose kornia matches the checkout's tag; the test
classes are imported from the checkout's files (they import only kornia.augmentation).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLASSES = (
    ("test_backward.py", "TestRandomAffineBackward"),
    ("test_backward.py", "TestRandomRotationBackward"),
    ("test_backward.py", "TestRandomPerspectiveBackward"),
    ("test_backward.py", "TestRandomMotionBlurBackward"),
    ("test_backward_3d.py", "TestRandomAffine3DBackward"),
    ("test_backward_3d.py", "TestRandomRotation3DBackward"),
    ("test_backward_3d.py", "TestRandomMotionBlur3DBackward"),
)


class StepRecorder:
    """Wraps SGD.step: for every parameter, did it move, and would the float32 step move it."""

    def __init__(self) -> None:
        self.steps: list = []
        self._real = torch.optim.SGD.step
        recorder = self

        def step(optimizer, *args, **kwargs):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            before = [p.detach().clone() for p in params]
            grads = [None if p.grad is None else p.grad.detach().float() for p in params]
            out = recorder._real(optimizer, *args, **kwargs)
            lr = optimizer.param_groups[0]["lr"]
            for b, g, p in zip(before, grads, params):
                if g is not None:
                    moved = bool((b != p.detach()).any())
                    moves_in_float32 = bool(((b.float() - lr * g) != b.float()).any())
                    recorder.steps.append((moved, moves_in_float32))
            return out

        torch.optim.SGD.step = step

    def close(self) -> None:
        torch.optim.SGD.step = self._real


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_replayed_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(function):
    marks = [m for m in getattr(function, "pytestmark", []) if m.name == "parametrize"]
    names = [m.args[0] for m in marks]
    values = [m.args[1] for m in marks]
    for combo in itertools.product(*values):
        yield dict(zip(names, combo))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="kornia source checkout at the installed release's tag")
    parser.add_argument("--no-shim", action="store_true", help="replay without the shim")
    parser.add_argument("--only-class", action="append", help="replay only this test class (repeatable)")
    args = parser.parse_args()
    if not args.no_shim:
        import kornia_halfpatch

        kornia_halfpatch.apply()
    recorder = StepRecorder()
    counts: collections.Counter = collections.Counter()
    try:
        for file_name, class_name in CLASSES:
            # kornia 0.7.0's tests live in test/, later releases' in tests/.
            path = next(
                (Path(args.checkout) / top / "augmentation" / file_name for top in ("tests", "test")
                 if (Path(args.checkout) / top / "augmentation" / file_name).exists()),
                Path(args.checkout) / "tests" / "augmentation" / file_name,
            )
            if args.only_class and class_name not in args.only_class:
                continue
            klass = getattr(_load(path), class_name, None) if path.exists() else None
            if klass is None or not hasattr(klass, "test_param"):
                continue
            for dtype in (torch.float16, torch.bfloat16):
                for kwargs in _cases(klass.test_param):
                    recorder.steps.clear()
                    try:
                        klass.test_param(klass(), device=torch.device("cpu"), dtype=dtype, **kwargs)
                        outcome = "passed"
                    except AssertionError:
                        below = any(not moved and moves for moved, moves in recorder.steps)
                        outcome = "failed: step below half an ulp" if below else "failed: other"
                    except Exception as exc:  # noqa: BLE001 - counted, not raised
                        outcome = f"error: {type(exc).__name__}"
                    counts[(class_name, str(dtype).replace("torch.", ""), outcome)] += 1
    finally:
        recorder.close()
    for (class_name, dtype, outcome), n in sorted(counts.items()):
        print(f"{n:6d}  {class_name:32s} {dtype:9s} {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
