"""flashref: FlashAttention, step by step, on a simulated GPU memory that counts every element.

Algorithms (numpy, each reads like its paper's algorithm box):
``standard`` (Algorithms 0, 3), ``flash1`` (Algorithms 1/2, 4), ``flash2`` (FlashAttention-2),
``blocksparse`` (Algorithm 5), ``decoding`` (split-KV, paged KV); ``variants`` holds the lines that
GQA, sliding windows, ALiBi and softcapping add to them; ``ring`` spreads attention over simulated
devices. Closed forms in ``iomodel`` (and the three-level DRAM model, ``iomodel.dram``, over the
simulated L2 of ``l2`` and the thread-block schedules of ``schedule``); GPU specs in ``hardware``;
work items in ``parallelism``. ``functional`` (the PyTorch front, imports torch), ``gpu`` (Triton
kernels, needs CUDA or TRITON_INTERPRET=1), ``lowp`` (FA3's FP8 numerics, needs ml_dtypes) and
``figures`` (matplotlib) are imported on first use, so ``import flashref`` needs none of them;
``distributed`` (ring attention over torch.distributed) is imported by name.
"""

import importlib

from . import (
    blocks,
    blocksparse,
    decoding,
    dropout,
    flash1,
    flash2,
    flops,
    hardware,
    iomodel,
    masks,
    memory,
    parallelism,
    patterns,
    problem,
    softmax,
    standard,
    variants,
)
from .memory import IOReport, Memory, SRAMOverflowError
from .problem import Problem

__version__ = "0.1.0"

_LAZY = ("functional", "gpu", "figures", "lowp")


def __getattr__(name):
    # torch and triton are heavy (or absent): load those modules only when first touched.
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# What ``from flashref import *`` gives: the numpy core, and ``lowp`` (loaded then, so it needs ml_dtypes, a
# dependency of the package). ``functional``, ``gpu`` and ``figures`` stay out of the star-import (they need
# torch, triton or matplotlib); import them by name.
__all__ = ["blocks", "blocksparse", "decoding", "dropout", "flash1", "flash2", "flops", "hardware", "iomodel", "lowp",
           "masks", "memory", "parallelism", "patterns", "problem", "softmax", "standard", "variants",
           "IOReport", "Memory", "Problem", "SRAMOverflowError"]
