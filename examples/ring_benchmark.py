"""Ring attention on P GPUs against one GPU: correctness, memory, largest N, time, zigzag against contiguous.

    torchrun --nproc_per_node 2 examples/ring_benchmark.py --out figures/gpu/ring-2xh200.json
    python examples/ring_benchmark.py --plot figures/gpu/ring-2xh200.json      # the PNG beside it
    torchrun --nproc_per_node 2 examples/ring_benchmark.py --smoke --out /tmp/ring.json   # CPU, gloo

Every rank runs every section; rank 0 writes the JSON after each section, so a run cut short keeps
what it measured. Sections, each skipped once ``--budget`` seconds are spent:

1. ``link``: bytes per second one way on the ring (a batch_isend_irecv to r+1 and from r−1).
2. ``correctness``: each layout, causal and not, forward and backward, against one GPU running
   ``flashref.gpu.attention`` on the whole sequence, both compared with an fp32 reference.
3. ``timing``: forward+backward wall time (max over ranks) of the ring, of the same ring with its
   communication skipped (compute only; ``exposed = ring − compute``), and of one GPU on the whole N.
4. ``memory``: peak bytes allocated per GPU for forward+backward, ring against one GPU at the same N.
5. ``largest``: doubling N until it no longer fits (one GPU, then the ring), with a refinement step.

Works for any number of GPUs (``--nproc_per_node P``); on CPUs (``--smoke``) it runs gloo and the
torch pair attention at toy sizes, to check the script before spending GPU time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from flashref import distributed as fd

T0 = time.monotonic()


def log(msg):
    if RANK == 0:
        print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def left(args):
    return args.budget - (time.monotonic() - T0)


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def max_over_ranks(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def all_ok(flag: bool) -> bool:
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def single(q, k, v, causal):
    """One device, the whole sequence: flashref's Triton kernels on CUDA, torch attention on CPU."""
    if DEV.type == "cuda":
        from flashref import gpu

        return gpu.attention(q, k, v, causal=causal)
    S = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        N = q.shape[-2]
        S = S.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(S, -1) @ v


def reference(q, k, v, do, causal):
    """fp32 attention with its gradients (autograd), the oracle for both one GPU and the ring."""
    q, k, v = (x.detach().float().requires_grad_(True) for x in (q, k, v))
    S = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        N = q.shape[-2]
        S = S.masked_fill(~torch.ones(N, N, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    o = torch.softmax(S, -1) @ v
    o.backward(do.float())
    return [o.detach(), q.grad, k.grad, v.grad]


def fwd_bwd(fn, q, k, v, do):
    o = fn(q, k, v)
    o.backward(do)
    return o


def make(shape, dtype, seed, grad=True):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(shape, generator=g, device=DEV, dtype=dtype).requires_grad_(grad)


def time_it(fn, reps, warmup=1):
    for _ in range(warmup):
        fn()
    sync()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return max_over_ranks((time.perf_counter() - t) / reps)


# ---------------------------------------------------------------- sections

def link(args, res):
    nbytes = args.link_mib * 2**20
    send = torch.ones(nbytes // 2, dtype=torch.bfloat16 if DEV.type == "cuda" else torch.float16, device=DEV)
    recv = torch.empty_like(send)
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD

    def step():
        ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()

    t = time_it(step, reps=args.reps * 3, warmup=2)
    res["link"] = {"bytes": nbytes, "seconds": t, "bytes_per_s_one_way": nbytes / t}
    log(f"link: {nbytes / t / 1e9:.1f} GB/s one way per rank")


def correctness(args, res):
    B, H, N, d = 1, args.heads_check, args.n_check, args.d
    rows = []
    for causal in (False, True):
        q, k, v, do = (make((B, H, N, d), DTYPE, seed, grad=False) for seed in range(4))
        ref = reference(q, k, v, do, causal)
        qs, ks, vs = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        o1 = fwd_bwd(lambda a, b, c, causal=causal: single(a, b, c, causal), qs, ks, vs, do)
        one = [o1.detach(), qs.grad, ks.grad, vs.grad]
        err_one = [(a.float() - b).abs().max().item() for a, b in zip(one, ref)]
        for layout in fd.LAYOUTS:
            mine = [fd.shard(x, layout, RANK, WORLD).detach().requires_grad_(True) for x in (q, k, v)]
            o_r = fwd_bwd(lambda a, b, c, causal=causal, layout=layout: fd.ring_attention(a, b, c, causal=causal,
                                                                                         layout=layout), *mine,
                          fd.shard(do, layout, RANK, WORLD))
            got = [o_r.detach(), mine[0].grad, mine[1].grad, mine[2].grad]
            err_ring = [max_over_ranks((a.float() - fd.shard(b, layout, RANK, WORLD)).abs().max().item())
                        for a, b in zip(got, ref)]
            err_vs_one = [max_over_ranks((a.float() - fd.shard(b.float(), layout, RANK, WORLD)).abs().max().item())
                          for a, b in zip(got, one)]
            rows.append({"layout": layout, "causal": causal, "N": N, "B": B, "H": H, "d": d,
                         **{f"ring_err_{n}": e for n, e in zip(("o", "dq", "dk", "dv"), err_ring)},
                         **{f"one_gpu_err_{n}": e for n, e in zip(("o", "dq", "dk", "dv"), err_one)},
                         **{f"ring_vs_one_{n}": e for n, e in zip(("o", "dq", "dk", "dv"), err_vs_one)}})
            log(f"correctness {layout:10s} causal={causal!s:5s} ring err o {err_ring[0]:.1e} dq {err_ring[1]:.1e} "
                f"dk {err_ring[2]:.1e} dv {err_ring[3]:.1e} | one GPU o {err_one[0]:.1e} dq {err_one[1]:.1e}")
        del ref, one
    res["correctness"] = rows


def peak_of(fn):
    """Peak bytes allocated while ``fn`` runs (inputs it allocates included), or None on CPU."""
    if DEV.type != "cuda":
        fn()
        return None
    sync()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync()
    return torch.cuda.max_memory_allocated() - base


def run_single(B, H, N, d, causal):
    q, k, v, do = (make((B, H, N, d), DTYPE, s, grad=s < 3) for s in range(4))
    fwd_bwd(lambda a, b, c: single(a, b, c, causal), q, k, v, do)


def run_ring(B, H, N, d, causal, layout):
    n = N // WORLD
    q, k, v, do = (make((B, H, n, d), DTYPE, 10 * RANK + s, grad=s < 3) for s in range(4))
    fwd_bwd(lambda a, b, c: fd.ring_attention(a, b, c, causal=causal, layout=layout), q, k, v, do)


def timing(args, res):
    B, H, d = 1, args.heads, args.d
    rows = []
    for N in args.n_time:
        if left(args) < 30:
            log(f"timing: budget spent, stopping before N={N}")
            break
        n = N // WORLD
        one = [make((B, H, N, d), DTYPE, s, grad=s < 3) for s in range(4)]
        mine = [make((B, H, n, d), DTYPE, 10 * RANK + s, grad=s < 3) for s in range(4)]
        row = {"N": N, "n_per_rank": n, "B": B, "H": H, "d": d, "world_size": WORLD}
        for causal in (False, True):
            c = "causal" if causal else "full"
            def whole(causal=causal, one=one):
                return fwd_bwd(lambda a, b, x: single(a, b, x, causal), *one)

            row[f"one_gpu_{c}"] = time_it(whole, args.reps)
            for layout in (fd.LAYOUTS if causal else ("zigzag",)):
                def ring(causal=causal, layout=layout, mine=mine):
                    return fwd_bwd(lambda a, b, x: fd.ring_attention(a, b, x, causal=causal, layout=layout), *mine)

                row[f"ring_{layout}_{c}"] = time_it(ring, args.reps)
                fd._SKIP_COMM = True
                try:
                    row[f"compute_{layout}_{c}"] = time_it(ring, args.reps)
                finally:
                    fd._SKIP_COMM = False
        rows.append(row)
        z = row["ring_zigzag_causal"]
        log(f"timing N={N}: one GPU causal {row['one_gpu_causal'] * 1e3:.1f} ms, ring zigzag {z * 1e3:.1f} ms "
            f"(compute {row['compute_zigzag_causal'] * 1e3:.1f}), "
            f"contiguous {row['ring_contiguous_causal'] * 1e3:.1f} ms;"
            f" full: one {row['one_gpu_full'] * 1e3:.1f}, ring {row['ring_zigzag_full'] * 1e3:.1f} "
            f"(compute {row['compute_zigzag_full'] * 1e3:.1f})")
    res["timing"] = rows


def memory(args, res):
    B, H, N, d = 1, args.heads, args.n_mem, args.d
    one = peak_of(lambda: run_single(B, H, N, d, True))
    ring = max_over_ranks(peak_of(lambda: run_ring(B, H, N, d, True, "zigzag")) or 0)
    res["memory"] = {"N": N, "B": B, "H": H, "d": d, "causal": True, "layout": "zigzag",
                     "one_gpu_peak_bytes": one, "ring_peak_bytes_per_gpu": ring or None,
                     "ratio": (ring / one) if one else None}
    if one:
        log(f"memory N={N}: one GPU {one / 2**30:.2f} GiB, ring {ring / 2**30:.2f} GiB per GPU ({ring / one:.2f}x)")


def largest(args, res):
    """Double N from ``--n-start`` while it fits, then try 1.5x the last fit; one GPU, then the ring."""
    B, H, d = args.big_batch, args.big_heads, args.d
    total = torch.cuda.get_device_properties(DEV).total_memory if DEV.type == "cuda" else None
    out = {"B": B, "H": H, "d": d, "causal": True, "layout": "zigzag", "gpu_bytes": total}
    unit = 2 * WORLD * 1024 if DEV.type == "cuda" else 2 * WORLD
    for who, fn in (("one_gpu", lambda N: run_single(B, H, N, d, True)),
                    ("ring", lambda N: run_ring(B, H, N, d, True, "zigzag"))):
        N, best, per_token, tries, refining = args.n_start, None, None, [], False
        while True:
            if left(args) < 20:
                log(f"largest {who}: budget spent")
                break
            if N > args.n_max:
                log(f"largest {who}: stopping at the cap N <= {args.n_max}")
                break
            # predicted peak from the last fit (memory is linear in N): skip a size that cannot fit, so no
            # rank ever runs out of memory in the middle of a ring step while the others wait for it
            fits = per_token is None or total is None or per_token * N < 0.98 * total
            ok = False
            if all_ok(fits):
                t = time.perf_counter()
                try:
                    peak = peak_of(lambda fn=fn, N=N: fn(N))
                    ok = True
                except torch.OutOfMemoryError:
                    peak = None
                if DEV.type == "cuda":
                    torch.cuda.empty_cache()
                ok = all_ok(ok)
                tries.append({"N": N, "fits": ok, "peak_bytes": peak, "seconds": time.perf_counter() - t})
                log(f"largest {who}: N={N} {'fits' if ok else 'out of memory'}"
                    + (f", peak {peak / 2**30:.1f} GiB" if ok and peak else ""))
            else:
                tries.append({"N": N, "fits": False, "predicted_bytes": per_token * N, "skipped": True})
                log(f"largest {who}: N={N} predicted {per_token * N / 2**30:.1f} GiB > GPU memory, not tried")
            if ok:
                best = N
                per_token = max_over_ranks(peak / N) if peak else None
            if refining:
                break
            if ok:
                N *= 2
                continue
            if best is None:
                break
            refining, N = True, (best * 3 // 2) // unit * unit  # once, between the last fit and the failure
            if N <= best:
                break
        out[who] = {"largest_N": best, "tries": tries,
                    "predicted_largest_N": int(0.98 * total / per_token) if total and per_token else None}
    res["largest"] = out
    if out["one_gpu"]["largest_N"] and out["ring"]["largest_N"]:
        log(f"largest N: one GPU {out['one_gpu']['largest_N']}, ring of {WORLD} {out['ring']['largest_N']}")


# ---------------------------------------------------------------- plot

def plot(res):
    import matplotlib

    matplotlib.use("Agg")
    from flashref.plots import COLORS, figure

    P = res["env"]["world_size"]
    gpu = res["env"]["device"]
    tm = res["timing"]
    t0 = tm[0]
    # the backend and dtype the run recorded (a CPU smoke run is gloo and float32, not NCCL and bf16)
    backend = res["env"].get("backend", "?").upper()
    dtype = res["env"].get("dtype", "?").removeprefix("torch.").replace("bfloat16", "bf16")
    fig, ax = figure(f"Ring attention on {P}x {gpu} ({backend}) against one GPU: B={t0['B']}, H={t0['H']}, "
                     f"d={t0['d']}, {dtype}, forward+backward", ncols=2, nrows=2, width=11, height=7.5)
    Ns = [r["N"] for r in tm]
    a = ax[0, 0]
    for key, label, style in (("one_gpu_causal", "one GPU, whole N", dict(color=COLORS["triton"], marker="o")),
                              ("ring_zigzag_causal", f"ring of {P}, zigzag",
                               dict(color=COLORS["flashref"], marker="s")),
                              ("compute_zigzag_causal", f"ring of {P}, compute only",
                               dict(color=COLORS["flashref"], marker="s", ls="--")),
                              ("ring_contiguous_causal", f"ring of {P}, contiguous",
                               dict(color=COLORS["standard"], marker="^"))):
        a.plot(Ns, [r[key] * 1e3 for r in tm], label=label, **style)
    a.plot(Ns, [r["one_gpu_causal"] / P * 1e3 for r in tm], color="gray", ls=":", label=f"one GPU / {P} (ideal)")
    a.set(xscale="log", yscale="log", xlabel="sequence length N", ylabel="ms", title="causal: time")
    a.legend()
    a = ax[0, 1]
    for c, m in (("causal", "o"), ("full", "s")):
        share = [(r[f"ring_zigzag_{c}"] - r[f"compute_zigzag_{c}"]) / r[f"ring_zigzag_{c}"] * 100 for r in tm]
        a.plot([r["n_per_rank"] for r in tm], share, marker=m, label=f"zigzag, {c}")
    if res.get("overlap_min_tokens"):
        a.axvline(res["overlap_min_tokens"], color="gray", ls=":", label="predicted overlap threshold (non-causal)")
    a.set(xscale="log", xlabel="tokens per GPU N/P", ylabel="% of ring time",
          title="exposed communication = ring − compute only")
    a.legend()
    a = ax[1, 0]
    sp = {lay: [r["ring_contiguous_causal"] / r[f"ring_{lay}_causal"] for r in tm] for lay in ("zigzag", "striped")}
    for lay, m in (("zigzag", "s"), ("striped", "D")):
        a.plot(Ns, sp[lay], marker=m, label=lay)
    a.axhline(1.0, color="gray", lw=0.8)
    a.axhline((2 * P - 1) / P, color="gray", ls=":", label=f"bound (2P−1)/P = {(2 * P - 1) / P:.2f}")
    a.set(xscale="log", xlabel="sequence length N", ylabel="speedup over contiguous", title="causal: load balance")
    a.legend()
    a = ax[1, 1]
    mem, big = res.get("memory"), res.get("largest") or {}
    for who, label, color in (("one_gpu", "one GPU, whole N", COLORS["triton"]),
                              ("ring", f"ring of {P}, per GPU", COLORS["flashref"])):
        tries = [t for t in big.get(who, {}).get("tries", []) if t.get("fits") and t.get("peak_bytes")]
        if tries:
            a.plot([t["N"] for t in tries], [t["peak_bytes"] / 2**30 for t in tries], marker="o", color=color,
                   label=f"{label}: largest N {big[who]['largest_N']:,}")
    if big.get("gpu_bytes"):
        a.axhline(big["gpu_bytes"] / 2**30, color="gray", ls=":", label="GPU memory")
    if mem and mem.get("one_gpu_peak_bytes"):
        a.set_title(f"peak memory, fwd+bwd causal, B={big.get('B')}, H={big.get('H')}\n"
                    f"(at B={mem['B']}, H={mem['H']}, N={mem['N']}: ring/one GPU = {mem['ratio']:.2f})")
    a.set(xscale="log", xlabel="sequence length N", ylabel="GiB")
    a.legend()
    return fig


# ---------------------------------------------------------------- main

# the sections --sections may name, in the order a full run takes them
SECTIONS = {"link": link, "correctness": correctness, "timing": timing, "memory": memory, "largest": largest}


def main():
    global RANK, WORLD, DEV, DTYPE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="only draw the PNG of a recorded JSON")
    ap.add_argument("--smoke", action="store_true", help="CPU, gloo, toy sizes")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; later sections are skipped past it")
    ap.add_argument("--sections", default="link,correctness,timing,memory,largest")
    args = ap.parse_args()
    sections = args.sections.split(",")
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown:
        ap.error(f"--sections: {unknown} are not among {', '.join(SECTIONS)}")
    if args.plot:
        try:
            res = json.loads(args.plot.read_text())
            fig = plot(res)
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--plot: {args.plot} is not a recorded run with a timing section ({type(e).__name__}: {e})")
        fig.tight_layout()
        fig.savefig(args.plot.with_suffix(".png"))
        print(f"wrote {args.plot.with_suffix('.png')}")
        return
    if not args.smoke and not torch.cuda.is_available():
        # the GPU sizes would run as toy sizes on a CPU and could overwrite a recorded GPU run at --out
        ap.error("no CUDA GPU here: pass --smoke for the CPU (gloo) toy run")
    cuda = torch.cuda.is_available() and not args.smoke
    RANK, WORLD = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    DEV = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    DTYPE = torch.bfloat16 if cuda else torch.float32
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=120),
                            **({"device_id": DEV} if cuda else {}))
    args.d = 128 if cuda else 16
    args.reps = 3 if cuda else 1
    args.link_mib = 256 if cuda else 4
    args.n_check, args.heads_check = (8192, 8) if cuda else (8 * WORLD, 2)
    args.heads = 32 if cuda else 2
    args.n_time = [4096, 8192, 16384, 32768, 65536] if cuda else [4 * WORLD, 8 * WORLD]
    args.n_mem = 65536 if cuda else 8 * WORLD
    args.big_batch, args.big_heads = (16, 64) if cuda else (1, 2)
    args.n_start = 8192 if cuda else 4 * WORLD
    args.n_max = 2**22 if cuda else 32 * WORLD  # the CPU has no memory to run out of here: stop somewhere
    res = {"env": {"world_size": WORLD, "backend": dist.get_backend(),
                   "device": torch.cuda.get_device_name(DEV) if cuda else "CPU",
                   "torch": torch.__version__, "dtype": str(DTYPE), "argv": sys.argv[1:]}}
    if cuda and RANK == 0:
        try:
            res["env"]["topology"] = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                                                    timeout=20).stdout
        except Exception as e:  # noqa: BLE001
            res["env"]["topology"] = f"nvidia-smi topo failed: {e}"
        try:
            import triton

            res["env"]["triton"] = triton.__version__
        except ImportError:
            pass
    for name in sections:
        if left(args) < 10:
            log(f"{name}: budget spent, skipped")
            continue
        t = time.monotonic()
        SECTIONS[name](args, res)
        res.setdefault("section_seconds", {})[name] = time.monotonic() - t
        if "link" in res and cuda:
            from flashref.iomodel import ring as iom

            res["overlap_min_tokens"] = iom.min_tokens_per_device(
                "H200", link_bandwidth=res["link"]["bytes_per_s_one_way"])
        if RANK == 0 and args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(res, indent=1))
    log(f"done in {time.monotonic() - T0:.0f} s")
    dist.barrier()
    dist.destroy_process_group()


RANK, WORLD, DEV, DTYPE = 0, 1, torch.device("cpu"), torch.float32

if __name__ == "__main__":
    main()
