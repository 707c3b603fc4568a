"""flashref: FlashAttention, step by step, on a simulated GPU memory that counts every element.

Algorithms (numpy, each reads like its paper's algorithm box):
``standard`` (Algorithms 0, 3), ``flash1`` (Algorithms 1/2, 4), ``flash2`` (FlashAttention-2),
``blocksparse`` (Algorithm 5), ``decoding`` (split-KV). Closed forms in ``iomodel``; GPU specs in
``hardware``; PyTorch front in ``functional``; real GPUs in ``gpu`` (imported lazily).
"""

from . import dropout, flops, iomodel, masks, memory, softmax, standard
from .memory import IOReport, Memory, SRAMOverflowError

__version__ = "0.1.0"

__all__ = ["dropout", "flops", "iomodel", "masks", "memory", "softmax", "standard",
           "IOReport", "Memory", "SRAMOverflowError"]
