"""Ring attention on ``torch.distributed``: each rank holds one shard of the sequence, with autograd.

``ring_attention(q, k, v, *, group=None, causal=False, layout="zigzag", scale=None)`` is
:mod:`flashref.ring` on real processes. Rank r keeps its query shard; K/V shards go round the ring
(rank r sends to r+1 and receives from r−1) while the current one is computed: at each step the
exchange of the *next* K/V shard is started with ``batch_isend_irecv`` before the attention of the
current pair, and waited for after it. Partial results are merged with the log-sum-exp rule. The
backward (a ``torch.autograd.Function``) runs the ring again with the final output and LSE; dQ
stays home, the dK/dV accumulators (fp32) travel with their K/V and take one more hop home.

Per block pair, where the attention of one (query shard, K/V shard) pair is computed:

* on CUDA tensors (NCCL): flashref's Triton FlashAttention-2 kernels, through ``flashref.gpu``:
  ``gpu.forward`` returns the output *and* its log-sum-exp, which the merge needs; the backward
  kernel is called with the final (merged) LSE, so it returns the pair's share of dQ, dK, dV;
* on CPU tensors (gloo): a small torch implementation here (:func:`block_forward`,
  :func:`block_backward`), because the torch front ``flashref.functional`` returns only the
  output, not the LSE. It is plain softmax attention in float64 (float32 for other dtypes).

Both kernels take a top-left causal flag only, so each layout's causal pattern between shards is
cut into pieces that are either full or top-left causal (:func:`pieces`): contiguous skips later
shards; zigzag (chunks r and 2P−1−r) attends all queries to the first half of an earlier shard and
the second half of the queries to all of a later shard; striped is causal on the diagonal and
earlier shards, and "strictly causal" (query i sees keys j < i, i.e. ``q[1:]`` against ``k[:-1]``)
on later ones.

Before any ring step every rank all-gathers a small descriptor of its inputs (layout, causal,
scale, dtypes, shapes, device) with a timeout (:data:`CHECK_TIMEOUT_S`), so that bad input — an
unknown layout, shards of unequal or wrong length, a sequence too short for the layout, ranks that
disagree — raises the same clear error on every rank instead of a hang in a send/receive. The backward
all-gathers one flag the same way (a NaN or inf in ``do`` on any rank). An overflow (finite inputs, scores
or gradients past the dtype) is a ``FloatingPointError`` raised after the ring, on the ranks it reached. Those
two are checked on CPU tensors, and on a GPU under ``torch.autograd.detect_anomaly()`` only, as
``gpu.attention`` checks its inputs.

Shards have equal lengths here (a ring exchanges equal buffers): ``N`` must be a multiple of P
(of 2P for zigzag). ``shard(x, layout, rank, world_size)`` cuts a full sequence, ``unshard``
puts the shards back. :func:`collective_counts` counts what this process issued.

Example (``torchrun --nproc_per_node 2 examples/ring_attention.py``)::

    q_r, k_r, v_r = (shard(x, "zigzag", rank, world) for x in (q, k, v))
    o_r = ring_attention(q_r, k_r, v_r, causal=True, layout="zigzag")
    o_r.backward(do_r)          # q_r.grad, k_r.grad, v_r.grad: this rank's shards of the gradients
"""

from __future__ import annotations

import datetime
import math
import numbers
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from .problem import _scale, check_options
from .ring import LAYOUTS, min_length, pieces  # pieces: one home, shared with the simulator (numpy only)
from .ring import positions as _positions

__all__ = ["ring_attention", "shard", "unshard", "gather", "pieces", "block_forward", "block_backward",
           "collective_counts", "reset_counts", "CHECK_TIMEOUT_S", "LAYOUTS"]

#: run the Triton pair kernels on CPU tensors too (tests, under ``TRITON_INTERPRET=1``)
_FORCE_TRITON = False

#: skip every exchange (a compute-only timing run for the benchmark; the results are then wrong)
_SKIP_COMM = False

#: CUDA path: (batch x heads x tokens) per ring run; larger shards run one group of heads at a time
HEAD_GROUP_SIZE = 2**18

#: seconds every rank waits for the others at the input check before raising (never a hang)
CHECK_TIMEOUT_S = 30.0

_COUNTS: Counter = Counter()


def collective_counts() -> dict:
    """What this process issued since :func:`reset_counts`: ``all_gather`` (input checks: one per forward, one
    per backward where ``do`` is checked, :func:`_agree_do`), ``kv`` and
    ``dkv`` (ring exchanges, one ``batch_isend_irecv`` of a send and a receive each), ``p2p`` (ops)."""
    return dict(_COUNTS)


def reset_counts() -> None:
    _COUNTS.clear()


# ---------------------------------------------------------------- layouts

def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")


def _equal_shards(N: int, P: int, layout: str, name: str = "x") -> None:
    parts = 2 * P if layout == "zigzag" else P
    if N < min_length(layout, P):
        raise ValueError(f"{name}: sequence of length {N} is too short for the {layout} layout over {P} ranks "
                         f"(needs at least {min_length(layout, P)})")
    if N % parts:
        raise ValueError(f"{name}: ring_attention needs shards of equal length, so N={N} must be a multiple of "
                         f"{parts} ({'2 x ' if layout == 'zigzag' else ''}world_size) for the {layout} layout")


def _check_dim(x: torch.Tensor, dim, name: str) -> None:
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim: expected an axis of {name} (-{x.dim()} <= dim < {x.dim()}), got {dim!r}")


def shard(x: torch.Tensor, layout: str, rank: int, world_size: int, dim: int = -2) -> torch.Tensor:
    """Rank ``rank``'s shard of the full sequence ``x`` (sequence on axis ``dim``), for ``layout``."""
    _check_layout(layout)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    for name, val in (("world_size", world_size), ("rank", rank)):
        if isinstance(val, (bool, np.bool_)) or not isinstance(val, numbers.Integral):
            raise TypeError(f"{name}: expected an int, got {val!r}")
    rank, world_size = int(rank), int(world_size)
    if world_size < 1:  # checked first: with no ranks, no rank is valid, and the error would blame rank
        raise ValueError(f"world_size: expected a positive number of ranks, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: expected 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    _check_dim(x, dim, "x")
    N = x.shape[dim]
    _equal_shards(N, world_size, layout)
    idx = torch.as_tensor(_positions(N, world_size, layout)[rank], device=x.device)
    return x.index_select(dim, idx)


def unshard(shards, layout: str, dim: int = -2) -> torch.Tensor:
    """The full sequence from every rank's shard (a list in rank order): the inverse of :func:`shard`."""
    _check_layout(layout)
    if isinstance(shards, torch.Tensor):  # list() would cut it along its first axis into "shards": a wrong shape
        raise TypeError(f"shards: expected a list of tensors, one per rank, got one torch.Tensor of shape "
                        f"{tuple(shards.shape)} (wrap a single shard in a list)")
    try:
        shards = list(shards)
    except TypeError as e:
        raise TypeError(f"shards: expected a list of tensors, one per rank, got {type(shards).__name__}") from e
    P = len(shards)
    if P == 0:
        raise ValueError("shards: expected one tensor per rank, got none")
    for s in shards:
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"shards: expected torch.Tensors, got {type(s).__name__}")
        _check_dim(s, dim, "shards")
    shapes = [tuple(s.shape) for s in shards]
    others = {sh[:dim % len(sh)] + sh[dim % len(sh) + 1:] for sh in shapes}  # every axis but the sequence's
    if len(others) != 1:
        raise ValueError(f"shards: expected the same size on every axis but the sequence axis (dim={dim}), "
                         f"got shapes {shapes}")
    if len({s.device for s in shards}) != 1:
        raise ValueError(f"shards: expected tensors on one device, got {[str(s.device) for s in shards]}")
    if len({s.dtype for s in shards}) != 1:  # torch.cat would promote them silently: pieces of different calls
        raise TypeError(f"shards: expected one dtype, got {[str(s.dtype) for s in shards]}")
    lengths = [s.shape[dim] for s in shards]
    if len(set(lengths)) != 1:
        raise ValueError(f"shards: expected equal lengths, got {lengths}")
    N = sum(lengths)
    _equal_shards(N, P, layout, "shards")
    perm = torch.as_tensor([int(i) for p in _positions(N, P, layout) for i in p], device=shards[0].device)
    inverse = torch.argsort(perm)  # where each global token sits in the concatenation
    return torch.cat(shards, dim=dim).index_select(dim, inverse)


def gather(x: torch.Tensor, layout: str, group=None, dim: int = -2) -> torch.Tensor:
    """All-gather every rank's shard and :func:`unshard` them (no autograd), on every rank."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return unshard(parts, layout, dim)


# ---------------------------------------------------------------- one block pair

def _acc_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def block_forward(q, k, v, causal: bool, scale: float):
    """CPU pair attention: ``(o, lse)`` of ``softmax(scale q kᵀ) v`` (top-left causal), accumulation dtype.

    A row that sees no key has ``lse = -inf`` and ``o = 0``. ``o`` is divided by its own ℓ (FA2 Alg.1 l.12), not
    weighted by ``exp(S − lse)``: one float ``lse = m + log ℓ`` drops log ℓ where |m| is huge, and P would not sum
    to one.
    """
    acc = _acc_dtype(q)
    S = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale  # (..., nq, nk)
    if causal:
        S = S.masked_fill(~torch.ones(S.shape[-2:], dtype=torch.bool, device=S.device).tril(), float("-inf"))
    m = S.amax(dim=-1, keepdim=True)  # (..., nq, 1)
    P = torch.exp(S - m.masked_fill(torch.isinf(m), 0.0))  # a row with no key: m = -inf, P = 0
    l = P.sum(dim=-1, keepdim=True)  # noqa: E741 - the paper's ℓ
    o = (P @ v.to(acc)) / l.masked_fill(l == 0, 1.0)
    return o, (m + torch.log(l)).squeeze(-1)  # log 0 = -inf where no key


def block_backward(q, k, v, do, lse, delta, causal: bool, scale: float):
    """CPU pair backward with the *final* ``lse`` and ``delta = rowsum(dO ∘ O)``: this pair's dq, dk, dv."""
    acc = _acc_dtype(q)
    q, k, v, do = q.to(acc), k.to(acc), v.to(acc), do.to(acc)
    S = (q @ k.transpose(-1, -2)) * scale
    if causal:
        S = S.masked_fill(~torch.ones(S.shape[-2:], dtype=torch.bool, device=S.device).tril(), float("-inf"))
    P = torch.exp(S - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])  # (..., nq, nk), the final softmax
    dv = P.transpose(-1, -2) @ do
    dS = P * (do @ v.transpose(-1, -2) - delta[..., None]) * scale
    return dS @ k, dS.transpose(-1, -2) @ q, dv


def _triton_forward(q, k, v, causal, scale):
    from . import gpu

    o, L = gpu.forward(q, k, v, causal=causal, scale=scale)  # L: natural-log LSE, fp32
    return o, L


def _triton_backward(q, k, v, o, do, lse, causal, scale):
    from . import gpu

    # the kernels' backward from the merged log-sum-exp (no dropout across the ring)
    return gpu.backward(q, k, v, o, do, lse, causal=causal, scale=scale)


def _merge(o_acc, lse_acc, o_blk, lse_blk):
    """In place: fold a partial (o_blk, lse_blk) of the same rows into (o_acc, lse_acc), §3.1's rule.

    The two weights are divided by their own sum, not by e^{logaddexp}: o stays a convex combination of the parts
    even where the log-sum-exps have lost log ℓ to rounding (:func:`_require_lse_holds_log_l` refuses those)."""
    M = torch.maximum(lse_acc, lse_blk)
    M = M.masked_fill(torch.isinf(M), 0.0)  # both -inf (no key yet): weights e^{-inf} = 0, never NaN
    w_acc, w_blk = torch.exp(lse_acc - M), torch.exp(lse_blk - M)
    w = w_acc + w_blk
    o_acc.mul_((w_acc / w.masked_fill(w == 0, 1.0))[..., None])
    o_acc.add_((w_blk / w.masked_fill(w == 0, 1.0))[..., None] * o_blk.to(o_acc.dtype))
    lse_acc.copy_(M + torch.log(w))


# ---------------------------------------------------------------- the ring

@dataclass
class _Config:
    group: object
    rank: int
    P: int
    nxt: int  # global rank of r + 1
    prv: int  # global rank of r - 1
    layout: str
    causal: bool
    scale: float
    triton: bool
    comm: bool = True  # False: skip every exchange (a compute-only timing run; wrong numbers)
    device: object = None  # where the checks' all-gathers run (the backend's device)


def _exchange(cfg: _Config, send: torch.Tensor, recv: torch.Tensor, tag: str):
    """Start sending ``send`` to r+1 and receiving ``recv`` from r−1; returns the requests."""
    if not cfg.comm or cfg.P == 1:
        return None
    _COUNTS[tag] += 1
    _COUNTS["p2p"] += 2
    ops = [dist.P2POp(dist.isend, send, cfg.nxt, cfg.group), dist.P2POp(dist.irecv, recv, cfg.prv, cfg.group)]
    return dist.batch_isend_irecv(ops)


def _wait(reqs):
    for req in reqs or ():
        req.wait()


def _ring_forward(q, k, v, cfg: _Config):
    n, r, P = q.shape[-2], cfg.rank, cfg.P
    acc = torch.float32 if cfg.triton else _acc_dtype(q)
    o = torch.zeros(q.shape, dtype=acc, device=q.device)  # (..., n, d), merged output so far
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=q.device)  # (..., n)
    kv = torch.stack([k, v])  # (2, ..., n, d): K and V travel in one message
    for t in range(P):
        nxt_kv, reqs = None, None
        if t < P - 1 and cfg.comm:
            nxt_kv = torch.empty_like(kv)
            reqs = _exchange(cfg, kv, nxt_kv, "kv")  # the next K/V moves while this one is computed
        s = (r - t) % P  # whose K/V this rank holds at step t
        for qs, ks, c in pieces(cfg.layout, cfg.causal, r, s, n):
            q_p, k_p, v_p = q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :]
            if cfg.triton:
                o_p, lse_p = _triton_forward(q_p, k_p, v_p, c, cfg.scale)
            else:
                o_p, lse_p = block_forward(q_p, k_p, v_p, c, cfg.scale)
            _merge(o[..., qs, :], lse[..., qs], o_p, lse_p)
        if reqs is not None:
            _wait(reqs)
            kv = nxt_kv
    return o.to(q.dtype), lse


def _ring_backward(q, k, v, o, lse, do, cfg: _Config):
    n, r, P = q.shape[-2], cfg.rank, cfg.P
    acc = torch.float32 if cfg.triton else _acc_dtype(q)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    delta = None if cfg.triton else (do.to(acc) * o.to(acc)).sum(-1)  # D = rowsum(dO ∘ O); Triton's pre-pass does it
    kv = torch.stack([k, v])
    incoming = None  # (requests, buffer): the dK/dV accumulator arriving from r - 1
    dkv = None
    for t in range(P):
        nxt_kv, kv_reqs = None, None
        if t < P - 1 and cfg.comm:
            nxt_kv = torch.empty_like(kv)
            kv_reqs = _exchange(cfg, kv, nxt_kv, "kv")
        s = (r - t) % P
        dkv = torch.zeros(kv.shape, dtype=acc, device=q.device)  # this rank's share of dK_s, dV_s
        for qs, ks, c in pieces(cfg.layout, cfg.causal, r, s, n):
            args = (q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :])
            if cfg.triton:
                dq_p, dk_p, dv_p = _triton_backward(*args, o[..., qs, :], do[..., qs, :], lse[..., qs], c, cfg.scale)
            else:
                dq_p, dk_p, dv_p = block_backward(*args, do[..., qs, :], lse[..., qs], delta[..., qs], c, cfg.scale)
            dq[..., qs, :] += dq_p
            dkv[0][..., ks, :] += dk_p
            dkv[1][..., ks, :] += dv_p
        if incoming is not None:  # what ranks before this one added to dK_s, dV_s
            _wait(incoming[0])
            dkv += incoming[1]
        if P > 1 and cfg.comm:
            buf = torch.empty_like(dkv)
            incoming = (_exchange(cfg, dkv, buf, "dkv"), buf)  # on to r + 1 (the last hop: home)
        if kv_reqs is not None:
            _wait(kv_reqs)
            kv = nxt_kv
    if incoming is not None:
        _wait(incoming[0])
        dkv = incoming[1]  # this rank's own dK, dV, back from its trip round the ring
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


def _head_groups(q, cfg: _Config) -> list:
    """Slices of the head axis, each run as its own ring (CUDA path), so the ring's buffers stay bounded.

    The ring holds, per (token, head) of its shard, a received K/V, fp32 dK/dV accumulators coming and
    going, an fp32 dQ and the kernels' own outputs and fp32 dQ: about 17 bf16-tensors' worth beyond the
    inputs and gradients themselves. Running groups of heads one after another bounds that to
    :data:`HEAD_GROUP_SIZE` (batch × heads × tokens) at a time, so the peak per GPU falls with P almost
    as the inputs do. One group (no split) on the CPU path and for small problems.
    """
    if not cfg.triton or q.dim() != 4:
        return [slice(None)]
    B, H, n, _ = q.shape
    groups = max(1, min(H, (B * H * n) // HEAD_GROUP_SIZE))
    hg = -(-H // groups)
    return [slice(h, min(h + hg, H)) for h in range(0, H, hg)]


DOUBLE_BACKWARD = ("flashref.distributed.ring_attention: double backward (create_graph=True) is not supported; "
                   "its backward runs the ring again (pair kernels and exchanges) and has no derivative of its own")


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cfg):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        groups = _head_groups(q, cfg)
        if len(groups) == 1:
            o, lse = _ring_forward(q, k, v, cfg)
        else:
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
            for h in groups:  # (B, heads of the group, n, d) each
                o[:, h], lse[:, h] = _ring_forward(q[:, h].contiguous(), k[:, h].contiguous(), v[:, h].contiguous(),
                                                   cfg)
        _require_finite(lse, "the scores", cfg)  # lse in the accumulation dtype: fp32, or fp64 for fp64
        _require_finite(o, "the output", cfg)
        _require_lse_holds_log_l(lse, cfg)
        ctx.save_for_backward(q, k, v, o, lse)  # the shard's output and LSE, as FlashAttention-2 saves
        ctx.cfg = cfg
        return o

    @staticmethod
    def backward(ctx, do):
        if torch.is_grad_enabled():  # backward(create_graph=True): a gradient of this gradient is asked for
            raise RuntimeError(DOUBLE_BACKWARD)
        q, k, v, o, lse = ctx.saved_tensors
        do = do.contiguous()
        _agree_do(do, ctx.cfg)  # on every rank, before any exchange: NaN/inf refused as the forward refuses it
        groups = _head_groups(q, ctx.cfg)
        if len(groups) == 1:
            dq, dk, dv = _ring_backward(q, k, v, o, lse, do, ctx.cfg)
        else:
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            for h in groups:
                dq[:, h], dk[:, h], dv[:, h] = _ring_backward(
                    *(x[:, h].contiguous() for x in (q, k, v, o)), lse[:, h].contiguous(), do[:, h].contiguous(),
                    ctx.cfg)
        for g, name in ((dq, "the gradient dq"), (dk, "the gradient dk"), (dv, "the gradient dv")):
            _require_finite(g, name, ctx.cfg)
        return dq, dk, dv, None


# ---------------------------------------------------------------- the input check, on every rank

_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
_MAXDIM = 6
_LOCAL_ERRORS = {
    1: (TypeError, "q, k and v must be torch.Tensors"),
    2: (TypeError, "q, k and v must be floating-point tensors (float64, float32, float16 or bfloat16)"),
    3: (ValueError, f"q, k and v must have between 2 and {_MAXDIM} axes, (..., n, d)"),
    4: (TypeError, "causal must be True or False"),
    5: (ValueError, "scale: expected a finite real number or None"),
}
_NONFINITE = 5 + 3 * (3 + _MAXDIM)  # where the descriptor's three "contains NaN or inf" flags start


def _descriptor(q, k, v, causal, layout, scale, device):
    """A small int64 vector describing this rank's call, or the code of what is wrong with it."""
    err = 0
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
        err = 1
    elif not all(x.dtype in _DTYPES for x in (q, k, v)):
        err = 2
    elif not all(2 <= x.dim() <= _MAXDIM for x in (q, k, v)):
        err = 3
    elif not isinstance(causal, bool):
        err = 4
    else:
        try:
            _scale(scale, 1)  # the rule every entry point shares (flashref.problem): any finite real, or None
        except ValueError:
            err = 5
    desc = [7741, LAYOUTS.index(layout) if layout in LAYOUTS else -1, int(causal is True), err]
    # scale travels as its float64 bits; None (the default, 1/√d) as a NaN, which no accepted scale can be
    # (any finite real is one: a sentinel such as -1.0 would make scale=None and scale=-1.0 look alike)
    scale_bits = torch.tensor([math.nan if scale is None or err else float(scale)], dtype=torch.float64)
    desc.append(int(scale_bits.view(torch.int64).item()))
    for x in (q, k, v):
        ok = not err
        desc.append(_DTYPES.index(x.dtype) if ok else -1)
        desc.append(x.dim() if ok else -1)
        shape = list(x.shape) if ok else []
        desc.extend(shape + [-1] * (_MAXDIM - len(shape)))
        desc.append(int(x.is_cuda) if ok else -1)
    desc.extend([0, 0, 0])
    desc = torch.tensor(desc, dtype=torch.int64, device=device)
    if not err:  # NaN or inf anywhere: on the device, no wait here (the all-gather's result is read anyway)
        for i, x in enumerate((q, k, v)):
            if x.numel():
                desc[_NONFINITE + i] = (~torch.isfinite(x)).any().to(device)
    return desc


def _scale_of(bits: int):
    """The scale a rank passed, from its descriptor's float64 bits: None where it gave none (a NaN there)."""
    value = float(np.array(bits, dtype=np.int64).view(np.float64))
    return None if math.isnan(value) else value


def _shape(row, i):
    base = 5 + i * (3 + _MAXDIM)
    ndim = int(row[base + 1])
    return _DTYPES[int(row[base])], tuple(int(x) for x in row[base + 2: base + 2 + ndim]), int(row[base + 2 + _MAXDIM])


def _gather_rows(mine: torch.Tensor, group, what: str) -> list:
    """All-gather every rank's int64 vector ``mine``, waiting at most :data:`CHECK_TIMEOUT_S` (never a hang)."""
    table = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    _COUNTS["all_gather"] += 1
    work = dist.all_gather(table, mine, group=group, async_op=True)
    try:
        work.wait(timeout=datetime.timedelta(seconds=CHECK_TIMEOUT_S))
    except Exception as e:  # a rank never arrived: it raised before the call, or called something else
        raise RuntimeError(f"ring_attention: not every rank of the group reached {what} within "
                           f"{CHECK_TIMEOUT_S:g} s (a rank raised before calling, skipped the call, or called "
                           f"another collective): {e}") from e
    return [t.cpu().tolist() for t in table]


def _agree_do(do: torch.Tensor, cfg: _Config) -> None:
    """The backward's input check: every rank learns whether any rank's ``do`` holds NaN or inf, before the ring.

    The forward's check cannot see ``do``; without this, a NaN spreads silently through dK, dV to every rank
    (or, under Triton's interpreter, the pair kernel refuses it on one rank while the others wait in an exchange).
    On a GPU it runs only under ``torch.autograd.detect_anomaly()``, as ``gpu.attention``'s checks do: there it
    would read ``do`` once more and wait for the GPU on every call, which would change what the benchmarks time."""
    from . import gpu

    if gpu._unchecked(do):
        return
    bad = (~torch.isfinite(do)).any() if do.numel() else torch.tensor(False)
    rows = _gather_rows(bad.to(device=cfg.device, dtype=torch.int64).reshape(1), cfg.group, "the backward's check")
    for r, (flag,) in enumerate(rows):
        if flag:
            raise ValueError(f"ring_attention: backward: on rank {r}: do (the gradient of the output) contains "
                             f"NaN or inf")


def _require_finite(x: torch.Tensor, what: str, cfg: _Config) -> None:
    """After the ring (no rank is left waiting in an exchange): an overflow is a ``FloatingPointError``.

    The inputs are finite (the input checks), so a NaN or inf here, or a ``-inf`` log-sum-exp (every query
    sees at least one key: itself), means the scores or a product overflowed ``x``'s dtype (the log-sum-exp's is
    the accumulation dtype). Raised on the ranks whose rows overflowed, as the numpy algorithms raise
    (:func:`flashref.problem.require_finite`). On a GPU only under ``torch.autograd.detect_anomaly()`` (as
    :func:`_agree_do`)."""
    from . import gpu

    if gpu._unchecked(x):
        return
    if x.numel() and not bool(torch.isfinite(x).all()):
        cure = ("scale the inputs down" if x.dtype == torch.float64 else
                "compute in float64 (q.double(), k.double(), v.double() on the CPU) or scale the inputs down")
        raise FloatingPointError(f"ring_attention: on rank {cfg.rank}: {what} overflowed {x.dtype}: the inputs "
                                 f"are finite but too large for this precision; {cure}")


def _require_lse_holds_log_l(lse: torch.Tensor, cfg: _Config) -> None:
    """After the ring: a log-sum-exp too large in magnitude to carry log ℓ is a ``FloatingPointError``, as
    :func:`flashref.flash2._check_L_holds_log_l` says why (spacing past ``L_SPACING``). The merges weighed
    the pairs by it, and the backward recomputes P = exp(S − lse) from it. Where its rows are; on a GPU only under
    ``torch.autograd.detect_anomaly()`` (as :func:`_require_finite`)."""
    from . import flash2, gpu

    if gpu._unchecked(lse) or not lse.numel():
        return
    L = lse.detach().cpu().numpy()
    if not flash2.L_holds_log_l(L):
        raise FloatingPointError(f"ring_attention: on rank {cfg.rank}: a row's log-sum-exp is "
                                 f"{abs(L[np.isfinite(L)]).max():.3g} in magnitude, too large for {lse.dtype} to carry "
                                 "log ℓ (its spacing exceeds flash2.L_SPACING), so the ring cannot weigh its pairs' "
                                 "outputs by it nor its backward recompute P: that row's scores are huge. Scale the "
                                 "inputs down, or compute in float64 on the CPU")


def _agree(q, k, v, causal, layout, scale, group, device):
    """All-gather every rank's descriptor (bounded wait); raise the same error on every rank if any is bad."""
    P = dist.get_world_size(group)
    rows = _gather_rows(_descriptor(q, k, v, causal, layout, scale, device), group, "the input check")
    for r, row in enumerate(rows):
        if row[3]:
            cls, msg = _LOCAL_ERRORS[row[3]]
            raise cls(f"ring_attention: on rank {r}: {msg}")
    for r, row in enumerate(rows):
        for i, name in enumerate("qkv"):
            if row[_NONFINITE + i]:
                raise ValueError(f"ring_attention: on rank {r}: {name} contains NaN or inf")
    bad = [r for r, row in enumerate(rows) if row[1] < 0]
    if bad:
        here = f"; this rank passed {layout!r}" if layout not in LAYOUTS else ""
        raise ValueError(f"ring_attention: layout: expected one of {LAYOUTS} on every rank; rank(s) {bad} passed "
                         f"an unknown layout{here}")
    for col, name in ((1, "layout"), (2, "causal"), (4, "scale")):
        if len({row[col] for row in rows}) > 1:
            vals = [LAYOUTS[row[1]] if col == 1 else bool(row[2]) if col == 2 else _scale_of(row[4]) for row in rows]
            raise ValueError(f"ring_attention: ranks disagree on {name}: {vals} by rank")
    desc = [[_shape(row, i) for i in range(3)] for row in rows]
    for r, ((qd, qs, qc), (kd, ks, kc), (vd, vs, vc)) in enumerate(desc):
        if not qd == kd == vd:
            raise TypeError(f"ring_attention: on rank {r}: q, k, v must share a dtype, got {qd}, {kd}, {vd}")
        if not qc == kc == vc:
            raise ValueError(f"ring_attention: on rank {r}: q, k, v must be on the same device type")
        if ks != vs or ks[:-2] != qs[:-2] or ks[-1] != qs[-1]:
            raise ValueError(f"ring_attention: on rank {r}: k and v must have q's leading axes and head dimension, "
                             f"and each other's shape; got q {qs}, k {ks}, v {vs}")
        if ks[-2] != qs[-2]:
            raise ValueError(f"ring_attention: on rank {r}: wrong shard length: k and v hold {ks[-2]} tokens but q "
                             f"holds {qs[-2]} (every rank holds the same tokens of q, k and v)")
    if len({d[0][0] for d in desc}) > 1:
        raise ValueError(f"ring_attention: ranks disagree on dtype: {[str(d[0][0]) for d in desc]} by rank")
    if len({d[0][2] for d in desc}) > 1:
        raise ValueError("ring_attention: ranks disagree on the device type (some CUDA, some CPU)")
    lengths = [d[0][1][-2] for d in desc]
    if len(set(lengths)) > 1:
        raise ValueError(f"ring_attention: shards of unequal length {lengths} by rank: every rank must hold "
                         f"N/world_size tokens (use flashref.distributed.shard)")
    if len({d[0][1] for d in desc}) > 1:
        raise ValueError(f"ring_attention: ranks disagree on shapes: {[d[0][1] for d in desc]} by rank")
    n = lengths[0]
    need = 2 if layout == "zigzag" else 1
    if n < need:
        raise ValueError(f"ring_attention: sequence too short for the {layout} layout: each of the {P} ranks "
                         f"holds {n} token(s), it needs at least {need} (N >= {min_length(layout, P)})")
    if layout == "zigzag" and n % 2:
        raise ValueError(f"ring_attention: wrong shard length for zigzag: {n} tokens is odd, but a zigzag shard is "
                         f"two equal chunks (r and 2P-1-r), so N must be a multiple of 2 x world_size")
    return P


RING_OPTIONS = ("group", "causal", "layout", "scale")


def ring_attention(q, k, v, *, group=None, causal=False, layout="zigzag", scale=None, **unknown):
    """Attention of this rank's query shard against the whole sequence, by ring attention, with autograd.

    Options (keyword only): ``group=None``, ``causal=False``, ``layout="zigzag"``, ``scale=None``.

    q, k, v: this rank's shards, ``(..., n, d)``, laid out by :func:`shard` with the same ``layout``
    on every rank of ``group`` (default: the world). CUDA fp16/bf16 tensors with ``(B, H, n, d)``
    and ``1 <= d <= gpu.MAX_HEAD_DIM`` (256) run flashref's Triton kernels over NCCL; CPU tensors (any
    float dtype) run the torch pair attention over gloo. ``causal`` is causal in global positions.
    ``scale`` defaults to 1/√d. Returns this rank's shard of the output; ``.backward`` gives this rank's
    shards of dq, dk, dv.
    """
    # Options enter one way (flashref.problem): an unknown name is a TypeError listing the valid ones (the
    # signature names the valid ones, so that it reads as the contract writes it)
    check_options(unknown, RING_OPTIONS, "ring_attention")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention: torch.distributed is not initialised (call "
                           "torch.distributed.init_process_group, or launch with torchrun)")
    if isinstance(causal, np.bool_):
        causal = bool(causal)  # as every entry point takes it (flashref.problem)
    if (isinstance(scale, torch.Tensor) and scale.dim() == 0 and scale.dtype.is_floating_point
            and not scale.requires_grad):
        scale = scale.item()  # a 0-d float tensor, as the torch front and gpu.attention take it; any other tensor
        # goes on to the shared check, refused alike on every rank
    backend = dist.get_backend(group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    P = _agree(q, k, v, causal, layout, scale, group, device)
    triton = q.is_cuda or _FORCE_TRITON
    if triton:  # the same verdict on every rank: they agree on shapes, dtypes and devices by now
        from . import gpu

        dtypes = (torch.float16, torch.bfloat16) + ((torch.float32,) if gpu._interpret() else ())
        if q.dtype not in dtypes or q.dim() != 4 or not 1 <= q.shape[-1] <= gpu.MAX_HEAD_DIM:
            raise ValueError(f"ring_attention: CUDA tensors run the Triton kernels, which need (B, H, n, d) fp16 or "
                             f"bf16 with 1 <= d <= {gpu.MAX_HEAD_DIM}; got {tuple(q.shape)} {q.dtype}")
    r = dist.get_rank(group)
    world = group if group is not None else dist.group.WORLD
    cfg = _Config(group=group, rank=r, P=P, nxt=dist.get_global_rank(world, (r + 1) % P),
                  prv=dist.get_global_rank(world, (r - 1) % P), layout=layout, causal=causal,
                  scale=_scale(scale, q.shape[-1]), triton=triton, comm=not _SKIP_COMM, device=device)
    return _RingAttention.apply(q, k, v, cfg)
