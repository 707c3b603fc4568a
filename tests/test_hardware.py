"""GPU specs and the roofline helpers: sanity of the numbers and hand-computed cases."""

import numpy as np
import pytest

from flashref import hardware


@pytest.mark.parametrize("name", sorted(hardware.GPUS))
def test_specs_are_sane(name):
    g = hardware.get(name)
    assert g.sms in (108, 132)
    assert 1e12 < g.hbm_bandwidth < 1e13                       # 1-10 TB/s
    assert 100 * 1024 <= g.smem_per_sm <= 256 * 1024            # the paper's "around 100KB" and up
    assert g.l2_size >= 40 * 2**20
    assert g.matmul_flops / g.nonmatmul_flops > 10               # tensor cores are >10x the fp32 CUDA cores
    assert g.smem_total == g.sms * g.smem_per_sm
    assert {"sms", "hbm_bandwidth", "matmul_flops", "nonmatmul_flops", "smem_per_sm", "l2_size"} <= set(g.sources)


def test_quoted_numbers():
    # FlashAttention-2 §3.1: A100 312 TFLOP/s fp16 matmul, 19.5 fp32 non-matmul: "16x more expensive"
    a = hardware.get("A100")
    assert a is hardware.A100_40GB
    assert round(a.matmul_flops / a.nonmatmul_flops) == 16
    assert hardware.get("a100-80gb").hbm_bandwidth == 2039e9 and a.hbm_bandwidth == 1555e9
    h = hardware.get("H100")
    assert h.matmul_flops == pytest.approx(989.4e12) and h.hbm_bandwidth == 3.35e12
    assert hardware.get("H200").matmul_flops == h.matmul_flops and hardware.get("H200").hbm_bandwidth == 4.8e12
    # the peak tensor-core rate is SMs x FLOP/clock/SM x clock: 2048 (A100) and 4096 (H100) FLOP per clock per SM
    assert a.matmul_flops == pytest.approx(a.sms * 2048 * a.boost_clock, rel=2e-3)
    assert h.matmul_flops == pytest.approx(h.sms * 4096 * h.boost_clock, rel=2e-3)
    # FlashAttention Figure 1: A100 SRAM ~19 TB/s
    assert 19e12 <= a.smem_bandwidth <= 20e12


def test_measured_ceilings_are_the_recorded_ones():
    """hardware.H100's measured_* fields are the medians that `bench --ceilings` recorded, to the digits kept."""
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[1] / "figures/gpu/h100-80gb-hbm3-ceilings.json").read_text())
    assert rec["metadata"]["device"] == "NVIDIA H100 80GB HBM3"
    h = hardware.get("H100")
    assert h.measured_hbm_bandwidth == pytest.approx(rec["copy_bytes_per_s"], rel=5e-3)
    assert h.measured_matmul_flops == pytest.approx(rec["matmul_flops_per_s"], rel=5e-3)
    assert f"{rec['copy_bytes_per_s'] / 1e12:.2f} TB/s" in h.sources["measured_hbm_bandwidth"]
    assert f"{rec['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s" in h.sources["measured_matmul_flops"]


def test_ridge_points():
    for g in hardware.GPUS.values():
        assert hardware.ridge_point(g) == g.matmul_flops / g.hbm_bandwidth
        assert g.ridge_point("nonmatmul") == g.nonmatmul_flops / g.hbm_bandwidth
    assert hardware.ridge_point("A100") == pytest.approx(312 / 1.555)           # ~200.6 FLOP/byte
    assert hardware.ridge_point("H100") == pytest.approx(989.4 / 3.35)          # ~295.3
    h = hardware.get("H100")
    assert hardware.ridge_point("H100", measured=True) == h.measured_matmul_flops / h.measured_hbm_bandwidth
    # the H200 has the H100's compute and more bandwidth: a lower ridge
    assert hardware.ridge_point("H200") < hardware.ridge_point("H100")
    with pytest.raises(ValueError, match="measured"):
        hardware.ridge_point("A100", measured=True)


def test_attainable_is_the_roofline():
    g = hardware.H100
    ridge = g.ridge_point()
    I = np.array([ridge / 10, ridge, ridge * 10])
    out = hardware.attainable_flops(I, g)
    assert out[0] == pytest.approx(ridge / 10 * g.hbm_bandwidth)
    assert out[1] == pytest.approx(g.matmul_flops) and out[2] == g.matmul_flops
    assert hardware.attainable_flops(1.0, g, "nonmatmul") == g.hbm_bandwidth   # below the fp32 ridge (20)


def test_time_estimate_hand_computed():
    a = hardware.A100_40GB
    # a square fp16 matmul M=N=K=8192: 2*8192^3 FLOPs, reads A and B, writes C
    n = 8192
    flops, nbytes = 2 * n**3, 3 * n * n * 2
    t = hardware.time_estimate(flops, 0, nbytes, a)
    assert t == flops / 312e12                                      # compute-bound
    assert hardware.arithmetic_intensity(flops, nbytes) == pytest.approx(n / 3)
    # the skinny one: M=K=8192, N=128
    m, k, nn = 8192, 8192, 128
    flops, nbytes = 2 * m * k * nn, (m * k + k * nn + m * nn) * 2
    assert hardware.arithmetic_intensity(flops, nbytes) < a.ridge_point()
    assert hardware.time_estimate(flops, 0, nbytes, a) == nbytes / 1555e9          # memory-bound
    # a softmax pass over 1024x1024 fp16: 5 FLOPs/element, read + write once -> memory-bound
    e = 1024 * 1024
    assert hardware.time_estimate(0, 5 * e, 2 * e * 2, a) == 2 * e * 2 / 1555e9
    # many non-matmul FLOPs on few bytes: the CUDA cores are the bottleneck
    assert hardware.time_estimate(0, 1e12, 1e6, a) == 1e12 / 19.5e12
    # the max, not the sum
    assert hardware.time_estimate(312e12, 19.5e12, 1555e9, a) == pytest.approx(1.0)


def test_bad_input():
    with pytest.raises(ValueError, match="name"):
        hardware.get("V100")
    with pytest.raises(TypeError, match="name"):
        hardware.get(3)
    with pytest.raises(ValueError, match="kind"):
        hardware.H100.peak("fp8")
    with pytest.raises(ValueError, match="bytes_moved"):
        hardware.arithmetic_intensity(1.0, 0)
    with pytest.raises(ValueError, match="matmul_flops"):
        hardware.time_estimate(-1, 0, 1, "H100")
    with pytest.raises(ValueError, match="gpu: unknown GPU 'B200'"):  # the caller's argument is named
        hardware.ridge_point("B200")
    with pytest.raises(ValueError, match="intensity"):
        hardware.attainable_flops(-5, "H100")


def test_nan_is_refused_by_name():
    with pytest.raises(ValueError, match="intensity: expected FLOP per byte >= 0"):
        hardware.attainable_flops(float("nan"), hardware.H100)
    with pytest.raises(ValueError, match="intensity"):
        hardware.attainable_flops(np.array([1.0, np.nan]), "H100")
    with pytest.raises(ValueError, match="bytes_moved"):
        hardware.arithmetic_intensity(1.0, float("nan"))
    with pytest.raises(ValueError, match="flops"):
        hardware.arithmetic_intensity(float("nan"), 1.0)
    with pytest.raises(ValueError, match="nonmatmul_flops"):
        hardware.time_estimate(1.0, float("nan"), 1.0, "H100")


def test_flags_and_intensities_are_what_they_say():
    """measured="no" is a truthy string (it gave the measured rate); numpy read intensity "5" as 5.0 and True as 1.0."""
    with pytest.raises(TypeError, match="measured: expected True or False"):
        hardware.H100.peak("matmul", measured="no")
    with pytest.raises(TypeError, match="measured: expected True or False"):
        hardware.H100.bandwidth(measured=1)
    for bad in ("5", True, ["1", 2]):
        with pytest.raises(TypeError, match="intensity: expected FLOP per byte"):
            hardware.attainable_flops(bad, "H100")
    assert hardware.attainable_flops(5, "H100") == 5 * hardware.H100.bandwidth()
    assert hardware.H100.peak("matmul", measured=np.True_) == hardware.H100.measured_matmul_flops
