"""flashref.gpu.attention (the Triton kernels' front) agrees with the torch front and with PyTorch's SDPA.

A review found the two fronts apart on three edge cases, each tested here forward and backward against the torch
front (``flashref.functional.scaled_dot_product_attention``, the numpy algorithms) and, where torch has the feature,
against PyTorch's SDPA with its math backend:

1. ``dropout_p = 1``: every weight dropped, so zeros and zero gradients (gpu.attention refused it);
2. ALiBi slopes of any shape that broadcasts to the (batch, head) axes, ``()`` or ``(1, Hq)`` say (gpu.attention
   took ``(Hq,)`` and ``(B, Hq)`` only); the shapes both fronts refuse are the same, each error naming
   ``alibi_slopes``. PyTorch has no ALiBi: its reference is SDPA with the ALiBi term as a float ``attn_mask``;
3. empty problems, ``Nq = 0`` or ``Nk = 0`` (and B, H or d = 0): the empty output, or zeros for rows with no keys,
   with zero gradients of each input's shape (gpu.attention refused Nq = 0 and Nk = 0). No kernel is launched
   for them (a grid with no program along an axis may fail on a GPU): the launches are replaced by a failure.

Without a GPU (CI) the kernels run in Triton's interpreter on CPU tensors in float16 (it computes bfloat16
wrongly); on a GPU the same tests run natively in float16 and bfloat16. Shapes are tiny: the file runs in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_env import DEVICE, INTERPRET

pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402, N812  (the usual name)
from reference import gpu_inputs  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from flashref import gpu  # noqa: E402
from flashref.functional import scaled_dot_product_attention as front  # noqa: E402

DTYPES = (torch.float16,) if INTERPRET else (torch.float16, torch.bfloat16)
# Tolerances against float32 references: an fp16 or bf16 result is off by its rounding, a few units of its eps
# at values of order 1 (outputs) and a few (gradients)
ATOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2}
GRAD_ATOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=0):
    """q (B, Hq, Nq, d), k and v (B, Hkv, Nk, d), and the gradient do flowing back into the output."""
    return gpu_inputs(B, Hq, Hkv, Nq, Nk, d, dtype, DEVICE, seed)


def _run(attend, q, k, v, do, dtype=None):
    """``attend(q, k, v)`` on fresh leaves (in ``dtype``, default the inputs'); returns the output and
    dq, dk, dv for the gradient ``do``."""
    q, k, v = (x.detach().to(dtype or x.dtype).requires_grad_() for x in (q, k, v))
    o = attend(q, k, v)
    # a gradient for every input that takes part: an empty output's sum has none to give, so zeros come back
    grads = torch.autograd.grad(o, (q, k, v), do.to(o.dtype), allow_unused=True, materialize_grads=True)
    return (o, *grads)


def _torch_math(q, k, v, **kw):
    """PyTorch's SDPA with its math backend: the reference whose edge cases (p = 1, no keys) we match."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _same(ours, theirs, names=("output", "dq", "dk", "dv")):
    """Equal shapes, dtypes and values (exactly: zeros and empty tensors have no rounding)."""
    for name, a, b in zip(names, ours, theirs):
        assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)}, expected {tuple(b.shape)}"
        assert a.dtype == b.dtype, f"{name}: dtype {a.dtype}, expected {b.dtype}"
        assert torch.equal(a, b), f"{name}: values differ"


@pytest.fixture
def no_launch(monkeypatch):
    """Every way gpu.attention reaches a kernel (kernels 1 and 2 through _forward / _backward, kernel 3 through
    kernel3.run) fails the test if taken."""
    from flashref.gpu import kernel3

    def launched(*args, **kwargs):
        raise AssertionError("a kernel was launched for a call with nothing to compute")

    for module, name in ((gpu, "_forward"), (gpu, "_backward"), (kernel3, "run")):
        monkeypatch.setattr(module, name, launched)


# ---------------------------------------------------------------------------------------------------- 1. dropout_p = 1

DROPPED_CASES = {  # (B, Hq, Hkv, Nq, Nk, d, options)
    "plain": (1, 2, 2, 5, 7, 16, {}),
    "causal, GQA": (2, 4, 2, 6, 6, 16, dict(causal=True, enable_gqa=True)),
    "variants": (1, 2, 2, 5, 9, 8, dict(window=(2, 1), alibi_slopes=[0.5, 0.25], softcap=2.0, seed=3)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", DROPPED_CASES)
def test_dropout_p_one_gives_zeros_as_the_front_and_torch(case, dtype, no_launch):
    """Every weight dropped: zeros of q's shape and dtype, and zero gradients of each input's shape (dk, dv with
    Hkv heads), bit for bit what the torch front and PyTorch's SDPA give. No kernel runs (1/(1 - p) is 1/0)."""
    B, Hq, Hkv, Nq, Nk, d, opts = DROPPED_CASES[case]
    q, k, v, do = _inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=1)
    causal, gqa = opts.get("causal", False), opts.get("enable_gqa", False)
    variants = {n: x for n, x in opts.items() if n not in ("causal", "enable_gqa")}
    ours = _run(lambda q, k, v: gpu.attention(q, k, v, dropout_p=1.0, **opts), q, k, v, do)
    theirs = _run(lambda q, k, v: front(q, k, v, dropout_p=1.0, is_causal=causal, enable_gqa=gqa, **variants),
                  q, k, v, do)
    _same(ours, theirs)
    _same(ours, _run(lambda q, k, v: _torch_math(q, k, v, dropout_p=1.0, is_causal=causal, enable_gqa=gqa),
                     q, k, v, do))
    assert ours[0].shape == (B, Hq, Nq, d) and not ours[0].any()
    assert ours[2].shape == (B, Hkv, Nk, d) and not ours[2].any() and not ours[3].any()
    assert gpu.which_kernel(q, k, v, dropout_p=1.0, **opts).startswith("no kernel: dropout_p = 1")


def test_dropout_p_one_draws_no_seed_and_takes_a_0d_tensor(no_launch):
    """p = 1 needs no mask, so torch's generator is not advanced (the torch front draws none either); a 0-d tensor
    and numpy's 1.0 are the same p."""
    q, k, v, _ = _inputs(1, 2, 2, 4, 4, 16, DTYPES[0])
    torch.manual_seed(0)
    first_draw = torch.randint(0, 2 ** 62, ())
    torch.manual_seed(0)
    for p in (1.0, 1, torch.tensor(1.0), np.float64(1.0), np.array(1.0)):
        o = gpu.attention(q, k, v, dropout_p=p)
        assert o.shape == q.shape and not o.any()
    assert torch.equal(torch.randint(0, 2 ** 62, ()), first_draw)  # the generator is where the seed left it


@pytest.mark.parametrize("p", [1.5, -0.1, True, float("nan")])
def test_dropout_p_outside_0_1_is_still_refused(p):
    q, k, v, _ = _inputs(1, 2, 2, 4, 4, 16, DTYPES[0])
    with pytest.raises(ValueError, match=r"dropout_p: expected a dropout probability in \[0, 1\), or 1 "):
        gpu.attention(q, k, v, dropout_p=p)


def test_forward_and_backward_keep_refusing_what_attention_answers_without_a_kernel():
    """gpu.forward and gpu.backward (the pieces ring attention composes) take what the kernels compute, as the numpy
    algorithms do: dropout_p = 1 and Nk = 0 are refused there, naming the argument (attention's docstring)."""
    q, k, v, _ = _inputs(1, 2, 2, 4, 4, 16, DTYPES[0])
    with pytest.raises(ValueError, match=r"dropout_p: expected a dropout probability in \[0, 1\), got 1.0"):
        gpu.forward(q, k, v, dropout_p=1.0, seed=1)
    with pytest.raises(ValueError, match="k must have at least one key"):
        gpu.forward(q, k[:, :, :0], v[:, :, :0])
    with pytest.raises(ValueError, match="q must have at least one query"):
        gpu.forward(q[:, :, :0], k, v)


# --------------------------------------------------------------------------------------- 2. ALiBi slopes that broadcast

B, HQ, HKV, NQ, NK, D = 2, 4, 2, 7, 9, 16
# distinct per (batch, head), so that a slope read for the wrong head or batch entry changes the result
SLOPES = torch.tensor([[0.5, 0.25, 0.125, 0.0625], [1.0, 0.3, 0.7, 0.05]])
ACCEPTED = {  # shape -> slopes of that shape
    "()": SLOPES[0, 0],
    "(1,)": SLOPES[0, :1],
    "(1, 1)": SLOPES[:1, :1],
    "(Hq,)": SLOPES[0],
    "(1, Hq)": SLOPES[:1],
    "(B, 1)": SLOPES[:, :1],
    "(B, Hq)": SLOPES,
}
REFUSED = {
    "(Hkv,)": torch.ones(HKV),  # one per K/V head: the slopes are the query heads'
    "(Hq + 1,)": torch.ones(HQ + 1),
    "(B + 1, Hq)": torch.ones(B + 1, HQ),
    "(1, 1, Hq)": torch.ones(1, 1, HQ),  # more axes than (B, Hq)
}


def _alibi_bias(slopes, Nq, Nk):
    """ALiBi as PyTorch can take it: the float attn_mask ``-slope·|i - j|``, shaped (B, Hq, Nq, Nk)."""
    i, j = torch.arange(Nq)[:, None], torch.arange(Nk)[None, :]
    per_head = torch.as_tensor(slopes, dtype=torch.float32).expand(B, HQ)[..., None, None]
    return -(per_head * (i - j).abs()).to(DEVICE)


def _causal(Nq, Nk):
    """The causal mask (top-left, key j for query i when j <= i) as an additive float mask."""
    keep = torch.ones(Nq, Nk, dtype=torch.bool).tril()
    return torch.zeros(Nq, Nk).masked_fill(~keep, float("-inf")).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", ACCEPTED)
def test_alibi_slopes_that_broadcast_agree_with_the_front_and_torch(shape, dtype):
    """Slopes of every shape the torch front takes give the front's output and gradients (GQA, causal), and PyTorch's
    SDPA with the same ALiBi term as a float mask, in float32."""
    slopes = ACCEPTED[shape]
    q, k, v, do = _inputs(B, HQ, HKV, NQ, NK, D, dtype, seed=2)
    ours = _run(lambda q, k, v: gpu.attention(q, k, v, causal=True, enable_gqa=True, alibi_slopes=slopes),
                q, k, v, do)
    theirs = _run(lambda q, k, v: front(q, k, v, is_causal=True, enable_gqa=True, alibi_slopes=slopes),
                  q, k, v, do)
    # PyTorch refuses attn_mask with is_causal: the causal mask goes into the float mask as -inf
    bias = _alibi_bias(slopes, NQ, NK) + _causal(NQ, NK)
    torch_fp32 = _run(lambda q, k, v: _torch_math(q, k, v, attn_mask=bias, enable_gqa=True), q, k, v, do,
                      dtype=torch.float32)
    for name, a, b, c in zip(("output", "dq", "dk", "dv"), ours, theirs, torch_fp32):
        assert a.shape == b.shape == c.shape and a.dtype == b.dtype == dtype, name
        atol = ATOL[dtype] if name == "output" else GRAD_ATOL[dtype]
        torch.testing.assert_close(a.float(), b.float(), atol=atol, rtol=1e-2, msg=f"{name} vs the torch front")
        torch.testing.assert_close(a.float(), c, atol=atol, rtol=1e-2, msg=f"{name} vs PyTorch's SDPA")


def test_broadcast_slopes_run_as_their_expanded_slopes():
    """One slope for every head is the same call as that slope written out per (batch, head): bit for bit."""
    q, k, v, _ = _inputs(B, HQ, HKV, NQ, NK, D, DTYPES[0], seed=4)
    one = gpu.attention(q, k, v, enable_gqa=True, alibi_slopes=0.25)
    written_out = gpu.attention(q, k, v, enable_gqa=True, alibi_slopes=torch.full((B, HQ), 0.25))
    assert torch.equal(one, written_out)
    without = gpu.attention(q, k, v, enable_gqa=True)
    assert not torch.equal(one, without)  # the slope took part


@pytest.mark.parametrize("shape", REFUSED)
def test_slopes_that_do_not_broadcast_are_refused_by_both_fronts(shape):
    slopes = REFUSED[shape]
    q, k, v, _ = _inputs(B, HQ, HKV, NQ, NK, D, DTYPES[0])
    with pytest.raises(ValueError, match=r"alibi_slopes: shape .* does not broadcast"):
        gpu.attention(q, k, v, enable_gqa=True, alibi_slopes=slopes)
    with pytest.raises(ValueError, match=r"alibi_slopes: shape .* does not broadcast"):
        front(q, k, v, enable_gqa=True, alibi_slopes=slopes)


# ----------------------------------------------------------------------------------------------- 3. empty problems

EMPTY_CASES = {  # (B, Hq, Hkv, Nq, Nk, d, causal)
    "Nq=0": (2, 4, 2, 0, 5, 16, False),
    "Nk=0": (2, 4, 2, 5, 0, 16, False),
    "Nk=0, causal": (1, 2, 2, 3, 0, 8, True),
    "Nq=Nk=0": (1, 2, 2, 0, 0, 16, True),
    "B=0": (0, 2, 2, 3, 5, 16, True),
    "H=0": (1, 0, 0, 3, 5, 16, False),
    "d=0": (1, 2, 2, 3, 5, 0, False),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", EMPTY_CASES)
def test_empty_problems_agree_with_the_front_and_torch(case, dtype, no_launch):
    """The empty output, or zeros for rows with no keys, and zero gradients of each input's shape: what the torch
    front and PyTorch's SDPA give, bit for bit, with no kernel launched."""
    Bn, Hq, Hkv, Nq, Nk, d, causal = EMPTY_CASES[case]
    q, k, v, do = _inputs(Bn, Hq, Hkv, Nq, Nk, d, dtype, seed=5)
    gqa = Hq != Hkv
    ours = _run(lambda q, k, v: gpu.attention(q, k, v, causal=causal, enable_gqa=gqa), q, k, v, do)
    _same(ours, _run(lambda q, k, v: front(q, k, v, is_causal=causal, enable_gqa=gqa), q, k, v, do))
    _same(ours, _run(lambda q, k, v: _torch_math(q, k, v, is_causal=causal, enable_gqa=gqa), q, k, v, do))
    assert ours[0].shape == (Bn, Hq, Nq, d) and ours[0].dtype == dtype and not ours[0].any()
    assert ours[2].shape == (Bn, Hkv, Nk, d)
    assert gpu.which_kernel(q, k, v, causal=causal, enable_gqa=gqa).startswith("no kernel: ")


def test_no_keys_with_the_variants_gives_zeros(no_launch):
    """Nk = 0 with every variant: the options are still checked, and the rows (which see no key) are zeros."""
    q, k, v, do = _inputs(2, 4, 2, 3, 0, 16, DTYPES[0])
    opts = dict(causal=True, enable_gqa=True, window=(1, 0), alibi_slopes=SLOPES[:1], softcap=5.0, scale=-0.5)
    ours = _run(lambda q, k, v: gpu.attention(q, k, v, **opts), q, k, v, do)
    assert ours[0].shape == q.shape and not ours[0].any()
    assert all(g.shape == x.shape and not g.any() for g, x in zip(ours[1:], (q, k, v)))
    with pytest.raises(ValueError, match="alibi_slopes"):  # refused as a call with keys would be
        gpu.attention(q, k, v, enable_gqa=True, alibi_slopes=torch.ones(3))
    with pytest.raises(TypeError, match="window"):
        gpu.attention(q, k, v, enable_gqa=True, window=3)


def test_nan_flowing_back_into_zeros_is_refused_where_it_is_checked():
    """The zeros' backward keeps attention's rule for the gradient flowing back: NaN raises on the CPU (the
    interpreter), where the check is free; on a GPU it is checked only under anomaly detection."""
    q, k, v, do = (x.requires_grad_() for x in _inputs(1, 2, 2, 3, 4, 16, DTYPES[0]))
    o = gpu.attention(q, k, v, dropout_p=1.0)
    nan = torch.full_like(o, float("nan"))
    if INTERPRET:
        with pytest.raises(ValueError, match="grad_output"):
            o.backward(nan)
    else:
        o.backward(nan)
        assert not q.grad.any()
