"""Ring attention with flashref on several processes: one shard of the sequence per rank.

    torchrun --nproc_per_node 2 examples/ring_attention.py              # CPUs: gloo, float64
    torchrun --nproc_per_node 2 examples/ring_attention.py --cuda       # GPUs: NCCL, bf16, Triton

Every rank builds the same full q, k, v (same seed), keeps its zigzag shard, runs
``flashref.distributed.ring_attention`` forward and backward, and checks its shard of the output and
of the gradients against one process's attention of the whole sequence.
"""

import argparse
import os

import torch
import torch.distributed as dist

from flashref import distributed as fd


def full_attention(q, k, v, causal):
    S = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        N = q.shape[-2]
        S = S.masked_fill(~torch.ones(N, N, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return torch.softmax(S, dim=-1) @ v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", action="store_true", help="NCCL and flashref's Triton kernels (bf16)")
    ap.add_argument("--layout", default="zigzag", choices=fd.LAYOUTS)
    ap.add_argument("--seq", type=int, default=1024, help="full sequence length N")
    args = ap.parse_args()
    if args.seq < 1:
        ap.error(f"--seq: expected a positive sequence length, got {args.seq}")
    if args.cuda and not torch.cuda.is_available():
        ap.error("--cuda: no CUDA GPU here; without --cuda it runs on the CPU (gloo, float64)")
    if args.cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if args.cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device, dtype = ("cuda", torch.bfloat16) if args.cuda else ("cpu", torch.float64)

    torch.manual_seed(0)  # the same full tensors on every rank
    B, H, N, d = 1, 4, args.seq, 64
    q, k, v, do = (torch.randn(B, H, N, d, device=device, dtype=dtype) for _ in range(4))

    # this rank's shard: chunks r and 2P-1-r of 2P (zigzag), so every rank does the same causal work
    q_r, k_r, v_r = (fd.shard(x, args.layout, rank, world).requires_grad_() for x in (q, k, v))
    o_r = fd.ring_attention(q_r, k_r, v_r, causal=True, layout=args.layout)
    o_r.backward(fd.shard(do, args.layout, rank, world))

    # one process, the whole sequence, in float32 or float64
    q1, k1, v1 = (x.double().requires_grad_() for x in (q, k, v))
    o1 = full_attention(q1, k1, v1, causal=True)
    o1.backward(do.double())
    errs = {name: (mine.double() - fd.shard(ref, args.layout, rank, world)).abs().max().item()
            for name, mine, ref in (("o", o_r, o1), ("dq", q_r.grad, q1.grad), ("dk", k_r.grad, k1.grad),
                                    ("dv", v_r.grad, v1.grad))}
    print(f"rank {rank}/{world}: {args.layout} shard of {o_r.shape[-2]} tokens; max error against one process: "
          + ", ".join(f"{n} {e:.1e}" for n, e in errs.items()) + f"; collectives {fd.collective_counts()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
