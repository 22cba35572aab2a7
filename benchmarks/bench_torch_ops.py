"""Benchmark for ``torch_ops`` and ``filters_conv_hang``: each promoted public function, CPU.

    .tox/kornia082/bin/python benchmarks/bench_torch_ops.py --oracle-python .tox/kornia090/bin/python

Measures, in one run, variants interleaved round by round, medians taken:

* float16 and bfloat16: patched installed kornia versus kornia 0.9.0 (the ``--oracle-python``
  interpreter), same seeded inputs. 0.9.0 also promotes these ops to float32 (or casts), so the
  ratio says what the wholesale promotion costs against 0.9.0's own choice.
* float32: patched versus unpatched installed kornia. Target: ratio <= 1.03 (the wrapper's dtype
  test is the only added work).

* half patched versus the release's own float32 call (unpatched): the promotion's cost is the
  release's float32 computation plus the casts, so a ratio near 1 says a slow half call is the
  release's algorithm, not the promotion.

The filters_conv_hang cases (``gaussian_blur2d`` and ``max_blur_pool2d`` with kernel 15,
``MS_SSIMLoss``) are not run in float16 by 0.9.0: there they would hang on avx512_fp16 CPUs.
A case whose function a release lacks is reported absent.
Workers are started once (``--worker``) and time calls on request.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, Dict, List

from _harness import ROOT, Worker, half_against_oracle, interleaved_rounds, variants
FIXES = ["torch_ops", "filters_conv_hang"]


def cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """name -> (dtype -> a no-argument call on prepared inputs). Realistic sizes."""
    import torch
    import kornia

    g = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    ep = kornia.geometry.epipolar

    def guided(dtype):
        guidance, image = torch.rand(1, 3, 256, 256, generator=g(1)).to(dtype), torch.rand(1, 3, 256, 256, generator=g(2)).to(dtype)
        return lambda: kornia.filters.guided_blur(guidance, image, 5, 0.01)

    def zca(dtype):
        x = torch.rand(2048, 48, generator=g(3)).to(dtype)
        return lambda: kornia.enhance.zca_whiten(x)

    def ellipses(dtype):
        xy = torch.rand(1, 2000, 2, generator=g(4)) * 256
        abc = torch.cat([0.02 + torch.rand(1, 2000, 1, generator=g(5)) * 0.05, torch.zeros(1, 2000, 1),
                         0.02 + torch.rand(1, 2000, 1, generator=g(6)) * 0.05], -1)
        e = torch.cat([xy, abc], -1).to(dtype)
        return lambda: kornia.feature.laf.ellipse_to_laf(e)

    def matcher(dtype):
        a, b = torch.rand(25, 128, generator=g(7)).to(dtype), torch.rand(25, 128, generator=g(8)).to(dtype)
        return lambda: kornia.feature.match_snn(a, b, 0.9)

    def soft_argmax(dtype):
        v = torch.rand(1, 1, 3, 128, 128, generator=g(9)).to(dtype)
        return lambda: kornia.geometry.subpix.conv_soft_argmax3d(v)

    def fundamental7(dtype):
        X = torch.cat([torch.rand(256, 7, 2, generator=g(10)) * 2 - 1, 2 + torch.rand(256, 7, 1, generator=g(11))], -1)
        x1, x2 = X[..., :2] / X[..., 2:], (X[..., :2] + 0.25) / (X[..., 2:] + 0.125)
        x1, x2 = x1.to(dtype), x2.to(dtype)
        return lambda: ep.find_fundamental(x1, x2, None, "7POINT")

    def decompose(dtype):
        E = torch.randn(1024, 3, 3, generator=g(12)).to(dtype)
        return lambda: ep.decompose_essential_matrix(E)

    def krt(dtype):
        P = (torch.eye(3, 4) + 0.1 * torch.randn(1024, 3, 4, generator=g(13))).to(dtype)
        return lambda: ep.KRt_from_projection(P)

    def warp3d(dtype):
        src = torch.rand(1, 1, 16, 64, 64, generator=g(14)).to(dtype)
        M = torch.eye(4).unsqueeze(0)
        M[:, :3, 3] = 0.5
        M = M.to(dtype)
        return lambda: kornia.geometry.transform.warp_perspective3d(src, M, (16, 64, 64))

    def fft_conv(dtype):
        x, k = torch.rand(1, 3, 256, 256, generator=g(16)).to(dtype), (torch.rand(1, 15, 15, generator=g(17)) / 100).to(dtype)
        return lambda: kornia.filters.filter.fft_conv(x, k)

    def warp_kpts(dtype):
        from kornia.feature.loftr.utils.geometry import warp_kpts

        kpts = (torch.rand(1, 2000, 2, generator=g(18)) * 62).round()
        depth = 2.0 + torch.rand(1, 64, 64, generator=g(19))
        pose = torch.eye(4).unsqueeze(0)
        pose[:, 0, 3] = 0.125
        K = torch.tensor([[[64.0, 0.0, 32.0], [0.0, 64.0, 32.0], [0.0, 0.0, 1.0]]])
        args = [t.to(dtype) for t in (kpts, depth, depth, pose, K, K)]
        return lambda: warp_kpts(*args)

    def homography_dlt(dtype):
        x1 = torch.rand(256, 8, 2, generator=g(20))
        H = torch.tensor([[1.1, 0.05, 0.1], [-0.05, 0.95, 0.05], [0.01, 0.02, 1.0]])
        x2 = kornia.geometry.transform_points(H[None], x1)
        x1, x2 = x1.to(dtype), x2.to(dtype)
        return lambda: kornia.geometry.homography.find_homography_dlt(x1, x2)

    def homography_lines(dtype):
        ls1 = torch.rand(256, 8, 2, 2, generator=g(21))
        ls2 = ls1 + 0.05 * torch.rand(256, 8, 2, 2, generator=g(22))
        ls1, ls2 = ls1.to(dtype), ls2.to(dtype)
        return lambda: kornia.geometry.homography.find_homography_lines_dlt(ls1, ls2)

    def essential5(dtype):
        X = torch.cat([torch.rand(64, 8, 2, generator=g(23)) * 2 - 1, 2 + torch.rand(64, 8, 1, generator=g(24))], -1)
        x1, x2 = X[..., :2] / X[..., 2:], (X[..., :2] + 0.25) / (X[..., 2:] + 0.125)
        x1, x2 = x1.to(dtype), x2.to(dtype)
        return lambda: ep.find_essential(x1, x2)

    def from_essential(dtype):
        E = torch.randn(1024, 3, 3, generator=g(25))
        K = torch.tensor([[64.0, 0.0, 32.0], [0.0, 64.0, 32.0], [0.0, 0.0, 1.0]]).expand(1024, 3, 3)
        E, K = E.to(dtype), K.to(dtype)
        return lambda: ep.fundamental_from_essential(E, K, K)

    def from_projections(dtype):
        P1 = (torch.eye(3, 4) + 0.1 * torch.randn(1024, 3, 4, generator=g(26))).to(dtype)
        P2 = (torch.eye(3, 4) + 0.1 * torch.randn(1024, 3, 4, generator=g(27))).to(dtype)
        return lambda: ep.fundamental_from_projections(P1, P2)

    def triangulate(dtype):
        P1 = (torch.eye(3, 4) + 0.05 * torch.randn(1, 3, 4, generator=g(28))).to(dtype)
        P2 = (torch.eye(3, 4) + 0.05 * torch.randn(1, 3, 4, generator=g(29))).to(dtype)
        x1, x2 = torch.rand(1, 1024, 2, generator=g(30)).to(dtype), torch.rand(1, 1024, 2, generator=g(31)).to(dtype)
        return lambda: ep.triangulate_points(P1, P2, x1, x2)

    def quaternions(dtype):
        from kornia.geometry.quaternion import Quaternion, average_quaternions

        q = torch.tensor([1.0, 0.0, 0.0, 0.0]) + (torch.rand(1024, 4, generator=g(32)) - 0.5) * 0.25
        q = Quaternion((q / q.norm(dim=-1, keepdim=True)).to(dtype))
        return lambda: average_quaternions(q)

    def unproject(dtype):
        from kornia.geometry.camera import PinholeCamera

        K = torch.tensor([[[64.0, 0.0, 32.0, 0.0], [0.0, 64.0, 32.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]])
        cam = PinholeCamera(K.to(dtype), torch.eye(4)[None].to(dtype), torch.tensor([64.0]).to(dtype),
                            torch.tensor([64.0]).to(dtype))
        pts, depth = (torch.rand(1, 4096, 2, generator=g(33)) * 64).to(dtype), torch.ones(1, 4096, 1).to(dtype)
        return lambda: cam.unproject(pts, depth)

    def registrator_inverse(dtype):
        from kornia.geometry.transform.image_registrator import Homography

        module = Homography().to(dtype)
        return lambda: module.forward_inverse()

    def zca_module(dtype):
        x = torch.rand(2048, 48, generator=g(34)).to(dtype)
        return lambda: kornia.enhance.ZCAWhitening()(x, include_fit=True)

    def so2_inverse(dtype):
        from kornia.geometry.liegroup import So2

        rotation = So2.exp(torch.rand(4096, generator=g(35)).to(dtype))
        return lambda: rotation.inverse()

    def affine3d_depth1(dtype):
        x = torch.rand(4, 3, 1, 64, 64, generator=g(36)).to(dtype)
        M = (torch.eye(3, 4) + 0.01 * torch.randn(4, 3, 4, generator=g(37))).to(dtype)
        return lambda: kornia.geometry.transform.warp_affine3d(x, M, (1, 64, 64))

    def ms_ssim(dtype):
        loss = kornia.losses.MS_SSIMLoss().to(dtype)
        a, b = torch.rand(1, 3, 128, 128, generator=g(38)).to(dtype), torch.rand(1, 3, 128, 128, generator=g(39)).to(dtype)
        return lambda: loss(a, b)

    def blur_pool15(dtype):
        x = torch.rand(1, 3, 256, 256, generator=g(40)).to(dtype)
        return lambda: kornia.filters.max_blur_pool2d(x, 15)

    def blur15(dtype):
        x = torch.rand(1, 3, 256, 256, generator=g(15)).to(dtype)
        return lambda: kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))

    return {
        "guided_blur 3ch 256x256": guided,
        "zca_whiten 2048x48": zca,
        "ellipse_to_laf 2000": ellipses,
        "match_snn 25x25x128": matcher,
        "conv_soft_argmax3d 3x128x128": soft_argmax,
        "find_fundamental 7POINT B=256": fundamental7,
        "decompose_essential_matrix B=1024": decompose,
        "KRt_from_projection B=1024": krt,
        "warp_perspective3d 16x64x64": warp3d,
        "gaussian_blur2d k=15 3x256x256": blur15,
        "fft_conv 3x256x256 k=15 (0.8.3)": fft_conv,
        "warp_kpts 2000 (LoFTR)": warp_kpts,
        "find_homography_dlt B=256": homography_dlt,
        "find_homography_lines_dlt B=256": homography_lines,
        "find_essential B=64": essential5,
        "fundamental_from_essential B=1024": from_essential,
        "fundamental_from_projections B=1024": from_projections,
        "triangulate_points 1024": triangulate,
        "average_quaternions 1024": quaternions,
        "PinholeCamera.unproject 4096": unproject,
        "Homography.forward_inverse": registrator_inverse,
        "ZCAWhitening fit+forward 2048x48": zca_module,
        "So2.inverse 4096": so2_inverse,
        "warp_affine3d depth 1 4x3x64x64": affine3d_depth1,
        "MS_SSIMLoss 3x128x128": ms_ssim,
        "max_blur_pool2d k=15 3x256x256": blur_pool15,
    }


# float16 unpatched (and in 0.9.0) would hang on avx512_fp16 CPUs (filters_conv_hang): not run
NO_FLOAT16_UNPATCHED = {"gaussian_blur2d k=15 3x256x256", "MS_SSIMLoss 3x128x128", "max_blur_pool2d k=15 3x256x256"}


def worker(threads: int) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import kornia
    import kornia_halfpatch

    if threads:
        torch.set_num_threads(threads)
    kornia_halfpatch.apply(only=FIXES)
    built = cases()
    print(json.dumps({"ready": True, "kornia": kornia.__version__, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        dtype = getattr(torch, request["dtype"])

        def run() -> List[float]:
            try:
                call = built[request["case"]](dtype)
            except (AttributeError, ImportError):
                raise LookupError("absent in this release")
            times = []
            with torch.no_grad():
                call()  # warm-up
                for _ in range(request["reps"]):
                    start = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - start)
            return times

        try:
            if request["patched"]:
                times = run()
            else:
                with kornia_halfpatch.unpatched(FIXES):
                    times = run()
            print(json.dumps({"times": times}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:60]}" if isinstance(exc, LookupError) else type(exc).__name__}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return 0
    sys.path.insert(0, str(ROOT))
    names = list(cases())
    local = Worker(__file__, sys.executable, args.threads)
    oracle = Worker(__file__, args.oracle_python, args.threads) if args.oracle_python else None
    chosen = variants(names, oracle is not None,
                      oracle_skips=lambda name, dtype: dtype == "float16" and name in NO_FLOAT16_UNPATCHED)
    median, errors = interleaved_rounds(chosen, local, oracle, args.rounds, args.reps)
    rows = []
    for name in names:
        row = {"case": name}
        if (name, "unpatched", "float32") not in median:
            row["absent"] = errors.get((name, "unpatched", "float32"), "no samples")
            rows.append(row)
            continue
        unpatched32 = median[(name, "unpatched", "float32")]
        row["float32 patched/unpatched"] = median[(name, "patched", "float32")] / unpatched32
        row["float32 unpatched ms"] = unpatched32 * 1e3
        for dtype in ("float16", "bfloat16"):
            half_against_oracle(row, name, dtype, median, errors)
            if (name, "patched", dtype) in median:
                # the promotion's own cost: the release's float32 computation plus the casts
                row[f"{dtype} patched/release float32"] = median[(name, "patched", dtype)] / unpatched32
        rows.append(row)
    result = {"benchmark": "torch_ops: promoted public functions, CPU", "installed": local.info,
              "oracle": oracle.info if oracle else None, "rows": rows, "samples_per_variant": args.rounds * args.reps,
              "float32_target": 1.03,
              "float32_met": all(r["float32 patched/unpatched"] <= 1.03 for r in rows if "absent" not in r)}
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']}; installed kornia {local.info['kornia']}, torch {local.info['torch']}, "
          f"{local.info['threads']} threads; {result['samples_per_variant']} calls per variant")
    print(f"  {'case':<40} {'f32 p/u':>8} {'f16 p/0.9':>12} {'bf16 p/0.9':>12} {'f16 p/f32':>9} {'bf16 p/f32':>10} "
          f"{'f32 ms':>8} {'f16 ms':>8} {'bf16 ms':>8}")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else (v or "-")  # noqa: E731
    for r in rows:
        if "absent" in r:
            print(f"  {r['case']:<40} {r['absent']}")
            continue
        print(f"  {r['case']:<40} {r['float32 patched/unpatched']:8.3f} {fmt(r.get('float16 patched/0.9.0')):>12} "
              f"{fmt(r.get('bfloat16 patched/0.9.0')):>12} {fmt(r.get('float16 patched/release float32')):>9} "
              f"{fmt(r.get('bfloat16 patched/release float32')):>10} {fmt(r.get('float32 unpatched ms')):>8} "
              f"{fmt(r.get('float16 patched ms')):>8} {fmt(r.get('bfloat16 patched ms')):>8}")
    print(f"  float32 target <= 1.03: {'met' if result['float32_met'] else 'NOT met'} (per case above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
