"""The figures command regenerates every figure in a clean clone, its numbers equal the committed CSVs, and it
leaves the clone clean."""

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from flashref import iomodel, standard
from flashref.figures import all_figures
from flashref.figures import roofline as rf
from flashref.plots import read_csv

REPO = Path(__file__).resolve().parents[1]
NAMES = [f.name for f in all_figures()]


def _same(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)


def _clean_clone(tmp_path: Path) -> Path:
    """A fresh git repository holding a copy of the tracked files, committed."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    for name in filter(None, files.stdout.split("\0")):
        src = REPO / name
        if src.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)  # copy2 keeps the old mtimes: a file the command rewrites is newer
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(git + cmd, cwd=clone, check=True, capture_output=True)
    return clone


# One test, not one per figure: the figures command is the slowest thing the suite runs (minutes on two cores),
# and a fixture shared by many tests would run once on each pytest-xdist worker that draws one of them.
def test_figures_command_in_a_clean_clone(tmp_path):
    """In a fresh clone, ``python -m flashref figures`` writes every figure (a PNG and its CSV), its numbers equal
    the committed CSVs, and it rewrites each with the same bytes: git sees nothing change."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = _clean_clone(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(clone), MPLBACKEND="Agg")
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "flashref", "figures"], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert str(clone / "figures") in proc.stdout, "the figures command did not write into the clone"
    out, bad = clone / "figures", []
    for name in NAMES:
        png, csv = out / f"{name}.png", out / f"{name}.csv"
        # written by this run (a second's slack: file systems round mtimes), not a copy of a committed file
        if not (png.exists() and png.stat().st_size > 1000 and png.stat().st_mtime >= started - 1):
            bad.append(f"{name}.png not written")
        if not (csv.exists() and csv.stat().st_mtime >= started - 1 and read_csv(csv)):
            bad.append(f"{name}.csv not written")
            continue
        committed = REPO / "figures" / f"{name}.csv"
        if not committed.exists():
            bad.append(f"figures/{name}.csv is not committed")
            continue
        new, old = read_csv(csv), read_csv(committed)
        if len(new) != len(old) or list(new[0]) != list(old[0]):
            bad.append(f"{name}.csv: {len(new)} rows of {list(new[0])}, committed {len(old)} of {list(old[0])}")
            continue
        cells = [(i, k, o[k], n[k]) for i, (n, o) in enumerate(zip(new, old)) for k in o if not _same(n[k], o[k])]
        if cells:
            bad.append(f"{name}: {len(cells)} cells differ from the committed CSV, first {cells[:5]}")
    assert not bad, "\n".join(bad)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    assert status == "", f"python -m flashref figures changed a clean clone:\n{status}"


# ----------------------------------------------------------------------------- the roofline figure's counts
@pytest.mark.parametrize("Nq,Nk,d", [(7, 13, 5), (64, 64, 16), (33, 20, 8)])
def test_line_flops_equal_the_counter(Nq, Nk, d):
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((2, n, d)) for n in (Nq, Nk, Nk))
    fwd = standard.forward(Q, K, V, causal=True, dropout_p=0.3)
    lf = rf.line_flops(Nq, Nk, d)
    assert sum(m for m, _ in lf.values()) * 2 == fwd.flops.matmul          # two heads
    assert sum(n for _, n in lf.values()) * 2 == fwd.flops.nonmatmul
    # and without mask and dropout, those two lines' FLOPs are gone
    plain = standard.forward(Q, K, V)
    assert plain.flops.nonmatmul == fwd.flops.nonmatmul - 2 * (lf["mask"][1] + lf["dropout"][1])


@pytest.mark.parametrize("N,d", [(16, 4), (100, 8)])
def test_io_by_line_equals_iomodel(N, d):
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((N, d)) for _ in range(3))
    fwd = standard.forward(Q, K, V, causal=True, dropout_p=0.1)
    pred = iomodel.predict("standard", "forward", Nq=N, Nk=N, d=d, causal=True, dropout_p=0.1)
    assert rf.io_by_line(fwd.events) == pred.by_line
    sim = rf.forward_line_counts(N, d, simulate=True)
    model = rf.forward_line_counts(N, d, simulate=False)
    assert [{k: v for k, v in r.items() if k != "source"} for r in sim.values()] == \
           [{k: v for k, v in r.items() if k != "source"} for r in model.values()]


def test_roofline_intensities():
    rows = {(r["gpu"], r["N"], r["op"]): r for r in rf.roofline_data()}
    for (_gpu, _N, op), r in rows.items():
        assert r["intensity_flop_per_byte"] < r["ridge_flop_per_byte"]     # every kernel of Alg. 0 is memory-bound
        if op in ("S = QK^T", "O = PV"):
            assert 50 < r["intensity_flop_per_byte"] < 64                  # -> d = 64 FLOP/byte as N grows
        else:
            assert r["intensity_flop_per_byte"] <= 1.25                    # softmax 5 FLOPs per 4 bytes
    assert rows[("H100-SXM5-80GB", 16384, "S = QK^T")]["source"] == "iomodel"
    assert rows[("H100-SXM5-80GB", 1024, "S = QK^T")]["source"] == "simulated"


@pytest.mark.parametrize("name", ["lowp_error_table", "lowp_error_vs_outliers", "lowp_p_underflow"])
def test_a_figure_a_notebook_draws_from_its_csv_draws_numbers(name):
    """Notebook 11 draws these from their CSVs (read_csv gives strings). underflow_plot drew the closed form's
    dotted lines from the strings as they were, so matplotlib made both axes categorical: tick labels
    "0.9999999999717519, 0.0, 1.0, ..." out of order, and the measured curves flat at the bottom. From the CSV the
    figure must draw what it draws from its data: the same lines, at the same numbers."""
    import matplotlib.pyplot as plt
    from matplotlib.category import StrCategoryConverter

    fig = next(f for f in all_figures() if f.name == name)
    from_csv = fig.plot(read_csv(REPO / "figures" / f"{name}.csv"))
    try:
        for ax in from_csv.axes:
            for axis in (ax.xaxis, ax.yaxis):
                assert not isinstance(axis.get_converter(), StrCategoryConverter), (name, ax.get_title())
            for line in ax.get_lines():
                x, y = (np.asarray(v, dtype=float) for v in line.get_data())
                assert np.isfinite(x).any() and np.isfinite(y).any()
    finally:
        plt.close(from_csv)
