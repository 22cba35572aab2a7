"""Live before/after demonstration of the utils_grids fix, for the CLI (``kornia-halfpatch``).

Loaded only by the CLI and the tests that run it (``Fix.demonstration`` names it as a string),
so importing the fix module builds no demo.
"""

from __future__ import annotations

import torch

from .._model import Demonstration


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    def max_eager_compiled_gap(dtype: torch.dtype, width: int) -> float:
        # A kornia module that binds create_meshgrid by name in every release (no deprecation
        # wrapper in between), so the demo sees what kornia's own code calls.
        import kornia.geometry.transform.homography_warper as homography_warper

        make = homography_warper.create_meshgrid

        def grid(h: int, w: int) -> torch.Tensor:
            return make(h, w, True, torch.device("cpu"), dtype)

        torch._dynamo.reset()
        compiled = torch.compile(grid, fullgraph=True)
        gap = (compiled(2, width).float() - grid(2, width).float()).abs().max().item()
        torch._dynamo.reset()
        return gap

    demo = Demonstration("create_meshgrid: eager vs torch.compile, max |difference| of half grids")
    holds = True
    for dtype, width in ((torch.bfloat16, 300), (torch.float16, 6000)):
        with kornia_halfpatch.unpatched(["utils_grids"]):
            before = max_eager_compiled_gap(dtype, width)
        with kornia_halfpatch.patched(only=["utils_grids"]):
            after = max_eager_compiled_gap(dtype, width)
        holds = holds and after == 0.0
        demo.cases.append((f"{str(dtype)[6:]} width {width}", f"{before:.4g}", f"{after:.4g}"))
    demo.holds = holds
    return demo
