"""flashref.gpu.decode (splitkv.py: split-KV decoding with packed GQA in Triton) against the numpy algorithm it is
written beside, decoding.forward(..., enable_gqa=True, gqa_packing=True), and against plain attention.

Without a CUDA GPU (CI) the kernels run in Triton's CPU interpreter (set here before triton is imported, as in
test_gpu_triton.py), in float32 and float16; with a GPU the same tests run in float16 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_env import DEVICE, DTYPES

pytest.importorskip("triton")

from flashref import decoding, gpu  # noqa: E402
from flashref.gpu import splitkv  # noqa: E402

# the largest |O − float64| allowed per input dtype (O of unit-normal values is of order 0.1-1)
TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _inputs(B, Hq, Hkv, Nq, Nk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, h, n, d, generator=g) for h, n in ((Hq, Nq), (Hkv, Nk), (Hkv, Nk)))
    return [x.to(device=DEVICE, dtype=dtype) for x in (q, k, v)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, Hq, Hkv, Nq, Nk, d, S", [
    (1, 8, 2, 1, 100, 16, 3),  # g = 4, one query, a ragged last tile in every split
    (2, 4, 4, 1, 37, 8, 1),  # g = 1 (plain attention), one split: O written by the split kernel
    (1, 6, 2, 3, 130, 64, 5),  # Nq = 3 (speculative decoding): 6 packed rows
    (2, 8, 1, 2, 64, 48, 2),  # MQA, d = 48 padded to 64 on chip
    (1, 2, 2, 1, 5, 128, 5),  # as many splits as keys
    (1, 16, 1, 5, 70, 16, 4),  # 80 packed rows: two row tiles of 64
])
def test_decode_is_decoding_forward_packed(B, Hq, Hkv, Nq, Nk, d, S, dtype):
    q, k, v = _inputs(B, Hq, Hkv, Nq, Nk, d, dtype)
    o = gpu.decode(q, k, v, num_splits=S)
    ref = decoding.forward(*(x.double().cpu().numpy() for x in (q, k, v)), enable_gqa=True, gqa_packing=True,
                           num_splits=S)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert float((o.double().cpu() - torch.from_numpy(ref.O)).abs().max()) <= TOL[dtype]


def test_decode_takes_any_scale_and_picks_its_splits():
    q, k, v = _inputs(1, 4, 2, 1, 90, 16, DTYPES[0], seed=1)
    for scale in (0.7, -0.3, 0.0):
        want = torch.softmax(scale * q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2), -1)
        want = want @ v.double().repeat_interleave(2, 1)
        assert float((gpu.decode(q, k, v, scale=scale).double() - want).abs().max()) <= TOL[DTYPES[0]]
    # None: parallelism.choose_num_splits for 2 K/V heads' items (an interpreter call assumes an H100's 132 SMs)
    assert splitkv.block_rows(2) == 16 and splitkv.block_rows(80) == 64


def test_decode_refuses_what_it_does_not_compute():
    q, k, v = _inputs(1, 4, 2, 1, 9, 8, DTYPES[0])
    with pytest.raises(ValueError, match="num_splits: expected at most Nk = 9"):
        gpu.decode(q, k, v, num_splits=10)
    with pytest.raises(ValueError, match="enable_gqa: q's 4 heads must be a multiple of k's 3 heads"):
        gpu.decode(q, *_inputs(1, 3, 3, 1, 9, 8, DTYPES[0])[1:])
    # NaN is looked for where it is free: on the CPU, and on a GPU under anomaly mode (gpu._finite says why)
    with pytest.raises(ValueError, match="q contains NaN or inf"), torch.autograd.detect_anomaly():
        gpu.decode(q * float("nan"), k, v)
    with pytest.raises(RuntimeError, match="forward only"):
        gpu.decode(q.requires_grad_(), k, v)
    with pytest.raises(TypeError, match="unexpected keyword argument 'causal'"):
        gpu.decode(q, k, v, causal=True)
    empty = gpu.decode(*_inputs(0, 4, 2, 1, 9, 8, DTYPES[0]))
    assert empty.shape == (0, 4, 1, 8)


def test_decode_reads_each_kv_heads_cache_once_per_split():
    """The packed schedule: a split program's K/V loads cover its K/V head's keys once for all g query heads, so the
    cache is read g times less than by one program per query head (decoding.forward counts it; here the launch
    grid is the schedule: one program per (split, row block, K/V head))."""
    B, Hq, Hkv, Nq = 2, 32, 8, 1
    rows = (Hq // Hkv) * Nq
    assert -(-rows // splitkv.block_rows(rows)) == 1  # the group's 4 rows fit one row tile
    packed = decoding.forward(*(np.random.default_rng(0).standard_normal(s) for s in
                                ((B, Hq, Nq, 8), (B, Hkv, 64, 8), (B, Hkv, 64, 8))),
                              enable_gqa=True, gqa_packing=True, num_splits=2, block_sizes=(Nq, splitkv.BLOCK_KEYS))
    assert packed.work_items == B * Hkv * 1 * 2  # what splitkv launches: (num_splits, Tr, B·Hkv)
    assert packed.io.by_line["split: load K_j, V_j"][0] == B * Hkv * 2 * 64 * 8


@pytest.mark.parametrize("score", [1e5, 1e7, 1e9])
def test_splits_merge_exactly_at_large_scores(score):
    """Before: each split kept one log-sum-exp m + log2 ℓ in fp32, which at scores of 10^5 and more cannot hold
    log2 ℓ beside m: three equal keys of weight 1/3 merged from two splits to 1.00475 (10^5), 0.75 (10^7) and 2.0
    (10^9) for 1. The partials now keep m and ℓ apart, as decoding.forward's do. (The scores come from the scale,
    so that fp16 inputs reach them too.)"""
    q, k, v = (torch.ones(1, 1, n, 1, device=DEVICE, dtype=DTYPES[0]) for n in (1, 3, 3))
    assert [float(gpu.decode(q, k, v, scale=score, num_splits=S)) for S in (1, 2, 3)] == [1.0, 1.0, 1.0]


def test_every_argument_is_checked_before_an_empty_batch_or_a_grid_too_tall():
    """Before: an empty batch returned before num_splits was looked at (0 and "bad" were taken), and a grid of more
    than 65535 row tiles reached CUDA's own launch error."""
    empty = [torch.zeros(0, h, n, 8, device=DEVICE, dtype=DTYPES[0]) for h, n in ((4, 1), (2, 9), (2, 9))]
    with pytest.raises(ValueError, match="num_splits: expected a positive integer"):
        gpu.decode(*empty, num_splits=0)
    with pytest.raises(TypeError, match="num_splits"):
        gpu.decode(*empty, num_splits="bad")
    tall = [torch.zeros(1, h, n, 1, device=DEVICE, dtype=DTYPES[0]) for h, n in ((64, 65536), (1, 4), (1, 4))]
    with pytest.raises(ValueError, match="the row tiles of .* = 65536 programs along one axis"):
        gpu.decode(*tall)
