"""A decoding step with grouped-query attention on a GPU: the packed and unpacked schedules' cache traffic in time.

    python examples/gqa_decode.py --out figures/gpu/h200-gqa-decode.json

One step of a layer shaped like Llama-3-8B's (32 query heads sharing 8 K/V heads, d = 128, fp16, one query a
sequence) against caches of 8192 to 131072 tokens, for 1 and 8 sequences. ``flashref.decoding`` counts what the two
schedules move: packed (``gqa_packing=True``), each K/V head's cache is read once; unpacked, once for each of the g = 4
query heads that share it. This times, with ``triton.testing.do_bench`` (which flushes the L2 between calls):

* ``expanded``: SDPA's flash backend on K and V repeated to the 32 query heads beforehand (not timed), so that each
  query head's cache is its own memory: the unpacked schedule's traffic, with nothing for the L2 to share;
* ``sdpa_gqa/<backend>``: SDPA with ``enable_gqa=True`` on each backend that takes it;
* ``flashref``: ``flashref.gpu.attention`` with ``enable_gqa=True``, one program per query head and row block (the
  unpacked schedule; the g programs of a group read the same K/V tiles, which the L2 can serve), without splitting
  the keys;
* ``flashref_decode``: ``flashref.gpu.decode``, split-KV decoding with packed GQA (``flashref/gpu/splitkv.py``), its
  number of splits chosen for the GPU's SMs.

Beside each time it records the closed form's bytes for both schedules (``iomodel.predict("decoding", ...)``, one
split), so that a time reads as a bandwidth, and each output's largest difference from the expanded call's. Each call is
timed twice: as a user makes it (``ms``), and its kernels alone, replayed from a CUDA graph (``ms_graph``). Needs a
CUDA GPU and Triton.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HQ, HKV, D = 32, 8, 128  # Llama-3-8B's attention: g = 4 query heads a K/V head
BATCHES = (1, 8)
CACHES = (8192, 32768, 131072)


def closed_form_bytes(B: int, N: int) -> dict:
    """The bytes of one step for both schedules, from flashref's closed form (fp16, one split)."""
    from flashref import iomodel

    out = {}
    for packing in (False, True):
        p = iomodel.predict("decoding", "forward", Nq=1, Nk=N, d=D, heads=B * HQ, kv_heads=B * HKV, enable_gqa=True,
                            gqa_packing=packing, num_splits=1, dtype_bytes=2)
        out["packed" if packing else "unpacked"] = p.bytes
    return out


def time_step(fn) -> float:
    """Median milliseconds of ``fn()``, the L2 flushed before each call."""
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def time_graph(fn) -> float:
    """Median milliseconds of ``fn``'s kernels alone: ``fn`` captured in a CUDA graph, whose replay has no host work
    (Python's checks, the launches), timed as :func:`time_step` times a call. A decoding step's kernels take tens of
    microseconds, as long as the host takes to launch them, so a call's time can hide what its kernels take."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as graph capture asks
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_step(graph.replay)


def calls(q, k, v, k_rep, v_rep, backends) -> dict:
    """name -> (SDPA backend or None, the call), each bound to this shape's tensors."""
    import torch

    from flashref import gpu

    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = {"expanded": (backends["flash"], lambda: sdpa(q, k_rep, v_rep))}
    for name, backend in backends.items():
        out[f"sdpa_gqa/{name}"] = (backend, lambda: sdpa(q, k, v, enable_gqa=True))
    out["flashref"] = (None, lambda: gpu.attention(q, k, v, enable_gqa=True))
    out["flashref_decode"] = (None, lambda: gpu.decode(q, k, v))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        ap.error("times the kernels on a CUDA GPU, and none is here (the recorded run: "
                 "figures/gpu/h200-gqa-decode.json)")
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION}
    rows = []
    for B in BATCHES:
        for N in CACHES:
            g = torch.Generator(device="cuda").manual_seed(0)
            q = torch.randn(B, HQ, 1, D, device="cuda", generator=g).half()
            k, v = (torch.randn(B, HKV, N, D, device="cuda", generator=g).half() for _ in range(2))
            k_rep, v_rep = (x.repeat_interleave(HQ // HKV, dim=1) for x in (k, v))  # each query head its own copy
            with sdpa_kernel(backends["flash"]):
                ref = torch.nn.functional.scaled_dot_product_attention(q, k_rep, v_rep)
            row = {"B": B, "Hq": HQ, "Hkv": HKV, "N": N, "d": D, "bytes": closed_form_bytes(B, N), "ms": {},
                   "ms_graph": {}, "max_abs_diff": {}, "errors": {}}
            for name, (backend, fn) in calls(q, k, v, k_rep, v_rep, backends).items():
                try:
                    if backend is None:
                        out, ms, ms_graph = fn(), time_step(fn), time_graph(fn)
                    else:
                        with sdpa_kernel(backend):
                            out, ms, ms_graph = fn(), time_step(fn), time_graph(fn)
                except RuntimeError as e:  # a backend that does not take this call says so; recorded, not fatal
                    row["errors"][name] = str(e).splitlines()[0][:200]
                    continue
                row["ms"][name], row["ms_graph"][name] = ms, ms_graph
                row["max_abs_diff"][name] = float((out.float() - ref.float()).abs().max())
            rows.append(row)
            times = "  ".join(f"{n} {t:.3f} ms ({row['ms_graph'][n]:.3f})" for n, t in row["ms"].items())
            print(f"B={B} N={N}: {times}", flush=True)
            del k_rep, v_rep
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": __import__("triton").__version__, "dtype": "float16",
            "timing": "triton.testing.do_bench, median, L2 flushed before each call; ms: the call as a user makes "
                      "it, ms_graph: its kernels alone, replayed from a CUDA graph"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
