"""Closed forms for ring attention's communication, and the condition under which it hides.

Shards (``flashref.ring.positions``): contiguous ``n_r = ⌊N/P⌋ + [r < N mod P]``; zigzag
``n_r = c_r + c_{2P−1−r}`` with chunk lengths ``c_k = ⌊N/2P⌋ + [k < N mod 2P]``; striped
``n_r = ⌈(N − r)/P⌉``. At step t device r holds the K/V shard of ``s = (r − t) mod P`` and sends it
to ``r + 1``; with H = the product of the leading (batch, head) axes, b bytes per K/V element and
g bytes per dK/dV element::

    forward   sent[r, t] = 2·H·d·b·n_s                 for t < P − 1, else 0
    backward  sent[r, t] = 2·H·d·(b·[t < P − 1] + g·[P > 1])·n_s
    received[r, t] = sent[r − 1, t]

With equal shards n = N/P the forward sends ``2(P−1)/P · N·H·d·b`` bytes per rank — every rank
sees every other K/V shard once — independent of P for large P. Ulysses (DeepSpeed-Ulysses,
Jacobs et al. 2023) instead does an all-to-all of Q, K, V before attention and of O after it, each
rank keeping 1/P of its (N/P)·H·d tensor: ``4·(P−1)/P² · N·H·d·b`` bytes per rank, P/2 times
less, but it needs P to divide the number of heads.

Overlap. One step computes a (n × n) block pair, ``4·n²·d·H`` matmul FLOPs forward (half of that
causal, on average over a balanced ring: zigzag or striped; a contiguous ring's step waits for a rank
that computes a full block) against ``2·n·d·H·b`` bytes on the link; with peak F and link
bandwidth W per direction the communication hides when ``4n²dH/F ≥ 2ndHb/W``, i.e.
``n ≥ F·b / (2W)`` tokens per device — the ring attention paper's ``c ≥ F/B`` (Liu et al. 2023,
§3) in these units. It does not depend on d or H. The backward step does 2.5 times the forward's FLOPs and sends
``(b + g)/b`` times its bytes (K/V and the dK/dV accumulators): :func:`overlap` gives both.
"""

from __future__ import annotations

import math

import numpy as np

from .. import hardware
from ..problem import _causal, _nonnegative_int, check_options, positive_int, positive_real
from ..ring import CommReport, check_layout, check_length

__all__ = ["shard_lengths", "comm", "ring_bytes_per_rank", "ulysses_bytes_per_rank", "min_tokens_per_device",
           "overlap", "NVLINK", "NVLINK_SOURCES"]

# NVLink bandwidth per GPU and per direction, bytes/s. NVIDIA's datasheets quote the bidirectional
# total per GPU: 900 GB/s for H100 SXM and H200 SXM (NVLink 4: 18 links x 50 GB/s, 25 GB/s each
# way), 600 GB/s for A100 SXM (NVLink 3: 12 links). A ring sends one way and receives the other,
# so each direction carries half.
NVLINK = {"A100-40GB": 300e9, "A100-80GB": 300e9, "H100": 450e9, "H200": 450e9}
NVLINK_SOURCES = {
    "H200": "NVIDIA H200 Tensor Core GPU datasheet (2024): 'NVLink: 900GB/s' per GPU (SXM), bidirectional; "
            "450 GB/s each way",
    "H100": "NVIDIA H100 datasheet: NVLink 900 GB/s (SXM5); H100 whitepaper: 18 NVLink 4 links, 50 GB/s each "
            "(25 GB/s per direction)",
    "A100": "NVIDIA A100 datasheet: NVLink 600 GB/s (SXM4), 12 NVLink 3 links",
}


def shard_lengths(N: int, world_size: int, layout: str = "contiguous") -> list[int]:
    """Tokens each device holds (equals ``[len(p) for p in ring.positions(N, P, layout)]``)."""
    N, P = positive_int(N, "N"), positive_int(world_size, "world_size")
    check_length(N, P, check_layout(layout))  # ring.positions' refusals: an unknown layout, too few tokens
    if layout == "contiguous":
        return [N // P + (r < N % P) for r in range(P)]
    if layout == "zigzag":
        c = [N // (2 * P) + (k < N % (2 * P)) for k in range(2 * P)]
        return [c[r] + c[2 * P - 1 - r] for r in range(P)]
    return [-(-(N - r) // P) for r in range(P)]  # striped (check_layout refused any other)


COMM_OPTIONS = {"N", "d", "world_size", "layout", "heads", "dtype_bytes", "grad_bytes"}


def comm(direction: str, **opts) -> CommReport:
    """Exact bytes per rank per step of ``flashref.ring.forward`` / ``backward`` (the simulator's ``.comm``).

    Options: ``N``, ``d``, ``world_size`` (required), ``layout="contiguous"``, ``heads=1`` (0: an empty batch,
    nothing sent), ``dtype_bytes=2``, ``grad_bytes=4``; an unknown one is refused, naming the valid ones."""
    check_options(opts, COMM_OPTIONS, "iomodel.ring.comm")
    for name in ("N", "d", "world_size"):
        if name not in opts:
            raise TypeError(f"iomodel.ring.comm: missing required option {name!r}")
    return _comm(direction, **opts)


def _comm(direction, *, N, d, world_size, layout="contiguous", heads=1, dtype_bytes=2, grad_bytes=4):
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction: expected 'forward' or 'backward', got {direction!r}")
    d, H = positive_int(d, "d"), _nonnegative_int(heads, "heads")
    b, g = positive_int(dtype_bytes, "dtype_bytes"), positive_int(grad_bytes, "grad_bytes")
    n = shard_lengths(N, world_size, layout)
    P = len(n)
    sent = np.zeros((P, P), dtype=np.int64)
    for r in range(P):
        for t in range(P):
            s = (r - t) % P  # the shard device r holds at step t
            kv = 2 * H * d * b * n[s] if t < P - 1 else 0  # K_s and V_s on to r + 1
            # their gradients, at every step (the last takes them home), but nowhere on one device: no link
            dkv = 2 * H * d * g * n[s] if direction == "backward" and P > 1 else 0
            sent[r, t] = kv + dkv
    received = np.roll(sent, 1, axis=0)  # received[r] = sent[r - 1]
    return CommReport(sent, received)  # the simulator's report type, without its event list


def _equal_shards(N, d, world_size, heads, dtype_bytes) -> tuple:
    """The formulas' sizes by every entry point's rules: equal shards of n = N/P tokens, so N a multiple of P (with
    unequal shards the ranks send and compute different amounts, which :func:`comm` gives each, and a formula of
    N/P would be a number no rank has)."""
    N, d, P = positive_int(N, "N"), positive_int(d, "d"), positive_int(world_size, "world_size")
    if N < P:
        raise ValueError(f"N: expected at least one token per device, N >= world_size={P}, got N={N}")
    if N % P:
        raise ValueError(f"N: the formula is for equal shards, so N must be a multiple of world_size={P}, got N={N} "
                         f"(iomodel.ring.comm counts unequal shards)")
    return N, d, P, _nonnegative_int(heads, "heads"), positive_int(dtype_bytes, "dtype_bytes")


def ring_bytes_per_rank(N, d, world_size, *, heads=1, dtype_bytes=2, **opts) -> float:
    """Forward bytes each rank sends, equal shards: ``2(P−1)/P · N·H·d·b``.

    N must be a multiple of P (:func:`_equal_shards`).
    """
    check_options(opts, {"heads", "dtype_bytes"}, "iomodel.ring.ring_bytes_per_rank")
    N, d, P, heads, dtype_bytes = _equal_shards(N, d, world_size, heads, dtype_bytes)
    return 2 * (P - 1) / P * N * heads * d * dtype_bytes


def ulysses_bytes_per_rank(N, d, world_size, *, heads=1, dtype_bytes=2, **opts) -> float:
    """Forward bytes each rank sends with Ulysses' all-to-alls (Q, K, V in, O out): ``4(P−1)/P² · N·H·d·b``.

    A real Ulysses run needs P to divide the number of heads. The formula is linear in ``heads`` and is
    returned for any (``heads=1`` is the per-head cost, which ``flashref.figures`` plots against the ring's
    for P = 2..16); check ``heads % world_size == 0`` yourself before reading it as a runnable config.
    """
    check_options(opts, {"heads", "dtype_bytes"}, "iomodel.ring.ulysses_bytes_per_rank")
    N, d, P, heads, dtype_bytes = _equal_shards(N, d, world_size, heads, dtype_bytes)
    return 4 * (P - 1) / P**2 * N * heads * d * dtype_bytes


def _rates(gpu, flops, link_bandwidth) -> tuple[float, float]:
    """The matmul rate and link bandwidth: given (a finite real > 0: a 0 would divide by zero) or the GPU's."""
    rate = "a finite positive number"
    g = hardware.get(gpu, "gpu")  # checked even where both rates are given: a misspelt GPU is never ignored
    F = g.peak("matmul") if flops is None else positive_real(flops, "flops", rate)
    W = NVLINK[_key(g)] if link_bandwidth is None else positive_real(link_bandwidth, "link_bandwidth", rate)
    return F, W


def min_tokens_per_device(gpu="H200", *, link_bandwidth=None, dtype_bytes=2, flops=None, causal=False,
                          **opts) -> float:
    """Smallest shard n = N/P at which one forward step's compute covers its communication.

    ``n ≥ F·b / (2W)`` (non-causal); causal blocks do half the work on average, so ``n ≥ F·b / W``.
    That halving assumes a balanced layout (zigzag or striped), where every rank does about half a block
    at every step. A contiguous causal ring's step lasts as long as its busiest rank, which computes a full
    block from step 1 on: its threshold is the non-causal one, ``causal=False``. ``flops`` defaults to
    the GPU's dense matmul peak, ``link_bandwidth`` to :data:`NVLINK`.
    """
    check_options(opts, {"gpu", "link_bandwidth", "dtype_bytes", "flops", "causal"},
                  "iomodel.ring.min_tokens_per_device")
    F, W = _rates(gpu, flops, link_bandwidth)
    b = positive_int(dtype_bytes, "dtype_bytes")
    return F * b / (2 * W) * (2 if _causal(causal) else 1)


def _key(gpu) -> str:
    """The GPU's name in hardware.GPUS, for its NVLink bandwidth; a GPU made by hand has none to look up."""
    g = hardware.get(gpu, "gpu")
    key = next((k for k, v in hardware.GPUS.items() if v == g), None)
    if key is None:
        raise ValueError(f"link_bandwidth: {g.name} is not one of hardware.GPUS, so its "
                         f"NVLink bandwidth is not known: pass link_bandwidth= (bytes/s)")
    return key


OVERLAP_OPTIONS = {"N", "d", "world_size", "heads", "causal", "gpu", "link_bandwidth", "flops", "dtype_bytes",
                   "grad_bytes"}


def overlap(*, N, d, world_size, heads=1, causal=False, gpu="H200", link_bandwidth=None, flops=None,
            dtype_bytes=2, grad_bytes=4, **opts) -> dict:
    """Compute time against communication time of one ring step, forward and backward.

    Equal shards ``n = N/P``. Forward step: ``4n²dH`` FLOPs (×1/2 causal: a balanced layout, zigzag or
    striped; a contiguous causal ring's step waits for its busiest rank's full block, so pass
    ``causal=False`` for it) against
    ``2ndH·b`` bytes; backward step: ``10n²dH`` FLOPs (2.5× the forward: five matmuls, recomputing
    S) against ``2ndH·(b + g)`` bytes. Times are ``FLOPs / F`` and ``bytes / W``; the step hides its
    communication when ``ratio = t_compute / t_comm ≥ 1`` (``inf`` with nothing to send: ``heads=0``).
    """
    check_options(opts, OVERLAP_OPTIONS, "iomodel.ring.overlap")
    N, d, P, heads, dtype_bytes = _equal_shards(N, d, world_size, heads, dtype_bytes)
    grad_bytes = positive_int(grad_bytes, "grad_bytes")
    n = N / P
    F, W = _rates(gpu, flops, link_bandwidth)
    frac = 0.5 if _causal(causal) else 1.0
    out = {"n": n, "flops_per_s": F, "link_bytes_per_s": W}
    for name, fl, by in (("forward", 4 * n * n * d * heads * frac, 2 * n * d * heads * dtype_bytes),
                         ("backward", 10 * n * n * d * heads * frac, 2 * n * d * heads * (dtype_bytes + grad_bytes))):
        tc, tm = fl / F, by / W
        # an empty batch (heads = 0) sends nothing: nothing to hide, never 0/0
        out[name] = {"t_compute": tc, "t_comm": tm, "ratio": tc / tm if tm else math.inf, "hidden": tc >= tm}
    return out
