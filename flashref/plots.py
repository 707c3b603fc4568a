"""One figure style for every plot in flashref, and the one place figures are saved.

Plot functions build and return a matplotlib figure; :func:`save` writes it as PNG beside a CSV
of the data it plots, so a test can regenerate the numbers and compare.
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from .figures import default_dir
from .problem import positive_int

__all__ = ["COLORS", "figure", "save", "write_csv", "read_csv", "storyboard", "STORYBOARD_DIR"]

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
    "fa4": "#000000",  # FlashAttention-4 (flash-attn-4), an optional peer in the GPU benchmark
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


class _HouseAxes(Axes):
    """Axes whose titles and legends take the house style when they are made. The rc context of :func:`figure`
    styles what exists when it closes (ticks, spines, grid); titles and legends come later, from the caller, and
    took matplotlib's defaults instead (12-pt titles over a 9.5-pt suptitle, framed 10-pt legends)."""

    def set_title(self, label, *args, **kwargs):
        kwargs.setdefault("fontsize", _RC["axes.titlesize"])
        return super().set_title(label, *args, **kwargs)

    def legend(self, *args, **kwargs):
        kwargs.setdefault("fontsize", _RC["legend.fontsize"])
        kwargs.setdefault("frameon", _RC["legend.frameon"])
        return super().legend(*args, **kwargs)


def figure(title: str, ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 3.8):
    """A new figure in the house style; ``title`` must name every fixed parameter."""
    with plt.rc_context(_RC):
        # constrained layout keeps a multi-line suptitle clear of the subplot titles, in notebooks too
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained",
                                 subplot_kw=dict(axes_class=_HouseAxes))
        for ax in axes.flat:
            ax.grid(True, alpha=0.3)
            ax.spines["top"].set_visible(False)
            ax.spines["right"].set_visible(False)
    fig.suptitle(title, fontsize=9.5)
    return fig, (axes[0, 0] if nrows * ncols == 1 else axes)


def _check_rows(rows) -> None:
    """The CSV's header is the first row's keys: refuse what has none, or a row with other keys (csv would fail
    half-way through the file), before anything is written."""
    if not isinstance(rows, (list, tuple)) or not rows or not isinstance(rows[0], dict):
        raise ValueError(f"rows: expected a non-empty list of dicts (one per CSV line), got {rows!r:.80}")
    keys = list(rows[0])
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != set(keys):
            got = list(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"rows[{i}]: every row must have the first row's keys {keys} (the CSV header), "
                             f"got {got}")


def write_csv(path: Path, rows: list[dict]) -> None:
    _check_rows(rows)
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
    """Write ``<stem>.png`` and ``<stem>.csv`` (the plotted data). The stem is kept whole: ``drop_p0.1`` writes
    ``drop_p0.1.png``, not ``drop_p0.png``."""
    _check_rows(rows)  # not a PNG without its CSV
    path_stem = Path(path_stem)
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    # with_suffix would take the ".1" of "drop_p0.1" for a suffix and replace it
    fig.savefig(path_stem.with_name(path_stem.name + ".png"), metadata=PNG_METADATA)
    plt.close(fig)
    write_csv(path_stem.with_name(path_stem.name + ".csv"), rows)


#: Where :func:`storyboard` writes: ``figures/storyboards/`` of the checkout; outside one (an installed package),
#: ``./figures/storyboards``, under the figures command's own default folder, not beside the installed package.
STORYBOARD_DIR = default_dir() / "storyboards"


def storyboard(fig, draw, frames, name: str, ncols: int = 4, folder: Path | None = None) -> Path:
    """Save the key frames of an animation as one PNG, ``<folder>/<name>.png``, and return its path.

    An animation made with ``FuncAnimation(fig, draw, ...)`` plays only where JavaScript runs; GitHub,
    a PDF or a slide shows its controls and no figure. This calls ``draw(k)`` for each ``k`` of
    ``frames``, renders ``fig`` and tiles the images ``ncols`` to a row, so the same frames are also a
    static picture. The bytes depend only on the frames (no date or version in the file).
    """
    import numpy as np
    from matplotlib.image import imsave

    ncols = positive_int(ncols, "ncols")
    images = []
    for k in frames:
        draw(k)
        fig.canvas.draw()
        images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
    if not images:
        raise ValueError(f"frames: expected at least one frame, got {frames!r}")
    h, w = images[0].shape[:2]
    pad = 12
    nrows = -(-len(images) // ncols)
    sheet = np.full((nrows * (h + pad) - pad, ncols * (w + pad) - pad, 3), 255, dtype=np.uint8)
    for n, img in enumerate(images):
        r, c = divmod(n, ncols)
        sheet[r * (h + pad):r * (h + pad) + img.shape[0], c * (w + pad):c * (w + pad) + img.shape[1]] = img
    path = Path(folder or STORYBOARD_DIR) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, sheet, metadata=PNG_METADATA)
    return path
