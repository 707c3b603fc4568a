"""Where fp16 runs out in the backward: flashref's kernels and PyTorch's SDPA backends against a float64 reference,
on gradients that fit fp16 but whose dS = P∘(dP − D) does not.

    python examples/fp16_backward_range.py --out figures/gpu/h200-fp16-backward-range.json

FlashAttention-2's Algorithm 2 forms dS_i^(j) on chip (l.14) and multiplies it into dQ_i and dK_j (l.15-16); its
CUDA kernels round dS to the inputs' dtype before the softmax scale is applied, so in fp16 an entry past 65504 is
inf even where τ·dS, and the gradients, fit. This builds such a call (values ±200 in alternate rows of V, gradients
of 300 or 1000 flowing back, scale 0.01, where dP = dO Vᵀ reaches ±10^7) and counts the non-finite entries of dq, dk
and dv each backend returns, beside the largest entry of the float64 gradients (all below 65504). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHAPE = (1, 2, 256)  # B, H, N: N a multiple of kernel 3's tiles, so gpu.attention runs kernel 3 at d = 64 and 128
HEAD_DIMS = (64, 128)
GRADS = (300.0, 1000.0)  # the gradient flowing back into every output entry
SCALE = 0.01


def inputs(d, grad, device):
    """q, k (standard normal), v (+200 in even rows, -200 in odd ones) and dO (``grad`` everywhere), fp16."""
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    B, H, N = SHAPE
    q, k = (torch.randn(B, H, N, d, device=device, generator=g).half() for _ in range(2))
    v = torch.full((B, H, N, d), 200.0, device=device)
    v[:, :, 1::2] = -200.0
    return q, k, v.half(), torch.full((B, H, N, d), grad, device=device).half()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        ap.error("runs the kernels on a CUDA GPU, and none is here (the recorded run: "
                 "figures/gpu/h200-fp16-backward-range.json)")
    from flashref import gpu
    from flashref.gpu import kernels

    def sdpa(backend):
        def run(q, k, v):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=SCALE)
        return run

    backends = {"flashref": lambda q, k, v: gpu.attention(q, k, v, scale=SCALE),
                "flashref2": lambda q, k, v: gpu.attention(q, k, v, scale=SCALE, config=kernels.Config()),
                "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
                "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION)}
    rows = []
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               shape=dict(zip("BHN", SHAPE)), scale=SCALE, rows=rows)
    for d in HEAD_DIMS:
        for grad in GRADS:
            q, k, v, do = inputs(d, grad, "cuda")
            ref = [t.double().requires_grad_() for t in (q, k, v)]
            torch.nn.functional.scaled_dot_product_attention(*ref, scale=SCALE).backward(do.double())
            row = dict(d=d, grad=grad, flashref_kernel=str(gpu.which_kernel(q, k, v)),
                       reference_max={n: float(t.grad.abs().max()) for n, t in zip(("dq", "dk", "dv"), ref)},
                       nonfinite={})
            for name, fn in backends.items():
                xs = [t.clone().requires_grad_() for t in (q, k, v)]
                fn(*xs).backward(do)
                grads = dict(zip(("dq", "dk", "dv"), (t.grad for t in xs)))
                row["nonfinite"][name] = {n: int((~torch.isfinite(g)).sum()) for n, g in grads.items()}
            rows.append(row)
            print(f"d={d:3d} dO={grad:6.0f} largest |dq| {row['reference_max']['dq']:8.0f}  non-finite dq: "
                  + "  ".join(f"{n} {c['dq']}" for n, c in row["nonfinite"].items()), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
