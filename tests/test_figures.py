"""The figures command regenerates every figure, and its numbers equal the committed CSVs."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashref import iomodel, standard
from flashref.figures import all_figures
from flashref.figures import roofline as rf
from flashref.plots import read_csv

REPO = Path(__file__).resolve().parents[1]
NAMES = [f.name for f in all_figures()]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    proc = subprocess.run([sys.executable, "-m", "flashref", "figures", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


def _same(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)


@pytest.mark.parametrize("name", NAMES)
def test_figure_written(generated, name):
    png, csv = generated / f"{name}.png", generated / f"{name}.csv"
    assert png.exists() and png.stat().st_size > 1000
    assert csv.exists() and len(read_csv(csv)) > 0


@pytest.mark.parametrize("name", NAMES)
def test_figure_matches_committed(generated, name):
    committed = REPO / "figures" / f"{name}.csv"
    if not committed.exists():
        pytest.skip(f"figures/{name}.csv is not committed")
    new, old = read_csv(generated / f"{name}.csv"), read_csv(committed)
    assert len(new) == len(old)
    assert list(new[0]) == list(old[0])
    bad = [(i, k, o[k], n[k]) for i, (n, o) in enumerate(zip(new, old)) for k in o if not _same(n[k], o[k])]
    assert not bad, f"{name}: {len(bad)} cells differ, first {bad[:5]}"


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
