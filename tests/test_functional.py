"""The torch front: gradcheck, agreement with PyTorch's SDPA, nn.Module use, clear errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812  (the usual name)

from flashref import standard
from flashref.functional import ALGORITHMS, scaled_dot_product_attention

ALGOS = sorted(ALGORITHMS)


def test_every_algorithm_is_registered():
    assert ALGOS == ["flash1", "flash2", "standard"]


def _qkv(shape_q, shape_k, dtype=torch.float64, seed=0, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(shape_k, generator=g, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(shape_k, generator=g, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


@pytest.mark.parametrize("algorithm", ALGOS)
@pytest.mark.parametrize("case", ["plain", "causal", "masked", "causal+ragged"])
def test_gradcheck(algorithm, case):
    q, k, v = _qkv((2, 5, 3), (2, 7, 3))
    kw = dict(algorithm=algorithm, block_sizes=(2, 3))
    if case.startswith("causal"):
        kw["is_causal"] = True
    if case == "masked":
        mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) < 0.7
        mask[2] = False  # a fully masked row: zero output, zero gradient
        kw["attn_mask"] = mask
    if case == "causal+ragged":
        q, k, v = _qkv((1, 2, 7, 4), (1, 2, 4, 4))  # Nq != Nk, leading axes, blocks that do not divide
        kw.update(block_sizes=(3, 3), scale=0.7)
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, **kw), (q, k, v))


@pytest.mark.parametrize("algorithm", ALGOS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_sdpa(algorithm, causal):
    q, k, v = _qkv((2, 3, 11, 8), (2, 3, 9, 8), requires_grad=False)
    mask = torch.rand(2, 1, 11, 9, generator=torch.Generator().manual_seed(3)) < 0.8
    mask[..., 0] = True  # torch's math path gives NaN-free zeros too, but keep every row attended
    for kw in (dict(is_causal=causal), dict(attn_mask=mask, scale=0.5)):
        got = scaled_dot_product_attention(q, k, v, algorithm=algorithm, **kw)
        want = F.scaled_dot_product_attention(q, k, v, **kw)
        assert got.dtype == q.dtype and got.shape == want.shape
        assert (got - want).abs().max().item() < 1e-12


def test_float32_keeps_dtype_and_matches():
    q, k, v = _qkv((4, 16, 8), (4, 16, 8), dtype=torch.float32)
    out = scaled_dot_product_attention(q, k, v, is_causal=True, algorithm=ALGOS[-1])
    assert out.dtype == torch.float32 and out.device == q.device
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out - want).abs().max().item() < 1e-5
    out.sum().backward()
    assert q.grad.dtype == torch.float32 and q.grad.shape == q.shape


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_in_and_out(dtype):
    q, k, v = _qkv((2, 8, 4), (2, 8, 4), dtype=dtype)
    out = scaled_dot_product_attention(q, k, v, is_causal=True, algorithm="flash1", block_sizes=(3, 3))
    assert out.dtype == dtype
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert (out.float() - want).abs().max().item() < 2e-2
    out.float().pow(2).sum().backward()
    assert q.grad.dtype == dtype and torch.isfinite(q.grad.float()).all()


def test_gradients_only_where_required():
    q, k, v = _qkv((6, 4), (5, 4), requires_grad=False)
    v.requires_grad_(True)
    out = scaled_dot_product_attention(q, k, v, algorithm="standard")
    out.backward(torch.ones_like(out))
    assert q.grad is None and k.grad is None and v.grad is not None


def test_dropout_is_reproducible_and_matches_standard():
    q, k, v = _qkv((2, 9, 4), (2, 9, 4), requires_grad=False)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5, algorithm="standard")
    for algorithm in ALGOS:
        b = scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5, algorithm=algorithm, block_sizes=(4, 2))
        assert (a - b).abs().max().item() < 1e-12
    want = standard.forward(q.numpy(), k.numpy(), v.numpy(), dropout_p=0.3, seed=5).O
    assert np.abs(a.numpy() - want).max() < 1e-12
    c = scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=6, algorithm="standard")
    assert (a - c).abs().max().item() > 1e-3


@pytest.mark.parametrize("algorithm", ALGOS)
def test_dropout_gradients_agree_across_algorithms(algorithm):
    grads = {}
    for name in ("standard", algorithm):
        q, k, v = _qkv((2, 7, 4), (2, 8, 4))
        out = scaled_dot_product_attention(q, k, v, dropout_p=0.4, seed=11, is_causal=True, algorithm=name,
                                           block_sizes=(3, 3))
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        grads[name] = (q.grad, k.grad, v.grad)
    for a, b in zip(grads["standard"], grads[algorithm]):
        assert (a - b).abs().max().item() < 1e-12


class TinyAttention(torch.nn.Module):
    def __init__(self, d, algorithm):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d, dtype=torch.float64)
        self.algorithm = algorithm

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return scaled_dot_product_attention(q, k, v, attn_mask=mask, algorithm=self.algorithm)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_inside_an_nn_module(algorithm):
    torch.manual_seed(0)
    ours = TinyAttention(8, algorithm)
    ref = TinyAttention(8, algorithm)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 10, 8, dtype=torch.float64)
    mask = torch.rand(10, 10, generator=torch.Generator().manual_seed(0)) < 0.8
    mask[:, 0] = True
    loss = ours(x, mask).pow(2).mean()
    loss.backward()
    q, k, v = ref.qkv(x).chunk(3, dim=-1)
    ref_loss = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).pow(2).mean()
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) < 1e-12
    for p, r in zip(ours.parameters(), ref.parameters()):
        assert (p.grad - r.grad).abs().max().item() < 1e-10


def test_bad_inputs_get_clear_errors():
    q, k, v = _qkv((4, 3), (5, 3), requires_grad=False)
    with pytest.raises(TypeError, match="gqa_packing: algorithm='flash1' has no gqa_packing"):
        scaled_dot_product_attention(q, k, v, gqa_packing=True, algorithm="flash1")
    with pytest.raises(TypeError, match="unknown option 'casual'"):
        scaled_dot_product_attention(q, k, v, casual=True)
    with pytest.raises(ValueError, match="algorithm"):
        scaled_dot_product_attention(q, k, v, algorithm="flash9")
    with pytest.raises(TypeError, match="query"):
        scaled_dot_product_attention(q.numpy(), k, v, algorithm="standard")
    with pytest.raises(ValueError, match="mask: shape"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 3, dtype=torch.bool), algorithm="standard")
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5, algorithm="standard")
    with pytest.raises(TypeError, match="block_sizes"):
        scaled_dot_product_attention(q, k, v, block_sizes=3, algorithm=ALGOS[-1])


@pytest.mark.parametrize("p", [np.int64(0), np.int32(0), np.int64(1), np.float32(0.25)])
def test_dropout_p_takes_numpy_numbers_as_torch_does(p):
    """numpy's integers too (torch's SDPA takes them), with the result of the Python number; a bool is not one."""
    q, k, v = _qkv((2, 4, 3), (2, 5, 3), requires_grad=False)
    got = scaled_dot_product_attention(q, k, v, dropout_p=p, seed=3)
    assert torch.equal(got, scaled_dot_product_attention(q, k, v, dropout_p=p.item(), seed=3))
    if p == 0:
        assert (got - F.scaled_dot_product_attention(q, k, v, dropout_p=p)).abs().max() < 1e-12
    for bad in (True, np.bool_(False)):
        with pytest.raises(ValueError, match="^dropout_p: expected a probability"):
            scaled_dot_product_attention(q, k, v, dropout_p=bad)


def test_unknown_option_lists_the_named_parameters_too():
    """A misspelt is_causal is answered with every name the front takes, torch's parameters included."""
    q, k, v = _qkv((4, 3), (5, 3), requires_grad=False)
    with pytest.raises(TypeError) as err:
        scaled_dot_product_attention(q, k, v, casual=True)
    listed = str(err.value).split("valid options are ")[1].split(", ")
    assert {"attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa", "algorithm", "seed"} <= set(listed)


def test_tiny_training_run_matches_torch():
    from flashref.figures.backward import train_tiny

    ours = np.array(train_tiny("flash1", steps=25))
    ref = np.array(train_tiny("torch", steps=25))
    assert ref[-1] < 0.5 * ref[0]  # it does learn
    assert np.abs(ours - ref).max() <= 1e-12 * ref.max()
