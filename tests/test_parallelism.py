"""Parallelism model: work items, wave quantisation, and split-K vs split-Q shared-memory traffic."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashref import parallelism


def test_work_items_by_hand():
    # batch 2, 3 heads, N = 1000, 128-blocks: Tr = Tc = ceil(1000/128) = 8
    assert parallelism.work_items("flash1", "forward", batch=2, heads=3, Nq=1000) == 6
    assert parallelism.work_items("flash1", "backward", batch=2, heads=3, Nq=1000) == 6
    assert parallelism.work_items("flash2", "forward", batch=2, heads=3, Nq=1000) == 48
    # backward splits the keys: Nk = 300 with Bc = 64 gives 5 column blocks
    assert parallelism.work_items("flash2", "backward", batch=2, heads=3, Nq=1000, Nk=300, Bc=64) == 30


def test_waves_and_efficiency_by_hand():
    # A100, 108 SMs: 16 heads fill 16/108 of one wave; 109 items need 2 waves, 109/216 busy
    assert parallelism.sm_count("A100") == 108 and parallelism.sm_count("H100") == 132
    assert parallelism.waves(16, 108) == 1 and parallelism.efficiency(16, 108) == 16 / 108
    assert parallelism.waves(108, 108) == 1 and parallelism.efficiency(108, 108) == 1.0
    assert parallelism.waves(109, 108) == 2 and parallelism.efficiency(109, 108) == 109 / 216
    occ = parallelism.occupancy("flash2", "forward", batch=1, heads=16, Nq=4096, gpu="H100")
    # 16 heads x 32 row blocks = 512 items on 132 SMs: 4 waves (528 slots), 512/528 busy
    assert occ == {"items": 512, "slots": 132, "waves": 4, "efficiency": 512 / 528}
    assert parallelism.occupancy("flash1", "forward", batch=1, heads=16, Nq=4096, gpu="A100",
                                 blocks_per_sm=2)["slots"] == 216


@given(st.integers(1, 5000), st.integers(1, 300))
def test_efficiency_from_first_principles(items, sms):
    # simulate the scheduler: fill slots wave by wave, count idle slot-waves
    busy, waves, left = 0, 0, items
    while left > 0:
        busy += min(left, sms)
        left -= min(left, sms)
        waves += 1
    assert parallelism.waves(items, sms) == waves
    assert math.isclose(parallelism.efficiency(items, sms), busy / (waves * sms))


def test_flash2_offers_more_work_than_flash1_at_small_batch():
    # the FlashAttention-2 §3.2 regime: long sequences, small batch x heads
    for gpu in ("A100", "H100"):
        f1 = parallelism.occupancy("flash1", "forward", batch=1, heads=8, Nq=8192, gpu=gpu)
        f2 = parallelism.occupancy("flash2", "forward", batch=1, heads=8, Nq=8192, gpu=gpu)
        assert f1["efficiency"] < 0.1 and f2["efficiency"] > 0.9


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="algorithm"):
        parallelism.work_items("flash3", "forward", batch=1, heads=1, Nq=8)
    with pytest.raises(ValueError, match="direction"):
        parallelism.work_items("flash2", "sideways", batch=1, heads=1, Nq=8)
    with pytest.raises(ValueError, match="batch"):
        parallelism.work_items("flash2", "forward", batch=0, heads=1, Nq=8)
    with pytest.raises(ValueError, match="warps"):
        parallelism.smem_traffic("split-Q", Br=6, warps=4)
    with pytest.raises(ValueError, match="scheme"):
        parallelism.smem_traffic("split-V")


@pytest.mark.parametrize("Br,Bc,d,W,inner", [(128, 128, 64, 4, 4), (64, 128, 32, 4, 3), (16, 8, 5, 2, 1),
                                             (64, 64, 128, 8, 2)])
def test_smem_traffic_by_hand(Br, Bc, d, W, inner):
    K = parallelism.smem_traffic("split-K", Br=Br, Bc=Bc, d=d, warps=W, inner=inner)
    Q = parallelism.smem_traffic("split-Q", Br=Br, Bc=Bc, d=d, warps=W, inner=inner)
    # split-K: K_j, V_j read once (each warp its slice); every warp reads every Q_i whole; each warp
    # writes (m, ℓ, Õ) for Br rows and the merge reads all of it back; 2 barriers per tile.
    assert K.operand_reads == 2 * Bc * d + inner * W * Br * d
    assert K.exchange_writes == K.exchange_reads == inner * W * Br * (d + 2)
    assert K.exchange_buffer == W * Br * (d + 2) and K.syncs == 2 * inner
    # split-Q: Q_i read once (each warp its rows); every warp reads every K_j and V_j whole; no exchange.
    assert Q.operand_reads == Br * d + inner * 2 * W * Bc * d
    assert Q.exchange_writes == Q.exchange_reads == Q.exchange_buffer == Q.syncs == 0


def test_both_warp_schemes_compute_the_same_tile_state():
    for scheme in parallelism.SCHEMES:
        _, states, plain = parallelism.smem_traffic(scheme, Br=16, Bc=12, d=5, warps=4, inner=2,
                                                    return_states=True)
        for got, want in zip(states, plain):
            for g, w in zip(got, want):
                assert np.allclose(g, w, rtol=1e-12, atol=1e-12)


def test_split_q_moves_less_than_split_k_at_paper_block_sizes():
    # 128 x 128 blocks, d = 64, 4 warps (FlashAttention-2 §3.3), a long inner loop
    K = parallelism.smem_traffic("split-K", Br=128, Bc=128, d=64, inner=16)
    Q = parallelism.smem_traffic("split-Q", Br=128, Bc=128, d=64, inner=16)
    assert Q.total < 0.7 * K.total


def test_split_k_needs_warps_that_divide_the_rows_its_merge_splits():
    """split-K splits Bc over the warps, then its merge splits Br: Br = 6 over 4 warps dropped 2 rows silently."""
    with pytest.raises(ValueError, match="warps: split-K splits Br=6 across warps"):
        parallelism.smem_traffic("split-K", Br=6, Bc=8, d=4, warps=4)
    t, states, plain = parallelism.smem_traffic("split-K", Br=8, Bc=8, d=4, warps=4, inner=1, return_states=True)
    assert all(np.allclose(a, b) for s, p in zip(states, plain) for a, b in zip(s, p))


def test_choose_num_splits_checks_its_arguments():
    with pytest.raises(ValueError, match="sms: expected a positive integer"):
        parallelism.choose_num_splits(4, 4, 100, sms=0)
    with pytest.raises(ValueError, match="items: expected a non-negative integer"):
        parallelism.choose_num_splits(-1, 4, 100)
    with pytest.raises(ValueError, match="Tc"):
        parallelism.choose_num_splits(4, 0, 100)
    assert parallelism.choose_num_splits(0, 4, 100) == 1  # an empty batch: nothing to split


def test_sizes_refuse_a_bool_or_float_as_a_type_error_naming_the_argument():
    """``_pos`` (work_items, waves, efficiency, occupancy, smem_traffic) raised ValueError for ``batch=True`` or
    ``batch=1.5``; every other entry point makes a bool or a float where a size goes a TypeError, naming it."""
    for bad in (True, 1.5, np.float64(2.0)):
        with pytest.raises(TypeError, match=r"^batch: expected a positive integer"):
            parallelism.work_items("flash2", "forward", batch=bad, heads=1, Nq=8)
        with pytest.raises(TypeError, match=r"^slots: expected a positive integer"):
            parallelism.waves(4, bad)
        with pytest.raises(TypeError, match=r"^d: expected a positive integer"):
            parallelism.smem_traffic("split-Q", d=bad)
    with pytest.raises(ValueError, match=r"^heads: expected a positive integer, got 0"):
        parallelism.occupancy("flash2", "forward", batch=1, heads=0, Nq=8)
    assert parallelism.waves(np.int64(5), 4) == 2  # numpy integers still pass


def test_smem_traffic_names_a_bad_seed():
    """``smem_traffic(seed=-1)`` let numpy's unnamed "expected non-negative integer" through."""
    with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer, got -1"):
        parallelism.smem_traffic("split-Q", seed=-1)
    with pytest.raises(TypeError, match=r"^seed: expected a non-negative integer"):
        parallelism.smem_traffic("split-Q", seed=0.5)
    assert parallelism.smem_traffic("split-Q", seed=3).total == parallelism.smem_traffic("split-Q", seed=0).total
