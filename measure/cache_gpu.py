"""Cold versus baked compile caches on a real GPU, with `rocmfleet cache bake`'s own layout and layer.

Not a test: a measurement for issue 15, run on a machine with a GPU, PyTorch and Triton::

    python3 measure/cache_gpu.py --runs 5 --out results/

Each run is a fresh Python process (no in-memory cache survives) that points the compilers at the
directories of :data:`rocmfleet.domain.cachedirs.LAYOUT` (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``,
``VLLM_CACHE_ROOT``, ``AITER_JIT_DIR``; ``TRITON_CACHE_AUTOTUNING=1`` as vLLM sets it) and then

* compiles and runs a set of Triton kernels (elementwise, fused softmax, RMSNorm, SiLU-and-mul, and
  a matmul auto-tuned over several configurations), each for fp16 and bf16;
* runs a ``torch.compile``'d 4-layer Llama-style decoder block (RMSNorm, rotary attention, SwiGLU)
  to its first output, then once more (steady state).

*cold*: every run starts with empty directories. *baked*: the directories one cold run filled are
packed by ``rocmfleet/scripts/cache-bake.sh pack`` -- the very step that makes the image layer
(``ADD cache-layer.tar /``) -- and each run unpacks that archive under a new, different root, as a
container sees the layer, then points the variables at the layout's paths below that root.
Files written into the restored directories during a baked run are counted: a compiler that
found its cache writes nothing new.

Prints a table (median and min..max of each phase) and writes ``cache_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rocmfleet.domain import cachedirs  # noqa: E402 - stdlib only; the device has no rocmfleet deps

SCRIPT = ROOT / "rocmfleet" / "scripts" / "cache-bake.sh"
PHASES = ("import_s", "triton_s", "compile_first_s", "steady_s", "process_s")


def _child() -> None:
    """One measured run in this process, the cache variables already set by the parent."""
    t0 = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    t_import = time.perf_counter()

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    @triton.jit
    def softmax(x, out, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + offs, mask=offs < cols, other=-float("inf")).to(tl.float32)
        v = tl.exp(v - tl.max(v, 0))
        tl.store(out + row * cols + offs, (v / tl.sum(v, 0)).to(out.dtype.element_ty), mask=offs < cols)

    @triton.jit
    def rmsnorm(x, w, out, cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(v * v, 0) / cols + eps)
        g = tl.load(w + offs, mask=offs < cols, other=0.0).to(tl.float32)
        tl.store(out + row * cols + offs, (v * r * g).to(out.dtype.element_ty), mask=offs < cols)

    @triton.jit
    def silu_mul(x, out, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        a = tl.load(x + row * 2 * cols + offs, mask=offs < cols).to(tl.float32)
        b = tl.load(x + row * 2 * cols + cols + offs, mask=offs < cols).to(tl.float32)
        tl.store(out + row * cols + offs, (a * tl.sigmoid(a) * b).to(out.dtype.element_ty), mask=offs < cols)

    configs = [
        triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in ((64, 64, 32, 4, 3), (128, 64, 32, 4, 3), (64, 128, 64, 4, 3), (128, 128, 64, 8, 3))
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm, rn, rk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K))
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N))
            acc += tl.dot(x, y)
        tl.store(
            c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N)
        )

    dev = "cuda"
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(4096, device=dev, dtype=dtype)
        out = torch.empty_like(x)
        add[(4,)](x, x, out, x.numel(), BLOCK=1024)
        m = torch.randn(64, 1000, device=dev, dtype=dtype)
        o = torch.empty_like(m)
        softmax[(64,)](m, o, 1000, BLOCK=1024)
        w = torch.ones(1000, device=dev, dtype=dtype)
        rmsnorm[(64,)](m, w, o, 1000, 1e-6, BLOCK=1024)
        g = torch.randn(64, 2000, device=dev, dtype=dtype)
        silu_mul[(64,)](g, o, 1000, BLOCK=1024)
        a = torch.randn(512, 512, device=dev, dtype=dtype)
        c = torch.empty_like(a)
        matmul[lambda meta: (triton.cdiv(512, meta["BM"]), triton.cdiv(512, meta["BN"]))](a, a, c, 512, 512, 512)
    torch.cuda.synchronize()
    t_triton = time.perf_counter()

    class Block(torch.nn.Module):
        def __init__(self, dim: int = 2048, heads: int = 16, hidden: int = 5632) -> None:
            super().__init__()
            self.heads, self.hd = heads, dim // heads
            self.n1, self.n2 = torch.nn.RMSNorm(dim), torch.nn.RMSNorm(dim)
            self.qkv, self.o = torch.nn.Linear(dim, 3 * dim, bias=False), torch.nn.Linear(dim, dim, bias=False)
            self.up = torch.nn.Linear(dim, 2 * hidden, bias=False)
            self.down = torch.nn.Linear(hidden, dim, bias=False)

        def forward(self, x, cos, sin):
            b, t, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, self.hd).unbind(2)

            def rope(u):
                u1, u2 = u.chunk(2, -1)
                return torch.cat((u1 * cos - u2 * sin, u2 * cos + u1 * sin), -1)

            q, k, v = (u.transpose(1, 2) for u in (rope(q), rope(k), v))
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(att.transpose(1, 2).reshape(b, t, d))
            gate, up = self.up(self.n2(x)).chunk(2, -1)
            return x + self.down(torch.nn.functional.silu(gate) * up)

    model = torch.nn.Sequential(*[Block() for _ in range(4)]).to(dev, torch.bfloat16).eval()
    layers = list(model)

    def forward(x, cos, sin):
        for layer in layers:
            x = layer(x, cos, sin)
        return x

    compiled = torch.compile(forward)
    x = torch.randn(1, 128, 2048, device=dev, dtype=torch.bfloat16)
    ang = torch.arange(128, device=dev)[:, None] * torch.arange(64, device=dev)[None, :] * 1e-3
    cos, sin = ang.cos()[None, :, None, :].to(torch.bfloat16), ang.sin()[None, :, None, :].to(torch.bfloat16)
    t_c0 = time.perf_counter()
    with torch.no_grad():
        compiled(x, cos, sin)
        torch.cuda.synchronize()
        t_c1 = time.perf_counter()
        compiled(x, cos, sin)
        torch.cuda.synchronize()
    t_c2 = time.perf_counter()
    print(
        "RESULT "
        + json.dumps(
            {
                "import_s": t_import - t0,
                "triton_s": t_triton - t_import,
                "compile_first_s": t_c1 - t_c0,
                "steady_s": t_c2 - t_c1,
                "torch": torch.__version__,
                "triton": triton.__version__,
                "gpu": torch.cuda.get_device_name(),
            }
        ),
        flush=True,
    )


def _run(paths: dict[str, Path]) -> dict:
    """One child process with each layout variable pointing at ``paths[name]``; its timings."""
    env = {**os.environ, "TRITON_CACHE_AUTOTUNING": "1", "PYTHONUNBUFFERED": "1"}
    env.update({d.variable: str(paths[d.name]) for d in cachedirs.LAYOUT})
    for p in paths.values():
        p.mkdir(parents=True, exist_ok=True)
    start = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "child"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["process_s"] = wall
    result["new_files"] = sum(
        1 for p in paths.values() for f in p.rglob("*") if f.is_file() and f.stat().st_mtime >= start
    )
    result["files"] = sum(1 for p in paths.values() for f in p.rglob("*") if f.is_file())
    return result


def _summary(runs: list[dict]) -> dict:
    return {
        k: {
            "median": statistics.median(r[k] for r in runs),
            "min": min(r[k] for r in runs),
            "max": max(r[k] for r in runs),
        }
        for k in (*PHASES, "new_files", "files")
    }


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        _child()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=".", help="directory for cache_gpu.json")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="rfcache-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    cold = []
    for i in range(args.runs):
        bake_dir = work / f"cold{i}"  # the bake directory: one subdirectory per layout name
        cold.append(_run({d.name: bake_dir / d.name for d in cachedirs.LAYOUT}))
        print(f"cold  {i}: {json.dumps({k: round(cold[-1][k], 2) for k in PHASES})}", flush=True)

    layer = work / "cache-layer.tar"
    pairs = [f"{d.name}={d.path}" for d in cachedirs.LAYOUT]
    t0 = time.perf_counter()
    digest = subprocess.run(
        ["sh", str(SCRIPT), "pack", str(work / "cold0"), str(layer), *pairs], check=True, capture_output=True, text=True
    ).stdout.strip()
    pack_s = time.perf_counter() - t0
    listing = subprocess.run(
        ["sh", str(SCRIPT), "list", str(work / "cold0")], check=True, capture_output=True, text=True
    ).stdout
    per_cache: dict[str, dict[str, int]] = {}
    for line in listing.splitlines():
        size, path = line.split("\t", 1)
        if size == "checksum":
            continue
        entry = per_cache.setdefault(path.split("/", 1)[0], {"files": 0, "bytes": 0})
        entry["files"] += 1
        entry["bytes"] += int(size)
    print(f"layer {layer.stat().st_size} bytes, sha256 {digest}, packed in {pack_s:.2f} s: {per_cache}", flush=True)

    baked = []
    for i in range(args.runs):
        root = work / f"restored{i}"  # a different root each time: the image's "/"
        root.mkdir()
        subprocess.run(["tar", "-C", str(root), "-xf", str(layer)], check=True)
        baked.append(_run({d.name: root / d.path.lstrip("/") for d in cachedirs.LAYOUT}))
        print(f"baked {i}: {json.dumps({k: round(baked[-1][k], 2) for k in PHASES})}", flush=True)

    report = {
        "cold": cold,
        "baked": baked,
        "summary": {"cold": _summary(cold), "baked": _summary(baked)},
        "layer": {"bytes": layer.stat().st_size, "sha256": digest, "pack_s": pack_s, "caches": per_cache},
        "versions": {k: cold[0][k] for k in ("torch", "triton", "gpu")},
    }
    (out / "cache_gpu.json").write_text(json.dumps(report, indent=2))
    print(f"\n{'phase':<16}{'cold median (min..max)':>30}{'baked median (min..max)':>30}{'cold/baked':>12}")
    for k in (*PHASES, "new_files"):
        c, b = report["summary"]["cold"][k], report["summary"]["baked"][k]
        ratio = f"{c['median'] / b['median']:.2f}" if b["median"] else "-"
        cells = [f"{s['median']:.2f} ({s['min']:.2f}..{s['max']:.2f})" for s in (c, b)]
        print(f"{k:<16}{cells[0]:>30}{cells[1]:>30}{ratio:>12}")
    print(f"versions: {report['versions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
