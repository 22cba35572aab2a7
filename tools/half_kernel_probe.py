"""Which torch ops have no float16/bfloat16 CPU kernel in the installed torch (tiny inputs).

    python tools/half_kernel_probe.py [--markdown OUT.md] [--json OUT.json]

Every op in ``OPS`` runs once in float32 (it must work there, or the probe input is wrong) and
once in float16 and bfloat16 on CPU. The result per dtype is ``ok`` or the first line of the
exception. The list holds the ops torch_ops promotes and other ops kornia calls that are known
suspects (special functions, 3-D pooling, sorting/statistics); ``tools/half_call_sites.py``
scans kornia for the ones that fail here.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F


def _spd(dtype, n=3):
    a = torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]])[:n, :n]
    return a.to(dtype)


def _vec(dtype, n=3):
    return torch.tensor([1.0, 2.0, 3.0][:n]).to(dtype)


def _pts(dtype, n=4):
    return torch.arange(n * 2, dtype=torch.float32).reshape(1, n, 2).div(7).to(dtype)


def _lu_solve(dtype):
    lu, pivots = torch.linalg.lu_factor(_spd(torch.float32))  # factor in float32: only the solve is probed
    return torch.linalg.lu_solve(lu.to(dtype), pivots, _vec(dtype)[:, None])


# name -> callable(dtype) ; the callables build their own tiny inputs in `dtype`
OPS = {
    # torch.linalg
    "torch.linalg.solve": lambda d: torch.linalg.solve(_spd(d), _vec(d)),
    "torch.linalg.solve_ex": lambda d: torch.linalg.solve_ex(_spd(d), _vec(d)),
    "torch.linalg.inv": lambda d: torch.linalg.inv(_spd(d)),
    "torch.linalg.inv_ex": lambda d: torch.linalg.inv_ex(_spd(d)),
    "torch.linalg.svd": lambda d: torch.linalg.svd(_spd(d)),
    "torch.linalg.svdvals": lambda d: torch.linalg.svdvals(_spd(d)),
    "torch.linalg.eigh": lambda d: torch.linalg.eigh(_spd(d)),
    "torch.linalg.eigvalsh": lambda d: torch.linalg.eigvalsh(_spd(d)),
    "torch.linalg.eig": lambda d: torch.linalg.eig(_spd(d)),
    "torch.linalg.eigvals": lambda d: torch.linalg.eigvals(_spd(d)),
    "torch.linalg.qr": lambda d: torch.linalg.qr(_spd(d)),
    "torch.linalg.det": lambda d: torch.linalg.det(_spd(d)),
    "torch.linalg.slogdet": lambda d: torch.linalg.slogdet(_spd(d)),
    "torch.linalg.lstsq": lambda d: torch.linalg.lstsq(_spd(d), _vec(d)[:, None]),
    "torch.linalg.cholesky": lambda d: torch.linalg.cholesky(_spd(d)),
    "torch.linalg.cholesky_ex": lambda d: torch.linalg.cholesky_ex(_spd(d)),
    "torch.linalg.pinv": lambda d: torch.linalg.pinv(_spd(d)),
    "torch.linalg.lu_factor": lambda d: torch.linalg.lu_factor(_spd(d)),
    "torch.linalg.lu_factor_ex": lambda d: torch.linalg.lu_factor_ex(_spd(d)),
    "torch.linalg.lu": lambda d: torch.linalg.lu(_spd(d)),
    "torch.linalg.lu_solve": lambda d: _lu_solve(d),
    "torch.linalg.solve_triangular": lambda d: torch.linalg.solve_triangular(torch.triu(_spd(d)), _vec(d)[:, None], upper=True),
    "torch.linalg.matrix_rank": lambda d: torch.linalg.matrix_rank(_spd(d)),
    "torch.linalg.matrix_exp": lambda d: torch.linalg.matrix_exp(_spd(d)),
    "torch.linalg.matrix_power(-1)": lambda d: torch.linalg.matrix_power(_spd(d), -1),
    "torch.linalg.norm": lambda d: torch.linalg.norm(_spd(d)),
    "torch.linalg.norm(ord=2)": lambda d: torch.linalg.norm(_spd(d), ord=2),
    "torch.linalg.norm(ord='nuc')": lambda d: torch.linalg.norm(_spd(d), ord="nuc"),
    "torch.linalg.vector_norm": lambda d: torch.linalg.vector_norm(_vec(d)),
    "torch.linalg.matrix_norm": lambda d: torch.linalg.matrix_norm(_spd(d)),
    "torch.linalg.matrix_norm(ord=2)": lambda d: torch.linalg.matrix_norm(_spd(d), ord=2),
    "torch.linalg.cond": lambda d: torch.linalg.cond(_spd(d)),
    "torch.linalg.cross": lambda d: torch.linalg.cross(_vec(d), _vec(d).flip(0)),
    "torch.linalg.householder_product": lambda d: torch.linalg.householder_product(_spd(d), _vec(d)),
    "torch.linalg.tensorinv": lambda d: torch.linalg.tensorinv(_spd(d), ind=1),
    "torch.linalg.multi_dot": lambda d: torch.linalg.multi_dot([_spd(d), _spd(d), _spd(d)]),
    # torch.* linear algebra
    "torch.inverse": lambda d: torch.inverse(_spd(d)),
    "torch.det": lambda d: torch.det(_spd(d)),
    "torch.logdet": lambda d: torch.logdet(_spd(d)),
    "torch.svd": lambda d: torch.svd(_spd(d)),
    "torch.pinverse": lambda d: torch.pinverse(_spd(d)),
    "torch.cholesky": lambda d: torch.cholesky(_spd(d)),
    "torch.cholesky_solve": lambda d: torch.cholesky_solve(_vec(d)[:, None], _spd(d)),
    "torch.cholesky_inverse": lambda d: torch.cholesky_inverse(_spd(d)),
    "torch.triangular_solve": lambda d: torch.triangular_solve(_vec(d)[:, None], torch.triu(_spd(d))),
    "torch.lu": lambda d: torch.lu(_spd(d)),
    "torch.geqrf": lambda d: torch.geqrf(_spd(d)),
    "torch.trace": lambda d: torch.trace(_spd(d)),
    # distances, statistics
    "torch.cdist (4x4 points: direct kernel)": lambda d: torch.cdist(_pts(d), _pts(d)),
    "torch.cdist (30x30 points: matmul path)": lambda d: torch.cdist(_pts(d, 30), _pts(d, 30)),
    "torch.cdist(p=1)": lambda d: torch.cdist(_pts(d, 30), _pts(d, 30), p=1.0),
    "F.pdist": lambda d: F.pdist(_pts(d)[0]),
    "torch.quantile": lambda d: torch.quantile(_vec(d), 0.5),
    "torch.nanquantile": lambda d: torch.nanquantile(_vec(d), 0.5),
    "torch.median": lambda d: torch.median(_vec(d)),
    "torch.median(dim)": lambda d: torch.median(_spd(d), dim=0),
    "torch.nanmedian": lambda d: torch.nanmedian(_vec(d)),
    "torch.kthvalue": lambda d: torch.kthvalue(_vec(d), 2),
    "torch.mode": lambda d: torch.mode(_vec(d)),
    "torch.sort": lambda d: torch.sort(_vec(d)),
    "torch.topk": lambda d: torch.topk(_vec(d), 2),
    "torch.unique": lambda d: torch.unique(_vec(d)),
    "torch.histc": lambda d: torch.histc(_vec(d), bins=4, min=0, max=4),
    "torch.histogram": lambda d: torch.histogram(_vec(d), bins=4),
    "torch.bucketize": lambda d: torch.bucketize(_vec(d), _vec(d)),
    "torch.searchsorted": lambda d: torch.searchsorted(_vec(d), _vec(d)),
    "torch.cov": lambda d: torch.cov(_spd(d)),
    "torch.corrcoef": lambda d: torch.corrcoef(_spd(d)),
    "torch.cumsum": lambda d: torch.cumsum(_vec(d), 0),
    "torch.cumprod": lambda d: torch.cumprod(_vec(d), 0),
    "torch.logcumsumexp": lambda d: torch.logcumsumexp(_vec(d), 0),
    "torch.logsumexp": lambda d: torch.logsumexp(_vec(d), 0),
    "torch.var_mean": lambda d: torch.var_mean(_vec(d)),
    "torch.std": lambda d: torch.std(_vec(d)),
    "torch.bincount (weights)": lambda d: torch.bincount(torch.tensor([0, 1, 1]), weights=_vec(d)),
    "torch.trapezoid": lambda d: torch.trapezoid(_vec(d)),
    "torch.renorm": lambda d: torch.renorm(_spd(d), 2, 0, 1.0),
    # special functions
    "torch.special.i0": lambda d: torch.special.i0(_vec(d)),
    "torch.special.i0e": lambda d: torch.special.i0e(_vec(d)),
    "torch.special.i1": lambda d: torch.special.i1(_vec(d)),
    "torch.special.i1e": lambda d: torch.special.i1e(_vec(d)),
    "torch.special.ndtri": lambda d: torch.special.ndtri(_vec(d) / 4),
    "torch.special.erfcx": lambda d: torch.special.erfcx(_vec(d)),
    "torch.special.bessel_j0": lambda d: torch.special.bessel_j0(_vec(d)),
    "torch.special.modified_bessel_i0": lambda d: torch.special.modified_bessel_i0(_vec(d)),
    "torch.erfinv": lambda d: torch.erfinv(_vec(d) / 4),
    "torch.lgamma": lambda d: torch.lgamma(_vec(d)),
    "torch.digamma": lambda d: torch.digamma(_vec(d)),
    "torch.polygamma": lambda d: torch.polygamma(1, _vec(d)),
    "torch.igamma": lambda d: torch.igamma(_vec(d), _vec(d)),
    "torch.atan2": lambda d: torch.atan2(_vec(d), _vec(d)),
    "torch.sinc": lambda d: torch.sinc(_vec(d)),
    # complex (kornia's So2/Se2 hold rotations as complex numbers)
    "torch.complex": lambda d: torch.complex(_vec(d), _vec(d)),
    "1 / complex (reciprocal)": lambda d: 1 / torch.complex(_vec(torch.float32), _vec(torch.float32)).to(
        {torch.float32: torch.complex64, torch.float16: torch.complex32, torch.bfloat16: torch.complex32}[d]),
    "torch.polar": lambda d: torch.polar(_vec(d), _vec(d)),
    # fft
    "torch.fft.fft": lambda d: torch.fft.fft(torch.ones(8, dtype=d)),
    "torch.fft.ifft": lambda d: torch.fft.ifft(torch.ones(8, dtype=d)),
    "torch.fft.rfft": lambda d: torch.fft.rfft(torch.ones(8, dtype=d)),
    "torch.fft.irfft": lambda d: torch.fft.irfft(torch.ones(5, dtype=d)),
    "torch.fft.fft2": lambda d: torch.fft.fft2(torch.ones(8, 8, dtype=d)),
    "torch.fft.rfft2": lambda d: torch.fft.rfft2(torch.ones(8, 8, dtype=d)),
    "torch.fft.fftn": lambda d: torch.fft.fftn(torch.ones(8, 8, dtype=d)),
    "torch.fft.fftshift": lambda d: torch.fft.fftshift(torch.ones(8, dtype=d)),
    "torch.fft.fftfreq": lambda d: torch.fft.fftfreq(8, dtype=d),
    "torch.stft": lambda d: torch.stft(torch.ones(64, dtype=d), 16, return_complex=True),
    # pooling / nn
    "F.avg_pool3d": lambda d: F.avg_pool3d(torch.ones(1, 1, 2, 2, 2, dtype=d), 2),
    "F.local_response_norm (4-D)": lambda d: F.local_response_norm(torch.ones(1, 4, 1, 1, dtype=d), 4),
    "F.local_response_norm (3-D)": lambda d: F.local_response_norm(torch.ones(1, 4, 3, dtype=d), 4),
    "F.max_pool3d": lambda d: F.max_pool3d(torch.ones(1, 1, 2, 2, 2, dtype=d), 2),
    "F.adaptive_avg_pool3d": lambda d: F.adaptive_avg_pool3d(torch.ones(1, 1, 2, 2, 2, dtype=d), 1),
    "F.adaptive_max_pool2d": lambda d: F.adaptive_max_pool2d(torch.ones(1, 1, 4, 4, dtype=d), 2),
    "F.max_pool2d(return_indices)": lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, dtype=d), 2, return_indices=True),
    "F.max_unpool2d": lambda d: F.max_unpool2d(*F.max_pool2d(torch.ones(1, 1, 4, 4, dtype=d), 2, return_indices=True), 2),
    "F.lp_pool2d": lambda d: F.lp_pool2d(torch.ones(1, 1, 4, 4, dtype=d), 2, 2),
    "F.avg_pool2d": lambda d: F.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=d), 2),
    "F.conv3d": lambda d: F.conv3d(torch.ones(1, 1, 3, 3, 3, dtype=d), torch.ones(1, 1, 3, 3, 3, dtype=d)),
    "F.conv_transpose2d": lambda d: F.conv_transpose2d(torch.ones(1, 1, 3, 3, dtype=d), torch.ones(1, 1, 2, 2, dtype=d)),
    "F.conv_transpose3d": lambda d: F.conv_transpose3d(torch.ones(1, 1, 2, 2, 2, dtype=d), torch.ones(1, 1, 2, 2, 2, dtype=d)),
    "F.grid_sample (5-D)": lambda d: F.grid_sample(torch.ones(1, 1, 2, 2, 2, dtype=d), torch.zeros(1, 1, 1, 1, 3, dtype=d), align_corners=False),
    "F.grid_sample (4-D, bicubic)": lambda d: F.grid_sample(torch.ones(1, 1, 4, 4, dtype=d), torch.zeros(1, 1, 1, 2, dtype=d), mode="bicubic", align_corners=False),
    "F.affine_grid (5-D)": lambda d: F.affine_grid(torch.eye(3, 4, dtype=d)[None], [1, 1, 2, 2, 2], align_corners=False),
    "F.interpolate (bicubic)": lambda d: F.interpolate(torch.ones(1, 1, 4, 4, dtype=d), scale_factor=2, mode="bicubic"),
    "F.interpolate (area)": lambda d: F.interpolate(torch.ones(1, 1, 4, 4, dtype=d), size=(3, 3), mode="area"),
    "F.interpolate (trilinear)": lambda d: F.interpolate(torch.ones(1, 1, 2, 2, 2, dtype=d), scale_factor=2, mode="trilinear"),
    "F.interpolate (bilinear, antialias)": lambda d: F.interpolate(torch.ones(1, 1, 8, 8, dtype=d), size=(3, 3), mode="bilinear", antialias=True),
    "F.pad (reflect, 5-D)": lambda d: F.pad(torch.ones(1, 1, 2, 2, 2, dtype=d), (1, 1, 1, 1, 1, 1), mode="reflect"),
    "F.pad (replicate, 5-D)": lambda d: F.pad(torch.ones(1, 1, 2, 2, 2, dtype=d), (1, 1, 1, 1, 1, 1), mode="replicate"),
    "F.pad (circular)": lambda d: F.pad(torch.ones(1, 1, 2, 2, dtype=d), (1, 1, 1, 1), mode="circular"),
    "F.unfold": lambda d: F.unfold(torch.ones(1, 1, 4, 4, dtype=d), 2),
    "F.fold": lambda d: F.fold(torch.ones(1, 4, 4, dtype=d), (3, 3), 2),
    "F.embedding_bag": lambda d: F.embedding_bag(torch.tensor([[0, 1]]), torch.ones(2, 2, dtype=d)),
    "F.normalize": lambda d: F.normalize(_spd(d)),
    "F.softmax": lambda d: F.softmax(_vec(d), 0),
    "F.layer_norm": lambda d: F.layer_norm(_spd(d), (3,)),
    "F.batch_norm": lambda d: F.batch_norm(torch.ones(2, 3, 2, 2, dtype=d), None, None, training=True),
    "F.instance_norm": lambda d: F.instance_norm(torch.ones(1, 3, 2, 2, dtype=d)),
    "F.group_norm": lambda d: F.group_norm(torch.ones(1, 4, 2, 2, dtype=d), 2),
    "F.scaled_dot_product_attention": lambda d: F.scaled_dot_product_attention(*(torch.ones(1, 2, 4, 8, dtype=d),) * 3),
    "torch.bmm": lambda d: torch.bmm(_spd(d)[None], _spd(d)[None]),
    "torch.einsum": lambda d: torch.einsum("ij,jk->ik", _spd(d), _spd(d)),
    "torch.baddbmm": lambda d: torch.baddbmm(_spd(d)[None], _spd(d)[None], _spd(d)[None]),
    "torch.multinomial": lambda d: torch.multinomial(_vec(d), 2),
    "torch.distributions.Beta.sample": lambda d: torch.distributions.Beta(_vec(d), _vec(d)).sample(),
    "torch.distributions.Uniform.rsample": lambda d: torch.distributions.Uniform(torch.zeros(2, dtype=d), torch.ones(2, dtype=d)).rsample(),
    "torch.normal": lambda d: torch.normal(torch.zeros(2, dtype=d), torch.ones(2, dtype=d)),
    "torch.poisson": lambda d: torch.poisson(_vec(d)),
    "torch._standard_gamma": lambda d: torch._standard_gamma(_vec(d)),
}


def probe_one(name, make):
    row = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        try:
            make(dtype)
            row[str(dtype).replace("torch.", "")] = "ok"
        except Exception as error:  # noqa: BLE001 - the error text is the measurement
            text = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            row[str(dtype).replace("torch.", "")] = text[:160]
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {name: probe_one(name, make) for name, make in OPS.items()}
    lines = [f"torch {torch.__version__}, CPU ({torch.backends.cpu.get_cpu_capability()}); "
             f"{len(results)} ops; float32 must be ok (else the probe input is wrong)", "",
             "| op | float32 | float16 | bfloat16 |", "|---|---|---|---|"]
    for name, row in results.items():
        lines.append(f"| `{name}` | " + " | ".join(row[d].replace("|", "\\|") for d in ("float32", "float16", "bfloat16")) + " |")
    failing = [n for n, r in results.items() if r["float16"] != "ok" or r["bfloat16"] != "ok"]
    lines += ["", f"No half CPU kernel (float16 or bfloat16 raises): {len(failing)} of {len(results)}: "
              + ", ".join(f"`{n}`" for n in failing)]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(text + "\n")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
