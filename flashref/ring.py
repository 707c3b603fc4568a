"""Ring attention, simulated: the sequence split over ``world_size`` devices, K/V passed round a ring.

FlashAttention's inner loop visits the K/V tiles of a row block one after another and folds each
into a running softmax state. Ring attention (Liu, Zaharia, Abbeel 2023) does the same across
devices: device ``r`` keeps its query shard ``Q_r`` and, at step ``t = 0 … P−1``, holds the K/V
shard of device ``s = (r − t) mod P``. It runs FlashAttention-2 on the pair ``(Q_r, K_s, V_s)``,
which returns a partial output ``O_rs`` and its log-sum-exp ``L_rs``, merges them into its
running ``(O_r, L_r)`` with the exact log-sum-exp rule of §3.1 (:func:`flashref.softmax.merge`),
and passes ``K_s, V_s`` on to device ``r + 1`` while receiving ``K_{s−1}, V_{s−1}`` from ``r − 1``.

The backward runs the same ring with FlashAttention-2's Algorithm 2 on each pair, using the
*final* ``O_r`` and ``L_r``: then ``P_ij = exp(S_ij − L_i)`` is already the normalised softmax and
each pair's dQ, dK, dV are simply its share of the sum. dQ stays home; the dK/dV accumulators
travel with their K/V, and a last hop brings them home (P sends of dK, dV; P − 1 of K, V; none
for P = 1).

Layouts (how the N tokens are dealt out; :func:`positions` gives each device's token indices):

* ``contiguous``: device r holds the r-th slice (``numpy.array_split``: the first ``N mod P``
  devices hold one token more). Causal attention is unbalanced: device P−1 computes 2P−1 times the
  work of device 0 (P−1 full blocks and half a block, against half a block) and the ring's step
  takes as long as the busiest device.
* ``zigzag``: the sequence is cut into ``2P`` chunks (``array_split``), device r holds chunks
  ``r`` and ``2P−1−r`` — one early, one late — so every device does the same causal work.
* ``striped``: token i lives on device ``i mod P`` (Brandon et al., Striped Attention, 2023).

Causal pairs run as FlashAttention-2 with a top-left causal flag only (as the GPU kernels of
:mod:`flashref.distributed` do): :func:`pieces` cuts each pair into sub-blocks that are full or
top-left causal, and FlashAttention-2 runs on each, so it skips what no query sees and ``.io``/``.flops``
count what a real ring computes. An explicit boolean mask would not do: it is a MASK function, and
FlashAttention-2 visits every tile for one.

Each device has its own counted :class:`~flashref.memory.Memory` (its HBM traffic is the sum of
its FlashAttention-2 calls plus the forward's merges and the backward's sums into dQ, dK and dV),
and the ring's link counts the bytes every device sends and receives at every step in ``.comm``;
:mod:`flashref.iomodel.ring` predicts both the communication (exactly) and whether it hides behind
the compute.

Example::

    fwd = ring.forward(Q, K, V, world_size=4, layout="zigzag", causal=True)
    bwd = ring.backward(Q, K, V, fwd.O, dO, fwd.L, world_size=4, layout="zigzag", causal=True)
    fwd.comm.sent          # (P, P) bytes sent by rank r at step t
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import flash2, softmax
from .blocks import DEFAULT_SRAM_BYTES
from .memory import Memory
from .problem import Problem, check_finite, check_like, check_options, overflow_checked, positive_int
from .results import BackwardResult, ForwardResult

__all__ = ["LAYOUTS", "positions", "forward", "backward", "CommReport", "CommEvent", "merge_lse",
           "pair_mask", "pieces", "OPTIONS"]

LAYOUTS = ("contiguous", "zigzag", "striped")
#: options a ring call accepts: FlashAttention-2's, less mask and dropout, plus the dK/dV wire width.
OPTIONS = ("scale", "causal", "sram_size", "block_sizes", "dtype_bytes", "grad_bytes")


def check_layout(layout) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:  # (an array's `in` compares element-wise)
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    return layout


def min_length(layout: str, world_size: int) -> int:
    """Shortest sequence a layout can deal out so that every device holds a token: P, zigzag 2P."""
    return 2 * world_size if layout == "zigzag" else world_size


def check_length(N: int, world_size: int, layout: str) -> None:
    """Refuse a sequence too short for ``layout`` to give every device a token (:func:`min_length`)."""
    if N < min_length(layout, world_size):
        raise ValueError(f"N: the {layout} layout over world_size={world_size} needs at least "
                         f"{min_length(layout, world_size)} tokens (one per "
                         f"{'chunk' if layout == 'zigzag' else 'device'}), got N={N}")


def positions(N: int, world_size: int, layout: str = "contiguous") -> list[np.ndarray]:
    """The global token indices each device holds, in the order it holds them (increasing)."""
    N, P = positive_int(N, "N"), positive_int(world_size, "world_size")
    check_layout(layout)
    check_length(N, P, layout)
    tokens = np.arange(N)
    if layout == "contiguous":
        return np.array_split(tokens, P)
    if layout == "zigzag":
        chunks = np.array_split(tokens, 2 * P)  # 2P chunks: device r takes r and 2P-1-r
        return [np.concatenate([chunks[r], chunks[2 * P - 1 - r]]) for r in range(P)]
    return [tokens[r::P] for r in range(P)]  # striped: token i on device i mod P


def pair_mask(pos_q: np.ndarray, pos_k: np.ndarray, causal: bool):
    """How device q's queries see device k's keys: None (all), False (none) or a boolean mask."""
    if not causal:
        return None
    m = pos_q[:, None] >= pos_k[None, :]  # (n_q, n_k): query i sees key j <= i, in global positions
    if m.all():
        return None
    if not m.any():
        return False
    return m


def _first_chunk(N: int, world_size: int, r: int) -> int:
    """Zigzag: how many tokens of device r's shard are its early chunk ``r`` (``array_split`` into 2P chunks)."""
    return N // (2 * world_size) + (r < N % (2 * world_size))


def pieces(layout: str, causal: bool, r: int, s: int, n: int, n_k: int | None = None, *,
           h_q: int | None = None, h_k: int | None = None) -> list:
    """Sub-blocks ``(query rows, key rows, causal)`` of the pair (queries of device r, keys of device s).

    ``n`` is the query shard's length, ``n_k`` the key shard's (default ``n``: equal shards, as
    :mod:`flashref.distributed` has). Zigzag only: ``h_q`` and ``h_k`` are how many tokens of each shard are
    its early chunk (default ``n // 2``: equal chunks; ``_first_chunk`` for any N). Each piece is full or
    top-left causal, so a kernel with a causal flag computes it; together they cover exactly the (query,
    key) pairs with global ``key position <= query position`` (what :func:`pair_mask` marks), and no
    piece holds a row or column that sees nothing. An empty list: nothing to compute.
    """
    n_k = n if n_k is None else n_k
    full_q, full_k = slice(0, n), slice(0, n_k)
    if not causal:
        return [(full_q, full_k, False)]
    if s == r:  # the diagonal: positions increase along the shard, so global causal = local causal
        return [(full_q, full_k, True)]
    if layout == "contiguous":  # an earlier shard is seen whole, a later one not at all
        return [(full_q, full_k, False)] if s < r else []
    if layout == "zigzag":
        # the queries are chunks r | 2P-1-r, the keys chunks s | 2P-1-s (h_q, h_k tokens in the first)
        h_q = n // 2 if h_q is None else h_q
        h_k = n_k // 2 if h_k is None else h_k
        if s < r:  # keys' first chunk precedes both query chunks; their second follows both
            return [(full_q, slice(0, h_k), False)]
        return [(slice(h_q, n), full_k, False)]  # later s: only the late query chunk sees it, wholly
    # striped: query i at r + P·i, key j at s + P·j. s < r: j <= i, top-left causal; keys past the last
    # query's index (j >= n, on an earlier device holding one token more) are seen by nobody, so are cut.
    if s < r:
        return [(full_q, slice(0, min(n_k, n)), True)]
    # s > r: j < i ("strictly causal"): queries 1.. against keys 0.., top-left causal. Query 0 sees
    # nothing, nor does a key j >= n - 1 (it would need a query i > j); one query alone: no piece.
    return [(slice(1, n), slice(0, min(n_k, n - 1)), True)] if n > 1 else []


def _pieces_of(layout, causal, r, s, pos):
    """:func:`pieces` for devices r and s of the shards ``pos`` (any N: chunk and shard lengths from ``pos``)."""
    N, P = sum(len(p) for p in pos), len(pos)
    return pieces(layout, causal, r, s, len(pos[r]), len(pos[s]), h_q=_first_chunk(N, P, r),
                  h_k=_first_chunk(N, P, s))


def merge_lse(O1, L1, O2, L2):
    """Merge two partial attentions of the same queries over disjoint keys (exact, §3.1).

    ``(O_k, L_k)`` are normalised outputs and their log-sum-exps. As softmax states they are
    ``(m, ℓ) = (L_k, 1)`` with numerator ``O_k``; :func:`flashref.softmax.merge` combines the
    states and the outputs are reweighted by ``e^{L_k − m} / ℓ``. A part with ``L = -inf`` (no key
    visible) weighs 0; two such parts give ``(0, -inf)``.
    """
    ones = np.ones_like(L1)
    m, l = softmax.merge(L1, ones, L2, ones)
    m_safe = softmax.finite_or_zero(m)
    l_safe = np.where(l == 0, 1.0, l)
    # Weights divided by ℓ before they multiply: O is then a convex combination of O1 and O2, which
    # fits the dtype whenever they do (e^{L1−m}·O1 + e^{L2−m}·O2 first, then / ℓ, overflows on the
    # way for |O| past half the dtype's range, though the merged O is no larger than the parts).
    w1, w2 = np.exp(L1 - m_safe) / l_safe, np.exp(L2 - m_safe) / l_safe
    O = w1[..., None] * O1 + w2[..., None] * O2
    L = np.where(l == 0, -np.inf, m + np.log(l_safe))
    return O, L


@dataclass(frozen=True)
class CommEvent:
    """One transfer on the ring: at ``step``, ``src`` sends ``tensor`` (shard ``shard``) to ``dst``."""

    step: int
    src: int
    dst: int
    tensor: str
    shard: int
    elements: int
    bytes: int


@dataclass
class CommReport:
    """Bytes each rank sends and receives at each step: ``sent[r, t]``, ``received[r, t]``."""

    sent: np.ndarray
    received: np.ndarray
    events: list = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.sent.shape[0]

    @property
    def per_rank(self) -> np.ndarray:
        """Bytes sent by each rank over all steps."""
        return self.sent.sum(axis=1)

    @property
    def total(self) -> int:
        """Bytes on all links together (each sent byte is received once)."""
        return int(self.sent.sum())

    @property
    def messages(self) -> int:
        """Ring exchanges (steps at which some rank sends), one collective each per tensor group."""
        return len({(e.step, e.tensor[0] == "d") for e in self.events})

    def __add__(self, other: CommReport) -> CommReport:
        # forward then backward: the steps follow one another
        steps = self.sent.shape[1]
        shifted = [CommEvent(e.step + steps, e.src, e.dst, e.tensor, e.shard, e.elements, e.bytes)
                   for e in other.events]
        return CommReport(np.concatenate([self.sent, other.sent], axis=1),
                          np.concatenate([self.received, other.received], axis=1), self.events + shifted)

    def __str__(self) -> str:
        P, T = self.sent.shape
        head = "rank  " + "  ".join(f"step {t:>2}" for t in range(T)) + "    total"
        rows = [head]
        for r in range(P):
            cells = "  ".join(f"{int(b):>7,}" for b in self.sent[r])
            rows.append(f"{r:>4}  {cells}  {int(self.sent[r].sum()):>7,}")
        return "bytes sent per rank per step\n" + "\n".join(rows)

    __repr__ = __str__


class _PerDevice(list):
    """One report per device (``.io``, ``.flops``), indexed by rank. Read as a report (``.total``, ``.reads``,
    ``.writes``, ``.bytes``, ``.by_tensor``, ``.peak_sram``; ``.matmul``, ``.exp``), it is all devices' together: the
    sum of their reports, whose ``peak_sram`` is the largest device's (reports add so), as one machine's result
    reads."""

    @property
    def total(self) -> int:
        return sum(x.total for x in self if x is not None)

    def __getattr__(self, name):
        # only for names a list lacks (reads, writes, by_tensor, peak_sram, matmul, ...): the combined report's,
        # so that ring's .io reads as every other algorithm's; a name no report has is an AttributeError as usual.
        # _combine is a function, not a property: an AttributeError inside a property would come back here
        if name.startswith("_"):
            raise AttributeError(name)
        report = _combine(self)
        if report is None:
            raise AttributeError(f"{name}: no device has a report to read it from")
        return getattr(report, name)

    def __add__(self, other):
        """Device by device, as reports add (``fwd.io + bwd.io``); a list's ``+`` would have concatenated them, and
        ``(f.io + b.io)[r]`` been rank r's forward alone."""
        if not isinstance(other, _PerDevice):
            return NotImplemented
        if len(other) != len(self):
            raise ValueError(f"cannot add reports of {len(self)} and {len(other)} devices")
        return _PerDevice(b if a is None else a if b is None else a + b for a, b in zip(self, other))

    def __radd__(self, other):
        if isinstance(other, int) and other == 0:  # sum() starts from 0
            return _PerDevice(self)
        return NotImplemented

    def __iadd__(self, other):  # += adds too, never extends
        return self.__add__(other)


def _combine(reports):
    """The reports that are not None, added (None if there are none)."""
    reports = [x for x in reports if x is not None]
    return sum(reports[1:], reports[0]) if reports else None


class _Ring:
    """P devices, each with its own Memory, and a link that counts what crosses it."""

    def __init__(self, P, steps, dtype_bytes, lead, sram_size=None):
        self.P, self.lead = P, lead
        self.heads = int(np.prod(lead, dtype=np.int64)) if lead else 1
        # each device's memory holds its own passes (the forward's merges, the backward's sums) to sram_size, as
        # its FlashAttention-2 calls do
        self.mems = [Memory(sram_size, dtype_bytes, lead) for _ in range(P)]
        self.sent = np.zeros((P, steps), dtype=np.int64)
        self.received = np.zeros((P, steps), dtype=np.int64)
        self.events: list[CommEvent] = []

    def send(self, step, src, tensor, shard, X, elt_bytes):
        """``src`` sends ``X`` to ``src + 1``; both ends count its bytes."""
        dst = (src + 1) % self.P
        n = int(X.size)
        self.sent[src, step] += n * elt_bytes
        self.received[dst, step] += n * elt_bytes
        self.events.append(CommEvent(step, src, dst, tensor, shard, n, n * elt_bytes))
        return X.copy()  # what arrives is a copy in the receiver's HBM

    def comm(self) -> CommReport:
        return CommReport(self.sent, self.received, self.events)


def _row_chunks(rows: slice, width: int, pb) -> list[tuple[int, int]]:
    """``rows`` cut into runs of as many rows as fit on chip at ``width`` elements a row (at least one): an
    elementwise pass over them (the forward's merge, the backward's sums) reads and writes each element once
    whatever the cut, and so holds no more than ``sram_size`` (the default M where none is given)."""
    # (the default M from its bytes alone: default_sram_size refuses a dtype_bytes past half of them, which
    # explicit block sizes may still run)
    M = pb.sram_size if pb.sram_size is not None else DEFAULT_SRAM_BYTES // pb.dtype_bytes
    step = max(1, M // width)
    return [(a, min(a + step, rows.stop)) for a in range(rows.start, rows.stop, step)]


def _problem(Q, K, V, world_size, layout, opts, where):
    # mask and dropout are not supported across the ring: they are not among the valid options. ``where`` names the
    # caller (ring.forward or ring.backward) in the errors
    check_options(opts, OPTIONS, where)
    grad_bytes = positive_int(opts.get("grad_bytes", 4), "grad_bytes")
    pb = Problem.from_arrays(Q, K, V, where, **{k: v for k, v in opts.items() if k != "grad_bytes"})
    P = positive_int(world_size, "world_size")
    if pb.Nq != pb.Nk:
        raise ValueError(f"K: ring attention shards one sequence, so Nk must equal Nq; got Nq={pb.Nq}, Nk={pb.Nk}")
    pos = positions(pb.Nq, P, layout)
    return pb, P, pos, grad_bytes


@overflow_checked("O")  # the merges of partial outputs: an overflow is a FloatingPointError, as flash2's
def forward(Q, K, V, *, world_size, layout="contiguous", **opts) -> ForwardResult:
    """Ring attention over ``world_size`` simulated devices: FlashAttention-2 per (Q, K/V) shard pair.

    Options: ``scale``, ``causal``, ``sram_size``, ``block_sizes``, ``dtype_bytes`` (as
    :func:`flashref.flash2.forward`) and ``grad_bytes`` (unused here). Returns ``.O`` and ``.L``
    for the whole sequence (equal to a single device's), ``.O_shards``/``.L_shards`` per device,
    ``.positions``, ``.comm`` (:class:`CommReport`), ``.io`` and ``.flops`` (lists, one per device; read as a
    report, the devices' together),
    ``.work[r, t]`` (query-key pairs device r scores at step t), ``.source[r, t]`` (whose K/V it holds).
    """
    pb, P, pos, _ = _problem(Q, K, V, world_size, layout, opts, "ring.forward")
    lead, d = pb.lead_shape, pb.d
    ring = _Ring(P, P, pb.dtype_bytes, lead, pb.sram_size)
    fa_opts = {k: v for k, v in opts.items() if k != "grad_bytes"}
    O_r = [np.zeros(lead + (len(p), d), dtype=pb.dtype) for p in pos]  # (..., n_r, d)
    L_r = [np.full(lead + (len(p),), -np.inf, dtype=pb.dtype) for p in pos]  # (..., n_r)
    # Step 0: each device holds its own K/V shard (placed in its HBM, like the inputs: no cost).
    kv = [(pb.K[..., p, :], pb.V[..., p, :]) for p in pos]
    io = [None] * P
    flops = [None] * P
    work = np.zeros((P, P), dtype=np.int64)
    source = np.zeros((P, P), dtype=np.int64)
    for r, mem in enumerate(ring.mems):
        mem.input("Q", pb.Q[..., pos[r], :])
        mem.input("O", O_r[r])
        mem.input("L", L_r[r])

    for t in range(P):
        for r in range(P):  # every device, in parallel on a real machine
            s = (r - t) % P
            source[r, t] = s
            K_s, V_s = kv[r]  # (..., n_s, d): its own at t = 0, then what arrived from r - 1
            m = pair_mask(pos[r], pos[s], pb.causal)
            if m is False:
                continue  # every key of shard s is later than every query of shard r: nothing to do
            work[r, t] = len(pos[r]) * len(pos[s]) if m is None else int(m.sum())
            # (O_rs, L_rs) = FlashAttention-2(Q_r, K_s, V_s), piece by piece: each full or top-left causal
            # sub-block of the pair is one call, so no tile that no query sees is visited (pieces).
            for qs, ks, c in _pieces_of(layout, pb.causal, r, s, pos):
                blk = flash2.forward(pb.Q[..., pos[r][qs], :], K_s[..., ks, :], V_s[..., ks, :],
                                     **{**fa_opts, "causal": c})
                # The merge below weighs each shard by e^{L_rs}: an L_rs too large to carry log ℓ (its spacing
                # past flash2.L_SPACING) would weigh shards of different sizes alike, silently (the backward refuses
                # that L too)
                flash2._check_L_holds_log_l(blk.L, "ring attention cannot weigh its shards' outputs by it")
                io[r] = blk.io if io[r] is None else io[r] + blk.io
                flops[r] = blk.flops if flops[r] is None else flops[r] + blk.flops
                # (O_r, L_r) = merge((O_r, L_r), (O_rs, L_rs)) over the piece's query rows (one elementwise
                # pass in HBM, as many rows at a time as fit on chip): read O_r, L_r and the piece's O_rs, L_rs;
                # write O_r, L_r.
                mem = ring.mems[r]
                mem.input("O_rs", blk.O)
                mem.input("L_rs", blk.L)
                for a, b in _row_chunks(qs, 2 * d + 2, pb):
                    O_old, L_old = mem.load("O", (a, b), as_="O_r"), mem.load("L", (a, b), as_="L_r")
                    piece = (a - qs.start, b - qs.start)
                    O_b, L_b = mem.load("O_rs", piece), mem.load("L_rs", piece)
                    O_new, L_new = merge_lse(O_old, L_old, O_b, L_b)
                    mem.store("O", O_new, (a, b))
                    mem.store("L", L_new, (a, b))
                    mem.free("O_r", "L_r", "O_rs", "L_rs")
        if t < P - 1:
            # Communication of step t (overlapped with its compute on a real machine): K_s, V_s on to r + 1.
            arriving = [None] * P
            for r in range(P):
                s = (r - t) % P
                K_s, V_s = kv[r]
                arriving[(r + 1) % P] = (ring.send(t, r, "K", s, K_s, pb.dtype_bytes),
                                         ring.send(t, r, "V", s, V_s, pb.dtype_bytes))
            kv = arriving

    O_shards = [ring.mems[r].result("O") for r in range(P)]
    L_shards = [ring.mems[r].result("L") for r in range(P)]
    for r in range(P):
        io[r] = ring.mems[r].report() if io[r] is None else io[r] + ring.mems[r].report()
    O = np.zeros_like(pb.Q)
    L = np.zeros(lead + (pb.Nq,), dtype=pb.dtype)
    for r, p in enumerate(pos):
        O[..., p, :] = O_shards[r]
        L[..., p] = L_shards[r]
    return ForwardResult(O=O, L=L, O_shards=O_shards, L_shards=L_shards, positions=pos, comm=ring.comm(),
                         io=_PerDevice(io), flops=_PerDevice(flops), work=work, source=source, layout=layout,
                         world_size=P)


@overflow_checked("dQ", "dK", "dV")  # the sums of the pairs' shares (each pair's own are checked by flash2)
def backward(Q, K, V, O, dO, L, *, world_size, layout="contiguous", **opts) -> BackwardResult:
    """The ring backward: FlashAttention-2's Algorithm 2 per shard pair; dK/dV travel home.

    ``O`` and ``L`` are the forward's (whole sequence); same options as :func:`forward`, plus
    ``grad_bytes`` (default 4: the dK/dV accumulators travel in fp32, as real implementations
    keep them; the accumulators' HBM bytes too). Returns ``.dQ``, ``.dK``, ``.dV`` (whole sequence), ``.comm``,
    ``.io`` (each device's FlashAttention-2 calls, and the passes that add each pair's share into the accumulators),
    ``.flops`` (lists per device), ``.work`` and ``.source`` as the forward's.
    """
    pb, P, pos, grad_bytes = _problem(Q, K, V, world_size, layout, opts, "ring.backward")
    lead, d = pb.lead_shape, pb.d
    O = check_like(O, "O", pb.Q.shape, pb.dtype)
    dO = check_like(dO, "dO", pb.Q.shape, pb.dtype)
    L = check_like(L, "L", lead + (pb.Nq,), pb.dtype)
    check_finite(O, "O")
    check_finite(dO, "dO")
    ring = _Ring(P, P, pb.dtype_bytes, lead, pb.sram_size)
    fa_opts = {k: v for k, v in opts.items() if k != "grad_bytes"}
    dQ_r = [np.zeros(lead + (len(p), d), dtype=pb.dtype) for p in pos]
    kv = [(pb.K[..., p, :], pb.V[..., p, :]) for p in pos]
    dkv = [None] * P  # the dK/dV accumulator of the shard each device holds
    io, flops = [None] * P, [None] * P
    work = np.zeros((P, P), dtype=np.int64)
    source = np.zeros((P, P), dtype=np.int64)

    for r, mem in enumerate(ring.mems):
        mem.input("dQ", dQ_r[r])  # dQ_r's accumulator, in device r's HBM (zeros, like the forward's O)

    for t in range(P):
        for r in range(P):
            s = (r - t) % P
            source[r, t] = s
            K_s, V_s = kv[r]
            if dkv[r] is None:
                dkv[r] = (np.zeros_like(K_s), np.zeros_like(V_s))
            # the dK_s/dV_s accumulators that arrived (their bytes counted on the link) sit in this device's HBM
            ring.mems[r].input("dK_s", dkv[r][0], dtype_bytes=grad_bytes)
            ring.mems[r].input("dV_s", dkv[r][1], dtype_bytes=grad_bytes)
            m = pair_mask(pos[r], pos[s], pb.causal)
            if m is False:
                continue
            work[r, t] = len(pos[r]) * len(pos[s]) if m is None else int(m.sum())
            # Algorithm 2 on each full or top-left causal piece of the pair (as the forward), with the final O, L.
            for qs, ks, c in _pieces_of(layout, pb.causal, r, s, pos):
                p = pos[r][qs]
                blk = flash2.backward(pb.Q[..., p, :], K_s[..., ks, :], V_s[..., ks, :], O[..., p, :], dO[..., p, :],
                                      L[..., p], **{**fa_opts, "causal": c})
                io[r] = blk.io if io[r] is None else io[r] + blk.io
                flops[r] = blk.flops if flops[r] is None else flops[r] + blk.flops
                # dQ_r += dQ_rs over the piece's query rows (dQ stays home), and dK_s += dK_rs, dV_s += dV_rs over
                # its key rows (they travel with K_s, V_s): each one elementwise pass in HBM, as the forward's
                # merge: read the accumulator's rows and the piece's share, write the rows (as many at a time as
                # fit on chip)
                mem = ring.mems[r]
                for acc, share, rows in (("dQ", blk.dQ, qs), ("dK_s", blk.dK, ks), ("dV_s", blk.dV, ks)):
                    mem.input(f"{acc}_rs", share)
                    for a, b in _row_chunks(rows, 2 * d, pb):
                        total = (mem.load(acc, (a, b), as_=f"{acc}_acc")
                                 + mem.load(f"{acc}_rs", (a - rows.start, b - rows.start)))
                        mem.store(acc, total, (a, b))
                        mem.free(f"{acc}_acc", f"{acc}_rs")
            dkv[r] = (ring.mems[r].result("dK_s"), ring.mems[r].result("dV_s"))
        # Communication of step t: K_s, V_s on (not after the last step), dK_s, dV_s always, except on one
        # device: there is no link, and its dK, dV are home already (distributed.ring_attention sends nothing).
        if P == 1:
            break
        arriving_kv, arriving_dkv = [None] * P, [None] * P
        for r in range(P):
            s = (r - t) % P
            nxt = (r + 1) % P
            if t < P - 1:
                arriving_kv[nxt] = (ring.send(t, r, "K", s, kv[r][0], pb.dtype_bytes),
                                    ring.send(t, r, "V", s, kv[r][1], pb.dtype_bytes))
            arriving_dkv[nxt] = (ring.send(t, r, "dK", s, dkv[r][0], grad_bytes),
                                 ring.send(t, r, "dV", s, dkv[r][1], grad_bytes))
        kv, dkv = arriving_kv, arriving_dkv
    # After P sends (none for P = 1) each accumulator is home: device r holds dK_r, dV_r.
    for r in range(P):
        io[r] = ring.mems[r].report() if io[r] is None else io[r] + ring.mems[r].report()
    dQ, dK, dV = np.zeros_like(pb.Q), np.zeros_like(pb.K), np.zeros_like(pb.V)
    for r, p in enumerate(pos):
        dQ[..., p, :] = ring.mems[r].result("dQ")
        dK[..., p, :], dV[..., p, :] = dkv[r]
    return BackwardResult(dQ=dQ, dK=dK, dV=dV, comm=ring.comm(), io=_PerDevice(io), flops=_PerDevice(flops),
                          work=work, source=source, positions=pos, layout=layout, world_size=P)
