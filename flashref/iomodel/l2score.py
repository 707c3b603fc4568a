"""Every recorded L2 measurement against :func:`flashref.iomodel.dram`: the scorecard, what no model can reach, and
what each rule buys.

``python -m flashref l2-score`` prints all three. The scorecard predicts every row of every ``profile-l2`` run in
``figures/gpu/`` (each with the kernel 3 tiles its run recorded; a shape measured several times in one run is one
row, the median of its repeats) and counts the rows within ±25% by kernel:

* ``eager``, ``sdpa_flash``: standard attention as PyTorch runs it, and FlashAttention-2 (SDPA's flash backend);
* ``kernel 2``: flashref's Triton kernel (``flashref2``), every flashref row recorded before kernel 3 became the
  default among them;
* ``kernel 3``: flashref's default kernel as it runs today;
* ``kernel 3, earlier launches``: kernel 3's rows of the runs measured before its launches took their present form
  (``l2fit.K3_EARLIER_RUNS``: older tiles, or no barrier between rounds past the knee, where its waves came apart
  by amounts that change from run to run).

:func:`out_of_reach` bounds what any model could score: the calls whose own measurements lie more than 5/3 apart
(where one wave of CTAs came apart by amounts that change from run to run), so that no single number is within
±25% of every one of them, and the fewest of those measurements any prediction must leave outside the band.

The ablation turns each rule of the model off in turn (its ``*_rule`` switch, which gives back the model as it
was before the rule: the numbers fitted then, the predictions written then) and counts again. A rule that buys
nothing on the recorded rows would be a fitted number too many; every rule was added where a measurement missed
and kept where it held on runs measured after its fit, so the rows it buys are listed both over every row and
over the runs held out of its fit.
"""

from __future__ import annotations

import argparse
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import schedule as S  # noqa: N812
from .._numbers import positive_int
from . import l2fit

D = importlib.import_module("flashref.iomodel.dram")  # the module (iomodel.dram is the function)

BAND = 0.25  # the issue's band: predicted within ±25% of what Nsight Compute measured
CLASSES = ("eager", "sdpa_flash", "kernel 2", "kernel 3", "kernel 3, earlier launches")


def _folder(folder=None):
    """``folder`` (default: ``figures/gpu/``), checked to be one."""
    folder = Path(folder) if folder is not None else Path(__file__).resolve().parents[2] / "figures" / "gpu"
    if not folder.is_dir():
        raise ValueError(f"folder: {folder} is not a folder")
    return folder


@dataclass(frozen=True)
class Row:
    """One recorded measurement: the run, the GPU, the kernel class (``CLASSES``), the call, and the DRAM bytes
    Nsight measured (the median of the run's repeats)."""
    run: str
    gpu: str
    kernel: str
    impl: str
    shape: str
    mode: str
    kw: dict
    measured: float
    info: object  # the run's kernel 3 tiles (schedule.kernel3_info), to predict it with them
    measured_l2: float | None = None  # Nsight's lts__t_bytes.sum (the median of the repeats), where recorded


def _kernel(impl, run):
    if impl == "flashref2":
        return "kernel 2"
    if impl == "flashref":
        return "kernel 3, earlier launches" if run in l2fit.K3_EARLIER_RUNS else "kernel 3"
    return impl


def recorded_rows(folder=None, gpus=("h100", "h200")) -> list[Row]:
    """Every row of every recorded ``profile-l2`` run in ``folder`` (default: ``figures/gpu/``)."""
    out = []
    for run, gpu, result in l2fit.recorded_runs(_folder(folder), gpus):
        try:  # a file that is not a profile-l2 run: one error naming it, not a KeyError from deep inside
            info = S.kernel3_info(result)
            rows = l2fit.measured_rows(result)
            for impl, _, _, kw, measured in rows:
                for name in ("B", "H", "Nq", "Nk", "d"):
                    positive_int(kw[name], name)
                D._check_shape(impl, **kw)  # a shape the model refuses (d = 300), named here and not at its prediction
                if not (math.isfinite(measured) and measured > 0):
                    raise ValueError(f"a measured total of {measured!r} bytes")
            l2 = _measured_l2(result)
            bad = [v for v in l2.values() if not (math.isfinite(v) and v > 0)]
            if bad:
                raise ValueError(f"a measured L2 total of {bad[0]!r} bytes")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            name = f"{gpu}-l2{'-' + run if run else ''}.json"
            raise ValueError(f"folder: {name} is not a profile-l2 run ({type(e).__name__}: {e})") from None
        out += [Row(run, gpu, _kernel(impl, run), impl, shape, mode, kw, measured, info, l2.get((impl, shape, mode)))
                for impl, shape, mode, kw, measured in rows]
    return out


def _measured_l2(result) -> dict:
    """{(impl, shape, mode): the median of its repeats' L2 bytes} for the rows that recorded them (runs before the
    L2 metric, and the metric sets of the long shapes, did not)."""
    seen = {}
    for r in result["rows"]:
        for mode in l2fit.MODES:
            m = r.get(mode)
            if not r.get("error") and isinstance(m, dict) and m.get("l2_bytes"):
                seen.setdefault((l2fit.recorded_impl(r), r["shape"], mode), []).append(float(m["l2_bytes"]))
    return {k: float(np.median(v)) for k, v in seen.items()}


def predictions(rows, params=None) -> list:
    """The model's prediction (``dram``'s, DRAM and L2 bytes) of each row, with the tiles its run recorded
    (``params``: overrides of ``dram.PARAMS``, as ``dram(params=...)``)."""
    out = []
    for r in rows:
        with S.kernel3_as_recorded(r.info):
            out.append(D.dram(r.impl, r.mode, **r.kw, gpu=r.gpu, params=params))
    return out


def predict(rows, params=None) -> np.ndarray:
    """The model's DRAM bytes for each row (``params`` as :func:`predictions`')."""
    return np.array([p.total_bytes for p in predictions(rows, params)], dtype=float)


def errors(rows, params=None) -> np.ndarray:
    """predicted / measured - 1 of each row."""
    return predict(rows, params) / np.array([r.measured for r in rows]) - 1


def l2_ratios(rows, predicted=None) -> list[dict]:
    """The model's ``l2_bytes`` (traffic between L2 and the SMs) over Nsight's ``lts__t_bytes.sum``, per kernel
    class and mode, for the rows that recorded it: how many, the median, the 10th and 90th percentiles. No parameter
    was fitted to these bytes: a scan kernel's are the tiles its CTAs load and store, a streaming kernel's what it
    reads and writes (eager's matmuls: each operand once, as the two-level count has it). ``predicted``: the rows'
    :func:`predictions`, where the caller has them already (one pass of the model, not two)."""
    predicted = predictions(rows) if predicted is None else predicted
    kept = [(p.l2_bytes, r) for p, r in zip(predicted, rows, strict=True) if r.measured_l2]
    model, rows = [m for m, _ in kept], [r for _, r in kept]
    out = []
    for kernel in CLASSES:
        for mode in l2fit.MODES:
            ratio = np.array([m / r.measured_l2 for m, r in zip(model, rows) if (r.kernel, r.mode) == (kernel, mode)])
            if len(ratio):
                out.append(dict(kernel=kernel, mode=mode, rows=len(ratio), median=float(np.median(ratio)),
                                p10=float(np.percentile(ratio, 10)), p90=float(np.percentile(ratio, 90))))
    return out


def _check_errs(rows, errs):
    errs = np.asarray(errs, dtype=float)
    if errs.shape != (len(rows),):
        raise ValueError(f"errs: expected one error per row ({len(rows)}), got shape {errs.shape}")
    return errs


def scorecard(rows, errs) -> list[dict]:
    """Per kernel class (and ``"all"``): rows, rows within the band, mean and largest |error|."""
    errs = _check_errs(rows, errs)
    out = []
    for kernel in CLASSES + ("all",):
        e = np.array([abs(x) for r, x in zip(rows, errs) if kernel in ("all", r.kernel)])
        if len(e):
            out.append(dict(kernel=kernel, rows=len(e), within=int(np.sum(e <= BAND)), mean=float(e.mean()),
                            worst=float(e.max())))
    return out


# PyTorch's kernels (eager's ops, FlashAttention-2's CUDA kernels) are the same in every run that recorded the same
# torch; flashref's changed from run to run (tiles, launch order, barriers), so only one run's repeats are one call
PYTORCH = ("eager", "sdpa_flash")


def _covered(values) -> int:
    """The most of ``values`` that one prediction P can hold within the band: P within ±BAND of v means
    P/(1+BAND) <= v <= P/(1-BAND), a window of ratio (1+BAND)/(1-BAND) = 5/3 in v. The best window starts at some
    value (slide its lower edge up to the lowest value it holds), so trying each value as the lowest is enough."""
    v = np.sort(np.asarray(values, dtype=float))
    ratio = (1 + BAND) / (1 - BAND)
    # for each lowest value v[i], the values up to v[i]·ratio (searchsorted: the first index past it)
    return int(np.max(np.searchsorted(v, v * ratio, side="right") - np.arange(len(v))))


def out_of_reach(folder=None, gpus=("h100", "h200")) -> list[dict]:
    """The calls whose own measurements no single prediction can hold within ±25%: the same call (one GPU, one
    kernel, one shape; for flashref's kernels, in one run) measured values more than (1+BAND)/(1-BAND) = 5/3 apart.
    For each: the measurements (every repeat), their spread (largest / smallest) and ``outside``, how many of them
    lie outside the band of any prediction whatever (the fewest a perfect deterministic model would miss)."""
    groups = {}
    for run, gpu, result in l2fit.recorded_runs(_folder(folder), gpus):
        torch = result.get("metadata", {}).get("torch")
        for (impl, _shape, mode), (kw, values) in l2fit.repeats(result).items():
            key = (gpu, impl, tuple(sorted(kw.items())), mode, torch if impl in PYTORCH else run)
            groups.setdefault(key, ([], set()))
            groups[key][0].extend(values)
            groups[key][1].add(run)
    out = []
    for (gpu, impl, kw, mode, _), (values, runs) in groups.items():
        outside = len(values) - _covered(values)
        if outside:
            out.append(dict(gpu=gpu, impl=impl, kw=dict(kw), mode=mode, runs=sorted(runs), measured=list(values),
                            spread=max(values) / min(values), outside=outside))
    return out


@dataclass(frozen=True)
class Rule:
    """A rule of the model: the switch that turns it off, the fitted numbers it added (how many, and which: a
    number fitted per GPU counts once for each; 0: a choice read from the hardware or the source), the
    implementations whose kernels it can change, and the first run held out of its fit (None: fitted before the
    runs were listed in order, ``l2fit.RUNS_SINCE_CHECK13``)."""
    name: str
    off: dict
    fitted: int
    names: str
    impls: tuple
    held_from: str | None = None


FA2 = ("sdpa_flash",)
OURS = ("flashref", "flashref2")
RULES = (
    Rule("writes a small kernel keeps in L2", dict(small_writes=0), 0, "", D.IMPLS),
    Rule("FA2's forward splits a small grid's keys", dict(fa2_split=0), 0, "", FA2),
    Rule("a diagonal-start wave in one partition", dict(partitions_diagonal=2), 0, "", OURS),
    Rule("eager's softmax on long rows", dict(softmax_passes=0), 2, "C_rows kappa_rows", ("eager",)),
    Rule("the walk's other heads (overlap)", dict(overlap_rule=0), 2, "STAGGERED_D64's overlap (H100, H200)", FA2),
    Rule("the walk's heads spread", dict(spread_rule=0), 4, "spread spread_time, the shared sets' overlap (H100, H200)",
         FA2, "check16"),
    Rule("a rolling grid's knee", dict(rolling_rule=0), 2, "C_roll kappa_roll", OURS, "check13"),
    Rule("a synced round's knee", dict(sync_rule=0), 2, "C_sync kappa_sync", OURS, "check23"),
    Rule("an SM's CTAs drift apart over waves", dict(drift_waves=1.0), 1, "drift_waves", FA2, "check25"),
    Rule("the drift in a rolling grid", dict(rdrift_rule=0), 1, "C_rdrift", OURS, "check22"),
    Rule("the spread past spread_waves", dict(swaves_rule=0), 1, "spread_waves", FA2, "check22"),
    Rule("FA2's d = 64 backward comes apart", dict(apart_rule=0), 2, "apart_steps apart_tau", FA2, "check22"),
    Rule("FA2's d = 64 forward: heads roll in", dict(head_rule=0), 1, "head_reads", FA2, "check22"),
    Rule("the drift where three CTAs share an SM", dict(rdrift3_rule=0), 2, "C_rdrift3 kappa_rdrift3", OURS,
         "check44"),
    Rule("the H200's own drift of three CTAs an SM", dict(rdrift3_gpu_rule=0), 1, "RDRIFT3_GPU['h200'] C_rdrift3",
         OURS, "check46"),
    Rule("a cap on the d = 64 walk's misses", dict(cap_rule=0), 2, "STAGGERED_D64's miss_cap (H100, H200)", FA2,
         "check45"),
    Rule("the walk's lag over other heads' CTAs", dict(lag_rule=0), 4,
         "STAGGERED_SHARED's miss_cap spread (H100, H200)", FA2,
         "check47"),
    Rule("the H100's d = 256 walk's own miss cap", dict(d256_rule=0), 1, "STAGGERED_D256['h100'] miss_cap", FA2,
         "check52"),
    Rule("capacities scaled by the GPU's L2 (the H200's 60 MB)", dict(l2_scale_rule=0), 0, "", D.IMPLS, "check56"),
    Rule("the H200's one-CTA walk's own set", dict(one_cta_rule=0), 2, "STAGGERED_ONE_CTA['h200'] kappa_stag miss_cap",
         FA2, "check63"),
    Rule("kernel 3's rounds together short of its knee", dict(k3_rounds_rule=0), 0, "", OURS, "k3few"),
)
# All of them off at once: the lockstep passes (C_eff, kappa), the write residue (alpha, rho) and the staggered walk
# as first fitted, a shared set and a d = 64 set of three a GPU (C_stag, kappa_stag, lag; the switches pick them)
ALL_OFF = Rule("every rule above off", {k: v for rule in RULES for k, v in rule.off.items()},
               sum(rule.fitted for rule in RULES), "", D.IMPLS)


ABLATED = RULES + (ALL_OFF,)  # what the ablation switches off: each rule in turn, then all of them


_ABSENT = object()  # a name the resolved parameters lack (dram reads "partitions" with a default)


def _prediction_reads(r: Row):
    """Row ``r``'s prediction with the model whole, the parameters it resolved, and the names of those it read
    (``dram.dram_reads``)."""
    with S.kernel3_as_recorded(r.info):
        return D.dram_reads(r.impl, r.mode, **r.kw, gpu=r.gpu)


def _reads(r: Row, found=None):
    """Row ``r``'s error with the model whole, the parameters its prediction resolved, and the names of those it
    read (``found``: its :func:`_prediction_reads`, where the caller has them)."""
    prediction, whole, read = _prediction_reads(r) if found is None else found
    return prediction.total_bytes / r.measured - 1, whole, read


def _moves(off, whole, read) -> bool:
    """Whether the resolved parameters ``off`` differ from ``whole`` in a name of ``read``: where they do not, the
    prediction that read those names is the same with ``off`` (``dram.dram_reads``)."""
    return any(off.get(name, _ABSENT) != whole.get(name, _ABSENT) for name in read)


def scored(rows) -> tuple[np.ndarray, list, list]:
    """One pass of the model over ``rows``: each row's error with the model whole (as :func:`errors`), what its
    prediction read, which :func:`ablation` takes as ``reads``, and the prediction itself (:func:`predictions`'):
    the scorecard, the L2 bytes and the ablation from one prediction of each row (``l2-score --rules`` and the
    figures command use them together)."""
    found = [_prediction_reads(r) for r in rows]
    reads = [_reads(r, f) for r, f in zip(rows, found)]
    return np.array([e for e, _, _ in reads]), reads, [p for p, _, _ in found]


def ablation(rows, errs=None, rules=ABLATED, reads=None) -> list[dict]:
    """For each rule: the rows within the band with the model whole and with that rule off, over every row and
    over the runs held out of the rule's fit. A row is predicted again only where the rule can change it: a row of
    the rule's implementations (a rule changes no other kernel; tests/test_l2score.py checks it) whose prediction
    read a parameter the rule off changes (``dram.dram_reads``: a prediction that never read a name is the same
    whatever its value). ``reads``: :func:`scored`'s, where the caller has them."""
    if errs is not None:
        errs = _check_errs(rows, errs)
    if reads is not None and len(reads) != len(rows):
        raise ValueError(f"reads: expected one per row ({len(rows)}), got {len(reads)}")
    return _ablation(rows, errs, rules, [_reads(r) for r in rows] if reads is None else reads)


def _ablation(rows, errs, rules, reads) -> list[dict]:
    """:func:`ablation` with each row's :func:`_reads` at hand (``errs`` None: the whole model's errors, theirs)."""
    errs = np.array([e for e, _, _ in reads]) if errs is None else errs
    within = np.abs(errs) <= BAND
    offs = [errs.copy() for _ in rules]
    resolved = {}  # (rule, impl, d, causal, gpu): the parameters the call resolves with the rule off
    # Row by row, each rule off in turn (not rule by rule over every row): the staggered walk's schedule, which
    # dram keeps for the next call on the same kernel, is then laid out once a row instead of once a rule and row
    for i, (r, (_, whole, read)) in enumerate(zip(rows, reads)):
        for n, (off, rule) in enumerate(zip(offs, rules)):
            if r.impl not in rule.impls:
                continue
            key = (n, r.impl, r.kw["d"], r.kw["causal"], r.gpu)
            if key not in resolved:
                resolved[key] = D.resolved_params(r.impl, d=r.kw["d"], causal=r.kw["causal"], gpu=r.gpu,
                                                  params=rule.off)
            # a row whose prediction read no name the rule off changes is predicted as it was (dram_reads)
            if _moves(resolved[key], whole, read):
                off[i] = errors([r], rule.off)[0]
    out = []
    for rule, off in zip(rules, offs):
        within_off = np.abs(off) <= BAND
        held = (np.array([r.run in l2fit.runs_from(rule.held_from) for r in rows]) if rule.held_from
                else np.zeros(len(rows), bool))
        out.append(dict(rule=rule.name, fitted=rule.fitted, names=rule.names, rows=len(rows),
                        within=int(within.sum()), within_off=int(within_off.sum()),
                        mean=float(np.abs(errs).mean()), mean_off=float(np.abs(off).mean()),
                        held_rows=int(held.sum()), held_within=int(within[held].sum()),
                        held_within_off=int(within_off[held].sum())))
    return out


def main(argv=None) -> int:
    # the first paragraph (its one sentence runs over two lines)
    ap = argparse.ArgumentParser(prog="python -m flashref l2-score",
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--folder", type=Path, default=None, help="the recorded runs (default: figures/gpu/)")
    ap.add_argument("--rules", action="store_true", help="also the ablation: each rule off in turn")
    args = ap.parse_args(argv)
    try:
        rows = recorded_rows(args.folder)
    except ValueError as e:
        ap.error(f"--{e}")
    if not rows:
        ap.error(f"--folder: no recorded profile-l2 runs in {args.folder}")
    # one pass of the model over the rows gives the errors, the L2 bytes and, with --rules, what each prediction read
    # (the ablation's)
    if args.rules:
        errs, reads, predicted = scored(rows)
    else:
        predicted = predictions(rows)
        errs = np.array([p.total_bytes for p in predicted]) / np.array([r.measured for r in rows]) - 1
    print(f"{len({(r.gpu, r.run) for r in rows})} recorded runs, {len(rows)} rows; within ±{BAND:.0%}:")
    for s in scorecard(rows, errs):
        print(f"  {s['kernel']:27} {s['within']:5d} of {s['rows']:5d}   mean |error| {s['mean']:6.1%}"
              f"   largest {s['worst']:7.1%}")
    print("\nL2 bytes (traffic between L2 and the SMs, nothing fitted to it), model / Nsight's lts__t_bytes.sum:")
    for s in l2_ratios(rows, predicted):
        print(f"  {s['kernel']:27} {s['mode']:7} {s['rows']:5d} rows   median {s['median']:5.2f}"
              f"   10th-90th percentile {s['p10']:.2f}-{s['p90']:.2f}")
    reach = out_of_reach(args.folder)
    print(f"\nOut of reach of any prediction: {sum(c['outside'] for c in reach)} measurements of {len(reach)} calls,"
          f" where one call measured values more than {(1 + BAND) / (1 - BAND):.3g}x apart:")
    for c in reach:
        kw = c["kw"]
        print(f"  {c['gpu']} {c['impl']:10} {kw['B']}x{kw['H']}x{kw['Nq']}"
              f"{'' if kw['Nk'] == kw['Nq'] else 'x' + str(kw['Nk'])} d={kw['d']}{' causal' if kw['causal'] else ''}"
              f" {c['mode']:7} {len(c['measured'])} measured in {', '.join(c['runs'])}: {c['spread']:.2f}x apart,"
              f" {c['outside']} outside any band")
    if args.rules:
        print(f"\nEach rule off in turn (whole model: {int(np.sum(np.abs(errs) <= BAND))} within,"
              f" mean |error| {np.mean(np.abs(errs)):.1%}):")
        print(f"  {'rule':40} {'fitted':>6} {'within':>7} {'mean':>6}   held out of its fit: within, off / whole")
        for a in _ablation(rows, errs, ABLATED, reads):
            held = f"{a['held_within_off']:5d} / {a['held_within']} of {a['held_rows']}" if a["held_rows"] else ""
            print(f"  {a['rule']:40} {a['fitted']:6d} {a['within_off']:7d} {a['mean_off']:6.1%}   {held}")
    return 0
