"""Half networks on CPU: forward time against float32, and weight/input gradient error against the
float32 gradient on the widened weights and patches (docs/fixes/networks_cpu_half.md, docs/training.md).

    python benchmarks/accuracy_half_gradients_cpu.py time --mode native     # the shim, cpu_half="native"
    python benchmarks/accuracy_half_gradients_cpu.py grad --mode float32
    KORNIA_0.9.0_PYTHON benchmarks/accuracy_half_gradients_cpu.py grad --mode none   # no shim (0.9.0)

The seeded weights are saved under --weights by the first run and loaded by every later one, so
runs in other environments (kornia 0.9.0) use the same weights. One thread; run one at a time.
"""
import argparse, copy, json, os, statistics, sys, tempfile, time
import torch

parser = argparse.ArgumentParser()
parser.add_argument("what")
parser.add_argument("--mode", default="none")
parser.add_argument("--out")
parser.add_argument("--nets", default="SOSNet,HardNet,HardNet8,HyNet,TFeat")
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--reps", type=int, default=0)
parser.add_argument("--dtypes", default="bfloat16,float16")
parser.add_argument("--weights", default=os.path.join(tempfile.gettempdir(), "kornia-halfpatch-gradient-weights"))
args = parser.parse_args()
torch.set_num_threads(1)
if args.mode != "none":
    import kornia_halfpatch
    kornia_halfpatch.apply(cpu_half=args.mode)
    print("shim", kornia_halfpatch.__file__, "cpu_half", args.mode, file=sys.stderr)
import kornia, kornia.feature as KF
print("kornia", kornia.__version__, file=sys.stderr)


def hardnet8():
    with torch.device("meta"):
        m = KF.HardNet8(pretrained=False)
    m = m.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for c in m.modules():
            if isinstance(c, torch.nn.Conv2d):
                b = c.weight[0].numel() ** -0.5
                c.weight.uniform_(-b, b, generator=g)
            elif isinstance(c, torch.nn.BatchNorm2d):
                c.reset_running_stats()
        m.mean.zero_()
        q, _ = torch.linalg.qr(torch.randn(*m.components.shape, generator=g))  # random orthonormal PCA
        m.components.copy_(q)
    return m


BUILD = {
    "SOSNet": lambda: KF.SOSNet(pretrained=False),
    "HardNet": lambda: KF.HardNet(pretrained=False),
    "HardNet8": hardnet8,
    "HyNet": lambda: KF.HyNet(pretrained=False),
    "TFeat": lambda: KF.TFeat(pretrained=False),
}


def build(name):
    # same weights in every venv: saved once, loaded everywhere
    os.makedirs(args.weights, exist_ok=True)
    path = f"{args.weights}/{name}.pt"
    if name == "HardNet8":
        m = hardnet8()
    else:
        torch.manual_seed(0)
        m = BUILD[name]()
    if os.path.exists(path):
        m.load_state_dict(torch.load(path))
    else:
        torch.save(m.state_dict(), path)
    return m.eval()


def patches(n, seed=1):
    return torch.rand(n, 1, 32, 32, generator=torch.Generator().manual_seed(seed))


def timed(call, reps):
    """Minimum wall time of ``reps`` calls (the machine is shared: the minimum is the least noisy)."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def forward_time(module, wide, dtype):
    x = patches(args.batch).to(dtype)
    with torch.no_grad():
        wide(x.float())  # warm-up
        float32_seconds = timed(lambda: wide(x.float()), args.reps or 2)
        module(x)
        half_seconds = timed(lambda: module(x), args.reps or (1 if dtype == torch.float16 else 2))
    return dict(f32_ms=float32_seconds * 1e3, half_ms=half_seconds * 1e3, ratio=half_seconds / float32_seconds)


def gradient_errors(module, wide, dtype):
    """Weight gradients per tensor (relative L2 error; largest error in half ulps at the float32
    gradient's largest magnitude) and the input gradient, against the float32 gradient."""
    x = patches(8).to(dtype).requires_grad_()
    x_wide = x.detach().float().requires_grad_()
    out = module(x)
    out_wide = wide(x_wide)
    projection = torch.randint(-16, 17, out.shape, generator=torch.Generator().manual_seed(3)) / 16
    (out.float() * projection).sum().backward()
    (out_wide * projection).sum().backward()
    pairs = [(name, p.grad, q.grad) for (name, p), (_, q) in zip(module.named_parameters(), wide.named_parameters())]
    pairs.append(("input", x.grad, x_wide.grad))
    relative, ulps, bitwise = {}, {}, True
    for name, got, wide_grad in pairs:
        assert got.dtype == dtype, name
        relative[name] = ((got.float() - wide_grad).norm() / wide_grad.norm()).item()
        narrowed = wide_grad.to(dtype).float()
        ulp = 2.0 ** (torch.floor(torch.log2(wide_grad.abs().max())) - {torch.float16: 10, torch.bfloat16: 7}[dtype])
        ulps[name] = ((got.float() - narrowed).abs().max() / ulp).item()
        bitwise &= torch.equal(got.float(), narrowed)
    weights = [name for name, _, _ in pairs if name != "input"]
    return dict(
        rel_median=statistics.median(relative[n] for n in weights), rel_max=max(relative[n] for n in weights),
        ulps_max=max(ulps[n] for n in weights), input_rel=relative["input"], input_ulps=ulps["input"],
        bitwise=bitwise, finite=all(torch.isfinite(g).all().item() for _, g, _ in pairs),
    )


results = {}
for name in args.nets.split(","):
    base = build(name)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        module = copy.deepcopy(base).to(dtype)
        wide = copy.deepcopy(module).float()  # the same half weights, widened
        try:
            row = forward_time(module, wide, dtype) if args.what == "time" else gradient_errors(module, wide, dtype)
        except Exception as error:  # noqa: BLE001 - a release without the half kernel: reported
            row = dict(error=repr(error)[:200])
        results[f"{name} {dtype_name}"] = row
        print(name, dtype_name, {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
if args.out:
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)
