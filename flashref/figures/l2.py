"""Figures of the three-level model (HBM - L2 - SRAM): the Figure 2 table re-derived, and the knee.

``l2_figure2_table``: the FlashAttention paper's Figure 2 (left) setting (N = 1024, d = 64, 16
heads, batch 64, fp16, forward + backward) on an H100. Each row sets the two-level count (the
paper's machine: every tile load goes to HBM) beside :func:`flashref.iomodel.dram`'s prediction
of the DRAM bytes (standard attention as the kernels eager PyTorch launches; FlashAttention as
SDPA's FlashAttention-2 kernels, as flashref's kernel 2 (Triton) and as its default on an H100, kernel 3
(Gluon), from the three-level model) and beside the bytes Nsight Compute measures
(``figures/gpu/h100-l2-grid.json``, batch 8 scaled to 64; kernel 3: ``h100-l2-kernel3c.json``, its 192-row
d = 64 forward, predicted before it was measured).
The existing ``backward_figure2_table`` is unchanged: this table is an addition.

``l2_knee_sweep``: B·H·N = 2^18 tokens, d = 128, non-causal, N from 4096 to 262144: DRAM bytes of
forward and forward+backward, predicted (lines) and measured (points), with the two-level count, for
FlashAttention-2 (SDPA), flashref's kernels 2 and 3, and eager standard attention while its N x N matrices fit
(N ≤ 16384).
Past the knee (one head's K and V, 2·N·d·2 bytes, larger than the L2 can keep) every wave re-reads
them.

``l2_past_the_knee``: the check6 shapes (one or two heads whose K and V are 1.3-3x the L2), each run measured
in several rounds (``figures/gpu/h100-l2-check6*.json``): measured over predicted for every round, for kernel 3
with three launches of its d = 128 forward, kernel 2 and FlashAttention-2. The model predicts the lockstep pass;
whether a wave keeps it past the knee depends, for kernels 2 and 3 without a barrier, on the launch, the shape and
the run; for FlashAttention-2, in these runs, it does not. And kernel 3 as it runs today
(``h100-l2-check11q.json``), with a barrier between rounds of tiles in its forward and dQ kernel there
(``kernel3.round_sync``): every round in step.

``l2_heads_side_by_side``: FlashAttention-2's d = 64 causal forward near its knee, every H100 run that measured it:
DRAM bytes a head against N for one, two, four and sixteen heads, and measured over predicted with the staggered
walk's spread term and without it (the other heads' key prefixes in the reuse distance, and the heads that spread
beside them: ``iomodel.dram.staggered_scan_bytes``).

``l2_rolling_knee``: flashref's causal forwards near the knee (kernel 3 as it runs today, and kernel 2), every H100
run: kernel 3's d = 64 DRAM bytes against N with the model with and without the rolling grid's own knee
(``C_roll``, ``kappa_roll``), and measured over predicted for every row, fit set and held out.

``l2_scorecard``: every recorded row of both GPUs (``iomodel.l2score``, ``python -m flashref l2-score``) against
the model: rows within ±25% and the mean error, by kernel class. Notebook 08 reads its CSV rather than predicting
the nine thousand rows again (a quarter of its time).

``l2_rules``: what each rule of the model buys. Every recorded row of both GPUs (``iomodel.l2score``), predicted
with the whole model and with each rule off in turn (its switch gives back the model before it): the rows each rule
brings within ±25%, over every row and over the runs held out of its fit, beside the fitted numbers it costs.
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, Locator, LogLocator, NullFormatter

from .. import iomodel, schedule
from ..iomodel import l2fit, l2score
from ..plots import COLORS, figure
from . import Figure

D = importlib.import_module("flashref.iomodel.dram")  # the module (iomodel.dram is the function)

GRID_JSON = Path(__file__).resolve().parents[2] / "figures" / "gpu" / "h100-l2-grid.json"
H200_JSON = GRID_JSON.with_name("h200-l2.json")  # the same shapes on an H200 (predicted before measured)
# flashref's kernels measured again, three times per shape, after they changed (NOTES-l2.md, fourth round)
FLASHREF_JSON = GRID_JSON.with_name("h100-l2-flashref.json")
# flashref's default on a Hopper GPU, kernel 3, measured (twice per shape) after its predictions were committed
KERNEL3_JSON = GRID_JSON.with_name("h100-l2-kernel3.json")
# kernel 3's 192-row d = 64 forward (the twelfth session's default), measured at its 13 d = 64 non-causal shapes:
# those rows supersede kernel3's (l2fit.latest), so the model's kernel 3 is set beside the kernel that ran
KERNEL3C_JSON = GRID_JSON.with_name("h100-l2-kernel3c.json")
# the knee sweep measured again for kernel 3 as it runs today (with its barrier past the knee, which kernel3's runs
# predate): its rows supersede kernel3's
SWEEPK3_JSON = GRID_JSON.with_name("h100-l2-sweepk3.json")
FIG2 = dict(B=64, H=16, N=1024, d=64)
MEASURED_B = 8  # the profiled batch of the "fig2" shape; bytes scale with the batch
IMPL_LABEL = {"eager": "standard (eager PyTorch)", "sdpa_flash": "FlashAttention-2 (SDPA flash)",
              "flashref2": "FlashAttention-2 (flashref kernel 2)", "flashref": "flashref default (kernel 3)"}
COLOR = {"eager": COLORS["standard"], "sdpa_flash": COLORS["flash"], "flashref2": COLORS["flashref"],
         "flashref": COLORS["triton"]}


def load_grid(path=GRID_JSON):
    return json.loads(Path(path).read_text())


def load_current(groups=("grid", "sweep")):
    """The H100 grid's rows as the shipped kernels measure: kernel 2's (``"flashref2"``) from its
    re-measurement (the median of three runs), kernel 3's (``"flashref"``) from its own (two runs; at d = 64
    without a mask, the 192-row tile's one run; on the knee sweep, today's kernel's two), the others from the
    grid."""
    picked = [load_grid()]
    for path in (FLASHREF_JSON, KERNEL3_JSON, KERNEL3C_JSON, SWEEPK3_JSON):
        again = load_grid(path)
        picked.append(dict(again, rows=[r for r in again["rows"] if r["group"] in groups]))
    return l2fit.latest(*picked)


def rows_by_shape(result):
    """{(impl, shape): row}, a shape measured several times given as one row of its median bytes; impl as
    the model names what ran (``iomodel.l2fit.recorded_impl``: flashref rows recorded before kernel 3 became
    the default are ``"flashref2"``)."""
    groups = {}
    for r in result["rows"]:
        groups.setdefault((l2fit.recorded_impl(r), r["shape"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if not r.get("error")] or rs
        out[key] = dict(ok[0], **{m: dict(ok[0][m], total_bytes=float(np.median([r[m]["total_bytes"] for r in ok])))
                                 for m in D.MODES if m in ok[0]})
    return out


def _measured(rows, impl, shape, mode):
    """The recorded bytes in ``rows_by_shape``'s rows (the median, where the shape was measured more than
    once), or None where it was not measured."""
    r = rows.get((impl, shape))
    return None if r is None or r.get("error") or mode not in r else r[mode]["total_bytes"]


# kernel tiles (BM, BN) of the two-level count: forward / backward, as in flashref.schedule
TWO_LEVEL_TILES = {"sdpa_flash": ((128, 128), (128, 128)), "flashref2": ((128, 128), (128, 128)),
                   "flashref": ((128, 128), (128, 128))}


def two_level(impl, B, H, N, d, causal=False):
    """The paper's two-level count (bytes, forward + backward) at the kernel's tiles."""
    heads = B * H
    if impl == "eager":
        algo, opts = "standard", [{}, {}]
    else:
        algo = "flash2"
        fwd, bwd = TWO_LEVEL_TILES[impl]
        opts = [dict(block_sizes=fwd), dict(block_sizes=bwd)]
    return sum(iomodel.predict(algo, dr, Nq=N, Nk=N, d=d, heads=heads, causal=causal, dtype_bytes=2, **o).bytes
               for dr, o in zip(("forward", "backward"), opts))


def figure2_l2_data():
    res = rows_by_shape(load_current())
    B, H, N, d = FIG2["B"], FIG2["H"], FIG2["N"], FIG2["d"]
    rows = []
    for impl in ("eager", "sdpa_flash", "flashref2", "flashref"):
        pred = D.dram(impl, "fwd_bwd", B=B, H=H, Nq=N, Nk=N, d=d)
        # like for like with the measurement: the model at batch 8, times 8 (the end-of-kernel
        # residue in L2 does not grow with the batch, so batch 64 itself moves a little more)
        like = D.dram(impl, "fwd_bwd", B=MEASURED_B, H=H, Nq=N, Nk=N, d=d).total_bytes * B / MEASURED_B / 1e9
        m = _measured(res, impl, "fig2", "fwd_bwd")
        meas = None if m is None else m * B / MEASURED_B / 1e9
        rows.append(dict(implementation=IMPL_LABEL[impl], impl=impl, two_level_gb=two_level(impl, B, H, N, d) / 1e9,
                         three_level_gb=pred.total_bytes / 1e9, three_level_read_gb=pred.read_bytes / 1e9,
                         three_level_write_gb=pred.write_bytes / 1e9, l2_gb=pred.l2_bytes / 1e9,
                         kernels=len(pred.by_kernel), three_level_b8_x8_gb=like, h100_measured_gb=meas,
                         error_b64=None if meas is None else pred.total_bytes / 1e9 / meas - 1,
                         error_b8_x8=None if meas is None else like / meas - 1))
    return rows


def figure2_l2_plot(rows):
    c = FIG2
    fig, ax = figure(f"Figure 2 (left) setting on an H100: fwd + bwd, N={c['N']}, d={c['d']}, {c['H']} heads, batch "
                     f"{c['B']}, fp16: two-level count, three-level model, Nsight Compute", width=10, height=2.6)
    ax.axis("off")
    ax.grid(False)
    cols = ["implementation", "kernels", "two-level\nHBM GB", "three-level\nDRAM GB (read + write)", "L2 <-> SM\nGB",
            "three-level\nbatch 8 x 8", "H100 measured\nbatch 8 x 8", "model /\nmeasured"]

    def f(x, fmt):
        return "–" if x is None or x == "" else format(float(x), fmt)

    cells = [[r["implementation"], str(r["kernels"]), f(r["two_level_gb"], ".2f"),
              f"{float(r['three_level_gb']):.2f} ({float(r['three_level_read_gb']):.2f} + "
              f"{float(r['three_level_write_gb']):.2f})", f(r["l2_gb"], ".1f"), f(r["three_level_b8_x8_gb"], ".2f"),
              f(r["h100_measured_gb"], ".2f"),
              "–" if r["error_b64"] in (None, "") else
              f"{1 + float(r['error_b64']):.3f} / {1 + float(r['error_b8_x8']):.3f}"] for r in rows]
    table = ax.table(cellText=cells, colLabels=cols, colWidths=[0.26, 0.06, 0.09, 0.18, 0.08, 0.1, 0.11, 0.12],
                     bbox=[0, 0.25, 1, 0.75], cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    ax.text(0.0, 0.21, "Two-level: iomodel.predict (standard: Alg. 0 + 3; flash2 at 128x128 tiles). Three-level: "
            "iomodel.dram (eager: the 12 kernels PyTorch launches;\nFlashAttention: lockstep waves through a "
            "simulated L2). Measured: figures/gpu/h100-l2-grid.json (kernels 2 and 3: their re-measurements, "
            "h100-l2-flashref.json,\nh100-l2-kernel3c.json), batch 8 scaled to 64. Model / measured: "
            "batch 64 / batch 8 x 8\n(what stays dirty in L2 at each kernel's end does not grow with the batch).",
            transform=ax.transAxes, fontsize=7, va="top")
    return fig


SWEEP_NS = [2 ** k for k in range(12, 19)]  # 4096 .. 262144
TOKENS = 2 ** 18


def knee_data():
    res = rows_by_shape(load_current())
    h200 = rows_by_shape(load_grid(H200_JSON)) if H200_JSON.exists() else {}
    rows = []
    for impl in ("flashref2", "flashref", "sdpa_flash", "eager"):
        for N in SWEEP_NS:
            H = TOKENS // N
            if impl == "eager" and H * N * N * 2 > 9e9:
                continue
            for mode in D.MODES:
                pred = D.dram(impl, mode, B=1, H=H, Nq=N, Nk=N, d=128)
                m = _measured(res, impl, f"sweep_{N}", mode)
                m200 = _measured(h200, impl, f"sweep_{N}", mode)
                rows.append(dict(impl=impl, mode=mode, N=N, H=H, kv_per_head_mb=2 * N * 128 * 2 / 2 ** 20,
                                 predicted_gb=pred.total_bytes / 1e9, measured_gb=None if m is None else m / 1e9,
                                 error=None if m is None else pred.total_bytes / m - 1,
                                 measured_h200_gb=None if m200 is None else m200 / 1e9))
    return rows


def knee_plot(rows):
    fig, axes = figure("Across the knee: B = 1, H*N = 2^18 tokens, d = 128, fp16, non-causal; lines: iomodel.dram; "
                       "points: Nsight Compute (o H100, x H200)\n(standard attention only where its N x N matrices "
                       "fit: N ≤ 16k)", ncols=2, width=11, height=4.2)
    C = D.PARAMS["C_eff"]
    for ax, mode in zip(axes.flat, D.MODES):
        handles = []
        for impl in ("flashref2", "flashref", "sdpa_flash", "eager"):
            rs = [r for r in rows if r["impl"] == impl and r["mode"] == mode]
            N = np.array([r["N"] for r in rs])
            ax.plot(N, [float(r["predicted_gb"]) for r in rs], "-", color=COLOR[impl])
            mm = [(r["N"], float(r["measured_gb"])) for r in rs if r["measured_gb"] not in (None, "")]
            if mm:
                ax.plot([a for a, _ in mm], [b for _, b in mm], "o", color=COLOR[impl], mfc="none")
            m2 = [(r["N"], float(r["measured_h200_gb"])) for r in rs if r.get("measured_h200_gb") not in (None, "")]
            if m2:
                ax.plot([a for a, _ in m2], [b for _, b in m2], "x", color=COLOR[impl])
            gpus = " + ".join(g for g, m in (("H100", mm), ("H200", m2)) if m) or "not measured"
            handles.append(Line2D([], [], color=COLOR[impl], label=f"{IMPL_LABEL[impl]} (measured: {gpus})"))
        Ns = np.array(SWEEP_NS)
        two = [sum(iomodel.predict("flash2", dr, Nq=int(n), Nk=int(n), d=128, heads=TOKENS // int(n), dtype_bytes=2,
                                   block_sizes=(128, 128)).bytes for dr in
                   (("forward",) if mode == "fwd" else ("forward", "backward"))) / 1e9 for n in Ns]
        handles += ax.plot(Ns, two, ":", color=COLORS["bound"], label="two-level count (flash2, 128x128)")
        knee = C / D.PARTITIONS / (2 * 128 * 2)  # N where one head's K and V, held in both partitions, fill C_eff
        ax.axvline(knee, color="k", lw=0.8, ls="--")
        ax.text(knee, 0.97, f" one head's K,V\n = C_eff / 2 ({C / 2 / 2**20:.1f} MiB)", fontsize=7, va="top",
                transform=ax.get_xaxis_transform())  # at the top: clear of the curves and the legend
        ax.set(xscale="log", yscale="log", xlabel="N (heads = 2^18 / N)", ylabel="DRAM GB (read + written)",
               title="forward" if mode == "fwd" else "forward + backward")
        ax.set_xticks(SWEEP_NS, [f"{n // 1024}k" for n in SWEEP_NS])
        ax.legend(handles=handles, fontsize=7, loc="center right")
    return fig


# check6 (NOTES-l2.md, "Thirteenth round"): which runs measured which launch; the rounds of a launch are pooled
CHECK6_RUNS = {  # label: (impl, the measurements)
    "kernel 3, no barrier (the default until check11)": ("flashref", ("h100-l2-check6.json", "h100-l2-check6r.json")),
    "kernel 3, d=128 persistent without Q prefetch": ("flashref", ("h100-l2-check6b.json", "h100-l2-check6br.json")),
    "kernel 3, d=128 one tile a program": ("flashref", ("h100-l2-check6c.json", "h100-l2-check6cr.json")),
    "kernel 2": ("flashref2", ("h100-l2-check6x.json",)),
    "FlashAttention-2 (SDPA flash)": ("sdpa_flash", ("h100-l2-check6x.json",)),
    "kernel 3 with its round barrier (today's)": ("flashref", ("h100-l2-check11q.json",)),
}
CHECK6_SHAPES = ("check6_128_163k", "check6_128_196k", "sweep_262144", "check6_128_2x262k", "check6_128_393k",
                 "check6_64_786k")


def past_knee_data():
    """One row per (launch, shape, mode, round): the model's bytes (with the tiles the run recorded) and Nsight's."""
    rows = []
    for label, (impl, files) in CHECK6_RUNS.items():
        for name in files:
            run = json.loads(GRID_JSON.with_name(name).read_text())
            with schedule.kernel3_as_recorded(schedule.kernel3_info(run)):
                for r in run["rows"]:
                    if l2fit.recorded_impl(r) != impl or r.get("error") or r["shape"] not in CHECK6_SHAPES:
                        continue
                    kw = dict(B=r["B"], H=r["H"], Nq=r["N"], Nk=r["N"], d=r["d"], causal=bool(r["causal"]))
                    for mode in D.MODES:
                        pred, m = D.dram(impl, mode, **kw).total_bytes, r[mode]["total_bytes"]
                        rows.append(dict(launch=label, shape=r["shape"], B=r["B"], H=r["H"], N=r["N"], d=r["d"],
                                         mode=mode, run=name.removesuffix(".json"), round=r.get("rep", 0),
                                         predicted_gb=pred / 1e9, measured_gb=m / 1e9, measured_over_model=m / pred))
    return rows


# kernel 3 on the long non-causal shapes of check11 and check6, before and after its round barriers (one H100)
BARRIER_RUNS = {"no barrier": ("h100-l2-check11.json", "h100-l2-check6.json", "h100-l2-check6r.json"),
                "forward's barrier": ("h100-l2-check11s.json",),
                "forward's and dQ kernel's (today)": ("h100-l2-check11q.json",)}


def barrier_rows():
    """One row per (shape, mode) that every run of ``BARRIER_RUNS`` measured for kernel 3: the model's bytes and,
    per run, each round's measured GB."""
    rounds, kws = {}, {}
    for label, files in BARRIER_RUNS.items():
        for name in files:
            run = json.loads(GRID_JSON.with_name(name).read_text())
            for (impl, shape, mode), (kw, values) in l2fit.repeats(run).items():
                if impl == "flashref" and not kw["causal"] and kw["Nq"] >= 196608:
                    kws[shape] = kw
                    rounds.setdefault((shape, mode), {}).setdefault(label, []).extend(v / 1e9 for v in values)
    return [dict(shape=shape, mode=mode, predicted_gb=D.dram("flashref", mode, **kws[shape]).total_bytes / 1e9,
                 **{label: by[label] for label in BARRIER_RUNS})
            for (shape, mode), by in sorted(rounds.items()) if len(by) == len(BARRIER_RUNS)]


class _RatioTicks(Locator):
    """Ticks of a measured / predicted axis. Over a wide range (more than 3x): the log scale's, decades (major) and
    2..9 times them (minor). Over a narrow one, where those leave nothing labelled above 1: 1.1, 1.2, 1.3, 1.5, ...
    (major), and no minor ticks."""

    FINE = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0)

    def __init__(self, minor: bool):
        self.minor = minor

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if lo > 0 and hi / lo <= 3:
            return [] if self.minor else [t for t in self.FINE if lo <= t <= hi]
        return LogLocator(subs=np.arange(2, 10) if self.minor else (1.0,)).tick_values(lo, hi)


def _ratio_panel(ax):
    """An axis of measured / predicted bytes: the band within ±25%, the line at 1, a log scale labelled 2 and 0.8 (not
    2 x 10^0), and 1.2, 1.5 where the range is narrow. Set before plotting: a later set_yscale would put the default
    labels back."""
    ax.axhspan(1 / 1.25, 1 / 0.75, color="0.9", zorder=0)  # |predicted / measured - 1| <= 0.25
    ax.axhline(1, color="k", lw=0.8)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_locator(_RatioTicks(minor=False))
    ax.yaxis.set_minor_locator(_RatioTicks(minor=True))
    ax.yaxis.set_major_formatter(plain)
    # over a wide range 0.9 and 9 would sit on the 1 and the 10: unlabelled there
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: "" if f"{v:g}".lstrip("0.").startswith("9") else f"{v:g}"))
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _runs(names):
    """A legend's name for a list of recorded runs: the first and the last (check13-check21)."""
    return f"{names[0]}-{names[-1]}" if len(names) > 1 else names[0]


def _compulsory(BH, N, d, e=2):
    """The bytes a forward must move at least: Q, K, V read and O written once."""
    return BH * 4 * N * d * e


def past_knee_plot(rows):
    b = sorted({int(r["B"]) for r in rows})
    fig, axes = figure(f"Past the knee on an H100, B = {'/'.join(map(str, b))}, non-causal, fp16: every round of the "
                       "same call, Nsight Compute's DRAM bytes / iomodel.dram's (band: within ±25%)",
                       ncols=2, width=12, height=4.5)
    labels = list(CHECK6_RUNS)
    colors = [COLOR["flashref"], "#8c564b", "#e377c2", COLOR["flashref2"], COLOR["sdpa_flash"], "k"]
    for ax, mode in zip(axes.flat, D.MODES):
        _ratio_panel(ax)
        for j, (label, color) in enumerate(zip(labels, colors)):
            xs, ys = [], []
            for i, shape in enumerate(CHECK6_SHAPES):
                for r in rows:
                    if r["launch"] == label and r["shape"] == shape and r["mode"] == mode:
                        xs.append(i + (j - (len(labels) - 1) / 2) * 0.12)
                        ys.append(float(r["measured_over_model"]))
            ax.plot(xs, ys, "o", color=color, mfc="none", ms=5, label=label)
        ax.set_xticks(range(len(CHECK6_SHAPES)),
                      ["1x163k", "1x196k", "1x262k", "2x262k", "1x393k", "1x786k\nd=64"], fontsize=8)
        ax.set(xlabel="heads x N (d = 128 unless marked)", ylabel="measured / predicted DRAM bytes",
               title="forward" if mode == "fwd" else "forward + backward")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 2.5)  # room at the top for the legend, above every point
        ax.legend(fontsize=7, loc="upper left")
    return fig


# FlashAttention-2's d = 64 causal forward near its knee, every H100 run that measured it; the runs its staggered set
# (STAGGERED_D64, with the spread term) was fitted on and those held out of the fit (check16-check18) or predicted
# before they were measured (check19, check20)
HEADS_FIT = D.SPREAD_FIT_ON["h100"]
HEADS_HELD_OUT = ("check16", "check17", "check18", "check19", "check20")
HEADS_MIN_N = 49152  # below it every head's keys fit, with or without the other heads


def heads_data():
    """One row per recorded d = 64 causal FlashAttention-2 forward at N >= HEADS_MIN_N on the H100: measured bytes and
    the model's with and without the spread term (the model before it), each per head over the compulsory bytes (Q, K,
    V, O once)."""
    rows = []
    for name in HEADS_FIT + HEADS_HELD_OUT:
        run = json.loads(GRID_JSON.with_name(f"h100-l2-{name}.json").read_text())
        for _, shape, _, kw, measured in l2fit.staggered_rows([run]):
            if kw["d"] != 64 or kw["Nq"] < HEADS_MIN_N:
                continue
            per_head = _compulsory(kw["B"] * kw["H"], kw["Nq"], kw["d"])  # of all heads
            with_, without = (D.dram("sdpa_flash", "fwd", **kw, params=p).total_bytes
                              for p in ({}, dict(spread_rule=0)))
            rows.append(dict(set=name, shape=shape, heads=kw["B"] * kw["H"], N=kw["Nq"],
                             held_out=name in HEADS_HELD_OUT,
                             measured=measured / per_head, predicted=with_ / per_head,
                             predicted_without_spread=without / per_head))
    return rows


def heads_plot(rows):
    fig, axes = figure("FlashAttention-2's (SDPA flash) d = 64 causal forward near its knee, fp16, H100: heads that "
                       "run side by side share the L2\nmodel: iomodel.dram; measured: Nsight Compute",
                       ncols=2, width=12, height=4.5)
    ax = axes.flat[0]
    Ns = np.arange(HEADS_MIN_N, 262144 + 1, 16384)
    def per_head(heads, **params):
        return [D.dram("sdpa_flash", "fwd", B=1, H=heads, Nq=int(n), Nk=int(n), d=64, causal=True,
                       params=params).total_bytes for n in Ns] / _compulsory(heads, Ns, 64)

    # without the other heads (no overlap term) the model's bytes a head hardly depend on the heads: one line for all
    ax.plot(Ns, per_head(2, overlap_rule=0, spread_rule=0), ":", color="0.3", label="model without the other heads")
    shown = (1, 2, 4, 16)
    for heads, color in zip(shown, (COLORS["flash"], COLORS["flashref"], COLORS["standard"], "0.15")):
        ax.plot(Ns, per_head(heads), "-", color=color, label=f"{heads} head{'s' * (heads > 1)}, model")
        pts = [r for r in rows if r["heads"] == heads]
        ax.plot([r["N"] for r in pts], [r["measured"] for r in pts], "o", color=color, mfc="none",
                label=f"{heads} head{'s' * (heads > 1)}, measured")
    other = [r for r in rows if r["heads"] not in shown]
    ax.plot([r["N"] for r in other], [r["measured"] for r in other], "s", color="0.5", mfc="none",
            label="3, 6, 8 or 12 heads, measured")
    ax.set(xscale="log", yscale="log", xlabel="N", ylabel="DRAM bytes a head / compulsory (Q, K, V, O once)",
           title="more heads, more bytes a head")
    ax.set_xticks([49152, 65536, 98304, 131072, 196608, 262144], ["48k", "64k", "96k", "128k", "192k", "256k"])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=6, ncol=2)
    ax = axes.flat[1]
    _ratio_panel(ax)
    for i, r in enumerate(sorted(rows, key=lambda r: (r["heads"], r["N"]))):
        x = r["heads"] + (i % 5 - 2) * 0.06
        fill = COLORS["flash"] if r["held_out"] else "none"
        ax.plot(x, r["measured"] / r["predicted"], "o", color=COLORS["flash"], mfc=fill)
        ax.plot(x, r["measured"] / r["predicted_without_spread"], "x", color="0.5")
    ax.plot([], [], "o", color=COLORS["flash"], mfc="none", label="model, on its fit set")
    ax.plot([], [], "o", color=COLORS["flash"], label=f"model, held out ({_runs(HEADS_HELD_OUT)})")
    ax.plot([], [], "x", color="0.5", label="the model before the spread term")
    ax.set(xlabel="heads (B x H)", ylabel="measured / predicted DRAM bytes",
           title="with and without the spread (band: within ±25%)")
    ax.legend(fontsize=7)
    return fig


# flashref's causal forwards, whose grids roll (schedule.ScanKernel.rolling): every H100 run of kernel 3 as it runs
# today and every kernel 2 run, as iomodel.l2fit.fit_rolling's fit set and held-out runs take them
ROLL_MIN_N = 32768  # below it one head's K and V fit whatever the knee


def rolling_data():
    """One row per recorded causal forward of flashref's kernels at N >= ROLL_MIN_N on the H100 (kernel 3 as it runs
    today, kernel 2): measured bytes and the model's with and without the rolling grid's knee, over the compulsory
    bytes (Q, K, V, O once)."""
    rows = []
    for held_out in (False, True):
        recorded = l2fit.recorded_rolling_rows(GRID_JSON.parent, held_out, ("h100",))
        for impl, shape, mode, kw, measured, _, info in recorded:
            if mode != "fwd" or kw["Nq"] < ROLL_MIN_N:
                continue
            compulsory = _compulsory(kw["B"] * kw["H"], kw["Nq"], kw["d"])
            with schedule.kernel3_as_recorded(info):
                now, before = (D.dram(impl, "fwd", **kw, params=p).total_bytes for p in ({}, dict(rolling_rule=0)))
            rows.append(dict(shape=shape, kernel="kernel 3" if impl == "flashref" else "kernel 2",
                             heads=kw["B"] * kw["H"], N=kw["Nq"], d=kw["d"], held_out=held_out,
                             measured=measured / compulsory, predicted=now / compulsory,
                             predicted_without_rule=before / compulsory))
    return rows


def rolling_plot(rows):
    fig, axes = figure("flashref's causal forwards near the knee, fp16, H100: "
                       "a grid that rolls keeps its tiles longer\n"
                       "model: iomodel.dram; measured: Nsight Compute", ncols=2, width=12, height=4.5)
    ticks = [32768, 65536, 131072, 262144, 524288]
    ax = axes.flat[0]
    Ns = np.arange(ROLL_MIN_N, 262144 + 1, 8192)
    for heads, color in ((2, COLORS["flashref"]), (16, COLORS["standard"])):
        for params, style, what in (({}, "-", "model"), (dict(rolling_rule=0), ":", "model without the rule")):
            model = [D.dram("flashref", "fwd", B=1, H=heads, Nq=int(n), Nk=int(n), d=64, causal=True,
                            params=params).total_bytes for n in Ns] / _compulsory(heads, Ns, 64)
            ax.plot(Ns, model, style, color=color, label=f"{heads} heads, {what}")
    pts = [r for r in rows if r["kernel"] == "kernel 3" and r["d"] == 64]
    sc = ax.scatter([r["N"] for r in pts], [r["measured"] for r in pts], c=[np.log2(r["heads"]) for r in pts],
                    cmap="viridis", marker="o", label="kernel 3, measured (colour: heads)")
    heads = sorted({r["heads"] for r in pts})
    bar = fig.colorbar(sc, ax=ax, pad=0.01, fraction=0.04)
    bar.set_ticks(np.log2(heads), labels=[str(h) for h in heads])
    bar.set_label("heads (B x H), measured points", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    ax.set(xscale="log", xlabel="N", ylabel="DRAM bytes / compulsory (Q, K, V, O once)",
           title="kernel 3, d = 64: K and V once a head up to N = 81920")
    ax.set_xticks(ticks, [f"{n // 1024}k" for n in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7)
    ax = axes.flat[1]
    _ratio_panel(ax)
    for kernel, color in (("kernel 3", COLORS["triton"]), ("kernel 2", COLORS["flashref"])):
        pts = [r for r in rows if r["kernel"] == kernel]
        for held_out in (False, True):
            sel = [r for r in pts if r["held_out"] == held_out]
            ax.plot([r["N"] for r in sel], [r["measured"] / r["predicted"] for r in sel], "o", color=color,
                    mfc=color if held_out else "none",
                    label=f"{kernel}, {f'held out ({_runs(l2fit.ROLL_HELD_OUT)})' if held_out else 'fit set'}")
        ax.plot([r["N"] for r in pts], [r["measured"] / r["predicted_without_rule"] for r in pts], "x", color=color,
                alpha=0.5, label=f"{kernel}, without the rule")
    ax.set(xscale="log", xlabel="N", ylabel="measured / predicted DRAM bytes",
           title="with and without the rolling grid's knee (band: within ±25%)")
    ax.set_xticks(ticks, [f"{n // 1024}k" for n in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=6)
    return fig


def rules_data():
    """One row per rule of the model (``l2score.ablation``, on every recorded row): rows within ±25% with the
    model whole and with the rule off, over every row and over the runs held out of the rule's fit."""
    rows, errs, reads = _scored()
    return l2score.ablation(rows, errs, reads=reads)


def rules_plot(rows):
    fig, axes = figure(f"What each rule of the three-level model buys: rows within ±25% of Nsight Compute, of "
                       f"{rows[0]['rows']} recorded (H100 and H200)", ncols=2, width=12, height=5)
    y = np.arange(len(rows))[::-1]
    labels = [f"{r['rule']} ({r['fitted']} fitted)" for r in rows]
    ax = axes.flat[0]
    ax.bar_label(ax.barh(y, [r["within"] - r["within_off"] for r in rows], color=COLORS["flash"]), fontsize=7)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set(xlabel="rows it brings within ±25% (whole model minus the rule off)",
           title=f"every recorded row (the whole model: {rows[0]['within']} within)")
    ax = axes.flat[1]
    held = [r for r in rows if r["held_rows"]]
    yh = np.arange(len(held))[::-1]
    ax.bar_label(ax.barh(yh, [r["held_within"] - r["held_within_off"] for r in held], color=COLORS["flashref"]),
                 fontsize=7)
    ax.set_yticks(yh, [f"{r['rule']} ({r['held_rows']} rows)" for r in held], fontsize=7)
    ax.set(xlabel="rows it brings within ±25%", title="the runs measured after its fit (held out)")
    return fig


@functools.lru_cache(maxsize=1)
def _scored():
    """Every recorded row, its error and what its prediction read (``l2score.scored``): predicted once a process,
    for l2_scorecard and l2_rules both (15-20 s on two cores each time)."""
    rows = l2score.recorded_rows()
    errs, reads, _ = l2score.scored(rows)
    return rows, errs, reads


def scorecard_data():
    """``l2score.scorecard`` of every recorded row: per kernel class (and all), rows, rows within ±25%, the mean and
    largest |error|."""
    rows, errs, _ = _scored()
    return l2score.scorecard(rows, errs)


def scorecard_plot(rows):
    fig, axes = figure(f"The three-level model against every recorded Nsight Compute measurement (H100 and H200): "
                       f"{rows[-1]['within']} of {rows[-1]['rows']} within ±25%", ncols=2, width=12, height=3.6)
    classes = rows[:-1]  # the last row is "all"
    y = np.arange(len(classes))[::-1]
    ax = axes.flat[0]
    bars = ax.barh(y, [r["within"] / r["rows"] for r in classes], color=COLORS["flash"])
    ax.bar_label(bars, [f"{r['within']} of {r['rows']}" for r in classes], fontsize=7)
    ax.set_yticks(y, [r["kernel"] for r in classes], fontsize=8)
    ax.set(xlabel="share of rows within ±25%", xlim=(0, 1.15))
    ax = axes.flat[1]
    bars = ax.barh(y, [100 * r["mean"] for r in classes], color=COLORS["flashref"])
    ax.bar_label(bars, [f"{100 * r['mean']:.1f}%" for r in classes], fontsize=7)
    ax.set_yticks(y, [r["kernel"] for r in classes], fontsize=8)
    ax.set(xlabel="mean |predicted / measured - 1| (%)")
    return fig


FIGURES = [
    Figure("l2_figure2_table", figure2_l2_data, figure2_l2_plot),
    Figure("l2_knee_sweep", knee_data, knee_plot),
    Figure("l2_past_the_knee", past_knee_data, past_knee_plot),
    Figure("l2_heads_side_by_side", heads_data, heads_plot),
    Figure("l2_rolling_knee", rolling_data, rolling_plot),
    Figure("l2_scorecard", scorecard_data, scorecard_plot),
    Figure("l2_rules", rules_data, rules_plot),
]
