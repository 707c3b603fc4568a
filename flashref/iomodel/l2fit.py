"""The three-level model against what Nsight Compute measured: the recorded rows, and the fit of each of
:mod:`flashref.iomodel.dram`'s fitted parameters.

``python -m flashref profile-l2`` records the DRAM bytes of each call in ``figures/gpu/<gpu>-l2-<run>.json``.
:func:`measured_rows` reads a run (a shape measured several times: the median of its repeats), and
:func:`recorded_impl` names the kernel a row measured. Each rule of the model has a fit here, an exhaustive search
over a grid of its parameters that minimises the mean squared log-ratio of predicted to measured bytes:

* :func:`fit`: the lockstep passes and the write residue (``C_eff``, ``kappa``, ``alpha``, ``rho``);
* :func:`fit_staggered`: FlashAttention-2's staggered causal walk (``C_stag``, ``kappa_stag``, ``lag``, ``overlap``);
* :func:`fit_softmax_rows`, :func:`fit_rolling`, :func:`fit_sync`, :func:`fit_drift_ramp`,
  :func:`fit_rolling_drift`, :func:`fit_spread_waves`, :func:`fit_apart`, :func:`fit_head_reads`: one rule each.

A rule is fitted on the runs recorded before the one that found it, and the runs from that one on are held out
(``*_HELD_OUT``, tails of :data:`RUNS_SINCE_CHECK13`): the ``recorded_*_rows`` functions give either set.
``tests/test_l2.py`` checks that every committed parameter is its fit's, and scores the held-out rows;
:mod:`flashref.iomodel.l2score` scores every recorded row.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

import numpy as np

from .. import schedule as S  # noqa: N812
from .._numbers import _bool
from ..l2 import preset
from .dram import (
    GPU_PARAMS,
    IMPLS,
    MB,
    MODES,
    PARAMS,
    _d64_tiles,
    _d256_tiles,
    _kernels,
    _one_cta_tiles,
    _params,
    _softmax,
    dram,
    predict_kernels,
)

FIT_IMPLS = IMPLS


def measured_rows(result, impls=FIT_IMPLS):
    """(impl, shape, mode, shape kwargs, measured total bytes) of a ``profile-l2`` JSON.

    A shape measured several times (``profile-l2 --repeat``) gives one row: the median of its repeats
    (:func:`repeats` gives them all)."""
    out = []
    for (impl, shape, mode), (kw, values) in repeats(result, impls).items():
        out.append((impl, shape, mode, kw, float(np.median(values))))
    return out


def repeats(result, impls=FIT_IMPLS):
    """{(impl, shape, mode): (shape kwargs, [total bytes of each repeat])}, in the order first measured."""
    out = {}
    for r in result["rows"]:
        impl = recorded_impl(r)
        if impl not in impls or r.get("error"):
            continue
        # N is the query length; Nk, where a row records it, the key length (rows before it had Nq = Nk)
        # causal as recorded (JSON's true or false): bool() would read "yes" or "false" as True
        kw = dict(B=r["B"], H=r["H"], Nq=r["N"], Nk=r.get("Nk", r["N"]), d=r["d"], causal=_bool(r["causal"], "causal"))
        for mode in MODES:
            out.setdefault((impl, r["shape"], mode), (kw, []))[1].append(r[mode]["total_bytes"])
    return out


def recorded_impl(row):
    """The model's name for the kernel a recorded (or pre-registered) row measured. ``profile-l2`` names
    ``flashref.gpu.attention``'s default ``"flashref"`` and, since kernel 3 became that default, records which
    kernel ran in the row's ``kernel`` field (``gpu.which_kernel``'s words). A ``"flashref"`` row is
    ``"flashref"`` where kernel 3 ran, and ``"flashref2"`` where kernel 2 did: where kernel 3 refused the call
    (on a GPU without Triton 3.6, say), and in every row recorded before, when the default was kernel 2."""
    if not isinstance(row, dict) or "impl" not in row:
        raise ValueError(f"row: expected a recorded row, a dict with an 'impl' entry, got {row!r}"[:300])
    if row["impl"] == "flashref" and not str(row.get("kernel", "")).startswith("kernel 3"):
        return "flashref2"
    return row["impl"]


def latest(*results):
    """One result from several recorded ones: each (impl, shape) from the latest-dated result that
    measured it. A kernel that changed is measured again; its older rows are then history, kept in
    their files but not predicted against (figures/gpu/NOTES-l2.md says which and why)."""
    newest = {}
    for res in sorted(results, key=lambda x: x["metadata"]["date"]):
        for r in res["rows"]:
            newest[(recorded_impl(r), r["shape"])] = res["metadata"]["date"]
    rows = [r for res in results for r in res["rows"]
            if newest[(recorded_impl(r), r["shape"])] == res["metadata"]["date"]]
    return dict(metadata=dict(date=max(x["metadata"]["date"] for x in results)), rows=rows)


def is_held_out(shape: str) -> bool:
    """The fixed-token sweep across the knee is held out of the fit."""
    return shape.startswith("sweep_")


def errors(rows, params=None, gpu="h100"):
    """Relative error (predicted / measured - 1) of each row."""
    return [dram(impl, mode, **kw, gpu=gpu, params=params).total_bytes / m - 1 for impl, _, mode, kw, m in rows]


GRID = dict(C_eff=[MB * c for c in (20, 25, 30, 35, 40, 45, 50)], kappa=[1.5, 2, 3, 4, 6, 8, 12],
            alpha=[0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
            rho=[MB * r for r in (12, 16, 20, 24, 28)])


def fit(result, start=None, rounds=2, grid=None):
    """Fit PARAMS on the fit set (every shape not held out): for each (C_eff, kappa) of the grid, a
    coordinate search over the other parameters, minimising the mean squared log-ratio of predicted
    to measured bytes. Returns (params, loss)."""
    grid = grid or GRID
    rows = [r for r in measured_rows(result) if not is_held_out(r[1])]
    if not rows:
        raise ValueError("result: no measured rows to fit (every row held out, failed or of another impl)")

    def loss(q):
        return sum(math.log1p(e) ** 2 for e in errors(rows, q)) / len(rows)

    best_p, best = None, math.inf
    for C in grid["C_eff"]:
        for kappa in grid["kappa"]:
            p = dict(start or PARAMS, C_eff=C, kappa=kappa)
            cur = loss(p)
            for _ in range(rounds):
                for name, values in grid.items():
                    if name in ("C_eff", "kappa"):
                        continue
                    for v in values:
                        q = dict(p, **{name: v})
                        lq = loss(q)
                        if lq < cur - 1e-12:
                            cur, p = lq, q
            if cur < best:
                best, best_p = cur, p
    return best_p, best


STAG_GRID = dict(C_stag=[MB * c for c in range(24, 129, 4)], kappa_stag=[1.5, 2, 3, 4, 6, 8, 12], lag=[1, 1.5, 2, 3, 4],
                 overlap=[0.0])
# the d = 64 set's search: the overlap term too, and the sharper knees and longer lags it asks for
D64_GRID = dict(STAG_GRID, kappa_stag=[1.5, 2, 3, 4, 6, 8, 12, 16, 24], lag=[0, 0.5, 1, 1.5, 2, 3, 4, 6],
                overlap=[0.0, 0.25, 0.5, 0.75, 1.0])
# the H100's d = 64 set's search with miss_cap (on every d = 64 causal forward the H100 recorded up to check44)
CAP_GRID = dict(miss_cap=[0.6, 0.65, 0.7, 0.75, 1.0], C_stag=[MB * c for c in (48, 52, 56, 60, 64, 72)],
                kappa_stag=[6, 8, 12], lag=[0.5, 1, 1.5, 2], overlap=[0.25, 0.5, 0.75])
# the shared set's search since the spread term: the overlap term too, at the smaller shares the d = 128 walk takes
SHARED_GRID = dict(STAG_GRID, overlap=[0.0, 0.1, 0.25, 0.5, 0.75])
# the H100's shared set with the lag over other heads' CTAs (STAGGERED_SHARED; on every d != 64 causal forward the
# H100 recorded up to check46, 102 rows: 2592 points, about ten minutes here). A coarser search first (C_stag 40-72
# MiB, kappa_stag 4-16, lag 0.5-3, overlap 0.1-1, spread 0.5-1, miss_cap 0.6-1) found the region
LAG_GRID = dict(lag_other=[1], C_stag=[MB * c for c in (48, 50, 52, 54, 56, 60)], kappa_stag=[5, 6, 7, 8],
                lag=[0.75, 1, 1.25], overlap=[0.4, 0.5, 0.6], spread=[0.25, 0.5, 0.75], miss_cap=[0.7, 0.75, 0.8, 0.9])

# The H200's runs each of its two sets below was fitted on, named: runs it measured later of sets predicted earlier
# (check37-check44, measured after the fit) are held out of it, whatever their name's place in RUNS_SINCE_CHECK13
H200_CAP_FIT_ON = ("", "check4")
H200_LAG_FIT_ON = ("", "check4", "check45", "check46")
# The H200's two sets with the same rules (miss_cap; lag_other and miss_cap), fitted as the H100's were, on the runs
# before each rule's first held-out run: the d = 64 set on the H200's runs before check45 (its grid and check4), the
# shared set on those before check47 (and check45, check46). The grids are centred on the H100's values: on so few rows
# (12 and 16 forwards) a wider grid's best slides along a flat valley to its edges (the d = 64 set to miss_cap 0.8,
# C_stag 72 MiB; loss 0.0144 against 0.0169) and predicts the runs held out worse (figures/gpu/NOTES-l2.md,
# "Twenty-fourth round")
H200_CAP_GRID = dict(miss_cap=[0.5, 0.55, 0.6, 0.65, 0.7], C_stag=[MB * c for c in (56, 60, 64, 68, 72)],
                     kappa_stag=[6, 8, 9, 10, 12], lag=[0.5, 1, 1.5], overlap=[0.4, 0.5, 0.6, 0.75])
H200_LAG_GRID = dict(lag_other=[1], C_stag=[MB * c for c in (50, 52, 54, 56, 58, 60)], kappa_stag=[5, 6, 7],
                     lag=[0.5, 0.75, 1, 1.25], overlap=[0.3, 0.4, 0.5, 0.6], spread=[0.25, 0.5],
                     miss_cap=[0.6, 0.65, 0.7, 0.75, 0.8])


def staggered_rows(results):
    """The rows only the staggered rule predicts: FlashAttention-2's causal forward."""
    return [r for res in results for r in measured_rows(res, ("sdpa_flash",)) if r[3]["causal"] and r[2] == "fwd"]


def fit_staggered(results, grid=None, gpu="h100", d=None, shared=False):
    """Fit the staggered walk's parameters (``C_stag``, ``kappa_stag``, ``lag``, ``overlap``, or any of PARAMS that
    ``grid`` names; the others as in PARAMS and the GPU's) on FlashAttention-2's causal forward in the recorded
    ``results`` (only at head dim ``d``, if given; ``shared=True``: only those the shared set predicts, every head
    dim but the d = 64 kernel's), minimising the mean squared log-ratio. An exhaustive search over ``grid``
    (``STAG_GRID``: overlap 0 only; ``D64_GRID``; ``SHARED_GRID``). Returns (params, loss)."""
    grid = grid or STAG_GRID
    rows = [r for r in staggered_rows(results) if (d is None or r[3]["d"] == d)
            and not (shared and _d64_tiles(r[3]["d"]))]
    if not rows:
        at = f" at d={d}" if d else " the shared set predicts" if shared else ""
        raise ValueError(f"results: no measured rows to fit (FlashAttention-2 causal forwards{at})")
    base = {**PARAMS, **GPU_PARAMS[gpu]}
    # each row's kernels once: the staggered walk is all that the searched parameters change
    parts = [_split("sdpa_flash", "fwd", kw, gpu, base, _is_staggered) for _, _, _, kw, _ in rows]

    def loss(point):
        q = {**base, **point}
        return sum(math.log1p(_split_total(part, q) / r[4] - 1) ** 2 for part, r in zip(parts, rows)) / len(rows)

    return _grid_search(grid, loss, base)


def _grid_search(grid, loss, base):
    """The exhaustive search of the fits: every combination of ``grid``'s values (the first name outermost), the one
    with the least ``loss(point)`` (the first of equals) returned as ``base`` overridden by it, with that loss."""
    best_point, best = None, math.inf
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        point = dict(zip(names, values))
        value = loss(point)
        if value < best:
            best, best_point = value, point
    return (None if best_point is None else {**base, **best_point}), best


def _split(impl, mode, kw, gpu, p, varies):
    """One call's kernels, split for a fit: (the DRAM bytes of those the searched parameters leave alone, under ``p``,
    [the kernels they change, ``varies(item)``], Nq, Nk). :func:`_split_total` adds the second part under each point
    of the search, so the rest of the call is predicted once, not once a point."""
    seq = _kernels(impl, mode, kw["B"], kw["H"], kw["Nq"], kw["Nk"], kw["d"], kw["causal"], 2, preset(gpu).sms,
                   bool(p["fa2_split"]), bool(p["softmax_passes"]))
    fixed = [item for item in seq if not varies(item)]
    return (sum(r[1] + r[2] for r in predict_kernels(fixed, kw["Nq"], kw["Nk"], p)),
            [item for item in seq if varies(item)], kw["Nq"], kw["Nk"])


def _split_total(part, p):
    """:func:`dram`'s total bytes of one call split by :func:`_split`, under ``p``."""
    rest, items, Nq, Nk = part
    for r in predict_kernels(items, Nq, Nk, p):
        rest += r[1] + r[2]
    return rest


def _is_staggered(item):
    """A staggered walk (FlashAttention-2's causal forward): what ``C_stag``, ``kappa_stag``, ``lag``, ``overlap`` and
    ``spread`` change."""
    return item[0] == "scan" and item[2]


def _is_rolling(item):
    """A rolling grid (``ScanKernel.rolling``): what ``C_roll`` and ``kappa_roll`` change."""
    return item[0] == "scan" and not item[2] and item[1].rolling


ROLL_GRID = dict(C_roll=[MB * c for c in range(40, 85, 5)], kappa_roll=[2, 3, 4, 6, 8, 12, 16])


def rolling_rows(result, gpu="h100", impls=("flashref", "flashref2")):
    """The rows of a ``profile-l2`` JSON whose call launches a rolling grid (``schedule.ScanKernel.rolling``: the
    causal forward of flashref's kernels, and kernel 3's dQ kernel), as (impl, shape, mode, shape kwargs, measured
    bytes, gpu, kernel 3's recorded tiles): what :func:`fit_rolling` fits on (:func:`recorded_rolling_rows`)."""
    info = S.kernel3_info(result)
    return [(impl, shape, mode, kw, m, gpu, info) for impl, shape, mode, kw, m in measured_rows(result, impls)
            if kw["causal"]]


# The recorded runs fit_rolling's fit set leaves out: kernel 3's earlier launches (older tiles, or no barrier past
# the knee, where its waves came apart; their kernel 2 rows stay), and the runs held out: check13-check16, and those
# measured after the fit (check17 on)
K3_EARLIER_RUNS = ("kernel3", "kernel3b", "check6", "check6b", "check6br", "check6c", "check6cr", "check6r", "check11",
                   "check11s")
# Every recorded run from check13 on, in the order it was measured. Each fit holds out the runs from the one that
# found its rule on, so its held-out list is this one's tail (a new run goes here, and so into every one of them).
RUNS_SINCE_CHECK13 = ("check13", "check14", "check15", "check16", "check17", "check18", "check18r", "check19",
                      "check20", "check21", "check22", "check23", "sweepk3", "check24", "check25", "check26",
                      "heads128", "check27", "check28", "check29", "knee64c", "check30", "check31", "check32",
                      "check33", "check34", "check35", "check36", "check37", "check38", "check39", "check40",
                      "check41", "check42", "check43", "check44", "check45", "check46", "check47",
                      "check48", "check49", "check50", "check51", "check52",
                      "check53", "check54", "check55", "check56", "check57", "check58", "check59", "check60",
                      "check61", "check62", "check63", "check64", "check65",
                      "check66", "check67", "check68", "check69", "check70", "knee32", "check71", "check72", "check73",
                      "check74", "check75", "knee96c", "check76", "check77",
                      "k2div16", "check78", "check79", "check80", "check81", "heads256", "check82", "check83",
                      "check84", "check85", "check86", "check87", "check88", "check89", "check90",
                      "check91", "check92", "check93", "check94", "check95", "k3few", "k3few2",
                      "check96", "check97", "check98", "check99", "check100", "check101", "check102",
                      "check103", "check104", "check105", "check106", "check107", "check108",
                      "check109", "check110", "check111", "check112", "check113", "check114",
                      "apart160", "check115", "apart160r", "check116", "check117", "check118", "padded",
                      "padded2", "check119", "check120", "check121", "check122", "apart256", "check123",
                      "check124", "waves256", "check125", "check126", "check127", "check128", "check129",
                      "check130", "apartkv", "check131", "check132", "check133", "check134", "check135",
                      "check136", "check137", "check138", "check139", "check140", "check141", "check142",
                      "check143", "check144", "check145", "check146")


def runs_from(first: str) -> tuple:
    """The recorded runs measured from ``first`` on (RUNS_SINCE_CHECK13's tail)."""
    return RUNS_SINCE_CHECK13[RUNS_SINCE_CHECK13.index(first):]


ROLL_HELD_OUT = runs_from("check13")


def recorded_rolling_rows(folder, held_out=False, gpus=("h100", "h200"), held=ROLL_HELD_OUT):
    """:func:`rolling_rows` of every ``<gpu>-l2*.json`` run in ``folder`` (``figures/gpu``): the fit set
    (``held_out=False``: every run but ``held``, kernel 2's rows only of K3_EARLIER_RUNS) or the held-out
    runs."""
    def skip(name):
        return (name in held) != held_out

    rows = []
    for name, gpu, result in recorded_runs(folder, gpus, skip):
        impls = ("flashref2",) if name in K3_EARLIER_RUNS else ("flashref", "flashref2")
        rows += rolling_rows(result, gpu, impls)
    return rows


def fit_rolling(rows, grid=None):
    """Fit ``C_roll`` and ``kappa_roll`` (the other parameters as in PARAMS and GPU_PARAMS) on ``rows`` of
    :func:`rolling_rows`, each predicted for its GPU with the kernel 3 tiles its run recorded, minimising the mean
    squared log-ratio. An exhaustive search over ``grid`` (``ROLL_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (flashref's causal calls)")
    return _fit_kernels(rows, _is_rolling, grid or ROLL_GRID)


# (fitted before the knee of three CTAs an SM, C_rdrift3, with that rule off: kernel 3's causal d = 64 forward in it)
RDRIFT_GRID = dict(C_rdrift=[MB * c for c in range(24, 49)], rdrift3_rule=[0])
# the recorded runs fit_rolling_drift leaves out: check22 on (knee64c, which found the drift's own knee, among them),
# and those measured after the fit (check30 on)
RDRIFT_HELD_OUT = runs_from("check22")


def fit_rolling_drift(rows, grid=None):
    """Fit ``C_rdrift`` (the other parameters as in PARAMS and GPU_PARAMS) on ``rows`` of :func:`rolling_rows`
    (:func:`recorded_rolling_rows` with ``held=RDRIFT_HELD_OUT``; ``grid``: ``RDRIFT_GRID``). Returns (params,
    loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (flashref's causal calls)")
    return _fit_kernels(rows, _is_rolling, grid or RDRIFT_GRID)


# fit_staggered's runs for the d = 64 set with miss_cap: every H100 run but check45 on (drawn after it)
CAP_HELD_OUT = runs_from("check45")
LAG_HELD_OUT = runs_from("check47")  # the runs measured after the shared set's fit with lag_other (LAG_GRID)


RDRIFT3_GRID = dict(C_rdrift3=[MB * c for c in range(16, 42, 2)], kappa_rdrift3=[2, 3, 4, 6, 8, 12, 16])
# the H200's own capacity for that drift (dram.RDRIFT3_GPU), its sharpness the fit's above, on its rows of the runs
# that found it (check41-check45, measured 2026-11-28); its runs after them held out
H200_RDRIFT3_GRID = dict(C_rdrift3=RDRIFT3_GRID["C_rdrift3"])
H200_RDRIFT3_FIT_ON = ("check41", "check42", "check43", "check44", "check45")
# fit_rolling_drift3's rows: kernel 3's rolling rows of every run recorded up to check43 (the rule was found on the
# runs from check19 on, so no earlier run can fit it alone: its test is check44, drawn after it)
RDRIFT3_HELD_OUT = runs_from("check44")


def recorded_rdrift3_rows(folder, held_out=False, gpus=("h100", "h200")):
    """Kernel 3's rows whose rolling grid runs three CTAs an SM (what ``C_rdrift3`` and ``kappa_rdrift3`` change;
    kernel 3's earlier launches left out, as :func:`recorded_rolling_rows` leaves them): the fit set of
    :func:`fit_rolling_drift3` (every run but RDRIFT3_HELD_OUT) or the held-out runs."""
    rows = _held_rows(folder, held_out, gpus, RDRIFT3_HELD_OUT, _is_rolling3, also_skip=K3_EARLIER_RUNS)
    return [row for row in rows if row[0] == "flashref"]


def _is_rolling3(item):
    """A rolling grid of three or more CTAs an SM: what ``C_rdrift3`` and ``kappa_rdrift3`` change."""
    return _is_rolling(item) and item[1].resident // item[1].sms >= 3


def fit_rolling_drift3(rows, grid=None):
    """Fit ``C_rdrift3`` and ``kappa_rdrift3`` (the other parameters as in PARAMS and GPU_PARAMS) on ``rows`` of
    :func:`recorded_rdrift3_rows` (``grid``: ``RDRIFT3_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (kernel 3's causal d = 64 forward)")
    return _fit_kernels(rows, _is_rolling3, grid or RDRIFT3_GRID)


# FlashAttention-2's d = 256 walk's own miss_cap on the H100 (dram.STAGGERED_D256): fitted on its causal rows of the
# runs measured before check52 (check5's; check52 and check53 found the rule), every run from check52 on held out
D256_CAP_GRID = dict(miss_cap=[0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75])
D256_FIT_ON = ("check5",)
D256_HELD_OUT = runs_from("check52")


def recorded_d256_rows(folder, held_out=False, gpu="h100"):
    """The rows of ``gpu``'s recorded runs whose call launches FlashAttention-2's d = 256 walk (its causal forward on
    64 x 64 tiles): the fit set of :func:`fit_d256_cap` (the runs of D256_FIT_ON) or the runs held out of it
    (D256_HELD_OUT; every run between is in neither)."""
    rows = _held_rows(folder, held_out, (gpu,), D256_HELD_OUT, _is_staggered)
    return [r for r in rows if _d256_tiles(r[3]["d"]) and (held_out or r[1].split("_")[0] in D256_FIT_ON)]


def fit_d256_cap(rows, grid=None):
    """Fit the d = 256 walk's ``miss_cap`` (the other parameters as :func:`dram` takes them: PARAMS, the GPU's and its
    shared staggered set) on ``rows`` of :func:`recorded_d256_rows` (``grid``: ``D256_CAP_GRID``). Returns (params,
    loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (FlashAttention-2's causal d = 256 calls)")
    return _fit_kernels(rows, _is_staggered, grid or D256_CAP_GRID)


# FlashAttention-2's walk with one CTA an SM on the H200 (dram.STAGGERED_ONE_CTA): its sharpness and miss_cap fitted
# on the rows of check61 and of check62's d = 192 shapes (the kernel's own head dim); check62's d = 160 shapes (the
# kernel at a head dim it predicates) held out
ONE_CTA_GRID = dict(kappa_stag=[4, 6, 7, 8, 10, 12, 16, 24], miss_cap=[0.65, 0.75, 0.85, 0.9, 0.95, 1.0])
ONE_CTA_RUNS = ("check61", "check62")


def recorded_one_cta_rows(folder, held_out=False, gpu="h200"):
    """The rows of ``gpu``'s runs of ONE_CTA_RUNS whose call launches FlashAttention-2's walk with one CTA an SM (its
    causal forward at the d = 192 kernel's head dims): the fit set of :func:`fit_one_cta` (check61's, and check62's at
    d = 192) or the rows held out of it (check62's at other head dims). Runs measured after the fit are not in either:
    they are blind sets of their own."""
    runs = recorded_runs(folder, (gpu,), lambda name: name not in ONE_CTA_RUNS)  # only those runs are read
    rows = [r for _, g, result in runs for r in _launching(result, g, _is_staggered) if _one_cta_tiles(r[3]["d"])]
    return [r for r in rows if (r[1].startswith("check62_") and r[3]["d"] != 192) == held_out]


def fit_one_cta(rows, grid=None):
    """Fit the one-CTA walk's ``kappa_stag`` and ``miss_cap`` (the other parameters as :func:`dram` takes them:
    PARAMS, the GPU's and its shared staggered set) on ``rows`` of :func:`recorded_one_cta_rows` (``grid``:
    ``ONE_CTA_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (FlashAttention-2's causal calls with one CTA an SM)")
    return _fit_kernels(rows, _is_staggered, grid or ONE_CTA_GRID)


SWAVES_GRID = dict(spread_waves=[1, 1.5, 2, 3, 4, 5, 6, 8, 12, 16])
# the recorded runs fit_spread_waves leaves out: check22 on (knee64c and check30, which found the rule, among them),
# and those measured after the fit (check32 on)
SWAVES_HELD_OUT = RDRIFT_HELD_OUT


def recorded_staggered_rows(folder, held_out=False, gpus=("h100", "h200")):
    """The rows of every ``<gpu>-l2*.json`` run in ``folder`` whose call launches a staggered walk (FlashAttention-2's
    causal forward, forward and forward+backward): the fit set of :func:`fit_spread_waves` (every run but
    SWAVES_HELD_OUT) or the held-out runs."""
    return _held_rows(folder, held_out, gpus, SWAVES_HELD_OUT, _is_staggered)


def fit_spread_waves(rows, grid=None):
    """Fit ``spread_waves`` (the other parameters as :func:`dram` takes them: PARAMS, the GPU's and, at d = 64, the
    d = 64 staggered set) on ``rows`` of :func:`recorded_staggered_rows` (:func:`_fit_kernels`; ``grid``:
    ``SWAVES_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (FlashAttention-2's causal calls)")
    return _fit_kernels(rows, _is_staggered, grid or SWAVES_GRID)


APART_GRID = dict(apart_steps=[0.0, 1e4, 2e4, 3e4, 4e4, 5e4, 6e4, 7e4, 8e4],
                  apart_tau=[2e4, 3e4, 4e4, 5e4, 6e4, 8e4, 1e5, 1.2e5, 1.6e5])
# the recorded runs fit_apart leaves out: check22 on (of the rows that found the rule, check21's is in the fit set,
# check28's and check36's held out)
APART_HELD_OUT = RDRIFT_HELD_OUT


def _is_apart(item):
    """A lockstep kernel whose passes come apart with the steps it has run (``ScanKernel.comes_apart``, its CTAs
    scanning the same tiles): what ``apart_steps`` and ``apart_tau`` change."""
    return item[0] == "scan" and not item[2] and item[1].comes_apart and item[1].same_scans


def recorded_apart_rows(folder, held_out=False, gpus=("h100", "h200")):
    """The rows of every ``<gpu>-l2*.json`` run in ``folder`` whose call launches FlashAttention-2's non-causal d = 64
    backward (forward+backward): the fit set of :func:`fit_apart` (every run but APART_HELD_OUT) or the held-out
    runs."""
    return _held_rows(folder, held_out, gpus, APART_HELD_OUT, _is_apart)


def fit_apart(rows, grid=None):
    """Fit ``apart_steps`` and ``apart_tau`` on ``rows`` of :func:`recorded_apart_rows` (:func:`_fit_kernels`;
    ``grid``: ``APART_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (FlashAttention-2's non-causal d = 64 backward)")
    return _fit_kernels(rows, _is_apart, grid or APART_GRID)


HEAD_GRID = dict(head_reads=[0.5, 1, 1.5, 2, 2.5, 3, 4, 5])
# the recorded runs fit_head_reads leaves out: check22 on (check23 and check37, whose misses found the rule, among them;
# check12's, which found it too, is in the fit set)
HEAD_HELD_OUT = RDRIFT_HELD_OUT


def _is_rolling_in(item):
    """A lockstep kernel whose heads after the first roll in (``ScanKernel.heads_roll_in``): what ``head_reads``
    changes."""
    return item[0] == "scan" and not item[2] and item[1].heads_roll_in


def recorded_head_rows(folder, held_out=False, gpus=("h100", "h200")):
    """The rows of every ``<gpu>-l2*.json`` run in ``folder`` whose call launches FlashAttention-2's non-causal d = 64
    forward: the fit set of :func:`fit_head_reads` (every run but HEAD_HELD_OUT) or the held-out runs."""
    return _held_rows(folder, held_out, gpus, HEAD_HELD_OUT, _is_rolling_in)


def fit_head_reads(rows, grid=None):
    """Fit ``head_reads`` on ``rows`` of :func:`recorded_head_rows` (:func:`_fit_kernels`; ``grid``: ``HEAD_GRID``).
    Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (FlashAttention-2's non-causal d = 64 forward)")
    return _fit_kernels(rows, _is_rolling_in, grid or HEAD_GRID)


def _fit_kernels(rows, varies, grid):
    """The search of the fits of one kind of kernel (:func:`fit_rolling`, :func:`fit_rolling_drift`, :func:`fit_sync`,
    :func:`fit_drift_ramp`, :func:`fit_spread_waves`, :func:`fit_apart`, :func:`fit_head_reads`):
    ``rows`` of (impl, shape, mode, shape kwargs, measured bytes, gpu, kernel 3's recorded tiles), each predicted for
    its GPU with the tiles its run recorded and the parameters :func:`dram` gives the call (:func:`_params`: PARAMS,
    the GPU's, and FlashAttention-2's d = 64 staggered set for its causal calls); the kernels ``varies(item)`` are all
    that ``grid`` changes, so the rest of each call is predicted once. Minimises the mean squared log-ratio; returns
    (params, loss)."""
    parts = []
    # what a grid fixes (one value) builds each row's parameters: a rule switch that dram._params reads (the L2 scaling,
    # a GPU's or a head dim's own set) acts there, not where a point overrides the parameters built
    then = {name: values[0] for name, values in grid.items() if len(values) == 1} or None
    for impl, _, mode, kw, m, gpu, info in rows:
        base = _params(gpu, kw["d"], impl == "sdpa_flash" and kw["causal"], then)
        with S.kernel3_as_recorded(info):
            parts.append((_split(impl, mode, kw, gpu, base, varies), base, m))

    def loss(point):
        return sum(math.log1p(_split_total(part, {**base, **point}) / m - 1) ** 2
                   for part, base, m in parts) / len(rows)

    return _grid_search(grid, loss, PARAMS)


def recorded_runs(folder, gpus=("h100", "h200"), skip=lambda name: False):
    """(run name, gpu, result) of every recorded ``<gpu>-l2*.json`` run in ``folder``, but those whose name
    ``skip(name)`` rejects (by default none)."""
    for path in sorted(p for g in gpus for p in Path(folder).glob(f"{g}-l2*.json")):
        name = path.stem.split("-l2-", 1)[1] if "-l2-" in path.stem else ""
        if not path.name.endswith("-predicted.json") and not skip(name):
            yield name, path.name[:4], _parsed_run(path)


# Each recorded run's JSON by the digest of its bytes. The scorecard, each rule's held-out rows and notebook 08 read
# the same 180 files several times over (parsing them took 3 s of notebook 08's 45); reading the bytes is cheap, and
# a file rewritten since hashes anew. Callers read a run and never change it.
_PARSED: dict[bytes, dict] = {}


def _parsed_run(path: Path) -> dict:
    """A recorded run's JSON, parsed once a process (:data:`_PARSED`)."""
    text = path.read_bytes()
    key = hashlib.blake2b(text, digest_size=16).digest()
    if key not in _PARSED:
        try:
            _PARSED[key] = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"folder: {path.name} is not JSON ({e})") from None
    return _PARSED[key]


# Runs a GPU measured after every fit of the model, of sets predicted long before (the H200's check37-check44,
# measured 2026-11-28): held out of every fit, whatever their name's place in RUNS_SINCE_CHECK13
MEASURED_AFTER_THE_FITS = {"h100": (), "h200": ("check37", "check38", "check39", "check40", "check41", "check42",
                                                   "check43", "check44")}


def _held_rows(folder, held_out, gpus, held, varies, also_skip=()):
    """:func:`_launching` rows (kernels ``varies(item)``) of every recorded run in ``folder`` of ``gpus``: the fit set
    (``held_out=False``: every run but those named in ``held`` and those MEASURED_AFTER_THE_FITS) or the held-out runs;
    runs in ``also_skip`` in neither."""
    out = []
    for gpu in gpus:
        def skip(name, gpu=gpu):
            return name in also_skip or (name in held or name in MEASURED_AFTER_THE_FITS[gpu]) != held_out

        out += [row for _, g, result in recorded_runs(folder, (gpu,), skip) for row in _launching(result, g, varies)]
    return out


def _launching(result, gpu, varies):
    """:func:`measured_rows` of a recorded run whose call launches a kernel ``varies(item)``, as :func:`_fit_kernels`
    takes them (kernel 3's tiles as the run recorded them)."""
    info = S.kernel3_info(result)
    with S.kernel3_as_recorded(info):
        return [(impl, shape, mode, kw, m, gpu, info) for impl, shape, mode, kw, m in measured_rows(result)
                if any(varies(item) for item in _kernels(impl, mode, kw["B"], kw["H"], kw["Nq"], kw["Nk"], kw["d"],
                                                         kw["causal"], 2, preset(gpu).sms, True))]


SYNC_GRID = dict(C_sync=[MB * c for c in range(40, 66, 2)], kappa_sync=[2, 3, 4, 6, 8, 12, 16, 24, math.inf])
# the recorded runs fit_sync leaves out: those measured after the fit (check23 on, and the knee sweep of today's
# kernel 3; heads128 among them measured SDPA flash alone, and has no synced row)
SYNC_HELD_OUT = runs_from("check23")


def _is_synced(item):
    """A pass that a barrier starts together (``ScanKernel.synced``): what ``C_sync`` and ``kappa_sync`` change."""
    return item[0] == "scan" and not item[2] and item[1].synced


def recorded_synced_rows(folder, held_out=False, gpus=("h100", "h200")):
    """The rows of every ``<gpu>-l2*.json`` run in ``folder`` whose call launches a synced pass (kernel 3's rounds
    with a barrier, as the run recorded its tiles), as (impl, shape, mode, shape kwargs, measured bytes, gpu, kernel
    3's recorded tiles): the fit set of :func:`fit_sync` (``held_out=False``: every run but SYNC_HELD_OUT and
    kernel 3's earlier launches, K3_EARLIER_RUNS) or the held-out runs."""
    return _held_rows(folder, held_out, gpus, SYNC_HELD_OUT, _is_synced, also_skip=K3_EARLIER_RUNS)


def fit_sync(rows, grid=None):
    """Fit ``C_sync`` and ``kappa_sync`` (the other parameters as in PARAMS and GPU_PARAMS) on ``rows`` of
    :func:`recorded_synced_rows` (:func:`_fit_kernels`; ``grid``: ``SYNC_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (calls with a synced pass)")
    return _fit_kernels(rows, _is_synced, grid or SYNC_GRID)


RAMP_GRID = dict(drift_waves=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16])
# the recorded runs fit_drift_ramp leaves out: those measured after the fit
RAMP_HELD_OUT = runs_from("check25")


def _is_ramped(item):
    """A lockstep kernel whose SM's CTAs drift apart over its first waves (``ScanKernel.drift_ramp``): what
    ``drift_waves`` changes."""
    return item[0] == "scan" and not item[2] and item[1].drift_ramp


def recorded_ramp_rows(folder, held_out=False, gpus=("h100", "h200")):
    """The rows of every ``<gpu>-l2*.json`` run in ``folder`` whose call launches a kernel with a drift ramp
    (FlashAttention-2's non-causal forward at a head dim other than 64), as (impl, shape, mode, shape kwargs, measured
    bytes, gpu, kernel 3's recorded tiles): the fit set of :func:`fit_drift_ramp` (``held_out=False``: every run but
    RAMP_HELD_OUT) or the held-out runs."""
    return _held_rows(folder, held_out, gpus, RAMP_HELD_OUT, _is_ramped)


def fit_drift_ramp(rows, grid=None):
    """Fit ``drift_waves`` (the other parameters as in PARAMS and GPU_PARAMS) on ``rows`` of
    :func:`recorded_ramp_rows` (:func:`_fit_kernels`; ``grid``: ``RAMP_GRID``). Returns (params, loss)."""
    if not rows:
        raise ValueError("rows: no measured rows to fit (calls with a drift ramp)")
    return _fit_kernels(rows, _is_ramped, grid or RAMP_GRID)


ROWS_GRID = dict(C_rows=[MB * c for c in range(16, 65)], kappa_rows=[2, 3, 4, 6, 8, 12, 16, 24])


def softmax_rows(result):
    """(Nk, S bytes, measured DRAM reads) of every eager forward softmax kernel in a ``profile-l2`` JSON that records
    its kernels (``python -m flashref profile-l2 --groups softmax_rows``), the median of its repeats, fp16."""
    shapes = {r["shape"]: r for r in result["rows"] if r.get("impl") == "eager" and not r.get("error")}
    reads = {}
    for k in result.get("kernels", []):
        if k.get("impl") == "eager" and k.get("phase") == "fwd" and "SoftMaxForward" in k["name"] \
                and k["shape"] in shapes:
            reads.setdefault(k["shape"], []).append(k["dram__bytes_read.sum"])
    out = []
    for shape, values in reads.items():
        r = shapes[shape]
        Nk = r.get("Nk", r["N"])
        out.append((Nk, r["B"] * r["H"] * r["N"] * Nk * 2, float(np.median(values))))
    return sorted(out)


def fit_softmax_rows(result, grid=None, sms=S.SMS):
    """Fit ``C_rows`` and ``kappa_rows`` on the eager forward softmax kernels of ``result`` (:func:`softmax_rows`):
    an exhaustive search over ``grid`` (``ROWS_GRID``) minimising the mean squared log-ratio of the predicted to the
    measured reads. Returns (params, loss)."""
    grid = grid or ROWS_GRID
    rows = softmax_rows(result)
    if not rows:
        raise ValueError("result: no eager forward softmax kernels recorded (profile-l2 --groups softmax_rows)")

    def loss(point):
        p, total = {**PARAMS, **point}, 0.0
        for Nk, Sb, measured in rows:
            item = _softmax(Sb, Nk, 2, sms)
            r = Sb if item[0] == "stream" else predict_kernels([item], 1, Nk, p)[0][1]
            total += math.log(r / measured) ** 2
        return total / len(rows)

    return _grid_search(grid, loss, PARAMS)
