"""Kernel 3 (flashref/gpu/kernel3.py: the Gluon forward with FlashAttention-3's intra-warpgroup overlap).

On CI (no GPU, Triton's interpreter, another Triton version) only the dispatcher runs: which calls kernel 3
takes, which it hands to kernel 2 and why, and that ``kernel3.attention`` then is kernel 2. On a Hopper GPU
with Triton 3.6.0 the kernel itself is held to the same float64 oracle and two-oracle rule as kernels 1
and 2 (tests/test_gpu_triton.py: error at most twice plain attention's in the input dtype, gradients
three times, plus a small atol), and its base-2 log-sum-exp to kernel 2's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from triton_env import DEVICE, INTERPRET

pytest.importorskip("triton")

from test_gpu_triton import ATOL, _attention, _err, _inputs  # noqa: E402

from flashref import gpu  # noqa: E402
from flashref.gpu import kernel3, kernel3_bwd  # noqa: E402
from flashref.gpu.kernel3 import Tiles3, plan  # noqa: E402
from flashref.gpu.kernel3_bwd import TilesB, TilesQ  # noqa: E402

RUNS = kernel3.available() if torch.cuda.is_available() else False
WHY = kernel3.unavailable() if torch.cuda.is_available() else "no CUDA GPU"
needs_k3 = pytest.mark.skipif(not RUNS, reason=f"kernel 3 unavailable: {WHY}")


# ---------------------------------------------------------------------------------------------
# the dispatcher (pure Python: runs on CI)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d,Nq,Nk,dtype,causal,options,why", [
    (96, 4096, 4096, "float16", False, {}, "d=96"),
    (192, 4096, 4096, "float16", True, {}, "d=192"),
    (32, 4096, 4096, "bfloat16", False, {}, "d=32"),
    (128, 4096, 2048, "float16", False, {}, "Nq=4096 != Nk=2048"),
    (128, 1000, 1000, "float16", True, {}, "not a multiple"),
    (64, 4160, 4160, "bfloat16", False, {}, "not a multiple"),  # a multiple of 64, not of 128
    (128, 4096, 4096, "float32", False, {}, "float32"),
    (128, 4096, 4096, "float16", False, {"dropout_p": 0.1}, "dropout_p"),
    (64, 4096, 4096, "float16", True, {"window": (128, 0)}, "window"),
    (128, 4096, 4096, "float16", False, {"enable_gqa": True}, "enable_gqa"),
    (128, 4096, 4096, "float16", False, {"softcap": 30.0, "alibi_slopes": [0.5]}, "alibi_slopes"),
    (64, 4096, 4096, "float16", False, {"alibi_slopes": torch.tensor([0.5, 0.25])}, "alibi_slopes"),  # a tensor
    (64, 4096, 4096, "float16", False, {"window": (-1, 0)}, "window"),
    (64, 4096, 4096, "float16", False, {"dropout_p": torch.tensor(0.25)}, "dropout_p"),
    (64, 4096, 4096, "float16", False, {"dropout_p": 0.25, "seed": 7}, "dropout_p', 'seed"),
    (64, 0, 0, "float16", False, {}, "N=0"),
    (128, -128, -128, "float16", False, {}, "N=-128"),
    (64, 4096, 4096, "float16", False, {"enable_gqa": np.bool_(True)}, "enable_gqa"),
])
def test_plan_refuses_and_says_why(d, Nq, Nk, dtype, causal, options, why):
    t, reason = plan(d, Nq, Nk, dtype, causal, options)
    assert t is None and why in reason, reason


def test_options_asking_for_nothing_do_not_refuse():
    """An option left at a value that asks for nothing, numpy's scalars and 0-d tensors included, is not a reason to
    refuse; nor a seed without dropout (it draws nothing) nor a window unbounded both ways (no window, as attention
    reads it). Each of these sent a call to kernel 2."""
    for value in (None, 0.0, False, np.float32(0.0), np.bool_(False), np.int64(0), torch.tensor(0.0)):
        assert plan(64, 4096, 4096, "float16", False, {"dropout_p": value})[1] is None
    for options in ({"seed": 7}, {"seed": 7, "dropout_p": 0.0}, {"window": (-1, -1)}, {"window": [-1, -1]}):
        assert plan(64, 4096, 4096, "float16", False, options)[1] is None, options


def test_gqa_with_as_many_kv_heads_is_plain_attention_to_the_dispatcher(monkeypatch):
    """enable_gqa=True where k and v have q's heads asks for nothing (choose on tensors: plan cannot see heads);
    with fewer K/V heads kernel 3 does not take the call. (The device check is stubbed: no GPU here.)"""
    monkeypatch.setattr(kernel3, "unavailable", lambda device: None)
    monkeypatch.setattr(kernel3, "_not_a_tensor", lambda q, k, v: None)  # the stand-ins below are not tensors

    class Cuda:  # a tensor's stand-in on a "cuda" device: choose reads the device, the shapes and the layout
        def __init__(self, shape):
            self.shape, self.dtype, self.device = shape, torch.float16, torch.device("cuda")
            self.ndim = len(shape)

        def numel(self):
            return int(np.prod(self.shape))

        def is_contiguous(self):
            return True

        def data_ptr(self):
            return 0

    q = Cuda((1, 4, 4096, 64))
    assert kernel3.choose(q, q, q, False, enable_gqa=True)[0]
    kv = Cuda((1, 2, 4096, 64))
    ok, why = kernel3.choose(q, kv, kv, False, enable_gqa=True)
    assert not ok and "enable_gqa" in why


@pytest.mark.parametrize("d", kernel3.HEAD_DIMS)
@pytest.mark.parametrize("dtype", kernel3.DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [128, 4096, 16384])
def test_plan_takes_the_benchmark_shapes(d, dtype, causal, N):
    # options at their defaults (dropout 0, no window, gqa off) are no reason to fall back
    t, reason = plan(d, N, N, dtype, causal, {"dropout_p": 0.0, "window": None, "enable_gqa": False})
    assert reason is None and t == kernel3.TILES[(d, causal)]


def test_plan_checks_the_tiles():
    # 16 rows a warp (the wgmma layout), and the STAGES slots of K and V must fit in shared memory
    assert "16 rows per warp" in plan(128, 4096, 4096, "float16", False, tiles=Tiles3(128, 128, 4, 2))[1]
    big = Tiles3(128, 128, 8, 4)  # Q and 4 + 4 slots of K, V: 288 KB at d = 128, 144 KB at d = 64
    assert big.smem_bytes(128) == 2 * 128 * (128 + 8 * 128) + 8 * 9
    assert "shared memory" in plan(128, 4096, 4096, "float16", False, tiles=big)[1]
    assert plan(64, 4096, 4096, "float16", False, tiles=big) == (big, None)
    t = Tiles3(128, 64, 8, 2)
    assert plan(128, 4160, 4160, "float16", False, tiles=t)[1] is not None  # 4160 = 32.5 x 128 rows
    assert plan(128, 4224, 4224, "float16", False, tiles=t) == (t, None)
    assert "pingpong" in plan(64, 4096, 4096, "float16", False, tiles=Tiles3(64, 128, 4, 2, pingpong=True))[1]
    assert "emu=4" in plan(64, 4096, 4096, "float16", False, tiles=Tiles3(64, 128, 4, 2, emu=4))[1]  # no pingpong
    assert "emu=3" in plan(64, 4096, 4096, "float16", False, tiles=Tiles3(128, 128, 8, 3, pingpong=True, emu=3))[1]
    emu = Tiles3(128, 128, 8, 3, pingpong=True, emu=4)
    assert plan(64, 4096, 4096, "float16", True, tiles=emu) == (emu, None)
    assert kernel3._parse_tiles("128,128,8,3,pp,emu4") == emu
    per = Tiles3(128, 128, 8, 3, pingpong=True, persistent=True)
    assert kernel3._parse_tiles("128,128,8,3,pp,persist") == per
    assert plan(128, 4096, 4096, "float16", False, tiles=per) == (per, None)
    assert "persistent" in plan(128, 4096, 4096, "float16", False, tiles=Tiles3(128, 128, 8, 2, persistent=True))[1]
    qr = Tiles3(128, 128, 8, 3, pingpong=True, persistent=True, q_regs=True)
    assert kernel3._parse_tiles("128,128,8,3,pp,persist,qregs") == qr
    assert plan(64, 4096, 4096, "float16", False, tiles=qr) == (qr, None)
    assert "q_regs" in plan(64, 4096, 4096, "float16", False, tiles=Tiles3(64, 128, 4, 2, q_regs=True))[1]
    qp = Tiles3(128, 128, 8, 2, pingpong=True, persistent=True, q_prefetch=True)
    assert kernel3._parse_tiles("128,128,8,2,pp,persist,qpre") == qp
    assert plan(128, 4096, 4096, "float16", False, tiles=qp) == (qp, None)
    assert "q_prefetch" in plan(128, 4096, 4096, "float16", False, tiles=replace(qp, persistent=False))[1]
    # three consumer warpgroups (FA3's 192-row d = 64 tile): N a multiple of 64 rows and of BLOCK_N, so the last
    # tile of N = 4096 runs 128 rows past it (one warpgroup wholly past, storing nothing); d = 64 only
    t3 = Tiles3(192, 128, 12, 2, pingpong=True, persistent=True)
    assert kernel3._parse_tiles("192,128,12,2,pp,persist") == t3 and t3.consumers == 3
    assert plan(64, 4096, 4096, "float16", False, tiles=t3) == (t3, None)
    assert "multiple of 64 rows" in plan(64, 4032, 4032, "float16", False, tiles=t3)[1]  # 31.5 key blocks
    assert "three consumer warpgroups" in plan(128, 4096, 4096, "float16", False, tiles=t3)[1]
    # a two-consumer tile keeps whole tiles (its ragged case is not tested on a GPU): d = 256's 128 x 64 at N = 4160
    assert "multiple of 128 rows" in plan(256, 4160, 4160, "float16", False)[1]
    assert "12 warps" in plan(64, 3072, 3072, "float16", False, tiles=Tiles3(192, 128, 12, 2))[1]  # no pingpong
    assert "BLOCK_M=128 with 8 warps" in plan(64, 4096, 4096, "float16", False,
                                             tiles=Tiles3(256, 128, 16, 2, pingpong=True))[1]
    # O's own buffer: at d = 128 three K/V stages no longer fit (32 + 32 + 192 KB), two do (192 KB)
    assert qp.smem_bytes(128) - replace(qp, q_prefetch=False).smem_bytes(128) == 128 * 128 * 2
    assert "shared memory" in plan(128, 4096, 4096, "float16", False, tiles=replace(qp, stages=3))[1]
    dy = replace(qp, dynamic=True)
    assert kernel3._parse_tiles("128,128,8,2,pp,persist,qpre,dyn") == dy
    assert plan(128, 4096, 4096, "float16", True, tiles=dy) == (dy, None)
    assert "dynamic" in plan(128, 4096, 4096, "float16", True, tiles=replace(dy, persistent=False,
                                                                            q_prefetch=False))[1]
    # the barrier between rounds (Tiles3.round_sync): the static persistent launch only; None lets the shape decide
    rs = replace(qp, round_sync=True)
    assert kernel3._parse_tiles("128,128,8,2,pp,persist,qpre,sync") == rs
    assert kernel3._parse_tiles("128,128,8,2,pp,persist,qpre,nosync") == replace(qp, round_sync=False)
    assert plan(128, 4096, 4096, "float16", False, tiles=rs) == (rs, None)
    assert "round_sync" in plan(128, 4096, 4096, "float16", False, tiles=replace(dy, round_sync=True))[1]
    assert "round_sync" in plan(64, 4096, 4096, "float16", False, tiles=Tiles3(64, 128, 4, 2, round_sync=True))[1]


def test_round_sync_where_one_heads_k_and_v_outgrow_the_threshold():
    """kernel3.round_sync and kernel3_bwd.dq_round_sync: the barrier where 2·N·d·elem reaches
    ROUND_SYNC_KV_BYTES, for the static persistent forward and the non-causal dQ kernel; a tile's own
    round_sync overrides the shape's choice; the dynamic and one-tile-a-program forwards never take it."""
    lim = kernel3.ROUND_SYNC_KV_BYTES
    n_at = lim // (2 * 128 * 2)  # the shortest N at d = 128, fp16, that reaches it
    fwd = kernel3.TILES[(128, False)]
    assert not kernel3.round_sync(fwd, n_at - 128, 128) and kernel3.round_sync(fwd, n_at, 128)
    assert kernel3.round_sync(fwd, n_at // 2, 128, elem=4)  # fp32 bytes: half the length
    assert not kernel3.round_sync(replace(fwd, round_sync=False), 10 * n_at, 128)
    assert kernel3.round_sync(replace(fwd, round_sync=True), 128, 128)
    assert not kernel3.round_sync(kernel3.TILES[(128, True)], 10 * n_at, 128)  # dynamic
    assert not kernel3.round_sync(replace(fwd, persistent=False, q_prefetch=False), 10 * n_at, 128)
    tq = kernel3_bwd.BWD_TILES[(128, False)].dq_tiles
    assert not kernel3_bwd.dq_round_sync(tq, n_at - 128, 128, False) and kernel3_bwd.dq_round_sync(tq, n_at, 128, False)
    assert not kernel3_bwd.dq_round_sync(tq, 10 * n_at, 128, True)  # causal: longest rows first, never
    assert kernel3_bwd.dq_round_sync(replace(tq, round_sync=True), 128, 128, False)
    assert not kernel3_bwd.dq_round_sync(replace(tq, round_sync=False), 10 * n_at, 128, False)
    causal_rs = replace(kernel3_bwd.BWD_TILES[(128, True)], dq_tiles=replace(tq, round_sync=True))
    assert "round_sync" in kernel3_bwd.plan(128, 4096, 4096, "float16", True, tiles=causal_rs)[1]


def test_unavailable_says_why_on_this_machine():
    why = kernel3.unavailable()
    import triton
    if triton.__version__ != kernel3.TRITON_VERSION:
        assert kernel3.TRITON_VERSION in why and triton.__version__ in why
    elif INTERPRET:
        assert "interpreter" in why
    elif not torch.cuda.is_available():
        assert why == "no CUDA GPU"
    assert (why is None) == kernel3.available()


def test_choose_and_fallback_to_kernel2():
    """Where kernel 3 cannot run (here: any CPU tensor; on a GPU also d = 96), kernel3.attention is
    gpu.attention: same output, bit for bit, and the reason is given."""
    device = DEVICE
    dtype = torch.float16 if device == "cuda" else torch.float32
    d = 96 if device == "cuda" else 16
    q, k, v, _ = _inputs(1, 2, 40, 40, d, dtype, seed=3, device=device)
    ok, why = kernel3.choose(q, k, v, causal=True)
    assert not ok and isinstance(why, str) and why
    o3 = kernel3.attention(q, k, v, causal=True)
    o2 = gpu.attention(q, k, v, causal=True)
    assert torch.equal(o3, o2)


def test_which_kernel_names_the_kernel_and_why():
    """gpu.which_kernel: kernel 3 where it takes the call (a Hopper GPU), else kernel 2 and kernel 3's
    refusal; an explicit Config names its kernel; options are checked as attention checks them."""
    from flashref.gpu.kernels import Config
    device = DEVICE
    q, k, v, _ = _inputs(1, 2, 256, 256, 64, torch.float16, seed=0, device=device)
    said = gpu.which_kernel(q, k, v, causal=True)
    ok, why = kernel3.choose(q, k, v, causal=True)
    if ok:
        assert said == "kernel 3 (backward: kernel 3)"
    else:
        assert said.startswith("kernel 2:") and why in said
    assert gpu.which_kernel(q, k, v, config=Config(version=1)).startswith("kernel 1:")
    assert gpu.which_kernel(q, k, v, config=Config()).startswith("kernel 2:")
    assert gpu.which_kernel(q, k, v, dropout_p=0.1).startswith("kernel 2:")  # kernel 3 has no dropout
    with pytest.raises(TypeError, match="is_causal"):
        gpu.which_kernel(q, k, v, is_causal=True)


def test_tensor_refusal_empty_misaligned_and_gqa():
    """The rules that need tensors, not shapes: the aligned, equal-shaped tensors pass; an empty head axis,
    a view 2 bytes past an aligned start, and fewer K/V heads do not."""
    q, k, v, _ = _inputs(1, 2, 256, 256, 64, torch.float16, seed=0, device="cpu")
    assert kernel3.tensor_refusal(q, k, v) is None
    assert "empty" in kernel3.tensor_refusal(q[:, :0], k[:, :0], v[:, :0])
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)  # contiguous, misaligned
    assert "aligned" in kernel3.tensor_refusal(shifted, k, v)
    assert kernel3.tensor_refusal(shifted.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) is None  # copied
    assert "differs" in kernel3.tensor_refusal(q, k[:, :1], v[:, :1])


# ---------------------------------------------------------------------------------------------
# the kernel (a Hopper GPU, Triton 3.6.0)
# ---------------------------------------------------------------------------------------------

GRID = [(d, N, causal, dtype) for d in (64, 128) for N in (128, 256, 640, 2048) for causal in (False, True)
        for dtype in (torch.float16, torch.bfloat16)]


def _check3(B, H, N, d, dtype, causal, seed, scale=None, grads=False, tiles=None):
    q, k, v, do = _inputs(B, H, N, N, d, dtype, seed)
    tau = 1.0 / math.sqrt(d) if scale is None else scale
    ok, t = kernel3.choose(q, k, v, causal)
    assert ok, t
    o, L2 = kernel3.forward(q, k, v, causal, tau, tiles=tiles)
    truth = _attention(q, k, v, do, causal, tau, None, torch.float64)
    plain = _attention(q, k, v, do, causal, tau, None, dtype)
    assert torch.isfinite(o).all() and torch.isfinite(L2).all()
    e, e_plain = _err(o, truth[0]), _err(plain[0], truth[0])
    assert e <= 2 * e_plain + ATOL[dtype], (e, e_plain)
    # L2: the base-2 log-sum-exp of the scaled scores, in float64 from the inputs
    S = (q.double() @ k.double().transpose(-1, -2)) * tau
    if causal:
        S = S.masked_fill(~torch.ones(N, N, dtype=torch.bool, device=S.device).tril(), float("-inf"))
    L2_ref = torch.logsumexp(S, -1) / math.log(2.0)
    assert _err(L2, L2_ref) < 1e-3 * max(1.0, float(L2_ref.abs().max())), _err(L2, L2_ref)
    if grads:
        q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
        o_ = kernel3.attention(q_, k_, v_, causal=causal, scale=scale)
        assert torch.equal(o_, o)  # the same kernel 3 forward
        o_.backward(do)
        for name, got, pl, ref in zip(("dq", "dk", "dv"), (q_.grad, k_.grad, v_.grad), plain[1:], truth[1:]):
            bound = 3 * _err(pl, ref) + ATOL[dtype] * max(1.0, float(ref.abs().max()))
            assert _err(got, ref) <= bound, (name, _err(got, ref), _err(pl, ref))
    return o, L2


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", GRID)
def test_kernel3_two_oracles(d, N, causal, dtype):
    _check3(2, 3, N, d, dtype, causal, seed=d + N + causal)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", [g for g in GRID if g[1] in (128, 2048)])
def test_kernel3_pingpong_two_oracles(d, N, causal, dtype):
    """The warp-specialised version (producer warp, two consumer warpgroups taking turns)."""
    _check3(2, 3, N, d, dtype, causal, seed=d + N + causal, tiles=Tiles3(128, 128, 8, 2, pingpong=True))
    _check3(1, 2, N, d, dtype, causal, seed=1, scale=4.0, tiles=Tiles3(128, 128, 8, 2, pingpong=True))


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel3_persistent_equals_one_program_per_tile(d, causal, dtype):
    """Tiles3.persistent: one program per SM looping over the tiles (512 tiles here, so each program runs
    three or four, its K/V ring and the turn mbarriers carried across them). The oracle, and bit-equality with
    the one-program-per-tile launch of the same tiles: each tile is computed by the same instructions."""
    t = Tiles3(128, 128, 8, 3, pingpong=True, persistent=True)
    o, L2 = _check3(2, 16, 2048, d, dtype, causal, seed=d + causal, tiles=t)
    q, k, v, _ = _inputs(2, 16, 2048, 2048, d, dtype, d + causal)
    o1, L21 = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, persistent=False))
    assert torch.equal(o, o1) and torch.equal(L2, L21)
    for hf in (False, True):  # heads first: the other tile order
        oh, _ = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, heads_first=hf))
        assert torch.equal(oh, o1)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N", [128, 2048])
def test_kernel3_q_prefetch_equals_persistent(d, causal, dtype, N):
    """Tiles3.q_prefetch: O_i staged in its own buffer, Q_i's handed back after a tile's last S product so the
    next tile's Q_i loads early. The oracle, and bit-equality with the persistent kernel that stages O_i in Q_i's
    buffer: only when the loads and stores happen moves, not what is computed. N = 128: one K/V block a tile
    (Q_i released after the first S product); N = 2048 with 32 heads: 512 tiles, three or four a program."""
    t = Tiles3(128, 128, 8, 2, pingpong=True, persistent=True, q_prefetch=True)
    H = 16 if N == 2048 else 300  # 600 one-block tiles: more than one a program
    o, L2 = _check3(2, H, N, d, dtype, causal, seed=d + causal + N, tiles=t)
    q, k, v, _ = _inputs(2, H, N, N, d, dtype, d + causal + N)
    o1, L21 = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, q_prefetch=False))
    assert torch.equal(o, o1) and torch.equal(L2, L21)
    oq, _ = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, q_regs=True))  # Q_i in registers too
    assert torch.equal(oq, o1)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,stages,q_prefetch", [(64, 3, True), (128, 2, True), (256, 2, False)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [128, 2048])
def test_kernel3_dynamic_equals_one_program_per_tile(d, stages, q_prefetch, causal, N):
    """Tiles3.dynamic: one program per SM, each claiming its next tile from an atomic counter and handing it to
    its consumer warpgroups through a ring in shared memory. Every tile is computed once, by the same
    instructions as one program a tile: the oracle, and bit-equality with that launch. N = 128 with 300 heads:
    600 one-block tiles; N = 2048 with 16: 512 tiles of 1-16 blocks causal (d = 256: 64 keys a step)."""
    bn = 64 if d == 256 else 128
    t = Tiles3(128, bn, 8, stages, pingpong=True, persistent=True, q_prefetch=q_prefetch, dynamic=True)
    H = 16 if N == 2048 else 300
    o, L2 = _check3(2, H, N, d, torch.float16, causal, seed=d + causal + N + 7, tiles=t)
    q, k, v, _ = _inputs(2, H, N, N, d, torch.float16, d + causal + N + 7)
    o1, L21 = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, persistent=False, q_prefetch=False,
                                                                        dynamic=False))
    assert torch.equal(o, o1) and torch.equal(L2, L21)
    for _ in range(3):  # the counter starts from zero at every call
        assert torch.equal(kernel3.forward(q, k, v, causal, d ** -0.5, tiles=t)[0], o1)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N", [128, 640, 2048])
def test_kernel3_three_consumers_two_oracles(causal, dtype, N):
    """FA3's d = 64 tile: 192 rows, three consumer warpgroups taking turns in a ring. N = 128, 640, 2048 are not
    multiples of 192, so each head's last tile runs past N by one or two whole warpgroups, which read the next
    head's rows (or the TMA unit's zeros past the tensor) and store nothing. The oracle for every launch (one
    program a tile; persistent; persistent with q_prefetch; dynamic), and bit-equality among them."""
    t = Tiles3(192, 128, 12, 2, pingpong=True)
    o, L2 = _check3(2, 3, N, 64, dtype, causal, seed=N + causal + 5, tiles=t)
    q, k, v, _ = _inputs(2, 3, N, N, 64, dtype, N + causal + 5)
    for other in (replace(t, persistent=True), replace(t, persistent=True, q_prefetch=True),
                  replace(t, persistent=True, q_prefetch=True, dynamic=True), replace(t, stages=3)):
        o1, L21 = kernel3.forward(q, k, v, causal, 64 ** -0.5, tiles=other)
        assert torch.equal(o1, o) and torch.equal(L21, L2), other
    H = 16 if N == 2048 else 100  # more tiles than programs: each persistent program runs several
    _check3(1, H, N, 64, dtype, causal, seed=N + 3, scale=4.0, tiles=replace(t, persistent=True, dynamic=causal))


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", [g for g in GRID if g[1] in (256, 2048)])
def test_kernel3_q_in_registers_two_oracles(d, N, causal, dtype):
    """Tiles3.q_regs: each warpgroup's Q_i loaded into registers once, the A operand of every S product. The
    oracle, and bit-equality with the same tiles reading Q_i from shared memory (the same products)."""
    t = Tiles3(128, 128, 8, 3, pingpong=True, q_regs=True)
    o, L2 = _check3(2, 3, N, d, dtype, causal, seed=d + N + 41, tiles=t)
    _check3(1, 2, N, d, dtype, causal, seed=43, scale=4.0, tiles=replace(t, persistent=not causal))
    q, k, v, _ = _inputs(2, 3, N, N, d, dtype, d + N + 41)
    o1, L21 = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=replace(t, q_regs=False))
    assert torch.equal(o, o1) and torch.equal(L2, L21)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("emu", [2, 4, 8])
@pytest.mark.parametrize("d,N,causal,dtype", [g for g in GRID if g[1] in (256, 2048)])
def test_kernel3_fma_exponentials_two_oracles(emu, d, N, causal, dtype):
    """Tiles3.emu: every emu-th step's exponentials by exp2.py's polynomial on the FMA units (the L2 check
    included: ℓ_i sums the emulated P̃)."""
    t = Tiles3(128, 128, 8, 3, pingpong=True, emu=emu)
    _check3(2, 3, N, d, dtype, causal, seed=d + N + emu, tiles=t)
    _check3(1, 2, N, d, dtype, causal, seed=emu, scale=4.0, tiles=t)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("N", [128, 256, 640, 2048])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel3_d256_two_oracles(N, causal, dtype):
    """d = 256: the pingpong forward with 128 x 64 tiles (O is 128 registers a thread), its gradients through
    kernel 2's backward (kernel 3's backward takes d in 64, 128 only)."""
    assert kernel3.backward_plan(256, N, N, "float16", causal)[0] is None
    _check3(2, 3, N, 256, dtype, causal, seed=N + causal, grads=N <= 640)
    _check3(1, 2, N, 256, dtype, causal, seed=7, scale=4.0)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,causal", [(64, False), (128, True)])
def test_kernel3_with_kernel2_backward(d, causal):
    _check3(1, 2, 512, d, torch.bfloat16, causal, seed=11, grads=True)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,causal", [(64, False), (64, True), (128, False), (128, True)])
def test_attention_runs_kernel3_by_default(d, causal):
    """gpu.attention without a config is kernel 3 where it takes the call: output and gradients bit-equal
    to kernel3.attention's; with kernels.Config() it is kernel 2, held to the same oracle."""
    from flashref.gpu.kernels import Config
    q, k, v, do = _inputs(2, 3, 384, 384, d, torch.float16, seed=d + causal)
    assert gpu.which_kernel(q, k, v, causal=causal) == "kernel 3 (backward: kernel 3)"
    runs = []
    for fn in (gpu.attention, kernel3.attention):
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        o = fn(*xs, causal=causal)
        o.backward(do)
        runs.append([o] + [x.grad for x in xs])
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    assert gpu.which_kernel(q, k, v, causal=causal, config=Config()).startswith("kernel 2")
    o2 = gpu.attention(q, k, v, causal=causal, config=Config())
    truth = _attention(q, k, v, do, causal, 1 / math.sqrt(d), None, torch.float64)[0]
    plain = _attention(q, k, v, do, causal, 1 / math.sqrt(d), None, torch.float16)[0]
    assert _err(o2, truth) <= 2 * _err(plain, truth) + ATOL[torch.float16]


@needs_k3
@pytest.mark.cuda
def test_attention_edge_cases_on_the_kernel3_path():
    """An empty batch, a misaligned view and double backward, where the shape alone would pick kernel 3."""
    from flashref.gpu.kernels import Config
    q, k, v, do = _inputs(1, 2, 256, 256, 64, torch.float16, seed=5)
    assert gpu.attention(q[:0], k[:0], v[:0]).shape == (0, 2, 256, 64)
    flat = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)
    shifted = flat[1:].view(q.shape)
    shifted.copy_(q)
    assert "aligned" in gpu.which_kernel(shifted, k, v)
    assert torch.equal(gpu.attention(shifted, k, v), gpu.attention(q, k, v, config=Config()))
    xs = [x.clone().requires_grad_() for x in (q, k, v)]
    o = gpu.attention(*xs)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(o.sum(), xs[0], create_graph=True)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_large_logits_force_rescaling(causal):
    # scale 4: rows' maxima grow block after block, so every O_i rescale (FA3 Alg.2 l.14) matters
    _check3(1, 2, 1024, 128, torch.float16, causal, seed=5, scale=4.0)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
def test_kernel3_equals_kernel2_on_a_long_row(d):
    # N = 8192, causal: kernel 3's O and L2 against kernel 2's (both fp32 inside; fp16 out)
    q, k, v, _ = _inputs(1, 4, 8192, 8192, d, torch.float16, seed=d)
    o3, L3 = kernel3.forward(q, k, v, True, d ** -0.5)
    o2, lse2 = gpu.forward(q, k, v, causal=True)
    assert (o3.float() - o2.float()).abs().max() < 4e-3
    assert (L3 * math.log(2.0) - lse2).abs().max() < 1e-3


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("tiles", [Tiles3(128, 64, 8, 2), Tiles3(128, 128, 8, 3), Tiles3(64, 128, 4, 2),
                                   Tiles3(128, 128, 8, 2, pingpong=True), Tiles3(128, 64, 8, 2, pingpong=True)])
def test_kernel3_other_tiles(tiles):
    for d in (64, 128):
        if plan(d, 1536, 1536, "float16", True, tiles=tiles)[1]:
            continue
        q, k, v, do = _inputs(1, 2, 1536, 1536, d, torch.float16, seed=7)
        for causal in (False, True):
            o, _ = kernel3.forward(q, k, v, causal, d ** -0.5, tiles=tiles)
            truth = _attention(q, k, v, do, causal, d ** -0.5, None, torch.float64)[0]
            plain = _attention(q, k, v, do, causal, d ** -0.5, None, torch.float16)[0]
            assert _err(o, truth) <= 2 * _err(plain, truth) + ATOL[torch.float16], (d, causal, tiles)


# ---------------------------------------------------------------------------------------------
# kernel 3's backward (flashref/gpu/kernel3_bwd.py): the dispatcher on CI, the kernel on a Hopper GPU
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d,Nq,Nk,dtype,options,why", [
    (96, 4096, 4096, "float16", {}, "d=96"),
    (256, 4096, 4096, "float16", {}, "d=256"),  # kernel 3's forward takes it, its backward does not
    (128, 4096, 2048, "float16", {}, "Nq=4096 != Nk=2048"),
    (64, 4160, 4160, "bfloat16", {}, "not a multiple"),  # a multiple of 64, not of BLOCK_N = 128
    (128, 4096, 4096, "float32", {}, "float32"),
    (128, 4096, 4096, "float16", {"dropout_p": 0.1}, "dropout_p"),
    (64, 4096, 4096, "float16", {"window": (128, 0)}, "window"),
])
def test_backward_plan_refuses_and_says_why(d, Nq, Nk, dtype, options, why):
    t, reason = kernel3_bwd.plan(d, Nq, Nk, dtype, True, options)
    assert t is None and why in reason, reason


@pytest.mark.parametrize("d", kernel3_bwd.BWD_HEAD_DIMS)
@pytest.mark.parametrize("N", [128, 4096, 16384])
def test_backward_plan_takes_the_benchmark_shapes(d, N):
    for dtype in kernel3.DTYPES:
        for causal in (False, True):
            t, reason = kernel3_bwd.plan(d, N, N, dtype, causal, {"dropout_p": 0.0, "window": None})
            assert reason is None and t == kernel3_bwd.BWD_TILES[(d, causal)]
            assert t.smem_bytes(d) <= kernel3.SMEM_LIMIT


def test_backward_plan_checks_the_tiles():
    # two consumer warpgroups of 64 keys (BLOCK_N = 128) and 64 rows a step; the slots must fit
    assert "two consumer warpgroups" in kernel3_bwd.plan(128, 4096, 4096, "float16", False,
                                                         tiles=TilesB(128, 128, 2))[1]
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=TilesB(128, 128, 2)) == (TilesB(128, 128, 2), None)
    assert "BLOCK_N=128" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=TilesB(64, 64, 2))[1]
    big = TilesB(64, 128, 5)  # K, V + 5 slots of Q, dO + 2 of dS: 256 KB + 16 mbarriers at d = 128
    assert big.smem_bytes(128) == 2 * (2 * 128 * 128 + 10 * 64 * 128 + 2 * 128 * 64) + 8 * 16
    assert "shared memory" in kernel3_bwd.plan(128, 4096, 4096, "float16", False, tiles=big)[1]
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=big) == (big, None)


def test_choose_backward():
    """A kernel 2 Config keeps kernel 2's backward; deterministic=True takes kernel 3's without atomics."""
    from flashref.gpu.kernels import Config
    q, k, v, _ = _inputs(1, 2, 256, 256, 64, torch.float16, seed=1, device="cpu")
    assert kernel3.choose_backward(q, k, v, True, False) == (True, kernel3_bwd.BWD_TILES[(64, True)])
    assert kernel3.choose_backward(q, k, v, False, False) == (True, kernel3_bwd.BWD_TILES[(64, False)])
    # where attention() uses it by default: the (d, causal) where it measured faster than kernel 2's
    assert kernel3.BACKWARD3 <= set(kernel3_bwd.BWD_TILES)
    # deterministic=True: kernel 3's atomic-free mode (the dK/dV kernel and the separate dQ kernel)
    ok, t = kernel3.choose_backward(q, k, v, True, True)
    assert ok and t.dq == 0, t
    assert kernel3.choose_backward(q, k, v, False, True)[1].dq == 0
    ok, why = kernel3.choose_backward(q, k, v, False, False, config=Config())
    assert not ok and "Config" in why
    q96, k96, v96, _ = _inputs(1, 2, 256, 256, 96, torch.float16, seed=1, device="cpu")
    ok, why = kernel3.choose_backward(q96, k96, v96, False, False)
    assert not ok and "d=96" in why


def test_backward_plan_is_the_one_decision():
    """backward_plan (shape only) is what backward_tiles (tensors) returns, what bench reports and what the L2
    model runs: kernel 3's backward where BACKWARD3 lists (d, causal), kernel 2's elsewhere."""
    from flashref.gpu import bench
    from flashref.iomodel.dram import kernel3_tiles
    for d, causal in sorted(kernel3.BACKWARD3):
        tb = kernel3.backward_plan(d, 4096, 4096, "float16", causal)
        assert tb == (kernel3_bwd.BWD_TILES[(d, causal)], None)
        q, k, v, _ = _inputs(1, 1, 256, 256, d, torch.float16, seed=1, device="cpu")
        assert kernel3.backward_tiles(q, k, v, causal, False) == kernel3.backward_plan(d, 256, 256, "float16", causal)
        assert kernel3_tiles(d, 4096, 4096, causal)[1] == tb[0]
        assert bench._flashref_configs("flashref3", d, causal, "fwd_bwd", 4096)["dkdv"].endswith("kernel3")
    assert kernel3.backward_plan(64, 4096, 4096, "float16", False, backward3=False) == (None, "backward3=False")
    assert "d=96" in kernel3.backward_plan(96, 4096, 4096, "float16", False, backward3=True)[1]
    assert kernel3.backward_plan(64, 4096, 4096, "float16", True, deterministic=True)[0].dq == 0


def _check_bwd(B, H, N, d, dtype, causal, seed, scale=None, tiles=None):
    """kernel3_bwd.backward on kernel 3's O and L2, and through kernel3.attention(backward3=True), against
    the float64 oracle with the two-oracle rule (gradients: three times plain attention's error in dtype)."""
    q, k, v, do = _inputs(B, H, N, N, d, dtype, seed)
    tau = 1.0 / math.sqrt(d) if scale is None else scale
    truth = _attention(q, k, v, do, causal, tau, None, torch.float64)
    plain = _attention(q, k, v, do, causal, tau, None, dtype)
    o, L2 = kernel3.forward(q, k, v, causal, tau)
    grads = kernel3_bwd.backward(q, k, v, o, L2, do, causal, tau, tiles=tiles)
    q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
    kernel3.attention(q_, k_, v_, causal=causal, scale=scale, backward3=True).backward(do)
    if tiles is not None:  # other tiles than the default's: the autograd path runs the default
        q_.grad, k_.grad, v_.grad = grads
    for name, got, via, pl, ref in zip(("dq", "dk", "dv"), grads, (q_.grad, k_.grad, v_.grad), plain[1:], truth[1:]):
        assert torch.isfinite(got).all(), name
        bound = 3 * _err(pl, ref) + ATOL[dtype] * max(1.0, float(ref.abs().max()))
        assert _err(got, ref) <= bound, (name, _err(got, ref), _err(pl, ref))
        # the same kernels through autograd (dQ's atomic adds may land in another order: rounding only)
        assert _err(via, got) <= 1e-2 * max(1.0, float(ref.abs().max())), (name, _err(via, got))


BWD_GRID = [(d, N, causal, dtype) for d in (64, 128) for N in (128, 256, 640, 2048) for causal in (False, True)
            for dtype in (torch.float16, torch.bfloat16)]


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", BWD_GRID)
def test_kernel3_backward_two_oracles(d, N, causal, dtype):
    # the atomic dQ (the default runs in the atomic-free tests below)
    _check_bwd(2, 3, N, d, dtype, causal, seed=d + N + causal + 7, tiles=kernel3_bwd.ATOMIC_TILES[(d, causal)])


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,causal", [(64, False), (128, True), (128, False)])
def test_kernel3_backward_large_logits(d, causal):
    # scale 4: sharp rows (P near one-hot), exp2(S·τ − L) far from uniform
    _check_bwd(1, 2, 1024, d, torch.float16, causal, seed=13, scale=4.0, tiles=kernel3_bwd.ATOMIC_TILES[(d, causal)])


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
def test_kernel3_backward_equals_kernel2(d):
    # N = 4096, causal and not: kernel 3's gradients against kernel 2's on the same O and L2 (fp32 inside both)
    from flashref.gpu import _backward
    from flashref.gpu.kernels import NO_VARIANTS, Config
    q, k, v, do = _inputs(1, 4, 4096, 4096, d, torch.float16, seed=d + 1)
    for causal in (False, True):
        o, L2 = kernel3.forward(q, k, v, causal, d ** -0.5)
        g3 = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=kernel3_bwd.ATOMIC_TILES[(d, causal)])
        cfg = Config().resolve(d, causal, False)
        g2 = _backward(q, k, v, o, L2, do, causal, d ** -0.5, False, cfg, None, NO_VARIANTS)
        for name, a, b in zip(("dq", "dk", "dv"), g3, g2):
            scale_ = max(1.0, float(b.abs().max()))
            assert _err(a, b) <= 2e-2 * scale_, (name, causal, _err(a, b), scale_)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("tiles", [TilesB(64, 128, 3), TilesB(64, 128, 2, dq=2), TilesB(64, 128, 3, dq=2),
                                   TilesB(64, 128, 2, dq=4), TilesB(128, 128, 2), TilesB(64, 128, 2, dq=2, vec4=True)])
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_backward_other_tiles(tiles, causal):
    for d in (64, 128):
        for N in (128, 640):
            if kernel3_bwd.plan(d, N, N, "float16", causal, tiles=tiles)[1] is None:
                _check_bwd(2, 3, N, d, torch.float16, causal, seed=d + N, tiles=tiles)


# ---------------------------------------------------------------------------------------------
# kernel 3's atomic-free backward (TilesB.dq = 0): the dK/dV kernel without dQ, then the dQ kernel
# ---------------------------------------------------------------------------------------------

def test_separate_plan():
    for (d, causal), t in kernel3_bwd.SEPARATE_TILES.items():
        assert t.dq == 0
        for N in (128, 4096, 16384):
            assert kernel3_bwd.plan(d, N, N, "float16", causal, tiles=t) == (t, None)
        assert t.dq_tiles.smem_bytes(d) <= kernel3.SMEM_LIMIT
    sep = TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(32, 2))
    assert "BLOCK_N in (64, 128)" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=sep)[1]
    sep = TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(64, 1))
    assert "2 K/V stages" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=sep)[1]
    big = TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(128, 3))  # Q, dO + 3 x (K, V) of 128 rows: 256 KB at d = 128
    assert big.dq_tiles.smem_bytes(128) == 2 * 128 * (256 + 768) + 8 * 15
    assert "dQ kernel tiles" in kernel3_bwd.plan(128, 4096, 4096, "float16", False, tiles=big)[1]
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=big) == (big, None)
    assert "dq=3" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=TilesB(64, 128, 2, dq=3))[1]
    # the pipelined dK/dV kernel (pipe) exists only without dQ, and has no dS buffer
    piped = TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(128, 3), pipe=True)
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", True, tiles=piped) == (piped, None)
    assert "pipe=True needs dq=0" in kernel3_bwd.plan(64, 4096, 4096, "float16", False,
                                                      tiles=TilesB(64, 128, 2, dq=2, pipe=True))[1]
    assert TilesB(64, 128, 3, dq=0).smem_bytes(64) - piped.smem_bytes(64) == 2 * 2 * 128 * 64 + 8 * 2
    tma = TilesB(64, 128, 4, dq=4, pipe=True)  # each warpgroup's dQ by a TMA reduce-add (d = 64)
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=tma) == (tma, None)
    for bad in (replace(tma, block_m=128), replace(tma, vec4=True)):
        assert "dq=4: d=64, BLOCK_M=64" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=bad)[1]
    assert "dq=4: d=64" in kernel3_bwd.plan(128, 4096, 4096, "float16", False, tiles=replace(tma, stages=2))[1]
    # one dS_ijᵀ buffer (64 keys x BLOCK_M) and one fp32 dQ_i staging tile (BLOCK_M x d) per warpgroup
    assert tma.smem_bytes(64) - replace(tma, dq=0).smem_bytes(64) == 2 * 64 * 64 * 2 + 2 * 64 * 64 * 4
    assert "side_stream=True needs dq=0" in kernel3_bwd.plan(64, 4096, 4096, "float16", False,
                                                            tiles=TilesB(64, 128, 2, dq=2, side_stream=True))[1]
    wide = TilesB(128, 128, 2, dq=0, wide=True)
    assert kernel3_bwd.plan(64, 4096, 4096, "float16", True, tiles=wide) == (wide, None)
    for bad in (replace(wide, pipe=True), replace(wide, block_m=64), replace(wide, dq=2)):
        assert "wide=True" in kernel3_bwd.plan(64, 4096, 4096, "float16", False, tiles=bad)[1]
    assert kernel3_bwd.plan(128, 4096, 4096, "float16", False, tiles=wide)[0] is None  # d = 64 only
    assert wide.smem_bytes(64) == 2 * (2 * 128 * 64 + 2 * 2 * 128 * 64 + 2 * 128 * 128) + 8 * (2 + 4 + 4)
    assert "kv_regs=True needs pipe=True" in kernel3_bwd.plan(64, 4096, 4096, "float16", False,
                                                             tiles=TilesB(64, 128, 3, dq=0, kv_regs=True))[1]
    assert "persistent=True needs pipe=True" in kernel3_bwd.plan(64, 4096, 4096, "float16", False,
                                                                tiles=TilesB(64, 128, 3, dq=0, persistent=True))[1]


def test_parse_tiles():
    assert kernel3_bwd._parse_tiles("64,128,2,2,1")[1] == TilesB(64, 128, 2, 2, True)
    assert kernel3_bwd._parse_tiles("64,128,2,0,0,64,3,1")[1] == TilesB(64, 128, 2, 0, False, TilesQ(64, 3, True))
    assert kernel3_bwd._parse_tiles("64,128,3,0,0,128,3,1,1")[1] == TilesB(64, 128, 3, 0, False, TilesQ(128, 3, True),
                                                                           pipe=True)
    assert kernel3_bwd._parse_tiles("64,128,4,0,0,128,3,1,1,1")[1] == TilesB(64, 128, 4, 0, False, TilesQ(128, 3, True),
                                                                             pipe=True, persistent=True)
    assert kernel3_bwd._parse_tiles("64,128,4,0,0,128,3,1,1,0,kv_regs=1,qdo_regs=1")[1] == TilesB(
        64, 128, 4, 0, False, TilesQ(128, 3, True, qdo_regs=True), pipe=True, kv_regs=True)
    with pytest.raises(ValueError, match="kv_reg"):
        kernel3_bwd._parse_tiles("64,128,4,kv_reg=1")
    assert kernel3_bwd._parse_tiles("64,128,3,0,0,64,4,1,0,0,side_stream=1")[1] == TilesB(
        64, 128, 3, 0, False, TilesQ(64, 4, True), side_stream=True)


def test_deterministic_attention_falls_back_where_the_dq_kernel_cannot():
    # the dispatcher: N = 4096 at d = 64 takes the dQ kernel; kernel 2 Config still wins
    from flashref.gpu.kernels import Config
    q, k, v, _ = _inputs(1, 2, 4096, 4096, 64, torch.float16, seed=1, device="cpu")
    assert kernel3.choose_backward(q, k, v, True, True, config=Config())[0] is False
    ok, t = kernel3.choose_backward(q, k, v, True, True)
    default = kernel3_bwd.BWD_TILES[(64, True)]
    assert ok and t == (default if default.dq == 0 else kernel3_bwd.SEPARATE_TILES[(64, True)])


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", BWD_GRID)
def test_kernel3_separate_backward_two_oracles(d, N, causal, dtype):
    _check_bwd(2, 3, N, d, dtype, causal, seed=d + N + causal + 17, tiles=kernel3_bwd.SEPARATE_TILES[(d, causal)])


SEPARATE_VARIANTS = [TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(64, 3)),
                     TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(128, 2)),
                     TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(128, 3)),
                     TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(64, 3)),
                     TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(64, 3, False)),
                     TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(128, 3)),
                     TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(64, 4))]
# the pipelined dK/dV kernel (TilesB.pipe): 2 and 3 Q/dO stages, with either dQ kernel
PIPE_VARIANTS = [TilesB(64, 128, 2, dq=0, dq_tiles=TilesQ(128, 3), pipe=True),
                 TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(128, 3), pipe=True),
                 TilesB(64, 128, 3, dq=0, dq_tiles=TilesQ(64, 4), pipe=True),
                 # 128 query rows a step (d = 64 only): P kept in the input dtype
                 TilesB(128, 128, 2, dq=0, dq_tiles=TilesQ(128, 3)),
                 TilesB(128, 128, 3, dq=0, dq_tiles=TilesQ(128, 3)),
                 # the A operands of S and dP in registers: K_j, V_j in the dK/dV kernel, Q_i, dO_i in the dQ kernel
                 TilesB(64, 128, 4, dq=0, dq_tiles=TilesQ(128, 3, qdo_regs=True), pipe=True, kv_regs=True),
                 TilesB(64, 128, 4, dq=0, dq_tiles=TilesQ(64, 4, qdo_regs=True), pipe=True, kv_regs=True)]


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("tiles", SEPARATE_VARIANTS + PIPE_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_separate_backward_variants(tiles, causal):
    for d in (64, 128):
        for N in (128, 640):
            if kernel3_bwd.plan(d, N, N, "float16", causal, tiles=tiles)[1] is None:
                _check_bwd(2, 3, N, d, torch.float16, causal, seed=d + N + 3, tiles=tiles)
                _check_bwd(1, 2, N, d, torch.float16, causal, seed=d + N + 4, scale=4.0, tiles=tiles)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("N", [128, 2048])
def test_round_barrier_changes_nothing_computed(d, N):
    """Tiles3.round_sync and TilesQ.round_sync forced on at short N, where the shape alone would not take them:
    the forward's O and L and the backward's dQ, dK, dV equal those without the barrier bit for bit (it moves when a
    program starts its next tile, not what it computes); the dQ kernel then runs persistent, one program per SM
    (N = 128 with 300 heads: 600 one-block tiles; N = 2048 with 16: 512 tiles, three or four a program), and its
    counter starts from zero at every call."""
    H = 16 if N == 2048 else 300
    q, k, v, do = _inputs(2, H, N, N, d, torch.float16, d + N + 31)
    tau = d ** -0.5
    fwd = kernel3.TILES[(d, False)]
    o, L2 = kernel3.forward(q, k, v, False, tau, tiles=replace(fwd, round_sync=False))
    for _ in range(2):
        os_, L2s = kernel3.forward(q, k, v, False, tau, tiles=replace(fwd, round_sync=True))
        assert torch.equal(os_, o) and torch.equal(L2s, L2)
    bwd = kernel3_bwd.BWD_TILES[(d, False)]
    plain = kernel3_bwd.backward(q, k, v, o, L2, do, False, tau,
                                 tiles=replace(bwd, dq_tiles=replace(bwd.dq_tiles, round_sync=False)))
    for _ in range(2):
        synced = kernel3_bwd.backward(q, k, v, o, L2, do, False, tau,
                                      tiles=replace(bwd, dq_tiles=replace(bwd.dq_tiles, round_sync=True)))
        assert all(torch.equal(a, b) for a, b in zip(synced, plain))
    _check_bwd(2, 3, N, d, torch.float16, False, seed=d + N + 32,
               tiles=replace(bwd, dq_tiles=replace(bwd.dq_tiles, round_sync=True)))


# FlashAttention-3's dQ (TilesB.pipe with dq = 4): the pipelined dK/dV kernel adds each warpgroup's dQ_i by one
# TMA reduce-add a step (d = 64; Q/dO stages 2-4, and persistent)
TMA_DQ = TilesB(64, 128, 4, dq=4, pipe=True)
TMA_DQ_VARIANTS = [replace(TMA_DQ, stages=2), replace(TMA_DQ, stages=3), replace(TMA_DQ, persistent=True)]


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", [g for g in BWD_GRID if g[0] == 64])
def test_kernel3_tma_dq_backward_two_oracles(d, N, causal, dtype):
    _check_bwd(2, 3, N, d, dtype, causal, seed=d + N + causal + 23, tiles=TMA_DQ)


# FlashAttention-3's layout for the dK/dV kernel (TilesB.wide, d = 64): 128-row steps, P and dS through shared memory
WIDE = TilesB(128, 128, 2, dq=0, dq_tiles=TilesQ(128, 3), wide=True)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,N,causal,dtype", [g for g in BWD_GRID if g[0] == 64])
@pytest.mark.parametrize("stages", [2, 3])
def test_kernel3_wide_backward_two_oracles(d, N, causal, dtype, stages):
    t = replace(WIDE, stages=stages)
    _check_bwd(2, 3, N, d, dtype, causal, seed=d + N + causal + stages + 37, tiles=t)
    if N == 640:
        _check_bwd(1, 2, N, d, dtype, causal, seed=39, scale=4.0, tiles=t)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("tiles", TMA_DQ_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_tma_dq_variants(tiles, causal):
    # 640 rows: ten row blocks, a column block's dQ reduce-adds land on rows other programs add to at once;
    # 16 heads at N = 2048: 512 column blocks, 3-4 a persistent program
    for B, H, N in ((2, 3, 128), (2, 3, 640), (1, 16, 2048)):
        _check_bwd(B, H, N, 64, torch.float16, causal, seed=N + causal + 29, tiles=tiles)
    _check_bwd(1, 2, 640, 64, torch.float16, causal, seed=31, scale=4.0, tiles=tiles)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_side_stream_equals_one_stream(d, causal):
    """TilesB.side_stream: the dQ kernel on a second stream beside the dK/dV kernel. The same kernels, so the
    same gradients bit for bit; and dq is complete when backward returns (the caller's stream waits for it)."""
    t = kernel3_bwd.BWD_TILES[(d, causal)]
    q, k, v, do = _inputs(2, 16, 2048, 2048, d, torch.float16, d + causal + 9)
    o, L2 = kernel3.forward(q, k, v, causal, d ** -0.5)
    one = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=t)
    two = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=replace(t, side_stream=True))
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    _check_bwd(2, 3, 640, d, torch.float16, causal, seed=d + causal + 10, tiles=replace(t, side_stream=True))


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_kernel3_persistent_dkdv_equals_one_program_per_tile(d, causal):
    """TilesB.persistent: one pipelined dK/dV program per SM looping over the column blocks (512 here, 3-4 a
    program, the K/V buffer handed back through kv_empty). The oracle, and bit-equality with the same tiles
    launched one program per column block."""
    t = TilesB(64, 128, 4, dq=0, dq_tiles=TilesQ(128 if d == 64 else 64, 3), pipe=True, persistent=True)
    _check_bwd(2, 16, 2048, d, torch.float16, causal, seed=d + causal + 5, tiles=t)
    q, k, v, do = _inputs(2, 16, 2048, 2048, d, torch.float16, d + causal + 6)
    o, L2 = kernel3.forward(q, k, v, causal, d ** -0.5)
    g1 = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=t)
    g2 = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=replace(t, persistent=False))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d", [64, 128])
def test_kernel3_separate_backward_is_deterministic_and_equals_kernel2(d):
    """No atomic adds: two runs give bit-equal gradients, directly and through attention(deterministic=True);
    against kernel 2's gradients on the same O and L2 at N = 4096."""
    from flashref.gpu import _backward
    from flashref.gpu.kernels import NO_VARIANTS, Config
    q, k, v, do = _inputs(1, 4, 4096, 4096, d, torch.float16, seed=d + 2)
    for causal in (False, True):
        t = kernel3_bwd.SEPARATE_TILES[(d, causal)]
        o, L2 = kernel3.forward(q, k, v, causal, d ** -0.5)
        g1 = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=t)
        g2 = kernel3_bwd.backward(q, k, v, o, L2, do, causal, d ** -0.5, tiles=t)
        assert all(torch.equal(a, b) for a, b in zip(g1, g2)), (d, causal)
        cfg = Config().resolve(d, causal, False)
        gk2 = _backward(q, k, v, o, L2, do, causal, d ** -0.5, False, cfg, None, NO_VARIANTS)
        for name, a, b in zip(("dq", "dk", "dv"), g1, gk2):
            assert _err(a, b) <= 2e-2 * max(1.0, float(b.abs().max())), (name, causal, _err(a, b))
        runs = []
        for _ in range(2):
            q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
            kernel3.attention(q_, k_, v_, causal=causal, deterministic=True).backward(do)
            runs.append((q_.grad, k_.grad, v_.grad))
        assert all(torch.equal(a, b) for a, b in zip(*runs)), (d, causal)
        if kernel3.choose_backward(q, k, v, causal, True)[1] == t:  # the same kernels: the same bits
            assert all(torch.equal(a, b) for a, b in zip(runs[0], g1)), (d, causal)


@needs_k3
@pytest.mark.cuda
@pytest.mark.parametrize("d,causal", [(64, True), (128, False), (128, True)])
def test_kernel3_separate_backward_large_logits(d, causal):
    _check_bwd(1, 2, 1024, d, torch.float16, causal, seed=23, scale=4.0, tiles=kernel3_bwd.SEPARATE_TILES[(d, causal)])


def test_a_non_tensor_is_named_not_an_attribute_error():
    """kernel3.attention and kernel3.forward read q.device first: a list there was an AttributeError from inside;
    attention now hands it to gpu.attention's checks (which name it), forward names it itself."""
    k = torch.zeros(1, 2, 16, 16)
    with pytest.raises(TypeError, match="^q must be a torch.Tensor"):
        kernel3.attention([1], k, k)
    with pytest.raises(TypeError, match="^v must be a torch.Tensor, got str"):
        kernel3.forward(k, k, "v", False, 0.25)
    assert kernel3.choose(k, [1], k, False) == (False, "k is not a torch.Tensor")
