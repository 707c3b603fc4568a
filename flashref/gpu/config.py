"""Kernel 2's launch configuration: its tiles by head dimension and the :class:`Config` that resolves them.

Pure Python (no triton import), so that what the kernels will run can be asked without a GPU or Triton:
the L2 model (:mod:`flashref.schedule`) reads kernel 2's tiles here, and :mod:`flashref.gpu.kernels`
imports every name from here for its launchers.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, replace

import numpy as np

from ..iomodel.triton import dim_split  # the forward's column tiles (pure Python, shared with the IO model)

__all__ = ["Tiles", "Config", "pad_dim", "INTERPRET", "INTERPRET_TILES", "FWD", "FWD_SPLIT", "DKDV", "DKDV_ATOMIC",
           "DQ", "FWD_DSPLIT", "DKDV_DSPLIT", "DSPLIT_MIN_PAD", "DSPLIT_MIN_PAD_CAUSAL", "SPLIT_DIMS",
           "HEADS_FIRST_CAUSAL"]

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


# --------------------------------------------------------------------------------------------
# configuration: one frozen object, passed to the launchers
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tiles:
    """One kernel's launch shape: BLOCK_M query rows, BLOCK_N key columns, warps, pipeline stages."""

    block_m: int
    block_n: int
    warps: int = 4
    stages: int = 2

    def __post_init__(self):
        # tl.arange needs power-of-two extents, and a tile of no rows divides by zero in the launchers' grid
        for name in ("block_m", "block_n", "warps", "stages"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"Tiles.{name} must be an int, got {v!r}")
            power = name != "stages"
            if v < 1 or (power and v & (v - 1)):
                raise ValueError(f"Tiles.{name} must be a positive {'power of two' if power else 'integer'}, got {v}")

    @classmethod
    def parse(cls, text: str) -> Tiles:
        """``"BM,BN,warps,stages"`` (the command-line tools' spelling)."""
        try:
            bm, bn, w, s = (int(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"tiles must be 'BM,BN,warps,stages', got {text!r}") from None
        return cls(bm, bn, w, s)

    def meta(self) -> dict:
        return dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n, num_warps=self.warps, num_stages=self.stages)


# The defaults, by padded head dimension D_PAD (sweep.py's interleaved runs on an H100, NOTES.md).
# fwd: BLOCK_M query rows per program (with split: two halves of BLOCK_M // 2); dkdv: BLOCK_N is the
# program's column block, BLOCK_M the inner row block; dq: the reverse.
FWD = {16: Tiles(128, 64, 4, 3), 32: Tiles(128, 64, 4, 3), 64: Tiles(128, 128, 4, 3),
       128: Tiles(128, 128, 8, 3), 256: Tiles(128, 64, 8, 2)}
FWD_SPLIT = {128: Tiles(256, 64, 8, 3)}  # d = 128: two interleaved halves of 128 rows (split)
DKDV = {16: Tiles(64, 64, 4, 3), 32: Tiles(64, 64, 4, 3), 64: Tiles(64, 64, 4, 3), 128: Tiles(64, 128, 8, 3),
        256: Tiles(32, 64, 8, 2)}
DKDV_ATOMIC = {16: Tiles(64, 64, 4, 3), 32: Tiles(64, 64, 4, 3), 64: Tiles(128, 128, 8, 2),
               128: Tiles(64, 128, 8, 3), 256: Tiles(32, 64, 8, 2)}
DQ = {16: Tiles(64, 64, 4, 3), 32: Tiles(64, 64, 4, 3), 64: Tiles(128, 64, 8, 3), 128: Tiles(128, 64, 8, 3),
      256: Tiles(64, 32, 8, 2)}
# The forward with d in two column tiles (dsplit), by the tiles' total width D_A + D_B (sweeps on an
# H100, NOTES.md): up to 128 (d = 80, 96) 128x64 w8 s3, +8-9% over the padded default without a mask
# but 4-6% slower causal (where the padded kernel's two row halves and heads-first grid win); up to 160
# (d = 160) 64x64 w4 s2, +24% and +16% causal; wider (d = 192) the padded d = 256 tiles, +0% and +3%.
# On by default from D_PAD = 128 without a mask and from 256 causal (off where not measured, d <= 64).
FWD_DSPLIT = ((128, Tiles(128, 64, 8, 3)), (160, Tiles(64, 64, 4, 2)), (256, FWD[256]))
DSPLIT_MIN_PAD, DSPLIT_MIN_PAD_CAUSAL = 128, 256
# ptxas's register cap (maxnreg) of the forward's launch, by its split-column tiles. The 128x64 w8 tiles take 128
# registers a thread at an N the tiles divide: two CTAs of 256 threads an SM. A ragged N compiles the last tiles'
# masked loads in too, and took them to 136-149 registers (d = 72-96): one CTA an SM (Nsight, check58). Capped at 128
# they compile without spilling (8 bytes at d = 88; sm_90, Triton 3.6), Nsight counts two CTAs an SM, and the ragged
# forward ran 1.11-1.29x faster (forward+backward 1.03-1.06x) at d = 72, 88 and 96; d = 80 (126 registers uncapped)
# and the even d = 96 launch 0.98-1.00x (H100: python -m flashref.gpu.regcap_probe, figures/gpu/h100-fwd-regcap.json).
FWD_MAXNREG = {FWD_DSPLIT[0][1]: 128}
# The atomic dK/dV kernel with d split (dsplit_bwd), by D_A + D_B (fwd+bwd sweep, NOTES.md): up to 128
# (d = 80, 96) the d = 128 tiles, +14% and +5% over padding; up to 160 (d = 160) 64x128 w8 s2, 2.9x;
# wider (d = 192) 32x128 w8 s2, 1.9x (64x128 does not fit). On by default from D_PAD = 128 for the atomic
# backward; the deterministic one keeps the padded tiles (not measured).
DKDV_DSPLIT = ((128, DKDV_ATOMIC[128]), (160, Tiles(64, 128, 8, 2)), (256, Tiles(32, 128, 8, 2)))
SPLIT_DIMS = (128,)  # forward split by default at these D_PAD
HEADS_FIRST_CAUSAL = (128,)  # heads-first grid for causal forwards at these D_PAD (+7–14%, NOTES.md)
INTERPRET_TILES = Tiles(16, 16, 1, 1)  # the CPU interpreter: small fixed tiles


def pad_dim(d: int) -> int:
    """The tile width the kernels use for head dimension d: the next power of two, at least 16."""
    return max(16, 1 << (int(d) - 1).bit_length())


@dataclass(frozen=True)
class Config:
    """How the kernels run; every field left at ``None`` takes the default for the head dimension.

    version: 1 (the readable kernel, kernel1.py) or 2 (this file's). fwd, dkdv, dq: :class:`Tiles`
    of the forward, the dK/dV kernel (atomic or deterministic, whichever runs) and the deterministic
    dQ kernel. The flags are kernel 2's schedules (module docstring); kernel 1 ignores them.
    """

    version: int = 2
    fwd: Tiles | None = None
    dkdv: Tiles | None = None
    dq: Tiles | None = None
    split: bool | None = None
    heads_first: bool | None = None
    persistent: bool = False
    warp_specialize: bool = False
    stagger: bool = True
    tma: bool = True
    lazy: bool = False
    dsplit: bool | None = None  # forward: two column tiles (dim_split) instead of one padded one
    dsplit_bwd: bool | None = None  # the dK/dV kernel: the same split (kernel 2)

    def __post_init__(self):
        # an int (numpy's too), as Tiles' fields are: 1.0 equals 1, and named "kernel 1.0" in which_kernel
        if isinstance(self.version, (bool, np.bool_)) or not isinstance(self.version, numbers.Integral):
            raise TypeError(f"Config.version must be the int 1 (readable) or 2 (fast), got {self.version!r}")
        if self.version not in (1, 2):
            raise ValueError(f"Config.version must be 1 (readable) or 2 (fast), got {self.version!r}")
        object.__setattr__(self, "version", int(self.version))  # (frozen: numpy's int as Python's)
        for name in ("fwd", "dkdv", "dq"):
            t = getattr(self, name)
            if t is not None and not isinstance(t, Tiles):
                raise TypeError(f"Config.{name} must be a Tiles or None, got {type(t).__name__}")
        # the flags: True or False (None where the head dim decides); a string such as "False" is truthy and
        # would turn its schedule on
        for name in ("split", "heads_first", "persistent", "warp_specialize", "stagger", "tma", "lazy", "dsplit",
                     "dsplit_bwd"):
            v = getattr(self, name)
            tri = name in ("split", "heads_first", "dsplit", "dsplit_bwd")
            if not (isinstance(v, (bool, np.bool_)) or (tri and v is None)):
                raise TypeError(f"Config.{name} must be True or False{' or None' if tri else ''}, got {v!r}")
        if self.split and self.dsplit and self.version == 2:  # refused here, not at the first call (resolve)
            raise ValueError("Config: split (two row halves) and dsplit (two column tiles) cannot both be on")
        if self.split and self.fwd is not None and self.fwd.block_m < 2:  # two halves of BLOCK_M // 2 rows each
            raise ValueError(f"Config: split runs two halves of BLOCK_M // 2 rows: fwd.block_m at least 2, got "
                             f"{self.fwd.block_m}")

    def resolve(self, d: int, causal: bool, deterministic: bool, interpret: bool | None = None) -> Config:
        """A copy with every ``None`` filled in for head dimension d (fixed 16×16 tiles, no split,
        no heads-first grid under the interpreter). ``interpret``: whether to resolve for Triton's CPU
        interpreter (None: whether it is on, ``TRITON_INTERPRET=1``); the L2 model asks for the GPU's (False)."""
        D = pad_dim(d)
        v1 = self.version == 1
        # dsplit: on by default where D_PAD reaches DSPLIT_MIN_PAD (_CAUSAL) and dim_split narrows the
        # tiles, unless the row split was asked for
        min_pad = DSPLIT_MIN_PAD_CAUSAL if causal else DSPLIT_MIN_PAD
        dsplit = (D >= min_pad and not self.split) if self.dsplit is None else self.dsplit
        d_a, d_b = dim_split(d)
        dsplit = bool(dsplit) and d_b > 0 and not v1
        dsplit_bwd = (D >= DSPLIT_MIN_PAD and not deterministic) if self.dsplit_bwd is None else self.dsplit_bwd
        dsplit_bwd = bool(dsplit_bwd) and d_b > 0 and not v1
        if INTERPRET if interpret is None else interpret:
            t = INTERPRET_TILES
            split = bool(self.split)
            return replace(self, fwd=self.fwd or (replace(t, block_m=32) if split else t), dkdv=self.dkdv or t,
                           dq=self.dq or t, split=split, heads_first=bool(self.heads_first), tma=False,
                           dsplit=dsplit, dsplit_bwd=dsplit_bwd)
        split = (D in SPLIT_DIMS and not v1 and not dsplit) if self.split is None else self.split
        heads_first = (causal and D in HEADS_FIRST_CAUSAL) if self.heads_first is None else self.heads_first
        if dsplit:
            fwd = self.fwd or next(t for w, t in FWD_DSPLIT if d_a + d_b <= w)
        else:
            fwd = self.fwd or (FWD_SPLIT.get(D, FWD[D]) if split else FWD[D])
        if dsplit_bwd and not deterministic:
            dkdv = self.dkdv or next(t for w, t in DKDV_DSPLIT if d_a + d_b <= w)
        else:
            dkdv = self.dkdv or (DKDV if deterministic else DKDV_ATOMIC)[D]
        return replace(self, fwd=fwd, dkdv=dkdv, dq=self.dq or DQ[D], split=split and not v1,
                       heads_first=heads_first and not v1, dsplit=dsplit, dsplit_bwd=dsplit_bwd)

    def fwd_launch(self) -> dict:
        """The forward's launch options: its tiles' meta-parameters, and the register cap FWD_MAXNREG gives its
        split-column tiles (a resolved config)."""
        cap = FWD_MAXNREG.get(self.fwd) if self.dsplit else None
        return {**self.fwd.meta(), **({"maxnreg": cap} if cap else {})}

    def describe(self) -> dict:
        """The resolved tiles and flags as short strings (bench.py's rows)."""
        out = {k: f"{t.block_m}x{t.block_n} w{t.warps} s{t.stages}" for k in ("fwd", "dkdv", "dq")
               if (t := getattr(self, k)) is not None}
        out["version"] = self.version
        out["flags"] = "+".join(f for f in ("split", "heads_first", "persistent", "warp_specialize", "stagger",
                                            "tma", "lazy", "dsplit", "dsplit_bwd") if getattr(self, f)) or "-"
        return out
