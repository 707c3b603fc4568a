"""One figure style for every plot in flashref, and the one place figures are saved.

Plot functions build and return a matplotlib figure; :func:`save` writes it as PNG beside a CSV
of the data it plots, so a test can regenerate the numbers and compare.
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt

__all__ = ["COLORS", "figure", "save", "write_csv", "read_csv"]

# One colour per algorithm, used by every figure and notebook.
COLORS = {
    "standard": "#d62728",
    "flash1": "#1f77b4",
    "flash2": "#2ca02c",
    "blocksparse": "#9467bd",
    "decoding": "#ff7f0e",
    "bound": "#7f7f7f",
    "triton": "#17becf",
    "math": "#d62728",
    "flash": "#2ca02c",
    "cudnn": "#8c564b",
    "efficient": "#e377c2",
    "flashref": "#1f77b4",
    "flashref_det": "#aec7e8",
}

_RC = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "axes.titlesize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


#: No "Software" (matplotlib version) entry in the PNGs: the same numbers give the same bytes.
PNG_METADATA = {"Software": None}


def figure(title: str, ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 3.8):
    """A new figure in the house style; ``title`` must name every fixed parameter."""
    with plt.rc_context(_RC):
        # constrained layout keeps a multi-line suptitle clear of the subplot titles, in notebooks too
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained")
        for ax in axes.flat:
            ax.grid(True, alpha=0.3)
            ax.spines["top"].set_visible(False)
            ax.spines["right"].set_visible(False)
    fig.suptitle(title, fontsize=9.5)
    return fig, (axes[0, 0] if nrows * ncols == 1 else axes)


def write_csv(path: Path, rows: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def save(fig, rows: list[dict], path_stem: Path) -> None:
    """Write ``<stem>.png`` and ``<stem>.csv`` (the plotted data)."""
    path_stem = Path(path_stem)
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path_stem.with_suffix(".png"), metadata=PNG_METADATA)
    plt.close(fig)
    write_csv(path_stem.with_suffix(".csv"), rows)
