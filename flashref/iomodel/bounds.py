"""The IO theorems of the FlashAttention paper as functions you can plot against exact counts.

All counts are HBM accesses in elements, per head, for sequence length N (queries = keys), head
dimension d and on-chip memory M elements (tridao, flash-attention issue #1704: "unit of M is
elements"). The theorems hold for d ≤ M ≤ Nd (:func:`in_theorem_range`).

* Theorem 2 (forward) and Theorem 5 (backward): standard attention needs Θ(Nd + N²), FlashAttention
  Θ(N²d²/M). :func:`standard_theta` and :func:`flash1_theta` return the expressions inside Θ(·),
  without constants. :func:`flash1_forward_leading` gives the constant of the Q and O traffic with
  the paper's block sizes: 12·N²d²/M (Tc = ⌈N/Bc⌉ ≈ 4Nd/M passes, each reading Q_i, O_i and writing
  O_i: 3Nd). Each pass also reads and writes ℓ_i, m_i (4N), so when the paper's blocks fit the exact
  count over N²d²/M tends (N → ∞) to (3d + 4)·M/(Bc·d²) ≈ 12 + 16/d, not to 12: 13 at d = 16,
  12.2 at d = 64.
* Proposition 3 (lower bound): "There does not exist an algorithm to compute exact attention with
  o(N²d²/M) HBM accesses for all M in the range [d, Nd]". It is *not* a bound Ω(N²d²/M) at each M;
  its proof only uses M = Θ(Nd), where N²d²/M = Θ(Nd) and any algorithm must at least read its
  inputs and write its output. So the lower bound we can state exactly, for every M, is that floor:
  :func:`prop3_lower_bound` = read Q, K, V once (3Nd) + write O once (Nd) = 4Nd elements, the same
  for all M. Every element of Q, K and V can change O, so none can be skipped, and O must reach HBM.
  At M = Nd the Θ(N²d²/M) curve meets this floor (up to constants): that is why no algorithm can
  beat N²d²/M uniformly over [d, Nd], while for small M the true optimum is left open by the paper.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["in_theorem_range", "standard_theta", "flash1_theta", "flash1_forward_leading",
           "prop3_lower_bound", "standard_backward_theta", "flash1_backward_theta"]


def _check(**kw):
    # finite: an infinite N, d or M gave inf, or NaN (inf/inf), and in_theorem_range(N=inf) was True
    for name, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
            raise ValueError(f"{name}: expected a finite positive number, got {v!r}")


def in_theorem_range(N, d, M) -> bool:
    """True when d ≤ M ≤ Nd, the range of Theorems 2 and 5 and Proposition 3.

    The low end of that range is not runnable: Algorithm 1 with 1×1 blocks holds 4d + 7 elements
    (``flash1.footprint(1, 1, d)``; Algorithm 4: 8d + 5), so for M below that it raises
    ``SRAMOverflowError``, and the paper's blocks fit no M below 8d² + 24d (and every M from 8d² + 33d: the
    ceiling in ⌈M/4d⌉ leaves gaps between). Plot the theorems against counted IO only where the count exists."""
    _check(N=N, d=d, M=M)
    return d <= M <= N * d


def standard_theta(N, d) -> float:
    """Theorem 2, standard attention forward: Nd + N² (inside the Θ, no constant)."""
    _check(N=N, d=d)
    return N * d + N ** 2


def flash1_theta(N, d, M) -> float:
    """Theorem 2, FlashAttention forward: N²d²/M (inside the Θ, no constant)."""
    _check(N=N, d=d, M=M)
    return N ** 2 * d ** 2 / M


def flash1_forward_leading(N, d, M) -> float:
    """The Q, O term of the exact forward count with the paper's blocks: 12·N²d²/M.

    Tc ≈ N/Bc = 4Nd/M passes, each reading Q and O and writing O (3Nd). Left out: the 4N per pass
    of ℓ, m (read and written; 16·N²d/M in all, lower order in d only, so the exact count tends to about
    (1 + 4/(3d)) times this) and the 3Nd + 2N paid once; see ``iomodel.flash1``.
    """
    return 12 * flash1_theta(N, d, M)


def prop3_lower_bound(N, d, M=None) -> int:
    """Proposition 3's floor, valid for every M: read Q, K, V and write O once each, 4·N·d.

    ``M`` is accepted (and ignored) so the bound can be plotted against M beside the counts.
    """
    _check(N=N, d=d)
    if M is not None:
        _check(M=M)
    return 4 * N * d


def standard_backward_theta(N, d) -> float:
    """Theorem 5, standard attention backward: Nd + N²."""
    return standard_theta(N, d)


def flash1_backward_theta(N, d, M) -> float:
    """Theorem 5, FlashAttention backward (Algorithm 4): N²d²/M."""
    return flash1_theta(N, d, M)
