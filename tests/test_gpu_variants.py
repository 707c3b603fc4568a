"""flashref.gpu's kernels with the attention variants: GQA, sliding window, ALiBi, softcap.

Each variant alone, with ``causal``, and with the others, in forward and backward, in both kernels
(kernel 1, readable; kernel 2, fast) and both dQ schemes, held to the two-oracle rule of
``test_gpu_triton.py`` against a float64 torch formula of the variants, which is itself checked
against the numpy reference (``flash2.forward``/``backward``) below. Without a GPU (CI) the kernels
run in Triton's interpreter on small shapes (N <= 64, d 16 and 32); the ``cuda`` tests run
larger shapes in float16 and bfloat16 on a GPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from triton_env import DEVICE, INTERPRET, needs_cuda

pytest.importorskip("triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from reference import gpu_inputs  # noqa: E402

from flashref import flash2, gpu  # noqa: E402
from flashref.gpu import kernels  # noqa: E402
from flashref.gpu.kernels import Config  # noqa: E402

DTYPE = torch.float32 if INTERPRET else torch.float16
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _oracle(q, k, v, do, dtype, *, causal=False, scale=None, enable_gqa=False, window=None, alibi_slopes=None,
            softcap=None):
    """The variants in plain torch (flashref.variants' order: scale, softcap, ALiBi, mask), in ``dtype``
    (softmax in at least fp32); a row with no key gives 0. Returns O and its gradients."""
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    B, Hq, Nq, d = q.shape
    Nk = k.shape[2]
    g = Hq // k.shape[1]
    K, V = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    work = torch.promote_types(dtype, torch.float32)
    S = ((q @ K.transpose(-1, -2)) * (1.0 / math.sqrt(d) if scale is None else scale)).to(work)
    if softcap is not None:
        S = softcap * torch.tanh(S / softcap)
    i = torch.arange(Nq, device=q.device)[:, None]
    j = torch.arange(Nk, device=q.device)[None, :]
    if alibi_slopes is not None:
        s = torch.as_tensor(alibi_slopes, device=q.device).to(work)
        S = S - s.reshape(-1 if s.dim() == 2 else 1, Hq, 1, 1) * (i - j).abs()
    ok = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device)
    if causal:
        ok = ok & (j <= i)
    if window is not None:
        left, right = window
        if left >= 0:
            ok = ok & (j >= i - left)
        if right >= 0:
            ok = ok & (j <= i + right)
    row = ok.any(-1, keepdim=True)
    P = torch.softmax(S.masked_fill(~ok, float("-inf")).masked_fill(~row, 0.0), dim=-1) * row
    O = P.to(dtype) @ V
    O.backward(do.to(dtype))
    return O.detach(), q.grad, k.grad, v.grad


def _inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=0, device=DEVICE):
    return gpu_inputs(B, Hq, Hkv, Nq, Nk, d, dtype, device, seed)


def _err(x, ref):
    return float((x.detach().double() - ref.double()).abs().max())


def _fenced(x):
    """``x`` as the first half of a buffer whose second half is NaN: a kernel that reads a row past the end of
    the last head (an unmasked load of a ragged block) gets NaN into its output or gradients."""
    buf = torch.full((2 * x.numel(),), float("nan"), dtype=x.dtype, device=x.device)
    buf[:x.numel()] = x.reshape(-1)
    return buf[:x.numel()].view(x.shape)


def _check(B, Hq, Hkv, Nq, Nk, d, *, dtype=DTYPE, config=None, deterministic=False, seed=0, fenced=False, **opts):
    """gpu.attention with the variants ``opts`` against the float64 oracle (the two-oracle rule); ``fenced``: the
    inputs and the incoming gradient end where NaN starts (``_fenced``)."""
    q, k, v, do = _inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed)
    if fenced:
        q, k, v, do = (_fenced(x) for x in (q, k, v, do))
    if opts.get("alibi_slopes") is not None:
        opts["alibi_slopes"] = torch.as_tensor(opts["alibi_slopes"], dtype=torch.float32, device=q.device)
    if Hkv != Hq:
        opts["enable_gqa"] = True
    q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = gpu.attention(q_, k_, v_, config=config, deterministic=deterministic, **opts)
    assert o.shape == q.shape and o.dtype == dtype
    assert torch.isfinite(o).all()
    truth = _oracle(q, k, v, do, torch.float64, **opts)
    plain = _oracle(q, k, v, do, dtype, **opts)
    assert _err(o, truth[0]) <= 2 * _err(plain[0], truth[0]) + ATOL[dtype], \
        (_err(o, truth[0]), _err(plain[0], truth[0]))
    o.backward(do)
    for name, got, pl, ref in zip(("dq", "dk", "dv"), (q_.grad, k_.grad, v_.grad), plain[1:], truth[1:]):
        assert got is not None and got.shape == ref.shape, name
        assert torch.isfinite(got).all(), name
        bound = 3 * _err(pl, ref) + ATOL[dtype] * max(1.0, float(ref.abs().max()))
        assert _err(got, ref) <= bound, (name, _err(got, ref), _err(pl, ref))
    return o


SLOPES4 = [0.5, 0.25, 0.125, 0.0625]  # ALiBi's geometric slopes for 4 heads (2^(-8h/H))


def test_oracle_is_the_numpy_reference():
    """The torch formula above equals flash2.forward/backward (float64) with every variant on."""
    q, k, v, do = _inputs(2, 4, 2, 21, 13, 8, torch.float64, seed=3, device="cpu")
    slopes = np.array([[0.5, 0.3, 0.2, 0.1], [0.05, 0.4, 0.0, 1.0]])
    opts = dict(causal=True, enable_gqa=True, window=(4, 1), alibi_slopes=slopes, softcap=1.5, scale=0.6)
    O, dq, dk, dv = _oracle(q, k, v, do, torch.float64, **opts)
    Q, K, V, dO = (x.numpy() for x in (q, k, v, do))
    fwd = flash2.forward(Q, K, V, **opts)
    np.testing.assert_allclose(O.numpy(), fwd.O, rtol=1e-10, atol=1e-12)
    bwd = flash2.backward(Q, K, V, fwd.O, dO, fwd.L, **opts)
    for got, ref in zip((dq, dk, dv), (bwd.dQ, bwd.dK, bwd.dV)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9, atol=1e-11)


# (Hq, Hkv, Nq, Nk, d, opts): each variant alone, with causal, with each other; Nq != Nk; ragged lengths.
CASES = {
    "gqa": (4, 2, 29, 45, 16, dict()),
    "mqa_causal": (4, 1, 40, 33, 32, dict(causal=True)),
    "window": (2, 2, 45, 40, 16, dict(window=(7, 3))),
    "window_left_causal": (2, 2, 50, 50, 32, dict(window=(9, -1), causal=True)),
    "window_right_only": (2, 2, 23, 41, 16, dict(window=(-1, 5))),
    "window_wide": (2, 2, 64, 60, 16, dict(window=(40, 20))),  # tiles wholly inside the band: unmasked
    "window_wide_causal": (2, 2, 64, 64, 32, dict(window=(35, 7), causal=True)),
    # unmasked tiles inside the band, and a ragged last row block that the dK/dV kernel's boundary calls reach
    "window_wide_ragged": (2, 2, 75, 70, 48, dict(window=(40, 20))),
    "alibi": (4, 4, 33, 29, 16, dict(alibi_slopes=SLOPES4)),
    "alibi_causal": (4, 4, 40, 40, 16, dict(alibi_slopes=SLOPES4, causal=True)),
    "softcap": (2, 2, 31, 37, 16, dict(softcap=0.7, scale=1.5)),
    "softcap_causal": (2, 2, 33, 33, 32, dict(softcap=2.0, causal=True)),
    "softcap_large": (2, 2, 30, 34, 16, dict(softcap=1e4, scale=3.0)),  # tanh(s/c) near 0: no cancellation
    "gqa_window_alibi": (4, 2, 37, 37, 16, dict(window=(5, 2), alibi_slopes=SLOPES4)),
    "all_causal": (4, 2, 41, 35, 16, dict(window=(6, 0), alibi_slopes=SLOPES4, softcap=1.0, causal=True)),
}


@triton.jit
def _tanh_probe(X, Y, n, NEAR_ZERO: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, kernels._tanh(x, NEAR_ZERO), mask=offs < n)


@pytest.mark.parametrize("near_zero", [True, False])
def test_kernels_tanh(near_zero):
    """The kernels' tanh (softcap's c·tanh(s/c)), from subnormal x up to where it is ±1, exactly odd.
    With its series near 0, to a few fp32 roundings of tanh x itself, relative; its exp2 formula alone is off
    by a few roundings of 1 at every x (1e-3 relative at x = 1e-4, all of x below 1e-8), as the launcher
    assumes where it leaves the series out."""
    mags = np.concatenate([[0.0, 1e-40], np.logspace(-30, 1.5, 500), [0.29999, 0.3, 0.30001, 50.0, 1e20, 3e38]])
    x = torch.tensor(np.concatenate([mags, -mags]), dtype=torch.float32, device=DEVICE)
    y = torch.empty_like(x)
    n = x.numel()
    _tanh_probe[(1,)](x, y, n, NEAR_ZERO=near_zero, BLOCK=triton.next_power_of_2(n))
    truth = torch.tanh(x.double())
    err = (y.double() - truth).abs().cpu()
    rel = err / truth.abs().cpu().clamp_min(1e-300)
    if near_zero:
        assert float(rel.max()) < 1e-6, float(rel.max())
    else:
        assert float(err.max()) < 4 * 2.0 ** -23, float(err.max())
        assert float(rel[(x.abs() > 1e-6).cpu()].max()) > 1e-3  # what the series is for (not a check of luck)
    assert torch.equal(y[: n // 2], -y[n // 2:]) and y[0] == 0


def test_softcap_takes_the_series_where_the_dtype_resolves_its_error():
    """Variants.tanh_near_zero: always in fp32, in fp16 past c = 512, in bf16 past c = 4096."""
    def near(c, dtype):
        q = torch.zeros(1, 1, 4, 16, dtype=dtype, device=DEVICE)
        return gpu._variants(q, q, False, dict(softcap=c)).flags()["SOFTCAP"]
    assert near(None, torch.float32) == 0
    assert near(0.5, torch.float32) == near(50.0, torch.float32) == 2
    assert near(50.0, torch.float16) == near(512.0, torch.float16) == 1 and near(513.0, torch.float16) == 2
    assert near(4096.0, torch.bfloat16) == 1 and near(4097.0, torch.bfloat16) == 2


@pytest.mark.parametrize("c", [2.0, 1e4])
def test_softcap_fp16_with_either_tanh(c):
    """fp16 at a small cap (the exp2 formula alone) and a large one (with the series): both held to the
    two-oracle rule."""
    _check(1, 2, 2, 30, 34, 16, dtype=torch.float16, softcap=c, scale=3.0)


@pytest.mark.parametrize("case", list(CASES))
def test_variant_kernel2(case):
    Hq, Hkv, Nq, Nk, d, opts = CASES[case]
    _check(1, Hq, Hkv, Nq, Nk, d, fenced=True, **dict(opts))


@pytest.mark.parametrize("case,kernel", [("all_causal", "kernel1"), ("gqa_window_alibi", "kernel1"),
                                         ("window_wide", "kernel1"), ("all_causal", "dq_kernel"),
                                         ("window_wide_causal", "dq_kernel"), ("gqa_window_alibi", "split")])
def test_variant_other_kernels(case, kernel):
    """Kernel 1 (readable), kernel 2's deterministic dQ kernel and its split row blocks."""
    Hq, Hkv, Nq, Nk, d, opts = CASES[case]
    kw = {"kernel1": dict(config=Config(version=1)), "dq_kernel": dict(deterministic=True),
          "split": dict(config=Config(split=True))}[kernel]
    _check(1, Hq, Hkv, Nq, Nk, d, **kw, **dict(opts))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the interpreter evaluates in numpy: no log2(0) anywhere
@pytest.mark.parametrize("kernel", ["kernel1", "kernel2"])
def test_fully_masked_rows_give_zeros(kernel):
    """A window leaves queries past Nk + left with no key: their output and gradients are 0, L is -inf,
    and nothing is NaN (nor, in the interpreter, a RuntimeWarning). Batch 2 with per-batch ALiBi slopes
    ((B, Hq)); then window (0, 0) with Nq > Nk, and with GQA."""
    cfg = Config(version=1 if kernel == "kernel1" else 2)
    slopes = [[0.5, 0.1], [0.2, 0.3]]
    o = _check(2, 2, 2, 40, 16, 16, config=cfg, window=(3, 2), alibi_slopes=slopes)
    assert (o[:, :, 19:] == 0).all() and (o[:, :, :19] != 0).any()
    assert (_check(1, 1, 1, 6, 3, 4, config=cfg, window=(0, 0))[:, :, 3:] == 0).all()
    assert (_check(1, 4, 2, 9, 6, 8, config=cfg, window=(2, 1))[:, :, 8:] == 0).all()
    q, k, v, _ = _inputs(1, 2, 2, 40, 16, 16, DTYPE)
    _, L = gpu.forward(q, k, v, window=(3, 2), config=cfg)
    assert torch.isinf(L[..., 19:]).all() and (L[..., 19:] < 0).all() and torch.isfinite(L[..., :19]).all()


def test_variants_off_are_the_plain_kernel():
    """window=(-1, -1), no slopes, softcap None and enable_gqa with Hq == Hkv: the same output, bit for bit."""
    q, k, v, _ = _inputs(1, 2, 2, 24, 24, 16, DTYPE)
    plain = gpu.attention(q, k, v, causal=True)
    same = gpu.attention(q, k, v, causal=True, window=(-1, -1), enable_gqa=True, softcap=None, alibi_slopes=None)
    assert torch.equal(plain, same)


def _bad(change):
    q, k, v, _ = _inputs(1, 4, 2, 8, 8, 16, DTYPE)
    kw = dict(enable_gqa=True)
    kw.update(change)
    if "k" in kw:
        k = v = kw.pop("k")
    return q, k, v, kw


@pytest.mark.parametrize("change,arg,exc", [
    (dict(k=torch.zeros(1, 3, 8, 16, dtype=DTYPE, device=DEVICE)), "enable_gqa", ValueError),
    (dict(enable_gqa=False), "enable_gqa", ValueError),
    (dict(enable_gqa=1), "enable_gqa", TypeError),
    (dict(window=(3,)), "window", TypeError),
    (dict(window=(1.0, 2)), "window", TypeError),
    (dict(window=4), "window", TypeError),
    (dict(window=(-2, 1)), "window", ValueError),
    (dict(softcap=-1.0), "softcap", ValueError),
    (dict(softcap=0), "softcap", ValueError),
    (dict(softcap=float("inf")), "softcap", ValueError),
    (dict(alibi_slopes=torch.ones(2)), "alibi_slopes", ValueError),
    (dict(alibi_slopes=torch.ones(3, 4)), "alibi_slopes", ValueError),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.int64)), "alibi_slopes", TypeError),
    (dict(alibi_slopes="ab"), "alibi_slopes", TypeError),
    # as the torch front: no gradient would reach them
    (dict(alibi_slopes=torch.ones(4, requires_grad=True)), "alibi_slopes: slopes that require grad", ValueError),
    # finite, but past what the kernels' fp32 holds (they were NaN outputs)
    (dict(alibi_slopes=torch.full((4,), 3e38)), "alibi_slopes: the kernels compute", ValueError),
    (dict(softcap=1e300), "softcap: the kernels compute in fp32", ValueError),
])
def test_bad_variant_inputs_name_the_argument(change, arg, exc):
    q, k, v, kw = _bad(change)
    with pytest.raises(exc, match=arg):
        gpu.attention(q, k, v, **kw)


# ---------------------------------------------------------------------------------------------
# on a GPU: larger shapes, float16 and bfloat16, every kernel and dQ scheme
# ---------------------------------------------------------------------------------------------

def _alibi(H):
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


CUDA_CASES = [  # (B, Hq, Hkv, Nq, Nk, d, opts)
    (2, 8, 1, 1024, 1024, 64, dict(causal=True)),
    (1, 16, 2, 777, 1500, 128, dict()),
    (2, 4, 4, 1024, 1024, 64, dict(window=(128, 0))),
    (1, 4, 4, 1000, 1000, 128, dict(window=(100, 37), causal=False)),
    (1, 4, 4, 1500, 700, 96, dict(window=(63, 5))),  # rows past Nk + 63 see nothing
    (2, 8, 8, 513, 513, 64, dict(alibi_slopes=_alibi(8), causal=True)),
    (1, 4, 4, 1024, 2048, 128, dict(softcap=30.0)),
    (1, 4, 4, 1024, 1024, 256, dict(softcap=5.0, causal=True)),
    (2, 8, 2, 1024, 1024, 128, dict(window=(256, 0), alibi_slopes=_alibi(8), softcap=20.0, causal=True)),
    (1, 8, 2, 999, 1111, 64, dict(window=(200, 50), alibi_slopes=_alibi(8), softcap=10.0)),
]


CUDA_RUNS = ([(i, "kernel2", dt) for i in range(len(CUDA_CASES)) for dt in (torch.float16, torch.bfloat16)]
             + [(i, "dq_kernel", torch.float16) for i in (0, 3, 4, 8)]
             + [(i, "kernel1", torch.float16) for i in (1, 4, 9)])


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("i,kernel,dtype", CUDA_RUNS, ids=[f"{i}-{k}-{str(t)[6:]}" for i, k, t in CUDA_RUNS])
def test_cuda_variants(i, kernel, dtype):
    """Every case in kernel 2 (fp16 and bf16); some in the deterministic dQ kernel and in kernel 1."""
    B, Hq, Hkv, Nq, Nk, d, opts = CUDA_CASES[i]
    kw = dict(config=Config(version=1)) if kernel == "kernel1" else dict(deterministic=kernel == "dq_kernel")
    _check(B, Hq, Hkv, Nq, Nk, d, dtype=dtype, seed=i, **kw, **dict(opts))


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("config", [Config(split=True), Config(persistent=True), Config(tma=False),
                                    Config(heads_first=True)], ids=["split", "persistent", "no_tma", "heads_first"])
def test_cuda_variants_schedules(config):
    """Kernel 2's schedules (split row blocks, persistent, pointer loads, heads-first grid) with every variant."""
    _check(2, 8, 2, 1024, 1024, 128, config=config, dtype=torch.float16,
           window=(300, 0), alibi_slopes=_alibi(8), softcap=20.0, causal=True)


@needs_cuda
@pytest.mark.cuda
def test_cuda_gqa_matches_sdpa():
    """GQA forward and backward against torch's own enable_gqa (flash or efficient backend)."""
    q, k, v, do = _inputs(2, 32, 4, 2048, 2048, 128, torch.bfloat16, device="cuda")
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = gpu.attention(q, k, v, causal=True, enable_gqa=True)
    grads = torch.autograd.grad(o, (q, k, v), do)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref_grads = torch.autograd.grad(ref, (q, k, v), do)
    assert _err(o, ref) < 2e-2
    for g, r in zip(grads, ref_grads):
        assert _err(g, r) < 5e-2 * max(1.0, float(r.abs().max()))


# numpy's bools and integers, which every other entry point takes (flashref.problem's rules), against the
# Python values: each gpu.attention option here with its numpy spelling, and the K/V heads it needs
NUMPY_OPTIONS = [
    ("causal", dict(causal=True), dict(causal=np.bool_(True)), 2),
    ("enable_gqa", dict(enable_gqa=True), dict(enable_gqa=np.bool_(True)), 1),
    ("window", dict(window=(2, 1)), dict(window=(np.int64(2), np.int64(1))), 2),
    ("softcap", dict(softcap=3), dict(softcap=np.int64(3)), 2),
    ("deterministic", dict(deterministic=True), dict(deterministic=np.bool_(True)), 2),
]


@pytest.mark.parametrize("name,plain,numpy_,Hkv", NUMPY_OPTIONS, ids=[c[0] for c in NUMPY_OPTIONS])
def test_numpy_option_values_are_the_python_ones(name, plain, numpy_, Hkv):
    """Accepted, and the same output and gradients, bit for bit (the deterministic dQ: no atomics on a GPU)."""
    q, k, v, do = _inputs(1, 2, Hkv, 16, 16, 16, DTYPE)
    runs = []
    for kw in (plain, numpy_):
        q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
        o = gpu.attention(q_, k_, v_, **{"deterministic": True, **kw})
        o.backward(do)
        runs.append((o.detach(), q_.grad, k_.grad, v_.grad))
    for a, b in zip(*runs):
        assert torch.equal(a, b), name
    # gpu.forward takes them too (and gpu.which_kernel answers for them)
    kw = {n: x for n, x in numpy_.items() if n != "deterministic"}
    assert torch.equal(gpu.forward(q, k, v, **kw)[0], runs[1][0])
    assert gpu.which_kernel(q, k, v, **numpy_).startswith("kernel")


def test_numpy_deterministic_is_refused_naming_it_when_not_a_bool():
    q, k, v, _ = _inputs(1, 2, 2, 8, 8, 16, DTYPE)
    with pytest.raises(TypeError, match=r"^deterministic: expected True, False or None, got "):
        gpu.attention(q, k, v, deterministic=np.int64(1))
