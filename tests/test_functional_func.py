"""torch.func through the torch front: grad, vjp, jacrev and vmap agree with autograd, with a Python loop and with
PyTorch's own SDPA under the same transforms (float64); a second order and forward mode raise; the SRAM overflow of
a problem widened to value's head dim says so."""

import pytest
import torch
import torch.nn.functional as F  # noqa: N812  (the usual name)
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

from flashref import SRAMOverflowError
from flashref.functional import scaled_dot_product_attention as sdpa

ALGOS = ["standard", "flash1", "flash2"]
TOL = dict(rtol=1e-9, atol=1e-12)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _close(got, want):
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_grad_and_vjp_equal_backward_and_torchs_gradients(algorithm):
    """Causal, a narrower key/value head dim on one side (Ev > E: Q and K padded) and a bool mask."""
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 6, seed=3)
    mask = torch.rand(3, 5, generator=torch.Generator().manual_seed(4)) < 0.7
    mask[:, 0] = True
    kw = dict(attn_mask=mask, is_causal=False, scale=0.6)
    w = _randn(2, 3, 6, seed=5)  # a loss that weighs every output entry differently

    def loss(f):
        return lambda q, k, v: (f(q, k, v, **kw) * w).sum()

    ours = grad(loss(lambda *a, **o: sdpa(*a, algorithm=algorithm, **o)), argnums=(0, 1, 2))(q, k, v)
    theirs = grad(loss(F.scaled_dot_product_attention), argnums=(0, 1, 2))(q, k, v)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    loss(lambda *a, **o: sdpa(*a, algorithm=algorithm, **o))(*leaves).backward()
    _close(ours, theirs)
    _close(ours, [t.grad for t in leaves])
    # vjp with the same cotangent: the same gradients, and the output itself
    out, vjp_fn = vjp(lambda q, k, v: sdpa(q, k, v, algorithm=algorithm, **kw), q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, **kw), **TOL)
    _close(vjp_fn(w), theirs)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_vmap_equals_a_loop_and_torchs_vmap(algorithm):
    """vmap over query (its batch axis in the middle), key and value batched, value unbatched, causal."""
    B, H, L, S, E = 3, 2, 4, 5, 3
    q, k, v = _randn(H, B, L, E, seed=1), _randn(B, H, S, E, seed=2), _randn(H, S, E, seed=3)

    def attend(f):
        return lambda q, k, v: f(q, k, v, is_causal=True)

    ours = vmap(attend(lambda *a, **o: sdpa(*a, algorithm=algorithm, **o)), in_dims=(1, 0, None))(q, k, v)
    loop = torch.stack([sdpa(q[:, b], k[b], v, is_causal=True, algorithm=algorithm) for b in range(B)])
    theirs = vmap(attend(F.scaled_dot_product_attention), in_dims=(1, 0, None))(q, k, v)
    assert ours.shape == (B, H, L, E)
    torch.testing.assert_close(ours, loop, rtol=0, atol=0)  # the same numbers: one call on a batch axis is exact
    torch.testing.assert_close(ours, theirs, **TOL)


def test_jacrev_equals_the_jacobian_of_torchs_sdpa():
    """jacrev vmaps the backward over the rows of the Jacobian: every row's cotangent gives its own gradients."""
    q, k, v = _randn(2, 3, seed=1), _randn(3, 3, seed=2), _randn(3, 2, seed=3)
    theirs = torch.autograd.functional.jacobian(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v))
    for algorithm in ALGOS:
        ours = jacrev(lambda q, k, v, a=algorithm: sdpa(q, k, v, is_causal=True, algorithm=a), argnums=(0, 1, 2))(
            q, k, v)
        assert ours[0].shape == (2, 2, 2, 3)
        _close(ours, theirs)


@pytest.mark.parametrize("algorithm", ["standard", "flash2"])
def test_grad_of_a_learned_float_mask(algorithm):
    """A float attn_mask among the arguments differentiated (a learned bias), broadcast along the heads and the rows;
    a float32 mask on float64 queries gets a float32 gradient, as PyTorch gives it."""
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 4, seed=3)
    bias = _randn(1, 5, seed=4)

    def loss(f):
        return lambda bias, q: f(q, k, v, attn_mask=bias).square().sum()

    ours = grad(loss(lambda *a, **o: sdpa(*a, algorithm=algorithm, **o)), argnums=(0, 1))(bias, q)
    theirs = grad(loss(F.scaled_dot_product_attention), argnums=(0, 1))(bias, q)
    assert ours[0].shape == bias.shape
    _close(ours, theirs)
    b32 = grad(loss(lambda *a, **o: sdpa(*a, algorithm=algorithm, **o)))(bias.float(), q)
    assert b32.dtype == torch.float32
    torch.testing.assert_close(b32, theirs[0].float(), rtol=1e-5, atol=1e-6)


def test_vmap_with_masks_batched_or_shared_and_their_gradients():
    """A mask of lower rank than the problem ((L, S) beside (H, L, E)) batched by vmap must broadcast as each element's
    did: its batch axis behind 1s, not against the heads. B = H, so that a wrong alignment gives wrong numbers rather
    than a shape error. A shared float mask: grad of vmap sums the elements' gradients, vmap of grad gives each its
    own; a batched one: each element's own."""
    B = H = 2
    L, S, E = 3, 4, 2
    q, k, v = _randn(B, H, L, E, seed=1), _randn(B, H, S, E, seed=2), _randn(B, H, S, E, seed=3)
    float_masks, shared = _randn(L, S, B, seed=4), _randn(L, S, seed=5)
    bool_masks = torch.rand(B, L, S, generator=torch.Generator().manual_seed(6)) < 0.6
    bool_masks[..., 0] = True

    def run(f):
        per_float = vmap(lambda q, k, v, m: f(q, k, v, attn_mask=m), in_dims=(0, 0, 0, 2))(q, k, v, float_masks)
        per_bool = vmap(lambda q, k, v, m: f(q, k, v, attn_mask=m))(q, k, v, bool_masks)

        def loss(m, q, k, v):
            return f(q, k, v, attn_mask=m).square().sum()

        summed = grad(lambda m: vmap(lambda q, k, v: loss(m, q, k, v))(q, k, v).sum())(shared)
        each_shared = vmap(grad(loss), in_dims=(None, 0, 0, 0))(shared, q, k, v)
        each_batched = vmap(grad(loss), in_dims=(2, 0, 0, 0))(float_masks, q, k, v)
        return per_float, per_bool, summed, each_shared, each_batched

    ours, theirs = run(sdpa), run(F.scaled_dot_product_attention)
    _close(ours, theirs)
    # and against loops of plain calls and .backward()
    _close(ours[:2], [torch.stack([sdpa(q[b], k[b], v[b], attn_mask=m) for b, m in enumerate(masks)])
                      for masks in (float_masks.movedim(2, 0), bool_masks)])
    leaf = shared.clone().requires_grad_()
    sum(sdpa(q[b], k[b], v[b], attn_mask=leaf).square().sum() for b in range(B)).backward()
    torch.testing.assert_close(ours[2], leaf.grad, **TOL)
    assert ours[3].shape == (B, L, S) and ours[4].shape == (B, L, S)


def test_vmap_with_dropout_and_a_seed_is_a_loop_of_calls_with_that_seed():
    """With seed=, the keyed mask is a function of (seed, head, row, column): each element gets the mask a call on it
    alone gets (not the one a batch axis would give it, renumbering the heads), and so do its gradients."""
    B, H, L, S, E = 3, 2, 4, 5, 3
    q, k, v = _randn(B, H, L, E, seed=1), _randn(B, H, S, E, seed=2), _randn(B, H, S, E, seed=3)

    def f(q, k, v):
        return sdpa(q, k, v, dropout_p=0.4, seed=11)

    ours = vmap(f)(q, k, v)
    torch.testing.assert_close(ours, torch.stack([f(q[b], k[b], v[b]) for b in range(B)]), rtol=0, atol=0)
    assert not torch.equal(ours, f(q, k, v))  # a batch axis of a plain call keys other heads

    def loss(q, k, v):
        return f(q, k, v).square().sum()

    each = vmap(grad(loss, argnums=(0, 1, 2)))(q, k, v)
    loop = [grad(loss, argnums=(0, 1, 2))(q[b], k[b], v[b]) for b in range(B)]
    _close(each, [torch.stack(g) for g in zip(*loop)])
    # jacrev (the backward vmapped over the Jacobian's rows) regenerates the forward's mask for every row
    small = (q[0, 0, :2], k[0, 0, :3], v[0, 0, :3, :2])
    _close(jacrev(f, argnums=(0, 1, 2))(*small), torch.autograd.functional.jacobian(f, small))


def test_vmap_with_dropout_and_no_seed_follows_vmaps_randomness():
    """seed=None draws the seed with torch.randint: vmap's default refuses, 'same' gives every element one mask,
    'different' each its own, and the backward regenerates each element's: with V = I the output is the dropped
    attention matrix A, and the gradient of <out, w> with respect to V is Aᵀ w."""
    B, L, S = 3, 4, 5
    q, k = _randn(L, 2, seed=1).expand(B, L, 2), _randn(S, 2, seed=2).expand(B, S, 2)
    eye = torch.eye(S, dtype=torch.float64).expand(B, S, S)
    w = _randn(B, L, S, seed=3)

    def out_and_grad(q, k, v, w):
        out, vjp_fn = vjp(lambda v: sdpa(q, k, v, dropout_p=0.5), v)
        return out, vjp_fn(w)[0]

    with pytest.raises(RuntimeError, match="randomness"):
        vmap(out_and_grad)(q, k, eye, w)
    for randomness in ("same", "different"):
        out, dv = vmap(out_and_grad, randomness=randomness)(q, k, eye, w)
        same = [torch.equal(out[0], out[b]) for b in range(1, B)]
        assert all(same) if randomness == "same" else not any(same)
        assert (out == 0).any()  # some weights dropped
        torch.testing.assert_close(dv, out.mT @ w, **TOL)


def test_a_second_order_and_forward_mode_raise():
    q, k, v = _randn(2, 3, 2, seed=1), _randn(2, 4, 2, seed=2), _randn(2, 4, 2, seed=3)

    def loss(q):
        return sdpa(q, k, v).square().sum()

    torch.testing.assert_close(grad(loss)(q), grad(lambda q: F.scaled_dot_product_attention(q, k, v).square().sum())(q),
                               **TOL)  # the first order works
    with pytest.raises(RuntimeError, match="double backward"):
        grad(lambda q: grad(loss)(q).sum())(q)
    with pytest.raises(RuntimeError, match="double backward"):
        jacrev(jacrev(loss))(q)
    for second in (lambda: hessian(loss)(q), lambda: jacfwd(loss)(q), lambda: jvp(loss, (q,), (q,))):
        with pytest.raises(RuntimeError, match="forward-mode AD"):
            second()
    out, vjp_fn = vjp(lambda q: sdpa(q, k, v), q)
    with pytest.raises(RuntimeError, match="double backward"):  # forward mode over the backward
        jvp(vjp_fn, (torch.ones_like(out),), (torch.ones_like(out),))


@pytest.mark.parametrize("algorithm", ALGOS)
def test_torchs_older_batched_gradients_raise_naming_torch_func(algorithm):
    """is_grads_batched and jacobian(vectorize=True) batch with torch._vmap_internals, which skips the Function's vmap
    and which _under_torch_func does not see: the backward failed inside torch ("Batching rule not implemented for
    aten::is_nonzero"). Now a RuntimeError saying what is not supported and what to use; the latter gives the rows."""
    q, k, v = (_randn(2, 3, 4, 6, seed=s).requires_grad_() for s in (1, 2, 3))
    o = sdpa(q, k, v, algorithm=algorithm)
    cts = _randn(3, *o.shape, seed=4)
    msg = r"a batch of gradients in one backward .*is_grads_batched.* is not supported; .*torch\.func\.vmap"
    with pytest.raises(RuntimeError, match=msg):
        torch.autograd.grad(o, q, cts, is_grads_batched=True, retain_graph=True)
    with pytest.raises(RuntimeError, match=msg):
        torch.autograd.functional.jacobian(lambda q: sdpa(q, k, v, algorithm=algorithm), q[0, 0], vectorize=True)
    _, vjp_fn = vjp(lambda q: sdpa(q, k, v, algorithm=algorithm), q)
    rows = vmap(vjp_fn)(cts)[0]
    for ct, row in zip(cts, rows, strict=True):
        torch.testing.assert_close(row, torch.autograd.grad(o, q, ct, retain_graph=True)[0], **TOL)


def test_value_checks_name_the_argument_under_transforms():
    """The checks that read values run in the autograd functions, where vmap's batch is plain: a NaN in one element,
    or in the cotangent, is named as without a transform."""
    q = _randn(3, 2, 4, 2, seed=1)
    bad = q.clone()
    bad[1, 0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="query: contains NaN"):
        vmap(lambda q: sdpa(q, q[..., :3, :], q[..., :3, :]))(bad)
    masks = torch.zeros(3, 4, 4, dtype=torch.float64)
    masks[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="attn_mask: a float mask must be finite"):
        vmap(lambda q, m: sdpa(q, q, q, attn_mask=m))(q, masks)
    out, vjp_fn = vjp(lambda q: sdpa(q, q, q), q)
    with pytest.raises(ValueError, match="grad_output"):
        vjp_fn(torch.full_like(out, float("nan")))


def test_the_zero_shortcut_and_the_variants_under_vmap():
    """dropout_p = 1 and no keys give zeros (and zero gradients) under vmap too; slopes shared by the batch work,
    batched ones are refused by name."""
    q = _randn(3, 2, 4, 2, seed=1)
    assert not vmap(lambda q: sdpa(q, q, q, dropout_p=1.0))(q).any()
    assert vmap(lambda q: sdpa(q, q[..., :0, :], q[..., :0, :]))(q).shape == q.shape
    assert not grad(lambda q: vmap(lambda q: sdpa(q, q, q, dropout_p=1.0))(q).sum())(q).any()
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    ours = vmap(lambda q: sdpa(q, q, q, alibi_slopes=slopes, window=(1, 0)))(q)
    loop = torch.stack([sdpa(x, x, x, alibi_slopes=slopes, window=(1, 0)) for x in q])
    torch.testing.assert_close(ours, loop, rtol=0, atol=0)
    with pytest.raises(ValueError, match="alibi_slopes: a tensor batched by torch.func.vmap"):
        vmap(lambda q, s: sdpa(q, q, q, alibi_slopes=s))(q, slopes.expand(3, 2))


def test_an_sram_overflow_of_the_padded_head_dim_names_values_head_dim():
    """E = 4, Ev = 32: the front runs the algorithm with d = 32. With sram_size=100 the forward overflows; with 200
    only the backward does (its footprint is larger), through .backward() and torch.func.grad alike. Either error
    says d=32 is value's Ev and E=4 was padded to it; a problem not widened keeps the algorithm's message."""
    q, v = _randn(1, 5, 4, seed=1), _randn(1, 5, 32, seed=2)
    match = r"d=32 is value's Ev; query's and key's head dim E=4 was zero-padded"
    with pytest.raises(SRAMOverflowError, match=match):
        sdpa(q, q, v, sram_size=100)
    out = sdpa(q.clone().requires_grad_(), q, v, sram_size=200)
    with pytest.raises(SRAMOverflowError, match=match):
        out.sum().backward()
    with pytest.raises(SRAMOverflowError, match=match):
        grad(lambda q: sdpa(q, q, v, sram_size=200).sum())(q)
    with pytest.raises(SRAMOverflowError) as refused:
        sdpa(v, v, q, sram_size=100)  # E = 32 is the caller's own (V is padded to it): nothing to add
    assert "value's Ev" not in str(refused.value) and "d=32" in str(refused.value)
