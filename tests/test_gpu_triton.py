"""flashref.gpu's Triton kernels against the float64 oracle, with the two-oracle rule.

Without a CUDA GPU (CI) the kernels run in Triton's CPU interpreter: ``TRITON_INTERPRET=1`` is set
here before triton is imported, and the inputs are CPU tensors in float32 and float16 (the
interpreter computes bfloat16 wrongly: numpy has no bfloat16, so bfloat16 is tested on CUDA only).
With a GPU the same small-shape tests run natively in float16 and bfloat16, and the ``cuda`` tests
add large shapes (N up to 16384).

Two-oracle rule (flash-attention's test suite): the kernel's error against float64 must be at most
twice the error of plain attention computed in the kernel's input precision, plus a small atol.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (flashref.gpu imports it lazily)
os.environ.setdefault("FLASHREF_AUTOTUNE", "0")  # fixed per-d configs: no tuning run per new shape

pytest.importorskip("triton")

from reference import attention_ref, torch_grads  # noqa: E402

from flashref import gpu  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
DTYPES = (torch.float32, torch.float16) if INTERPRET else (torch.float16, torch.bfloat16)
# atol per input dtype, added to the two-oracle bound (covers results whose plain error is ~0)
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or INTERPRET, reason="needs a CUDA GPU")


def _inputs(B, H, Nq, Nk, d, dtype, seed, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, n, d, generator=g) for n in (Nq, Nk, Nk, Nq))
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, do)]


def _plain(q, k, v, do, causal, scale):
    """Plain attention in the inputs' precision (the second oracle), with autograd."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    S = (q @ k.transpose(-1, -2)) * scale
    if causal:
        Nq, Nk = S.shape[-2:]
        S = S.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool, device=S.device).tril(), float("-inf"))
    O = torch.softmax(S.float(), dim=-1).to(q.dtype) @ v
    O.backward(do)
    return O.detach(), q.grad, k.grad, v.grad


def _err(x, ref):
    return float(np.max(np.abs(x.detach().double().cpu().numpy() - ref)))


def _oracle(q, k, v, do, causal, tau):
    """float64 truth: O, dQ, dK, dV as numpy arrays.

    On the CPU the shared numpy/torch oracles of tests/reference.py; on a GPU the same formula in
    torch float64 on the device (the CPU would take minutes at N = 16384)."""
    if q.device.type == "cpu":
        n64 = [x.double().numpy() for x in (q, k, v, do)]
        return (attention_ref(*n64[:3], scale=tau, causal=causal)[0],) + torch_grads(*n64, scale=tau, causal=causal)
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    S = (q @ k.transpose(-1, -2)) * tau
    if causal:
        Nq, Nk = S.shape[-2:]
        S = S.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool, device=S.device).tril(), float("-inf"))
    O = torch.softmax(S, dim=-1) @ v
    O.backward(do.double())
    return tuple(x.detach().cpu().numpy() for x in (O, q.grad, k.grad, v.grad))


def _check(B, H, Nq, Nk, d, dtype, causal, seed=0, scale=None, grads=True, deterministic=False):
    q, k, v, do = _inputs(B, H, Nq, Nk, d, dtype, seed)
    tau = 1.0 / math.sqrt(d) if scale is None else scale
    q_, k_, v_ = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = gpu.attention(q_, k_, v_, causal=causal, scale=scale, deterministic=deterministic)
    assert o.shape == q.shape and o.dtype == dtype and o.device == q.device
    O_ref, *refs = _oracle(q, k, v, do, causal, tau)
    plain = _plain(q, k, v, do, causal, tau)
    assert np.isfinite(o.detach().double().cpu().numpy()).all()
    assert _err(o, O_ref) <= 2 * _err(plain[0], O_ref) + ATOL[dtype], (_err(o, O_ref), _err(plain[0], O_ref))
    if not grads:
        return
    o.backward(do)
    for name, got, pl, ref in zip(("dq", "dk", "dv"), (q_.grad, k_.grad, v_.grad), plain[1:], refs):
        assert got is not None and got.shape == ref.shape, name
        bound = 2 * _err(pl, ref) + ATOL[dtype] * max(1.0, float(np.abs(ref).max()))
        assert _err(got, ref) <= bound, (name, _err(got, ref), _err(pl, ref))


# ---------------------------------------------------------------------------------------------
# small shapes: the interpreter in CI, natively on a GPU
# ---------------------------------------------------------------------------------------------

SMALL = [  # (Nq, Nk, d, causal): lengths no block divides, Nq != Nk, single rows/keys, causal
    (1, 1, 16, False), (1, 1, 16, True), (16, 16, 16, False), (17, 17, 16, True),
    (7, 40, 32, False), (40, 7, 32, True), (33, 19, 16, True), (19, 33, 32, True),
    (32, 32, 32, True), (5, 1, 16, True), (37, 37, 32, False),
]


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "dq_kernel"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("Nq,Nk,d,causal", SMALL)
def test_small_shapes_two_oracles(Nq, Nk, d, causal, dtype, deterministic):
    _check(1, 2, Nq, Nk, d, dtype, causal, seed=Nq * 100 + Nk, deterministic=deterministic)


@pytest.mark.parametrize("variant", ["FLASHREF_SPLIT", "FLASHREF_HEADS_FIRST", "FLASHREF_STAGGER"])
@pytest.mark.parametrize("Nq,Nk,d,causal", [(33, 19, 16, True), (37, 37, 32, False), (40, 70, 32, False)])
def test_scheduling_variants(variant, Nq, Nk, d, causal, monkeypatch):
    """The kernels' scheduling options (kernels.py: two row halves and a heads-first grid in the
    forward, a staggered row loop in dK/dV) compute the same function."""
    monkeypatch.setenv(variant, "1")
    _check(1, 2, Nq, Nk, d, DTYPES[0], causal, seed=Nq + 7 * Nk)


def test_custom_scale_and_batch():
    _check(2, 1, 21, 13, 16, DTYPES[0], causal=True, scale=0.3, seed=7)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_large_logits_force_rescaling(causal, dtype):
    """scale = 3: row maxima jump by far more than the lazy-rescale slack between blocks, so a
    kernel that skipped the O_i rescale would overflow P̃ in 16-bit or lose the old terms."""
    _check(1, 2, 45, 45, 16, dtype, causal=causal, scale=3.0, seed=9)


def test_causal_first_query_sees_only_first_key():
    """Top-left causal: row 0 attends key 0 alone, so O[0] = V[0] exactly (up to rounding)."""
    q, k, v, _ = _inputs(1, 1, 9, 12, 16, DTYPES[0], seed=3)
    o = gpu.attention(q, k, v, causal=True)
    np.testing.assert_allclose(o[0, 0, 0].double().cpu().numpy(), v[0, 0, 0].double().cpu().numpy(),
                               rtol=0, atol=ATOL[DTYPES[0]])


def test_forward_returns_logsumexp():
    q, k, v, _ = _inputs(1, 2, 23, 17, 32, DTYPES[0], seed=5)
    o, L = gpu.forward(q, k, v, causal=True)
    _, _, lse = attention_ref(*(x.double().cpu().numpy() for x in (q, k, v)), scale=1 / math.sqrt(32), causal=True)
    assert L.shape == (1, 2, 23) and L.dtype == torch.float32
    tol = 1e-5 if DTYPES[0] == torch.float32 else 1e-2
    assert np.max(np.abs(L.cpu().numpy() - lse)) <= tol


def _grads(q, k, v, do, **kw):
    xs = [x.clone().requires_grad_() for x in (q, k, v)]
    gpu.attention(*xs, causal=True, **kw).backward(do)
    return [x.grad for x in xs]


def test_gradients_are_deterministic():
    """deterministic=True (no atomics): two backward passes give bit-identical gradients; the
    atomic path agrees with them to rounding (its dK, dV come from the same code, bit for bit)."""
    q, k, v, do = _inputs(1, 2, 29, 31, 16, DTYPES[0], seed=11)
    first, second = _grads(q, k, v, do, deterministic=True), _grads(q, k, v, do, deterministic=True)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    dq, dk, dv = _grads(q, k, v, do, deterministic=False)
    assert torch.equal(dk, first[1]) and torch.equal(dv, first[2])
    torch.testing.assert_close(dq, first[0], rtol=0, atol=ATOL[DTYPES[0]])


def test_deterministic_follows_torch_flag(monkeypatch):
    """deterministic=None reads torch.are_deterministic_algorithms_enabled(); a non-bool is refused."""
    from flashref.gpu import kernels
    seen = []
    real = kernels.backward
    monkeypatch.setattr(kernels, "backward", lambda *a: seen.append(a[-1] is None) or real(*a))
    q, k, v, do = _inputs(1, 1, 8, 8, 16, DTYPES[0], seed=2)
    for flag in (True, False):
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda flag=flag: flag)
        _grads(q, k, v, do)
    assert seen == [True, False]  # dq_acc is None exactly when deterministic
    with pytest.raises(TypeError, match="deterministic"):
        gpu.attention(q, k, v, deterministic="yes")


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------

def _ok(n=8, d=16, dtype=None):
    return [torch.randn(1, 2, n, d, device=DEVICE, dtype=dtype or DTYPES[0]) for _ in range(3)]


@pytest.mark.parametrize("change,arg,exc", [
    (lambda q, k, v: (q[0], k, v), "q", ValueError),
    (lambda q, k, v: (q, k.double(), v), "k", TypeError),
    (lambda q, k, v: (q, k, v[..., :7, :]), "v", ValueError),
    (lambda q, k, v: (q, k[..., :8], v), "k", ValueError),
    (lambda q, k, v: (q.numpy() if q.device.type == "cpu" else None, k, v), "q", TypeError),
])
def test_bad_inputs_name_the_argument(change, arg, exc):
    q, k, v = change(*_ok())
    with pytest.raises(exc, match=arg):
        gpu.attention(q, k, v)


def test_bad_head_dim_dtype_scale_causal():
    q, k, v = _ok(d=16)
    q24, k24, v24 = (torch.randn(1, 1, 4, 24, device=DEVICE, dtype=DTYPES[0]) for _ in range(3))
    with pytest.raises(ValueError, match="head dimension"):
        gpu.attention(q24, k24, v24)
    with pytest.raises(TypeError, match="q must be float16"):
        gpu.attention(q.to(torch.int32), k, v)
    with pytest.raises(ValueError, match="scale"):
        gpu.attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="scale"):
        gpu.attention(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="causal"):
        gpu.attention(q, k, v, causal="yes")


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = (torch.randn(1, 1, 4, 16, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match="CUDA"):
        gpu.attention(q, k, v)


# ---------------------------------------------------------------------------------------------
# CUDA only: large shapes
# ---------------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@pytest.mark.parametrize("B,H,Nq,Nk,d,causal", [
    (2, 3, 1000, 1000, 64, True), (1, 2, 777, 1531, 128, False), (1, 2, 1531, 777, 128, True),
    (2, 2, 1024, 1024, 16, False), (2, 2, 2048, 2048, 32, True), (1, 4, 4096, 4096, 128, True),
    (1, 2, 4099, 4097, 64, False),
])
def test_cuda_large_shapes(B, H, Nq, Nk, d, causal, dtype):
    _check(B, H, Nq, Nk, d, dtype, causal, seed=Nq + d)
    if dtype == torch.float16:
        _check(B, H, Nq, Nk, d, dtype, causal, seed=Nq + d + 1, deterministic=True)


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_n16384(causal):
    _check(1, 2, 16384, 16384, 64, torch.float16, causal, seed=1)
    _check(1, 2, 16384, 16384, 128, torch.float16, causal, seed=2, deterministic=True)
