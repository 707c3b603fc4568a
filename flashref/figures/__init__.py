"""``python -m flashref figures``: regenerate every file in ``figures/``.

Each module in this package defines ``FIGURES``, a list of :class:`Figure`: a name, a ``data()``
function returning the plotted numbers as a list of row dicts (computed by running the simulator,
never typed in), and a ``plot(rows)`` function returning a matplotlib figure. Modules are found
automatically, so adding a figure means adding it to a module's ``FIGURES`` list.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import _cli

__all__ = ["Figure", "all_figures", "main"]


@dataclass
class Figure:
    name: str
    data: Callable[[], list]
    plot: Callable[[list], object]


def all_figures() -> list[Figure]:
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(getattr(module, "FIGURES", []))
    return out


def default_dir() -> Path:
    """``figures/`` at the repository root when run from a checkout, else ``./figures``."""
    repo = Path(__file__).resolve().parents[2]
    return repo / "figures" if (repo / "pyproject.toml").exists() else Path("figures")


def main(argv=None) -> int:
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    from ..plots import save

    ap = argparse.ArgumentParser(prog="python -m flashref figures", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=_cli.folder, default=None, help="output folder (default: figures/)")
    ap.add_argument("--only", nargs="*", default=None, help="names of the figures to make")
    args = ap.parse_args(argv)
    out = args.out or default_dir()
    figs = all_figures()
    if args.only is not None and not args.only:  # "--only" alone: not every figure, silently
        ap.error(f"--only: name at least one figure; known: {[f.name for f in figs]}")
    if args.only:
        unknown = set(args.only) - {f.name for f in figs}
        if unknown:
            ap.error(f"--only: unknown figures {sorted(unknown)}; known: {[f.name for f in figs]}")
        figs = [f for f in figs if f.name in args.only]
    try:  # before minutes of work (and after the arguments: a mistyped --only makes no folder): --out must be a folder
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.error(f"--out: cannot write figures into {out}: {e.strerror or e}")
    t0 = time.perf_counter()
    for f in figs:
        t = time.perf_counter()
        rows = f.data()
        save(f.plot(rows), rows, out / f.name)
        print(f"  {f.name:<40s} {time.perf_counter() - t:6.1f} s")
    print(f"{len(figs)} figures written to {out} in {time.perf_counter() - t0:.1f} s")
    return 0
