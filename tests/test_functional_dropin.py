"""The torch front is a drop-in for torch.nn.functional.scaled_dot_product_attention (float64)."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812  (the usual name)
from hypothesis import given, settings
from hypothesis import strategies as st

from flashref import dropout
from flashref.functional import scaled_dot_product_attention as sdpa


@st.composite
def sdpa_cases(draw):
    """Shapes and options as real models pass them: GQA, Ev != E, broadcast, bool/float masks, causal."""
    B, Hkv = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    gqa = draw(st.booleans())
    Hq = Hkv * (draw(st.integers(1, 3)) if gqa else 1)
    L, S, E, Ev = (draw(st.integers(1, 9)) for _ in range(4))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, L, E, generator=g, dtype=torch.float64)
    k_lead = (B, Hkv) if draw(st.booleans()) else (1, Hkv)  # broadcast batch axis
    k = torch.randn(*k_lead, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(*k_lead, S, Ev, generator=g, dtype=torch.float64)
    kind = draw(st.sampled_from(["none", "bool", "float", "padding"]))
    mask = None
    if kind == "bool":
        mask = torch.rand(L, S, generator=g) < 0.7
    elif kind == "float":
        mask = torch.randn(B, 1, L, S, generator=g, dtype=torch.float64)
        mask[..., 0, :] = float("-inf")  # a fully masked row
    elif kind == "padding":  # an HF-style key-padding mask, (B, 1, 1, S), additive
        keep = torch.rand(B, 1, 1, S, generator=g) < 0.8
        mask = torch.zeros(B, 1, 1, S, dtype=torch.float64).masked_fill(~keep, torch.finfo(torch.float64).min)
    causal = mask is None and draw(st.booleans())  # PyTorch refuses both together
    scale = draw(st.sampled_from([None, 0.3]))
    return dict(q=q, k=k, v=v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)


@settings(max_examples=40, deadline=None)
@given(sdpa_cases(), st.sampled_from(["flash2", "standard"]))
def test_agrees_with_torch_sdpa_forward_and_backward(case, algorithm):
    q, k, v = (case[n].clone().requires_grad_(True) for n in "qkv")
    kw = {n: case[n] for n in ("attn_mask", "is_causal", "scale", "enable_gqa")}
    mask = case["attn_mask"]
    learned = mask is not None and mask.is_floating_point()  # a float mask learns, as a bias (T5's): its gradient too
    ours_mask, ref_mask = ((mask.clone().requires_grad_(True) if learned else mask) for _ in range(2))
    ours = sdpa(q, k, v, algorithm=algorithm, block_sizes=(3, 2), **dict(kw, attn_mask=ours_mask))
    ref_q, ref_k, ref_v = (case[n].clone().requires_grad_(True) for n in "qkv")
    ref = F.scaled_dot_product_attention(ref_q, ref_k, ref_v, **dict(kw, attn_mask=ref_mask))
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    # (a row padded out by finfo.min leaves flash2's L unable to carry log ℓ: the front's backward recomputes P
    # with standard's forward there, and agrees with torch all the same; test_padded_rows_of_finfo_min below)
    ours.backward(g)
    ref.backward(g)
    for a, b in ((q, ref_q), (k, ref_k), (v, ref_v)) + (((ours_mask, ref_mask),) if learned else ()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kw", [{}, {"scale": 0.7}, {"enable_gqa": True}])
def test_padded_rows_of_finfo_min(dtype, kw):
    """An additive mask as Hugging Face builds it: finfo.min on padded keys, and on every key of a padded query's row.
    Torch reads such a row as uniform weights (the scores vanish in finfo.min); flash2's L = m + log ℓ cannot carry
    log ℓ there (flash2.backward refuses it), so the front's backward recomputes P with standard's forward: output and
    every gradient, the mask's included, agree with torch's math, and the front warns of nothing."""
    gen = torch.Generator().manual_seed(3)
    hk = 2 if kw.get("enable_gqa") else 4
    q = torch.randn(2, 4, 5, 8, generator=gen, dtype=dtype)
    k, v = (torch.randn(2, hk, 6, 8, generator=gen, dtype=dtype) for _ in range(2))
    mask = torch.zeros(2, 1, 5, 6, dtype=dtype)
    mask[0, :, :, 4:] = torch.finfo(dtype).min  # padded keys
    mask[1, :, 3:] = torch.finfo(dtype).min  # padded queries: their rows are finfo.min throughout
    g = torch.randn(2, 4, 5, 8, generator=gen, dtype=dtype)
    grads = []
    for front in (sdpa, F.scaled_dot_product_attention):
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v, mask)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = front(*inputs[:3], attn_mask=inputs[3], **kw)
            out.backward(g)
        grads.append([out.detach()] + [t.grad for t in inputs])
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
    # the padded queries' rows are torch's uniform weights: the mean of V over the keys
    v_heads = v.repeat_interleave(4 // hk, dim=1)[1]  # query head h reads K/V head h // (4 // hk)
    torch.testing.assert_close(grads[0][0][1, :, 3:], v_heads.mean(-2, keepdim=True).expand(-1, 2, -1),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("bias", [-1e4, -1e6, -3e6])
def test_a_row_masked_by_a_large_finite_bias_keeps_its_gradients(bias):
    """A padded query (zeros) whose row is masked by a large finite number short of finfo.min: every score of the row
    is the bias, and softmax of it is uniform, exactly. In float32 flash2's L = m + log ℓ carries log ℓ only to its
    spacing (1/4 at 3e6): the front's gradients were 1.5% off at 1e6 and 5% at 3e6 (as PyTorch's own float32 backward
    is). Past flash2.L_SPACING (2^-10, float32 at 16384) the front recomputes P with standard; short of it (1e4)
    rounding L moves P by at most e^(2^-11) − 1 (5e-4), and the gradients by no more."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 1, n, 8, generator=gen) for n in (4, 64, 64))
    q[0, 0, 1] = 0
    mask = torch.zeros(4, 64)
    mask[1] = bias
    g = torch.randn(1, 1, 4, 8, generator=gen)
    grads = []
    for dtype in (torch.float32, torch.float64):
        inputs = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
        out = sdpa(*inputs, attn_mask=mask.to(dtype))
        grads.append(torch.autograd.grad(out, inputs, g.to(dtype)))
    for ours, exact in zip(*grads):
        assert ((ours.double() - exact).norm() / exact.norm()).item() < 1e-3


@pytest.mark.parametrize("L,S", [(0, 5), (4, 0), (0, 0)])
def test_empty_inputs_as_torch(L, S):
    q, k, v = torch.randn(2, 3, L, 4), torch.randn(2, 3, S, 4), torch.randn(2, 3, S, 6)
    ours, ref = sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v)
    assert ours.shape == ref.shape and torch.equal(ours, ref)


ZERO_SHORTCUTS = {"dropout_p=1": (4, 6, dict(dropout_p=1.0)), "no keys": (4, 0, {}), "no queries": (0, 6, {})}


@pytest.mark.parametrize("case", ZERO_SHORTCUTS)
@pytest.mark.parametrize("option", [
    dict(scale=float("nan")), dict(seed=1.5), dict(window=(-3, 1)), dict(softcap=-1.0), dict(block_sizes=(0, 1)),
    dict(sram_size=0), dict(alibi_slopes=torch.ones(3)), dict(alibi_slopes=torch.tensor([float("nan")]))])
def test_the_zero_shortcut_refuses_an_option_as_with_data(case, option):
    """Where nothing is attended (no keys, no queries, every weight dropped) the front answers with zeros and runs
    no algorithm: the algorithms' checks of the options are made from the shapes (Problem.from_shapes), so that an
    option out of range is refused with the same error as with data (these were accepted there)."""
    L, S, zero_opts = ZERO_SHORTCUTS[case]
    q = torch.randn(1, 1, L, 8)
    k, v = torch.randn(1, 1, S, 8), torch.randn(1, 1, S, 8)
    data = (torch.randn(1, 1, 4, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8))
    with pytest.raises((ValueError, TypeError)) as with_data:
        sdpa(*data, dropout_p=0.5, **option)
    with pytest.raises(type(with_data.value)) as zero:
        sdpa(q, k, v, **zero_opts, **option)
    assert str(zero.value) == str(with_data.value)


@pytest.mark.parametrize("case", ["dropout_p=1", "no keys"])  # (no queries: an empty output, no gradient to hold NaN)
def test_the_zero_shortcut_checks_grad_output(case):
    """A NaN gradient flowing back into the zeros is refused, naming grad_output, as the backward with data does; a
    finite one gives zero gradients."""
    L, S, zero_opts = ZERO_SHORTCUTS[case]
    q = torch.randn(1, 1, L, 8, requires_grad=True)
    k, v = torch.randn(1, 1, S, 8), torch.randn(1, 1, S, 8)
    out = sdpa(q, k, v, **zero_opts)
    with pytest.raises(ValueError, match="^grad_output: .* contains NaN or inf"):
        torch.autograd.grad(out, q, torch.full_like(out, float("nan")), retain_graph=True)
    (dq,) = torch.autograd.grad(out, q, torch.ones_like(out))
    assert dq.shape == q.shape and not dq.any()


def test_the_zero_shortcuts_grad_check_leaves_meta_and_batched_gradients_alone():
    """The check of grad_output on the zeros read its values: a meta tensor's backward (no values) and torch's older
    batching of gradients (is_grads_batched=True, which no Python branch can read) failed there, where they ran
    before. Both give their zero gradients; the stand-ins of a meta call allocate nothing of its size."""
    import tracemalloc
    q = torch.randn(2, 4, 8, device="meta", requires_grad=True)
    sdpa(q, q, q).sum().backward()
    assert q.grad.shape == q.shape and q.grad.device.type == "meta"
    q = torch.randn(2, 4, 8, requires_grad=True)
    out = sdpa(q, q, q, dropout_p=1.0)
    (grads,) = torch.autograd.grad(out, q, torch.randn(5, *out.shape), is_grads_batched=True)
    assert grads.shape == (5, 2, 4, 8) and not grads.any()
    big = torch.empty(1024, 64, 4096, 128, device="meta")
    tracemalloc.start()
    try:
        assert sdpa(big, big, big).shape == big.shape
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20  # stand-ins of 1024 x 64 heads of 128 floats were 96 MB


def test_a_nested_tensor_is_refused_by_name():
    """A strided nested tensor passed the layout check and failed inside torch ('NestedTensorImpl doesn't support
    sizes')."""
    with warnings.catch_warnings():  # torch warns that this nested-tensor API is a prototype
        warnings.simplefilter("ignore", UserWarning)
        nested = torch.nested.nested_tensor([torch.randn(3, 4), torch.randn(5, 4)])
    with pytest.raises(TypeError, match="^query: expected a dense \\(strided\\) tensor, got a nested tensor"):
        sdpa(nested, nested, nested)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_is_refused_by_name(dtype):
    """PyTorch's SDPA refuses float8; the front did not (e4m3 failed inside isfinite, e5m2 computed)."""
    q = torch.randn(1, 1, 4, 8).to(dtype)
    with pytest.raises(TypeError, match=r"^query: expected one of float16, bfloat16, float32, float64.*flashref\.lowp"):
        sdpa(q, q, q)


def test_torch_compile_runs_the_front_outside_its_graph():
    """Dynamo traced the numpy algorithms and failed on the dropout mask's hashing; the front is a graph break now,
    and the compiled function gives the eager result and gradients (backend "eager": Dynamo without a compiler)."""
    q = torch.randn(1, 2, 6, 8, requires_grad=True)
    k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)

    def step(q):
        return (sdpa(q, k, v, dropout_p=0.25, seed=3) * 2).sum()

    compiled = torch.compile(step, backend="eager")
    want, got = torch.autograd.grad(step(q), q)[0], torch.autograd.grad(compiled(q), q)[0]
    torch.testing.assert_close(compiled(q), step(q), rtol=0, atol=0)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_importing_the_front_leaves_dynamo_unloaded():
    """The graph break is asked for when torch.compile traces the front, not by a decorator at import: that imported
    torch._dynamo with the module, a second more for every notebook and test worker that imports it."""
    import subprocess
    import sys
    code = "import sys, flashref.functional; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False"]


def test_empty_batch():
    q = torch.randn(0, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    out = sdpa(q, q, q, is_causal=True)
    assert out.shape == (0, 2, 5, 4)
    out.sum().backward()
    assert q.grad.shape == q.shape


def test_dropout_draws_a_fresh_mask_per_call_from_torchs_generator():
    q = torch.randn(2, 16, 8, dtype=torch.float64)
    torch.manual_seed(0)
    a, b = sdpa(q, q, q, dropout_p=0.5), sdpa(q, q, q, dropout_p=0.5)
    assert not torch.equal(a, b)  # every step, every layer: a new mask
    torch.manual_seed(0)
    assert torch.equal(sdpa(q, q, q, dropout_p=0.5), a)  # torch.manual_seed reproduces a run


def test_dropout_statistics_and_the_keyed_mask_on_request():
    p, N = 0.3, 64
    v = torch.eye(N, dtype=torch.float64).expand(4, N, N)
    q = torch.zeros(4, N, 8, dtype=torch.float64)  # uniform attention: O = P∘Z with P = 1/N
    out = sdpa(q, q[..., :N, :], v, dropout_p=p, seed=17)
    kept = (out > 0).double().mean().item()
    assert abs(kept - (1 - p)) < 4 * np.sqrt(p * (1 - p) / out.numel())
    assert torch.allclose(out[out > 0], torch.tensor(1 / (N * (1 - p)), dtype=torch.float64))
    keep = dropout.keep_mask(17, p, (4,), (0, N), (0, N))
    assert np.array_equal(out.numpy() > 0, keep)  # seed=... gives exactly the reference's keyed mask
    # the mean over many fresh masks is the undropped output (dropout is unbiased)
    torch.manual_seed(1)
    mean = sum(sdpa(q, q, v, dropout_p=p) for _ in range(200)) / 200
    assert abs(mean.mean().item() - 1 / N) < 0.05 / N


def test_double_backward_is_a_clear_error():
    q = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    out = sdpa(q, q, q)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    (g,) = torch.autograd.grad(sdpa(q, q, q).sum(), q)  # a first-order gradient still works
    assert g.shape == q.shape and not g.requires_grad


def test_gqa_bad_head_counts_are_named():
    q, k = torch.randn(1, 6, 3, 4), torch.randn(1, 4, 3, 4)
    with pytest.raises(ValueError, match="enable_gqa: query heads Hq=6 must be a multiple of key/value heads Hkv=4"):
        sdpa(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="do not broadcast"):
        sdpa(q, k, k)


def test_gqa_key_and_value_heads_may_differ_as_in_torch():
    """PyTorch asks only that each of K's and V's head counts divide Q's: each is repeated on its own."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 6, 5, 8, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    k2, v3 = k[:, :2].detach().requires_grad_(), v[:, :3].detach().requires_grad_()
    for algorithm in ("flash2", "standard", "flash1"):
        out = sdpa(q, k2, v3, enable_gqa=True, is_causal=True, algorithm=algorithm)
        ref = F.scaled_dot_product_attention(q, k2, v3, enable_gqa=True, is_causal=True)
        torch.testing.assert_close(out, ref)
        mine, theirs = (torch.autograd.grad(o.sum(), (q, k2, v3)) for o in (out, ref))
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match=r"Hkv=4 \(value\)"):
        sdpa(q, k2, v[:, :4], enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("algorithm", ["flash2", "flash1", "standard"])
def test_an_in_place_change_before_backward_is_an_error_not_a_wrong_gradient(dtype, algorithm):
    """The arrays the backward reads share memory with the inputs (fp32, fp64): changed in place after the forward,
    PyTorch's version counters must catch it, as for its own kernels, and a second backward without retain_graph is
    PyTorch's error too (the saved arrays are freed). The output is the caller's own: changed in place, the backward
    gives what PyTorch's gives."""
    q, k, v = (torch.randn(1, 2, 4, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    out = sdpa(q, k, v, algorithm=algorithm)
    out.mul_(3)
    out.sum().backward()
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).mul(3).sum(), q)[0]
    torch.testing.assert_close(q.grad, want, atol=1e-4 if dtype == torch.float32 else 1e-10, rtol=0)
    q.grad = None
    q1 = q * 1
    out = sdpa(q1, k, v, algorithm=algorithm)
    q1.add_(5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out = sdpa(q, k, v, algorithm=algorithm)
    out.sum().backward(retain_graph=True)
    first = q.grad.clone()
    out.sum().backward()  # kept for a second one on request: the gradients add up
    torch.testing.assert_close(q.grad, 2 * first)
    q.grad = None
    out = sdpa(q, k, v, algorithm=algorithm)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()


def test_a_narrower_value_gives_a_contiguous_output_as_torch():
    q, k, v = _qkv64(E=8, Ev=3)
    out = sdpa(q, k, v)
    assert out.is_contiguous() and out.view(-1).numel() == out.numel()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def _qkv64(L=5, S=7, E=4, Ev=6, lead=(2, 3)):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*lead, n, e, generator=g, dtype=torch.float64) for n, e in ((L, E), (S, E), (S, Ev))]


def test_edges_torch_takes_agree_with_torch():
    """dropout_p = 1 (every weight dropped: zeros and zero gradients), a head dim E = 0 (every score 0: each row
    averages V over the keys it sees), an empty head axis with enable_gqa, 0-d tensors for scale and dropout_p."""
    q, k, v = (x.requires_grad_() for x in _qkv64())
    for kw in (dict(dropout_p=1.0), dict(dropout_p=1.0, is_causal=True)):
        out, ref = sdpa(q, k, v, **kw), F.scaled_dot_product_attention(q, k, v, **kw)
        assert out.shape == ref.shape and torch.equal(out, ref)
        (gq, gv) = torch.autograd.grad(out.sum(), (q, v))
        assert not gq.any() and not gv.any()
    q0, k0, v0 = _qkv64(E=0)
    for kw in (dict(scale=1.0), dict(scale=1.0, is_causal=True)):
        torch.testing.assert_close(sdpa(q0, k0, v0, **kw), F.scaled_dot_product_attention(q0, k0, v0, **kw))
    assert torch.allclose(sdpa(q0, k0, v0), v0.mean(-2, keepdim=True).expand(2, 3, 5, 6))
    assert sdpa(q[:, :0], k[:, :0], v[:, :0], enable_gqa=True).shape == (2, 0, 5, 6)
    torch.testing.assert_close(sdpa(q, k, v, scale=torch.tensor(0.5), dropout_p=torch.tensor(0.0)),
                               F.scaled_dot_product_attention(q, k, v, scale=0.5))


@pytest.mark.parametrize("call,exc,match", [
    (lambda q, k, v: sdpa(q[0, 0], k, v, enable_gqa=True), ValueError, "enable_gqa: expected query and key"),
    (lambda q, k, v: sdpa(q, k, v, is_causal="no"), TypeError, "is_causal"),
    (lambda q, k, v: sdpa(q, k, v, is_causal=None), TypeError, "is_causal"),
    # enable_gqa by is_causal's rule (PyTorch refuses a non-bool too), with or without heads to group
    (lambda q, k, v: sdpa(q, k, v, enable_gqa="yes"), TypeError, "enable_gqa: expected True or False"),
    (lambda q, k, v: sdpa(q, k, v, enable_gqa=1), TypeError, "enable_gqa"),
    (lambda q, k, v: sdpa(q, k, v, enable_gqa=None), TypeError, "enable_gqa"),
    (lambda q, k, v: sdpa(q, k[:, :1], v[:, :1], enable_gqa="yes", algorithm="flash1"), TypeError, "enable_gqa"),
    (lambda q, k, v: sdpa(q, k, v, dropout_p=-0.1), ValueError, "dropout_p"),
    (lambda q, k, v: sdpa(q.float(), k, v), TypeError, "key: dtype torch.float64 does not match query's"),
    (lambda q, k, v: sdpa(q, k, v, attn_mask=torch.ones(2, 3, 3, dtype=torch.bool)), ValueError,
     r"attn_mask: shape \(2, 3, 3\) does not broadcast to \(..., L, S\) = \(2, 3, 5, 7\)"),
    (lambda q, k, v: sdpa(q.index_fill(-1, torch.tensor([0]), float("nan")), k, v), ValueError,
     "query: contains NaN"),
    (lambda q, k, v: sdpa(q, k, v, alibi_slopes=torch.ones(3, requires_grad=True)), ValueError,
     "alibi_slopes: slopes that require grad"),
    (lambda q, k, v: sdpa(q, k, v, attn_mask=torch.zeros(5, 7).index_fill(0, torch.tensor([1]), float("nan"))),
     ValueError, "attn_mask: a float mask must be finite or -inf"),
    (lambda q, k, v: sdpa(q, k, v, attn_mask=torch.zeros(5, 7).index_fill(0, torch.tensor([1]), float("inf"))),
     ValueError, "attn_mask: a float mask must be finite or -inf"),
    # a learnable temperature would silently never train: refused, as a float mask that requires grad
    (lambda q, k, v: sdpa(q, k, v, scale=torch.tensor(0.5, dtype=torch.float64, requires_grad=True)), ValueError,
     "scale: a tensor that requires grad is not supported"),
    (lambda q, k, v: sdpa(q, k, v, dropout_p=torch.tensor(0.1, requires_grad=True)), ValueError,
     "dropout_p: a tensor that requires grad"),
    # devices, as PyTorch refuses mixed ones; a meta tensor has no values to read
    (lambda q, k, v: sdpa(q.to("meta"), k, v), ValueError, "key: on cpu, but query is on meta"),
    (lambda q, k, v: sdpa(q, k, v.to("meta")), ValueError, "value: on meta, but query is on cpu"),
    (lambda q, k, v: sdpa(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool, device="meta")), ValueError,
     "attn_mask: on meta, but query is on cpu"),
    (lambda q, k, v: sdpa(q.to_sparse(), k, v), TypeError, "query: expected a dense"),
    # a sparse mask (PyTorch refuses it too) failed deep in numpy's conversion, naming no argument
    (lambda q, k, v: sdpa(q, k, v, attn_mask=(torch.ones(5, 7) > 0).to_sparse()), TypeError,
     "attn_mask: expected a dense"),
    (lambda q, k, v: sdpa(q, k, v, attn_mask=torch.ones(5, 7).to_sparse_csr()), TypeError,
     "attn_mask: expected a dense"),
    (lambda q, k, v: sdpa(q, k, v, algorithm=["flash2"]), ValueError, "algorithm: expected one of"),
    (lambda q, k, v: sdpa(q, k, v, alibi_slopes=[[1.0], [1.0, 2.0]]), TypeError, "alibi_slopes: expected a tensor"),
    (lambda q, k, v: sdpa(q, k, v, alibi_slopes=torch.ones(3, dtype=torch.complex64)), TypeError,
     "alibi_slopes: expected real slopes"),
    # the front's option names, not the algorithm's internals
    (lambda q, k, v: sdpa(q, k, v, algorithm="flash1", gqa_packing=True), TypeError,
     "gqa_packing: algorithm='flash1' has no gqa_packing"),
])
def test_refusals_name_the_fronts_argument(call, exc, match):
    """Refused as PyTorch refuses, or as the front's documented differences say, naming the front's own argument
    (query, attn_mask, is_causal), not the numpy algorithms' (Q, mask)."""
    with pytest.raises(exc, match=match):
        call(*_qkv64())


def test_overflow_through_a_float_mask_and_a_nan_gradient_are_errors():
    q = torch.full((1, 1, 2, 4), 1e18)
    k = torch.full((1, 1, 3, 4), 1e18)
    bias = torch.full((2, 3), 3.4e38)
    bias[:, 0] = 0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a NaN with RuntimeWarnings: an error naming the cure
        with pytest.raises(FloatingPointError, match=r"bias overflowed float32.*float64"):
            sdpa(q, k, torch.randn(1, 1, 3, 4), attn_mask=bias)
    q, k, v = (x.requires_grad_() for x in _qkv64())
    out = sdpa(q, k, v)
    with pytest.raises(ValueError, match="grad_output"):
        out.backward(torch.full_like(out, float("nan")))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_every_weight_dropped_gives_zeros_even_when_a_sum_overflows(dtype):
    """dropout_p = 1 (and no keys) returns zeros with a graph to the inputs; built once as query.sum() * 0, it was
    NaN as soon as an input's sum overflowed its dtype (fp16: 16 x 64 ones times 1000)."""
    big = torch.finfo(dtype).max / 4
    q, k = torch.randn(2, 3, 16, 64, dtype=dtype), torch.randn(2, 3, 16, 64, dtype=dtype)
    v = torch.full((2, 3, 16, 64), big, dtype=dtype, requires_grad=True)
    ref = F.scaled_dot_product_attention(q, k, v.detach(), dropout_p=1.0)
    out = sdpa(q, k, v, dropout_p=1.0)
    assert out.shape == ref.shape and torch.equal(out, torch.zeros_like(ref))
    out.sum().backward()
    assert torch.equal(v.grad, torch.zeros_like(v))
    no_keys = sdpa(q.clamp(-1, 1) * big, k[..., :0, :], v.detach()[..., :0, :])
    assert no_keys.shape == q.shape and torch.equal(no_keys, torch.zeros_like(q))


def test_meta_tensors_give_the_shape_pytorch_gives():
    meta = [torch.empty(s, device="meta") for s in ((2, 3, 4, 8), (2, 1, 5, 8), (2, 3, 5, 6))]
    out = sdpa(*meta)
    ref = F.scaled_dot_product_attention(*meta)
    assert out.device.type == "meta" and out.shape == ref.shape == (2, 3, 4, 6) and out.dtype == ref.dtype


DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("mask_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float_mask_dtypes_as_torch_takes_them(dtype, mask_dtype):
    """A float attn_mask is taken where PyTorch takes it, float32 or the query's dtype, and refused (naming it) where
    PyTorch refuses it; where taken, the two agree."""
    q = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(1)).to(dtype)
    mask = torch.randn(3, 3, generator=torch.Generator().manual_seed(2)).to(mask_dtype)
    try:
        want = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    except RuntimeError:
        want = None
    assert (want is None) == (mask_dtype not in (torch.float32, dtype))
    if want is None:
        with pytest.raises(TypeError, match="attn_mask: a float mask must be float32 or the query's dtype"):
            sdpa(q, q, q, attn_mask=mask)
    else:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5
        torch.testing.assert_close(sdpa(q, q, q, attn_mask=mask), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("algorithm", ["standard", "flash1", "flash2"])
def test_changing_a_mask_or_an_option_after_the_forward_changes_no_gradient(algorithm):
    """The backward reads the mask (or bias), the ALiBi slopes and the window again: the front keeps its own copies,
    so a caller that refills one buffer before calling backward (gradient accumulation) gets the gradients of what the
    forward saw, as PyTorch gives. Changing the output in place is allowed too, as PyTorch allows it."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    bool_mask = torch.rand(6, 6, generator=g) < 0.8
    cases = [dict(attn_mask=bool_mask)]
    if algorithm != "flash1":
        cases += [dict(attn_mask=torch.randn(6, 6, generator=g, dtype=torch.float64)),
                  dict(alibi_slopes=[0.5, 0.25, 0.125], window=[2, 1]),
                  dict(alibi_slopes=np.array([0.5, 0.25, 0.125])), dict(alibi_slopes=torch.tensor([0.5, 0.25, 0.125]))]

    def grads(opts, change):
        a, b, c = (x.clone().requires_grad_() for x in (q, k, v))
        out = sdpa(a, b, c, algorithm=algorithm, **opts)
        change(opts, out)
        out.sum().backward()
        return a.grad, b.grad, c.grad

    def refill(opts, out):
        for x in opts.values():
            if isinstance(x, torch.Tensor) and x.dtype == torch.bool:
                x.logical_not_()
            elif isinstance(x, (torch.Tensor, np.ndarray)):
                x *= 7
            else:
                x[0] += 3
        out.mul_(2)  # the caller's output, not the O the backward reads

    for opts in cases:
        want = grads({n: (x.clone() if isinstance(x, torch.Tensor) else np.array(x) if isinstance(x, np.ndarray)
                          else list(x)) for n, x in opts.items()}, lambda o, out: out.mul_(2))
        for x, y in zip(grads(opts, refill), want):
            torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("algorithm", ["flash2", "standard", "flash1"])
def test_a_learned_bias_gets_its_gradient_as_torch_gives_it(algorithm):
    """A float attn_mask that requires grad (a learned bias: T5's relative positions, AlphaFold's pair bias) gets
    the gradient PyTorch gives it, summed over the axes it was broadcast along, with GQA, causal and Ev != E; a
    float32 mask on float64 queries gets a float32 gradient; an empty batch gives it zeros."""
    g = torch.Generator().manual_seed(8)
    for shape, causal, gqa in (((5, 7), False, False), ((1, 4, 5, 7), True, False), ((2, 1, 1, 7), False, True),
                               ((2, 4, 5, 7), True, True)):
        q = torch.randn(2, 4, 5, 3, generator=g, dtype=torch.float64)
        k, v = torch.randn(2, 2 if gqa else 4, 7, 3, generator=g, dtype=torch.float64), \
            torch.randn(2, 2 if gqa else 4, 7, 6, generator=g, dtype=torch.float64)
        bias = torch.randn(shape, generator=g, dtype=torch.float32)
        grads = []
        for fn in (lambda *a, **kw: sdpa(*a, algorithm=algorithm, **kw), F.scaled_dot_product_attention):
            b, qq = bias.clone().requires_grad_(), q.clone().requires_grad_()
            mask = b if not causal else b.masked_fill(~torch.ones(5, 7, dtype=torch.bool).tril(), float("-inf"))
            out = fn(qq, k, v, attn_mask=mask if fn is F.scaled_dot_product_attention else b, enable_gqa=gqa,
                     **({"is_causal": True} if causal and fn is not F.scaled_dot_product_attention else {}))
            grads.append(torch.autograd.grad(out.square().sum(), (qq, b)))
        assert grads[0][1].shape == bias.shape and grads[0][1].dtype == torch.float32
        for ours, theirs in zip(*grads):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    b = torch.randn(5, 7, requires_grad=True)
    sdpa(torch.randn(0, 2, 5, 3), torch.randn(0, 2, 7, 3), torch.randn(0, 2, 7, 3), attn_mask=b).sum().backward()
    assert b.grad is not None and not b.grad.any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["dropout_p=1", "Nq=0", "Nk=0"])
def test_shortcut_with_a_learned_float32_mask_keeps_the_querys_dtype(dtype, case):
    """The shortcut (every weight dropped, no queries, no keys) with a float32 mask that requires grad, which PyTorch
    takes with an fp16/bf16 query: the output has the query's dtype and PyTorch's values, and the mask gets its zero
    gradient in float32. The mask's empty sum once promoted the result to float32."""
    g = torch.Generator().manual_seed(3)
    L, S = {"dropout_p=1": (5, 7), "Nq=0": (0, 7), "Nk=0": (5, 0)}[case]
    q = torch.randn(2, L, 4, generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(2, S, e, generator=g).to(dtype) for e in (4, 6))
    mask = torch.randn(L, S, generator=g, requires_grad=True)
    kw = dict(attn_mask=mask, dropout_p=1.0 if case == "dropout_p=1" else 0.0)
    out, ref = sdpa(q, k, v, **kw), F.scaled_dot_product_attention(q, k, v, **kw)
    assert out.dtype == ref.dtype == dtype
    assert out.shape == ref.shape and torch.equal(out, ref)
    if out.numel():
        dq, dmask = torch.autograd.grad(out.sum(), (q, mask))
        assert dq.dtype == dtype and not dq.any()
        assert dmask.dtype == torch.float32 and dmask.shape == mask.shape and not dmask.any()


@pytest.mark.parametrize("mask", ["bool (S,)", "float (S,)", "0-d"])
def test_a_mask_of_fewer_than_2_dims_broadcasts_as_torch_math_path_does(mask):
    """An attn_mask of shape (S,) or () broadcasts as PyTorch's math path broadcasts it, 4-D inputs too: the front
    once refused it there, as PyTorch 2.13's fused CPU kernel does (an IndexError), though PyTorch takes it whenever
    it runs its math path (dropout, or a float mask that requires grad). Output and every gradient, the mask's too,
    agree with the math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator().manual_seed(4)
    q, k, v = _qkv64(lead=(2, 3))
    m = {"bool (S,)": torch.rand(7, generator=g) > 0.3, "float (S,)": torch.randn(7, generator=g, dtype=torch.float64),
         "0-d": torch.tensor(0.7, dtype=torch.float64)}[mask]
    for inputs in ((q, k, v), (q[0], k[0], v[0])):
        mine = [t.detach().clone().requires_grad_() for t in inputs]
        theirs = [t.detach().clone().requires_grad_() for t in inputs]
        mm, tm = (m.detach().clone().requires_grad_(m.is_floating_point()) for _ in range(2))
        out = sdpa(*mine, attn_mask=mm)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(*theirs, attn_mask=tm)
        torch.testing.assert_close(out, ref)
        dO = torch.randn(out.shape, generator=g, dtype=out.dtype)
        want = [x for x in (*theirs, tm) if x.requires_grad]
        got = [x for x in (*mine, mm) if x.requires_grad]
        for a, b in zip(torch.autograd.grad(out, got, dO), torch.autograd.grad(ref, want, dO)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtypes", [("float32", "bfloat16", "float32"), ("float32", "float32", "float32"),
                                    ("float16", "float16", "float16"), ("float64", "float64", "float64")])
@pytest.mark.parametrize("mask", [None, "bool", "float32"])
def test_under_autocast_as_torch_runs_it(dtypes, mask):
    """Inside torch.autocast PyTorch's SDPA casts query, key, value and a float mask to the region's dtype (all but
    float64 ones) and returns that dtype: mixed dtypes, as a Linear under autocast gives next to an fp32 cache, are
    taken; the output's dtype and values and the inputs' gradients (in their own dtypes) are PyTorch's."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g).to(getattr(torch, dt)).requires_grad_()
               for n, dt in zip((5, 7, 7), dtypes))
    m = None if mask is None else (torch.rand(5, 7, generator=g) < 0.8 if mask == "bool" else torch.randn(5, 7))
    if dtypes[0] == "float64" and mask == "float32":  # the mask cast to bf16, the float64 query not: both refuse
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with pytest.raises(RuntimeError, match="attn_mask"):
                F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            with pytest.raises(TypeError, match="attn_mask"):
                sdpa(q, k, v, attn_mask=m)
        return
    out = {}
    for name, f in (("torch", F.scaled_dot_product_attention), ("flashref", sdpa)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            o = f(q, k, v, attn_mask=m)
        o.float().square().sum().backward()
        out[name] = (o, *(t.grad for t in (q, k, v)))
        for t in (q, k, v):
            t.grad = None
    want = torch.float64 if dtypes[0] == "float64" else torch.bfloat16
    assert out["flashref"][0].dtype == out["torch"][0].dtype == want
    for ours, theirs in zip(out["flashref"], out["torch"]):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        tol = 1e-10 if want == torch.float64 else 0.1
        torch.testing.assert_close(ours.float(), theirs.float(), atol=tol, rtol=tol)


def test_tensors_with_torchs_negation_bit_read_as_their_values():
    """``x.conj().imag`` of a complex tensor is a real view holding its values negated behind torch's lazy negation
    bit; ``.numpy()`` refuses it. The front reads the values it stands for, as torch does, in the forward and in
    the gradient flowing back."""
    torch.manual_seed(0)
    q = torch.randn(2, 3, 4, dtype=torch.cfloat).conj().imag
    k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    assert q.is_neg()
    ours, theirs = (k.clone().requires_grad_() for _ in range(2))
    out = sdpa(q, ours, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    grad = torch.randn(out.shape, dtype=torch.cfloat).conj().imag
    out.backward(grad)
    F.scaled_dot_product_attention(q, theirs, v).backward(grad)
    torch.testing.assert_close(ours.grad, theirs.grad)


def test_empty_inputs_keep_querys_leading_axes_as_torch_does():
    """With no queries or an empty value PyTorch returns zeros with query's own leading axes, not the broadcast of the
    three (its meta tensors too); any other empty input (a leading axis of 0 in query or key) broadcasts as with
    data. The front gives the same shapes, with zero gradients of the inputs' shapes. (It once gave query's own
    leading axes whenever any input was empty: (0, 1, 5, 4) against keys of (1, 3, 7, 4) gave (0, 1, 5, 4), PyTorch
    (0, 3, 5, 4).)"""
    for shapes in (((1, 4, 4), (2, 0, 4), (2, 0, 4)), ((4, 4), (2, 0, 4), (2, 0, 4)), ((1, 0, 4), (2, 3, 4), (2, 3, 4)),
                   ((1, 3, 4), (2, 3, 4), (2, 3, 0)), ((1, 1, 4, 4), (1, 2, 0, 4), (1, 2, 0, 4)),
                   ((0, 1, 5, 4), (1, 3, 7, 4), (1, 3, 7, 4)), ((5, 4), (0, 2, 7, 4), (7, 4)),
                   ((2, 1, 5, 4), (1, 0, 7, 4), (1, 1, 7, 4)), ((0, 1, 5, 4), (1, 3, 7, 4), (1, 3, 7, 0))):
        q, k, v = (torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes)
        ours, theirs = sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v)
        assert ours.shape == theirs.shape and torch.equal(ours, theirs), shapes
        ours.sum().backward()
        assert all(t.grad.shape == t.shape and not t.grad.any() for t in (q, k, v))
    # the documented refusals: a NaN float mask, and no key/value heads under enable_gqa
    with pytest.raises(ValueError, match="attn_mask"):
        sdpa(torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4), attn_mask=torch.full((3, 5), np.nan))
    with pytest.raises(ValueError, match="key"):
        sdpa(torch.randn(2, 4, 3, 4), torch.randn(2, 0, 5, 4), torch.randn(2, 0, 5, 3), enable_gqa=True)


def test_a_mask_broadcasts_to_the_scores_not_to_values_axes():
    """PyTorch adds the mask to the scores in place, so it must broadcast to query's and key's leading axes and (L, S);
    value's leading axes join only the output. The front once checked it against all three, and took a (2, 4, 2)
    mask for scores of (4, 2) that PyTorch refuses."""
    q, k, v = torch.randn(4, 3), torch.randn(2, 3), torch.randn(2, 2, 3)
    wide = torch.ones(2, 4, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, v, attn_mask=wide)
    with pytest.raises(ValueError, match=r"attn_mask: shape \(2, 4, 2\) does not broadcast to .* = \(4, 2\)"):
        sdpa(q, k, v, attn_mask=wide)
    fits = torch.rand(4, 2) > 0.3
    torch.testing.assert_close(sdpa(q, k, v, attn_mask=fits), F.scaled_dot_product_attention(q, k, v, attn_mask=fits))
    # with native GQA the scores have query's heads, key's two heads repeated: a mask of query's four heads fits
    q, k, v = (torch.randn(s, dtype=torch.float64) for s in ((1, 4, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8)))
    bias = torch.randn(1, 4, 5, 7, dtype=torch.float64)
    torch.testing.assert_close(sdpa(q, k, v, attn_mask=bias, enable_gqa=True),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True))


def test_scale_and_enable_gqa_are_keyword_only_as_in_torch():
    q = k = v = torch.randn(3, 4)
    for f in (F.scaled_dot_product_attention, sdpa):
        with pytest.raises(TypeError):
            f(q, k, v, None, 0.0, False, 1.0)


def test_a_running_sum_past_float32_raises_and_float64_computes_it():
    """The documented difference: values whose attention fits float32 but whose unnormalised sum (up to Nk·max|V|)
    does not raise a FloatingPointError in a float32 call (PyTorch, normalising first, returns them); the same call in
    float64 gives PyTorch's answer."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 4, generator=g), torch.randn(1, 7, 4, generator=g)
    v = torch.full((1, 7, 4), 1e38)
    assert torch.isfinite(F.scaled_dot_product_attention(q, k, v)).all()
    with pytest.raises(FloatingPointError, match="overflowed"):
        sdpa(q, k, v)
    out = sdpa(q.double(), k.double(), v.double())
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q.double(), k.double(), v.double()))
