"""Which (query, key) pairs may attend: causal and boolean masks, tile by tile.

Conventions are PyTorch's (``torch.nn.functional.scaled_dot_product_attention``):

* a boolean ``mask`` broadcastable to ``(..., Nq, Nk)``, ``True`` = attend;
* ``causal=True`` lets query ``i`` see keys ``j <= i`` (top-left aligned, also when Nq != Nk).

The paper's MASK function (Alg.2 l.11) is applied on chip: masked scores become -inf. Tiled
algorithms ask for the mask of one tile with :func:`tile_mask`; a mask is a function of the
coordinates here, so it moves no HBM traffic (a dense mask tensor on a real GPU would cost
Nq*Nk bytes once per pass; the paper's MASK function is the model we follow).
"""

from __future__ import annotations

import numpy as np

from ._numbers import _nonnegative_int

__all__ = ["causal_mask", "tile_mask", "apply", "full_mask"]


def causal_mask(Nq: int, Nk: int) -> np.ndarray:
    """``(Nq, Nk)`` boolean, True where key ``j <= i``."""
    # np.arange took Nq = 2.5 (a 3-row mask), True (1 row) and -1 (0 rows) without a word.
    return np.arange(_nonnegative_int(Nk, "Nk"))[None, :] <= np.arange(_nonnegative_int(Nq, "Nq"))[:, None]



def tile_mask(mask, causal: bool, rows: tuple[int, int], cols: tuple[int, int]):
    """The attend-mask of the tile ``rows x cols``, or ``None`` if every entry may attend.

    ``mask`` is the user's boolean mask, already broadcast to ``(..., Nq, Nk)`` or ``None``.
    """
    out = None
    if causal:
        i = np.arange(rows[0], rows[1])[:, None]
        j = np.arange(cols[0], cols[1])[None, :]
        out = j <= i  # (r, c)
        if out.all():
            out = None
    if mask is not None:
        m = mask[..., rows[0]:rows[1], cols[0]:cols[1]]
        out = m if out is None else (m & out)
    return out


def full_mask(mask, causal: bool, Nq: int, Nk: int):
    """The attend-mask of the whole score matrix (or ``None``)."""
    return tile_mask(mask, causal, (0, Nq), (0, Nk))


def apply(S: np.ndarray, attend) -> np.ndarray:
    """MASK(S): scores where ``attend`` is False become -inf."""
    if attend is None:
        return S
    return np.where(attend, S, -np.inf)
