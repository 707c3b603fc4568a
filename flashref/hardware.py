"""GPU specifications (A100, H100, H200) and the roofline model.

Numbers are the vendor's peak (datasheet or whitepaper) unless a field says ``measured``. Units
are SI: bytes, bytes per second, FLOP per second (1 TB/s = 1e12 B/s, 1 TFLOP/s = 1e12 FLOP/s);
on-chip sizes are in bytes (1 KB = 1024 B, as NVIDIA quotes shared memory and L2).

Two FLOP rates matter for attention (FlashAttention-2, §3.1): dense fp16/bf16 matmul on the tensor
cores, and fp32 non-matmul arithmetic (exp, max, sum, scale, mask, dropout) on the CUDA cores, 16x
slower on an A100.

The roofline (Williams, Waterman, Patterson, CACM 2009): a kernel that does F FLOPs while moving
B bytes to and from HBM has arithmetic intensity ``I = F / B``; it can run no faster than
``min(peak, I * bandwidth)``. The *ridge point* ``peak / bandwidth`` separates memory-bound
kernels (``I`` below it) from compute-bound ones.

:func:`time_estimate` extends this to a kernel that does both kinds of FLOPs::

    t = max(matmul_flops / matmul_peak, nonmatmul_flops / nonmatmul_peak, bytes / bandwidth)

i.e. it assumes the tensor cores, the CUDA cores and the memory system all run concurrently and
perfectly overlapped, so the slowest of the three sets the time. It is a lower bound for a machine
without an L2 that moves the bytes counted: it ignores latency, launch overhead and any serialisation
between the units (FlashAttention-3 works hard to get the overlap this assumes). On a real GPU the L2
serves many re-reads, so the DRAM bytes, and the memory term with them, can be lower than the two-level
count gives (``iomodel.dram`` models that; notebook 08).

Example::

    from flashref import hardware
    h100 = hardware.get("H100")
    h100.ridge_point()                       # ~295.3 FLOP/byte
    hardware.time_estimate(2 * 8192**3, 0, 3 * 8192**2 * 2, h100)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from ._numbers import _bool

__all__ = ["GPU", "GPUS", "get", "ridge_point", "attainable_flops", "arithmetic_intensity",
           "time_estimate", "A100_40GB", "A100_80GB", "H100", "H200"]

KB = 1024
MB = 1024 * KB
GB = 1e9  # HBM capacities are quoted in decimal GB


@dataclass(frozen=True)
class GPU:
    """Peak numbers of one GPU; every field's source is in :attr:`sources`."""

    name: str
    sms: int  # streaming multiprocessors
    hbm_capacity: float  # bytes
    hbm_bandwidth: float  # bytes/s, peak
    smem_per_sm: int  # bytes: the largest configurable shared memory (the paper's SRAM) per SM
    l2_size: int  # bytes
    registers_per_sm: int  # bytes of register file per SM
    boost_clock: float  # Hz, the clock at which the tensor-core peak is quoted
    matmul_flops: float  # FLOP/s, dense fp16/bf16 tensor cores (no sparsity)
    nonmatmul_flops: float  # FLOP/s, fp32 on the CUDA cores
    measured_hbm_bandwidth: float | None = None  # bytes/s, a device-to-device copy
    measured_matmul_flops: float | None = None  # FLOP/s, a large bf16 matmul
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def smem_total(self) -> int:
        """Shared memory (SRAM) of the whole chip, bytes."""
        return self.sms * self.smem_per_sm

    @property
    def registers_total(self) -> int:
        return self.sms * self.registers_per_sm

    @property
    def smem_bandwidth(self) -> float:
        """Aggregate shared-memory bandwidth, bytes/s: an *estimate*, SMs x 128 B/clock x clock.

        128 bytes per clock per SM (32 banks of 4 bytes, CUDA C Programming Guide, "Shared
        Memory"). For the A100 it gives 19.5 TB/s, the "19 TB/s" of FlashAttention's Figure 1.
        """
        return self.sms * 128 * self.boost_clock

    def peak(self, kind: str = "matmul", measured: bool = False) -> float:
        """Peak FLOP/s of ``kind`` ("matmul" or "nonmatmul"); ``measured`` uses the measured matmul rate (no
        non-matmul rate was measured: "nonmatmul" is the vendor's peak either way)."""
        measured = _bool(measured, "measured")
        if kind == "matmul":
            if measured:
                if self.measured_matmul_flops is None:
                    raise ValueError(f"measured: no measured matmul rate recorded for {self.name}")
                return self.measured_matmul_flops
            return self.matmul_flops
        if kind == "nonmatmul":
            return self.nonmatmul_flops
        raise ValueError(f"kind: expected 'matmul' or 'nonmatmul', got {kind!r}")

    def bandwidth(self, measured: bool = False) -> float:
        """HBM bandwidth in bytes/s (peak, or the measured copy rate)."""
        if _bool(measured, "measured"):
            if self.measured_hbm_bandwidth is None:
                raise ValueError(f"measured: no measured bandwidth recorded for {self.name}")
            return self.measured_hbm_bandwidth
        return self.hbm_bandwidth

    def ridge_point(self, kind: str = "matmul", measured: bool = False) -> float:
        """FLOP per byte at which the roofline turns from memory-bound to compute-bound."""
        return ridge_point(self, kind, measured)


_A100_SOURCES = {
    "sms": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs on A100",
    "hbm_bandwidth": "NVIDIA A100 datasheet: 1,555 GB/s (40GB HBM2), 2,039 GB/s (80GB HBM2e, SXM4)",
    "smem_per_sm": "A100 whitepaper: 192 KB combined L1/shared per SM, up to 164 KB configurable as shared",
    "l2_size": "A100 whitepaper: 40 MB L2 (deviceQuery reports 41943040 bytes)",
    "registers_per_sm": "A100 whitepaper: 65,536 32-bit registers (256 KB) per SM",
    "boost_clock": "A100 whitepaper: 1410 MHz boost; 108 SMs x 2048 FLOP/clk x 1.41 GHz = 312 TFLOP/s",
    "matmul_flops": "A100 datasheet: 312 TFLOP/s FP16/BF16 tensor core, dense (624 with sparsity); "
                    "also FlashAttention-2 §3.1",
    "nonmatmul_flops": "A100 datasheet: 19.5 TFLOP/s FP32 (CUDA cores); FlashAttention-2 §3.1",
    "verified": "glennklockwood.com/garden/processors/A100 (tabulates the datasheet), fudzilla A100 launch "
                "article (164 KB shared/SM, 40 MB L2)",
}

A100_40GB = GPU(
    name="A100-SXM4-40GB", sms=108, hbm_capacity=40 * GB, hbm_bandwidth=1555e9,
    smem_per_sm=164 * KB, l2_size=40 * MB, registers_per_sm=256 * KB, boost_clock=1.41e9,
    matmul_flops=312e12, nonmatmul_flops=19.5e12, sources=_A100_SOURCES,
)

A100_80GB = GPU(
    name="A100-SXM4-80GB", sms=108, hbm_capacity=80 * GB, hbm_bandwidth=2039e9,
    smem_per_sm=164 * KB, l2_size=40 * MB, registers_per_sm=256 * KB, boost_clock=1.41e9,
    matmul_flops=312e12, nonmatmul_flops=19.5e12, sources=_A100_SOURCES,
)

_H100_SOURCES = {
    "sms": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 132 SMs on H100 SXM5",
    "hbm_bandwidth": "NVIDIA H100 datasheet: 3.35 TB/s (SXM, 80 GB HBM3)",
    "smem_per_sm": "H100 whitepaper: 256 KB combined L1/shared per SM, up to 228 KB configurable as shared",
    "l2_size": "H100 whitepaper: 50 MB L2 on H100 SXM5",
    "registers_per_sm": "H100 whitepaper: 65,536 32-bit registers (256 KB) per SM",
    "boost_clock": "H100 whitepaper: peak rates quoted at 1830 MHz; 132 SMs x 4096 FLOP/clk x 1.83 GHz = 989.4 TFLOP/s",
    "matmul_flops": "H100 datasheet/whitepaper: 989.4 TFLOP/s FP16/BF16 tensor core, dense (1979 with "
                    "sparsity); FlashAttention-3 quotes 989 TFLOPS",
    "nonmatmul_flops": "H100 datasheet: 67 TFLOP/s FP32 (66.9 in the whitepaper)",
    "measured_hbm_bandwidth": "measured: device-to-device copy of 1 GiB 3.00 TB/s, bytes read + written, one H100 "
                              "80GB HBM3, median of 5 rounds (figures/gpu/h100-80gb-hbm3-ceilings.json, "
                              "python -m flashref bench --ceilings)",
    "measured_matmul_flops": "measured: 8192^3 bf16 matmul 693 TFLOP/s, median of 5 rounds (the first, 748, before "
                             "the clocks settle), same run",
    "verified": "glennklockwood.com/garden/processors/h100 (989.4 dense FP16/BF16, 66.9 FP32, 132 SMs), "
                "chipsandcheese 'Nvidia's H100: Funny L2' (132 SMs on SXM5), 3eyedtech H100 SXM5 card "
                "(228 KB shared/SM, 50 MB L2, 67 TFLOPS FP32, 3.35 TB/s)",
}

H100 = GPU(
    name="H100-SXM5-80GB", sms=132, hbm_capacity=80 * GB, hbm_bandwidth=3.35e12,
    smem_per_sm=228 * KB, l2_size=50 * MB, registers_per_sm=256 * KB, boost_clock=1.83e9,
    matmul_flops=989.4e12, nonmatmul_flops=67e12,
    measured_hbm_bandwidth=3.00e12, measured_matmul_flops=693e12, sources=_H100_SOURCES,
)

H200 = GPU(
    name="H200-SXM-141GB", sms=132, hbm_capacity=141 * GB, hbm_bandwidth=4.8e12,
    smem_per_sm=228 * KB, l2_size=60 * MB, registers_per_sm=256 * KB, boost_clock=1.83e9,
    matmul_flops=989.4e12, nonmatmul_flops=67e12,
    sources={**{k: v for k, v in _H100_SOURCES.items() if not k.startswith("measured")},
             "l2_size": "measured: the driver's L2 size (torch.cuda.get_device_properties().L2_cache_size) on every "
                        "recorded H200 run, 62914560 bytes (figures/gpu/h200-l2-*.json, metadata.l2_bytes); the "
                        "H100 SXM5 on the same die reports 52428800 (NVIDIA's H100 whitepaper: the full GH100 has 60 "
                        "MB of L2, the H100 SXM5 enables 50)",
             "hbm_bandwidth": "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s; same GH100 die and compute as H100 "
                              "SXM (the datasheet's 1,979 TFLOPS FP16 is with sparsity: 989.5 dense)",
             "verified_h200": "aiminingco.com/gpu/h200/specs and aiwiki.ai nvidia_h200 (141 GB, 4.8 TB/s, same "
                              "GH100 die), lzwjava H200 table (compute identical to H100 SXM)"},
)

GPUS: dict[str, GPU] = {"A100-40GB": A100_40GB, "A100-80GB": A100_80GB, "H100": H100, "H200": H200}

# "A100" alone means the FlashAttention paper's GPU: an A100 with 40 GB of HBM (§4.3, Figure 1).
_ALIASES = {"a100": "A100-40GB", "a100-sxm4-40gb": "A100-40GB", "a100-sxm4-80gb": "A100-80GB",
            "h100-sxm5-80gb": "H100", "h100-sxm5": "H100", "h200-sxm-141gb": "H200", "h200-sxm": "H200"}


def get(name: str, arg: str = "name") -> GPU:
    """Look up a GPU by key ("A100-40GB", "A100-80GB", "H100", "H200"; "A100" = the 40 GB part), any case.
    ``arg``: the caller's name for the argument, which the errors name."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"{arg}: expected a GPU name (str), got {type(name).__name__}")
    key = {k.lower(): k for k in GPUS}.get(name.lower()) or _ALIASES.get(name.lower())
    if key is None:
        raise ValueError(f"{arg}: unknown GPU {name!r}; known: {sorted(GPUS)} (or 'A100')")
    return GPUS[key]


def ridge_point(gpu, kind: str = "matmul", measured: bool = False) -> float:
    """``peak / bandwidth`` in FLOP/byte: below it a kernel is memory-bound, above it compute-bound."""
    gpu = get(gpu, "gpu")
    return gpu.peak(kind, measured) / gpu.bandwidth(measured)


def _number(v, name: str):
    """A real number (Python, numpy, a 0-d array), else a TypeError naming ``name``; the callers check its range."""
    if isinstance(v, (bool, str, np.bool_)) or (not isinstance(v, numbers.Real) and np.ndim(v) != 0):
        raise TypeError(f"{name}: expected a number, got {v!r}")
    try:
        return v if isinstance(v, numbers.Real) else float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number, got {v!r}") from None


def arithmetic_intensity(flops, bytes_moved) -> float:
    """FLOPs per byte of HBM traffic."""
    flops, bytes_moved = _number(flops, "flops"), _number(bytes_moved, "bytes_moved")
    # "not x > 0" rather than "x <= 0": a NaN fails every comparison, so it is refused too
    if not bytes_moved > 0:
        raise ValueError(f"bytes_moved: expected a positive number of bytes, got {bytes_moved!r}")
    if not flops >= 0:
        raise ValueError(f"flops: expected a non-negative count, got {flops!r}")
    return flops / bytes_moved


def attainable_flops(intensity, gpu, kind: str = "matmul", measured: bool = False):
    """The roofline: ``min(peak, intensity * bandwidth)`` FLOP/s (works on numpy arrays too)."""
    gpu = get(gpu, "gpu")
    raw = np.asarray(intensity)
    # numbers only: numpy reads "5" as 5.0 and True as 1.0, which a roofline would then take as FLOP per byte
    if raw.dtype.kind not in "iuf":
        raise TypeError(f"intensity: expected FLOP per byte (a number or an array), got {intensity!r}")
    intensity = raw.astype(float)
    if not (intensity >= 0).all():  # a NaN fails >= too
        bad = intensity[~(intensity >= 0)].flat[0]
        raise ValueError(f"intensity: expected FLOP per byte >= 0 (not NaN), got {bad}")
    return np.minimum(gpu.peak(kind, measured), intensity * gpu.bandwidth(measured))


def time_estimate(matmul_flops, nonmatmul_flops, bytes_moved, gpu, measured: bool = False) -> float:
    """Roofline time in seconds of a kernel: the slowest of its three resources.

    ``max(matmul_flops / matmul peak, nonmatmul_flops / fp32 peak, bytes / HBM bandwidth)``: the
    tensor cores, the CUDA cores and HBM are assumed to work concurrently with perfect overlap, so
    this is a lower bound on the real time of a machine that moves ``bytes_moved`` (no latency, launch
    cost or serialisation). Fed the two-level count, it is not one for a GPU whose L2 serves re-reads:
    there the DRAM bytes can be fewer (``iomodel.dram``).
    """
    gpu = get(gpu, "gpu")
    for name, v in (("matmul_flops", matmul_flops), ("nonmatmul_flops", nonmatmul_flops),
                    ("bytes_moved", bytes_moved)):
        if not _number(v, name) >= 0:  # NaN too
            raise ValueError(f"{name}: expected a non-negative count, got {v!r}")
    return max(matmul_flops / gpu.peak("matmul", measured),
               nonmatmul_flops / gpu.peak("nonmatmul"),
               bytes_moved / gpu.bandwidth(measured))
