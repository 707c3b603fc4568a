"""What the algorithms return: the tensors under the paper's names plus the IO and FLOP reports."""

from __future__ import annotations

__all__ = ["ForwardResult", "BackwardResult"]


class _Result:
    """Attribute bag with a short repr listing what it holds."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        parts = []
        for k, v in self.__dict__.items():
            shape = getattr(v, "shape", None)
            if shape is not None:
                parts.append(f"{k}: {tuple(shape)}")
            elif k == "io":
                parts.append(f"io.total={v.total:,}")
            elif k == "flops":
                parts.append(f"flops.total={v.total:,}")
            elif isinstance(v, (list, tuple, dict)) and len(v) > 8:  # the event trace: thousands of entries
                parts.append(f"{k}: [{len(v):,} {'entries' if isinstance(v, dict) else 'items'}]")
            else:
                parts.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class ForwardResult(_Result):
    """``.O``, the saved statistics (``P``, or ``l`` and ``m``, or ``L``), ``.io``, ``.flops``."""


class BackwardResult(_Result):
    """``.dQ``, ``.dK``, ``.dV``, ``.io``, ``.flops``."""
