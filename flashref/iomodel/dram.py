"""Three-level memory (HBM - L2 - SRAM): the DRAM bytes Nsight Compute measures, predicted.

``dram(impl, mode, *, B, H, Nq, Nk, d, causal=False, gpu="h100", dtype_bytes=2)`` adds up, kernel
by kernel, the bytes that cross the DRAM interface in one call (``mode="fwd"``: the forward;
``"fwd_bwd"``: forward and backward), for

* ``"eager"``: standard attention as plain PyTorch ops, the kernels PyTorch really launches
  (Nsight Compute shows 12: forward ``bmm, mul, softmax, bmm``; backward ``bmm, bmm``, a binary
  elementwise kernel and ``softmax_backward`` (SoftmaxBackward0 on CUDA), ``mul``, ``bmm, bmm`` and
  the copy of dK into its layout; causal adds a ``masked_fill`` each way);
* ``"sdpa_flash"``: PyTorch SDPA's flash backend (FlashAttention-2's CUDA kernels; on a grid too small to fill
  the GPU its forward splits the keys and merges the fp32 partials in a second kernel, ``schedule.fa2_num_splits``);
* ``"flashref"``: flashref's kernels as ``flashref.gpu.attention`` runs them on a Hopper GPU: kernel 3
  (Gluon; :func:`kernel3_tiles`) where its dispatcher takes the shape, with its atomic-free backward (a
  dK/dV kernel, then a dQ kernel), and kernel 2 elsewhere;
* ``"flashref2"``: kernel 2 (Triton) by name (``config=kernels.Config()``), dQ added atomically in fp32.
  Every recorded ``flashref`` row that does not say kernel 3 ran is this kernel's (:func:`.l2fit.recorded_impl`),
  among them all those recorded before kernel 3 became the default.

**The rule for each kernel.** Nsight flushes the L2 before every kernel, so every kernel starts
cold and reads each byte it needs at least once (the compulsory reads). Beyond that:

1. *Lockstep passes* (:func:`scan_bytes`). The CTAs of one wave that belong to one head walk the
   same tiles at nearly the same time, so a tile read by one of them is an L2 hit for the rest:
   one DRAM read per tile per *pass* (a wave, for one head), however many CTAs the pass holds.
   This is why a FlashAttention kernel moves far less than Theorem 2 counts.
2. *Reuse across passes.* The next pass over the same head's tiles finds them in L2 only if what
   was touched in between - the reuse distance ``D``, here the footprint of one pass: every
   head's scanned tiles in the wave plus the CTAs' own tiles - fits. The fraction that misses is
   ``miss(D) = 1 / (1 + (C_eff / D) ** kappa)``: a step at ``C_eff`` (LRU) softened by ``kappa``
   (a real L2 hashes addresses over sets and does not evict in exact LRU order). When one head's
   K and V outgrow ``C_eff``, every pass re-reads them: the **knee**. A tile that a whole wave
   reads at once is held in both L2 partitions, so ``D`` counts twice; a wave that starts on the
   diagonal (flashref's causal dK/dV: column block j starts at row block j) never reads one tile
   with all its CTAs at once, and counts ``partitions_diagonal`` = 1 times (a choice, not a fit,
   made after the second check and tested on the third). A *rolling* grid (causal, every row block
   scanning its keys from 0, longest first: kernel 3's and kernel 2's causal forwards, kernel 3's dQ
   kernel) starts a head's later passes one CTA at a time, as CTAs end; measured, its re-reads have
   a later, sharper knee, with its own ``C_roll`` and ``kappa_roll``. A *synced* pass (kernel 3's rounds
   past its knee, which a barrier starts together: ``ScanKernel.synced``) has one reuse distance, not the
   spread of them a wave of drifting CTAs has, and a sharper knee of its own, ``C_sync`` and ``kappa_sync``
   (``sync_rule=0``: the lockstep pair, as every prediction up to check22).
3. *Staggered scans* (FlashAttention-2's causal forward, :func:`staggered_scan_bytes`): its CTAs
   walk their key blocks from the diagonal down, start at different times and never line up, so
   each CTA's reads reuse what the previous row block read. The reuse distance comes from the
   launch order: the first wave starts together; later, about the whole key prefix plus a lag
   that depends on how far apart in time the CTAs drift, which is a property of the machine; and a share of the
   key prefixes of the other heads running at the same time, more of them than the launch order alone runs side
   by side (``spread``).
4. *Writes.* Every byte written reaches DRAM, except what is still dirty in L2 when the kernel
   ends (Nsight counts neither side of its flush): ``min(alpha * W, rho)`` of a kernel's ``W``, or all of
   ``W`` where the kernel's reads ``R`` and writes fit in ``C_eff`` together (:func:`_residue`;
   ``small_writes=0`` gives the rule before this clause, which wrote every pre-registered prediction up to
   check8).

**What it cannot say.** Past the knee, the lockstep pass of rule 1 is one of two states. FlashAttention-2's
waves keep it, run after run (nearly: at 4 x 1 x 262144, d = 128, check18's six rounds read 8.7-16.1 GB and once
48.8, the model 8.7), and so does kernel 3 since it puts a barrier between rounds of tiles there
(``gpu.kernel3.round_sync``; figures/gpu/NOTES-l2.md, "Fifteenth round"). Without one, kernel 2 and the earlier
kernel 3 left it at some shapes (each launch at shapes of its own) and then read up to 30x more, by amounts that
move about 2x from run to run of the same call ("Thirteenth round"; notebook 08). The prediction there is the
lockstep state, which such runs sometimes meet; it is not an estimate of the others. FlashAttention-2's non-causal
d = 64 backward is the exception that is not chaotic: its passes come apart gradually and alike from run to run,
more the longer the kernel has run, and the model follows them (``apart_steps``, ``apart_tau``;
``ScanKernel.comes_apart``).

Eager attention's softmax on rows too long for the shared memory of PyTorch's block softmax (24512 fp16 elements
and more) runs ``cunn_SoftMaxForward``, three passes over each row, which miss in L2 once the rows in flight
outgrow it: 1.3x its input read at 49152 keys, 3.0x at 98304 (figures/gpu/NOTES-l2.md, the softmax probe). The
model follows the forward's passes (:func:`_softmax`, ``C_rows``, ``kappa_rows``); the backward's
``cunn_SoftMaxBackward`` reads its two inputs up to 1.5x past the same limit, which it does not (forward+backward
5-7% low there).

**Fitted parameters** (``PARAMS``; every ``fit*`` function named here is in :mod:`flashref.iomodel.l2fit`,
which re-derives each from the recorded runs, :func:`fit` these first four):
``C_eff`` (bytes of L2 that the scanned tiles get; the prior is the whole L2, 50 MB on the H100: a pass that a whole
wave reads is held in both partitions, which rule 1 counts by doubling its reuse distance, so its knee sits near
``C_eff / 2``, one partition), ``kappa``, ``alpha`` and ``rho``; and, for staggered scans only, ``C_stag``,
``kappa_stag``, ``lag`` and ``overlap`` (:func:`fit_staggered`), per GPU (``GPU_PARAMS``: the H200, with the H100's
SMs, needs its own; these, and PARAMS' own, are the walk's first sets, which the sets below replace in every
prediction today: only ``spread_rule=0`` or ``lag_rule=0`` reaches them), and
for FlashAttention-2's d = 64 kernel a set of its own (``STAGGERED_D64``), with ``spread``, ``spread_time`` and
``spread_waves`` (:func:`fit_spread_waves`) shared by all of them; for eager's
softmax on long rows, ``C_rows`` and ``kappa_rows`` (:func:`fit_softmax_rows`); for a rolling grid's re-reads,
``C_roll`` and ``kappa_roll`` (:func:`fit_rolling`); for a pass that kernel 3's barrier starts together,
``C_sync`` and ``kappa_sync`` (:func:`fit_sync`); for FlashAttention-2's forward kernels but the d = 64 one, the
waves over which the CTAs sharing an SM drift apart, ``drift_waves`` (:func:`fit_drift_ramp`); for a rolling grid,
the capacity the drift between its SM's CTAs sees, ``C_rdrift`` (:func:`fit_rolling_drift`); for FlashAttention-2's
non-causal d = 64 backward, the steps its passes stay together and the steps over which they then come apart e-fold,
``apart_steps`` and ``apart_tau`` (:func:`fit_apart`); for its d = 64 forward, how many more times a head that rolls
in reads what misses in its first pass, ``head_reads`` (:func:`fit_head_reads`); where three CTAs of a rolling grid
share an SM, the drift's own knee, ``C_rdrift3`` and ``kappa_rdrift3`` (:func:`fit_rolling_drift3`); and for the H100's
d = 64 walk, the largest share of its re-reads that miss far past its knee, ``miss_cap`` (with its set,
:func:`fit_staggered`); and for the H100's other walks, whose lag counts only the CTAs of other heads
(``lag_other``), a ``miss_cap`` and a ``spread`` of their own (with their set, ``STAGGERED_SHARED``); and for the H100's
d = 256 walk (64 x 64 tiles), a ``miss_cap`` of its own (``STAGGERED_D256``, :func:`fit_d256_cap`); and for the H200's
walk with one CTA an SM (the d = 192 kernels), a sharpness and ``miss_cap`` of its own (``STAGGERED_ONE_CTA``,
:func:`fit_one_cta`). Everything else (tiles, grids, CTAs per SM, scan order) is read from the kernels' source and
checked against Nsight's launch statistics (:mod:`flashref.schedule`).

The closed forms are checked against the cache simulation (:func:`flashref.schedule.simulate` on an
:class:`flashref.l2.L2Cache`, LRU, every CTA at one speed) with ``kappa`` infinite and the rules the simulation does not
run switched off (``tests/test_l2.py``): equal where every CTA of a pass walks the same tiles in the same order and
one CTA runs an SM (the non-causal forwards at one CTA an SM) and the L2 is far from a pass's footprint, within 10% at
the staggered and causal shapes tested. Near the knee they part: the closed form gives each pass one reuse distance
and misses all of it or none, where the LRU misses tile by tile; a review of random small-machine kernels found the
non-causal forwards at one CTA an SM 0.69-1.30x the simulation there (171 of 4677 not equal), the causal and
staggered ones 0.40-1.5x one capacity step from the tested shapes, and the backward's walk up to 9x just past its knee
(its closed form reads the whole head again on every pass, where the LRU keeps most of it). They are not that
simulation in closed form: where two or three CTAs share an SM the closed form has them drift apart after the first
wave (the simulation runs every CTA at one speed, and has no drift), and non-causal forwards there are 0.68-2.7x the
simulation at small-machine shapes; at others the backward kernels 0.5-1.5x it, and the staggered walk with its
``overlap`` term 0.5-1.6x. L2 bytes are equal in both. The closed forms are a model of the GPU, fitted to what Nsight
measures; the simulation is what shows the mechanisms they stand for.

The L2 presets' ``partitions`` and ``sector_bytes`` describe the GPUs; the closed forms do not read them
(``PARTITIONS`` is the two partitions of both GPUs modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import schedule as S  # noqa: N812
from ..l2 import preset
from ..problem import MAX_N, _bool, _causal, _nonnegative_int, check_options, positive_int

__all__ = ["dram", "dram_reads", "resolved_params", "DRAMPrediction", "PARAMS", "GPU_PARAMS", "STAGGERED_D64",
           "STAGGERED_ONE_CTA", "IMPLS", "MODES", "scan_bytes", "staggered_scan_bytes", "kernels", "kernel3_tiles"]

IMPLS = ("eager", "sdpa_flash", "flashref", "flashref2")
MODES = ("fwd", "fwd_bwd")
MB = 2 ** 20

# The first four fitted on figures/gpu/h100-l2-grid.json (fit set: every shape whose name does not
# start with "sweep_"; held out: the fixed-token sweep across the knee), see fit(); the staggered
# four on FlashAttention-2's causal forwards, see fit_staggered() and SPREAD_FIT_ON.
PARAMS = dict(C_eff=45 * MB, kappa=2.0, alpha=0.6, rho=24 * MB,
              # these four: staggered walks (fit_staggered(), SPREAD_FIT_ON; before the spread term, 84 MiB, 4, 2, 0)
              C_stag=104 * MB, kappa_stag=6.0, lag=3.0,
              overlap=0.25,  # the staggered walk's share of the other running heads' keys (staggered_scan_bytes)
              partitions_diagonal=1,  # not fitted: L2 partitions holding a diagonal-start wave's tile (scan_bytes)
              small_writes=1,  # not fitted: a kernel whose reads and writes fit in C_eff keeps its writes (_residue)
              fa2_split=1,  # not fitted: FlashAttention-2's forward splits its keys on a small grid (schedule)
              overlap_rule=1,  # not fitted: the d = 64 staggered set with the overlap term (0: the set before it)
              # eager's softmax on rows too long for shared memory: three passes, the last two from L2 while the rows
              # in flight fit C_rows (sharpness kappa_rows; fitted, fit_softmax_rows(), on the softmax probe's forward)
              C_rows=29 * MB, kappa_rows=12.0,
              softmax_passes=1,  # not fitted: that rule (0: the softmax streams S once, as the model before it)
              # a rolling grid's passes (schedule.ScanKernel.rolling: causal, every row block scanning its keys from
              # 0): capacity and sharpness of their own (fitted, fit_rolling(), on every such row recorded before
              # check13 but kernel 3's earlier launches; check13-check18 held out. Before the drift clause below,
              # the same fit gave 60 MiB and 12, which predicted check17)
              C_roll=65 * MB, kappa_roll=8.0,
              rolling_rule=1,  # not fitted: that rule (0: C_eff and kappa, as every prediction up to check16)
              rolling_drift=1,  # not fitted: the SM's drift term keeps C_eff and kappa (0: the rolling pair, check17)
              # the staggered walk's heads that spread beside the schedule's (staggered_scan_bytes), fitted with both
              # of the H100's staggered sets (fit_staggered): how many heads, and over how many head-times
              spread=0.5, spread_time=1.0,
              spread_rule=1,  # not fitted: the staggered sets fitted with the spread (0: the sets before, spread 0)
              # a pass of CTAs that a barrier starts together (ScanKernel.synced: kernel 3's rounds past its knee):
              # capacity and sharpness of its own (fitted, fit_sync(), on every such row recorded before check23;
              # check23 and the knee sweep of today's kernel 3 held out)
              C_sync=54 * MB, kappa_sync=12.0,
              sync_rule=1,  # not fitted: that rule (0: C_eff and kappa, as every prediction up to check22)
              # the waves over which the two CTAs of an SM drift apart in FlashAttention-2's forward kernels but the
              # d = 64 one (ScanKernel.drift_ramp; fitted, fit_drift_ramp(), on every such row recorded before
              # check25; 1: at once, as every prediction up to check24)
              drift_waves=6.0,
              # the capacity the drift between the CTAs sharing an SM sees in a rolling grid (its sharpness stays
              # kappa; fitted, fit_rolling_drift(), on every rolling row recorded before check22)
              C_rdrift=35 * MB,
              rdrift_rule=1,  # not fitted: that rule (0: C_eff, as every prediction up to check29 and knee64c)
              # that drift's capacity and sharpness where three CTAs share an SM (kernel 3's causal d = 64 forward;
              # fitted, fit_rolling_drift3(), on every rolling row of kernel 3 recorded up to check43)
              C_rdrift3=26 * MB, kappa_rdrift3=8.0,
              rdrift3_rule=1,  # not fitted: that rule (0: C_rdrift and kappa, as every prediction up to check43)
              # the GPU's own capacity for that drift, where it has one (RDRIFT3_GPU; 0: PARAMS' on every GPU, as every
              # prediction up to check50)
              rdrift3_gpu_rule=1,
              # the waves of its own head's CTAs up to which the staggered walk's heads spread in full; a head of more
              # waves has the spread in proportion (fitted, fit_spread_waves(), on every FlashAttention-2 causal row
              # recorded before check22)
              spread_waves=4.0,
              swaves_rule=1,  # not fitted: that rule (0: the spread in full at every N, as every prediction to check31)
              # FlashAttention-2's non-causal d = 64 backward: the steps its passes stay together, and the steps over
              # which they come apart by e-fold after (ScanKernel.comes_apart; fitted, fit_apart(), on every such row
              # recorded before check22)
              apart_steps=40000.0, apart_tau=60000.0,
              apart_causal=0,  # not fitted: the rule on the causal backward too (1: its first form, check37-check41)
              apart_rule=1,  # not fitted: that rule (0: a lockstep pass at any length, as every prediction to check36)
              # FlashAttention-2's d = 64 forward: how many more times a head's first pass after the first wave reads
              # what misses (ScanKernel.heads_roll_in; fitted, fit_head_reads(), on every such row recorded before
              # check22)
              head_reads=2.0,
              # the largest share of the staggered walk's re-reads that miss, however far past its knee (1: all of them;
              # the H100's d = 64 set has its own, below)
              miss_cap=1.0,
              cap_rule=1,  # not fitted: the d = 64 set with it (0: the set before it, every prediction up to check44)
              # the staggered walk's lag counts only the CTAs of other heads (1), or every running CTA (0); the H100's
              # shared set (STAGGERED_SHARED) has it on
              lag_other=0,
              lag_rule=1,  # not fitted: the H100's shared set with it (0: the set before, every prediction to check46)
              # FlashAttention-2's d = 256 walk (64 x 64 tiles) with its GPU's own miss_cap where it has one
              # (STAGGERED_D256; 0: the shared set's, as every prediction up to check53)
              d256_rule=1,
              # FlashAttention-2's walk with one CTA an SM (the d = 192 kernels) with its GPU's own set where it has one
              # (STAGGERED_ONE_CTA; 0: the shared set, as every prediction up to check62)
              one_cta_rule=1,
              # the capacities of L2_SCALED scaled by the GPU's L2 against the H100's (0: the H100's on every GPU, as
              # every prediction up to check55)
              l2_scale_rule=1,
              # kernel 3's non-causal rounds short of its barrier's threshold with the synced pair, C_sync and
              # kappa_sync (ScanKernel.rounds_together; 0: C_eff and kappa, as every prediction up to k3few)
              k3_rounds_rule=1,
              head_rule=1)  # not fitted: that rule (0: a head's first pass reads its tiles once, as every prediction to
              # check39)
# The staggered walk depends on timing, not on the L2 alone: the H200 (the H100's SMs, faster HBM and 60 MB of L2
# against 50, which the fits below took for the same until the twenty-fifth round of figures/gpu/NOTES-l2.md) reads
# 0.37-0.95x the H100's bytes on FlashAttention-2's causal forward (about half at the median). Its parameters are
# therefore per GPU: fitted (fit_staggered) on each GPU's own runs (first its grid + check,
# figures/gpu/h100-l2-{grid,check}.json and figures/gpu/h200-l2.json; since the spread term, SPREAD_FIT_ON).
GPU_PARAMS = {"h100": {}, "h200": dict(C_stag=112 * MB, kappa_stag=6.0, lag=3.0, overlap=0.1)}
# FlashAttention-2's d = 64 forward (128 x 128 tiles, r = 1) walks with a timing of its own: with the
# shared staggered set it read 0.6% of its re-reads from DRAM where the d = 128 kernel (128 x 64 tiles)
# read 2.6% at the same reuse distance, and its knee is sharper (N = 98304 -> 131072: 2.1x -> 10x the
# compulsory bytes). So it has its own three, per GPU, fitted with fit_staggered(..., d=64) on every
# d = 64 causal forward recorded before check4 (the H100's grid, check, check2, check3; the H200's grid,
# check, check2), then checked on check4, predicted before it was measured. The shared set above stays
# fitted on grid + check of both head dims: refitted on d = 128 alone (96 MiB, 6, 3) it did worse on the
# held-out d = 128 rows (mean 16.8% against 13.5%).
STAGGERED_D64_BEFORE = {"h100": dict(C_stag=76 * MB, kappa_stag=8.0, lag=3.0),
                        "h200": dict(C_stag=100 * MB, kappa_stag=8.0, lag=4.0)}
# Then check11 and check12 found it reading more per head at four heads than at two, at the same N near the knee
# (1 x 4 x 131072: 16x its compulsory bytes a head, where two heads read 9.9x), and check4 less at one (163840:
# 11.8x): the heads that run side by side share the L2. With the overlap term (staggered_scan_bytes) the set is
# fitted again, four parameters per GPU (fit_staggered(..., d=64, grid=D64_GRID)): on the H100 on every d = 64
# causal forward recorded before check11 (grid, check, check2-check4, repeat, check7, check9), check11 and check12
# held out; on the H200 on all of its own (grid, check, check2, check4). The shared set (the other head dims') keeps
# overlap = 0 and its three. Refitted with overlap free on its own fit sets (grid + check), it takes (80 MiB, 4, 1.5,
# 0.25) on the H100 and (76 MiB, 6, 1, 0.5) on the H200, and on every d != 64 causal forward recorded that refit is
# no better: 27 of 27 within 25% on the H100 (mean 11.3% against 11.1%), 12 of 13 on the H200 (13.7% against 13 of
# 13, 11.9%). figures/gpu/NOTES-l2.md, "Sixteenth round".
STAGGERED_D64_BEFORE_SPREAD = {"h100": dict(C_stag=84 * MB, kappa_stag=12.0, lag=4.0, overlap=0.75),
                               "h200": dict(C_stag=76 * MB, kappa_stag=8.0, lag=1.5, overlap=0.75)}
# Then check13-check17 found the walk's re-reads a head rising with the heads up to about eight and staying there,
# past what the overlap term's one-speed schedule gives (check16's and check17's d = 64 forwards at 8 and 16 heads of
# 131072: -34.6%, -34.5%): the heads spread (staggered_scan_bytes). With the spread term every staggered set was
# fitted again (fit_staggered with spread = 0.5, spread_time = 1): the H100's two on every causal forward recorded
# before check16 (SPREAD_FIT_ON; check16-check18 held out), the H200's on all of its own. figures/gpu/NOTES-l2.md,
# "Eighteenth round".
STAGGERED_D64_BEFORE_CAP = {"h100": dict(C_stag=72 * MB, kappa_stag=8.0, lag=2.0, overlap=0.5),
                            "h200": dict(C_stag=76 * MB, kappa_stag=8.0, lag=1.5, overlap=0.5)}
# Then the walk far past its knee (check30, check32, knee64c, check43, check44: N = 262144-458752) read the same
# bytes a head at one to eight heads, and fewer than that set's: +18% at one head of 393216, +29% to +36% at two to
# four heads of 393216-458752; what the GPU reads grows with N more slowly than a walk whose every re-read misses
# once its reuse distance is well past the capacity. A real L2 is not LRU: it hashes lines over its sets, and a
# cyclic walk larger than it keeps a share of them (random replacement would keep C/D of them). So far past the knee
# a share of the re-reads still hits: at most miss_cap of them miss. The H100's set was fitted again with it
# (fit_staggered(..., d=64, grid=CAP_GRID)) on every d = 64 causal forward the H100 recorded up to check44 (128 rows):
# 0.65, with C_stag 56 MiB and lag 1 (loss 0.0146 against 0.0228; 128 of 128 within ±25% against 116), and checked
# on check45, drawn after it. The H200's 12 rows, none far past the knee, keep their set (with a cap, at best 0.029
# against 0.014). figures/gpu/NOTES-l2.md, "Twenty-second round".
# Then the H200 measured check45-check49 (2026-11-28): its d = 64 walk far past the knee 35-40% over with its set
# without the cap (check45's 1 x 3 x 393216-524288, check49's 4 x 1 x 393216). Its set was fitted again with miss_cap,
# as the H100's (fit_staggered(..., gpu="h200", d=64, grid=H200_CAP_GRID)), on the H200's runs before check45 (its
# grid and check4, 12 forwards): 0.7, with C_stag 68 MiB; check45-check49 held out, 25 of 26 within ±25% (the set
# before: 17 of 26). figures/gpu/NOTES-l2.md, "Twenty-fourth round".
STAGGERED_D64 = {"h100": dict(C_stag=56 * MB, kappa_stag=8.0, lag=1.0, overlap=0.5, miss_cap=0.65),
                 "h200": dict(C_stag=68 * MB, kappa_stag=8.0, lag=1.0, overlap=0.6, miss_cap=0.7)}
# Then the lone head at the d = 128 walk's knee: one head of N = 65536 read 0.16 GB where that set has 0.84 (+509%),
# two heads 0.67 against 1.15, three and more within 12% (heads128, check26, check29). A head alone keeps its 32 MiB
# of K and V in L2 through the walk. The lag stood for the tiles read between two reads of one tile; where the CTAs
# reading them are the same head's, those tiles are keys the head's prefix already counts. So the lag counts only the
# share of the running CTAs that belong to other heads (lag_other, from the one-speed list schedule), which leaves a
# head alone at its prefix, and a knee near the L2's size. The far side of that knee still hits a share of its
# re-reads, as the d = 64 walk's (miss_cap). The H100's shared set was fitted again with both
# (fit_staggered(..., shared=True, grid=LAG_GRID)) on every d != 64 causal forward the H100 recorded up to check46
# (102 rows): loss 0.012 against 0.095, 100 of 102 within ±25% against 95, mean error 7.9% against 23.2%. Fitted on
# the runs before heads128 and check26 alone (46 rows; no lone head at its knee among them), the search picks the
# same point, and the 56 rows after are 55 within (the set before: 50). figures/gpu/NOTES-l2.md, "Twenty-third round".
# The H200 then measured check47: its lone heads at the d = 128 knee 52-281% over with its set (the lag over every
# CTA). Its shared set was fitted again with both (fit_staggered(..., gpu="h200", shared=True, grid=H200_LAG_GRID)) on
# the H200's runs before check47 (16 forwards): check47-check49 held out, 26 of 26 within ±25% (the set before: 17).
# figures/gpu/NOTES-l2.md, "Twenty-fourth round".
STAGGERED_SHARED = {"h100": dict(C_stag=48 * MB, kappa_stag=7.0, lag=1.0, overlap=0.5, spread=0.25, miss_cap=0.75,
                                 lag_other=1),
                    "h200": dict(C_stag=50 * MB, kappa_stag=7.0, lag=1.25, overlap=0.3, spread=0.25, miss_cap=0.65,
                                 lag_other=1)}
# FlashAttention-2's d = 256 walk (64 x 64 tiles: r = 1, as the d = 64 kernel's 128 x 128, with twice the CTAs a head of
# the d = 128 kernel's 128 x 64): on the H100 the shared set was over at every d = 256 causal forward measured, nine
# shapes of check5, check52 and check53 (+10% to +51%, mean +18%), below the knee and far past it alike: the walk's
# re-reads miss less often than the d = 128 walk's, at every reuse distance. So it keeps the shared set with a miss_cap
# of its own, fitted (l2fit.fit_d256_cap) on the rows measured before check52 (check5's two shapes, two runs each) and
# checked on check52 and check53 (seen before the fit, so not blind) and on check54, drawn after it. The H200 had no
# d = 256 walk measured before check52 to fit on, and keeps its shared set's (figures/gpu/NOTES-l2.md, "Twenty-fifth
# round")
STAGGERED_D256 = {"h100": dict(miss_cap=0.6), "h200": {}}
# FlashAttention-2's walk with one CTA an SM (the d = 192 kernels: eight warps of 228-236 registers a thread; d = 160
# runs them on the PyTorch measured): the H200 read 1.3-2.0x the shared set's bytes past its knee (check61 and check62,
# 1-16 heads of N = 32768-131072 at d = 160 and 192; 8 of 20 rows within ±25%). Far past the knee nearly every re-read
# misses: the one CTA walking an SM keeps none of the share of hits that the shared set's miss_cap stands for, and the
# knee is sharper. Its sharpness and miss_cap are fitted (l2fit.fit_one_cta) on check61 and check62's d = 192 shapes;
# check62's d = 160 shapes held out (one of them check61's call measured again): 6 of 8 rows within ±25% (mean error
# 19.7%; the shared set: 2 of 8, 33.0%). Then check63, drawn after the fit at d = 136-192 and predicted with it: 14 of
# 16 (mean 15.0%; the shared set: 3 of 16). Many heads at d = 160 still read more than it says (2 x 8 x 65536, -41%;
# 4 x 4 x 98304, -30%). The H100 measured no such walk past its knee and keeps its shared set (figures/gpu/NOTES-l2.md,
# "Thirty-first round")
STAGGERED_ONE_CTA = {"h100": {}, "h200": dict(kappa_stag=12.0, miss_cap=1.0)}
# The H200 has 60 MB of L2 (its driver reports 62914560 bytes on every recorded run), not the H100's 50: the full
# GH100's 60 MB, of which the H100 SXM5 enables 50 (NVIDIA's H100 whitepaper). Every capacity in PARAMS was fitted on
# H100 rows (the H200's own sets above replace some); those that stand for a share of the L2 that a kernel's passes get
# scale with it on another GPU (l2_scale_rule): the lockstep waves' C_eff, the synced rounds' C_sync, the softmax rows'
# C_rows and the drift's C_rdrift. Not C_roll: the rolling grid's knee, fitted at 65 MiB (more than the H100's L2),
# stands for timing as much as for the L2, and scaled it put kernel 3's causal rows on the H200 further off (mean error
# 5.2% to 6.7%). No number is fitted: the ratio is the two L2 sizes. Over the H200's 1200 rows recorded before check56
# it takes 1174 within ±25% (1171 without), check55's 50 of 50 among them (45 without; seen before the rule, so not
# blind: check56 is). figures/gpu/NOTES-l2.md, "Twenty-fifth round"
L2_SCALED = ("C_eff", "C_sync", "C_rows", "C_rdrift")
# the runs each GPU's staggered sets (shared and d = 64) are fitted on since the spread term
SPREAD_FIT_ON = {"h100": ("grid", "check", "check2", "check3", "check4", "repeat", "check7", "check9", "check11",
                          "check12", "check13", "check15"),
                 "h200": ("", "check4")}
# The staggered sets before the spread term (spread_rule=0, which wrote every prediction up to check18): the shared
# set (PARAMS' and GPU_PARAMS' then) and the d = 64 set above
STAGGERED_BEFORE_SPREAD = {"h100": dict(C_stag=84 * MB, kappa_stag=4.0, lag=2.0, overlap=0.0, spread=0.0),
                           "h200": dict(C_stag=108 * MB, kappa_stag=6.0, lag=3.0, overlap=0.0, spread=0.0)}
# The drift where three CTAs share an SM, a GPU's own: the H200 measured check41-check45 on 2026-11-28, and kernel 3's
# causal d = 64 forward near that knee read 26-39% less than C_rdrift3 (fitted on the H100's rows) says, at five of
# its 48 rows (3-8 heads of 163840-196608): the H200's faster HBM leaves the CTAs sharing an SM less far apart, as its
# FlashAttention-2 walk reads less than the H100's. Its capacity alone is fitted again (fit_rolling_drift3 with
# H200_RDRIFT3_GRID, the sharpness kept) on those 48 rows, the H200's runs after them held out
# (figures/gpu/NOTES-l2.md, "Twenty-fourth round")
RDRIFT3_GPU = {"h100": {}, "h200": dict(C_rdrift3=32 * MB)}
PARTITIONS = 2  # a tile read by a whole wave at once is held in both L2 partitions


@dataclass
class DRAMPrediction:
    """Bytes across the DRAM interface (``read_bytes``, ``write_bytes``) and between L2 and the SMs. ``caveats``: a
    sentence for each class of calls measured to read far more than the prediction, where the call is one of them
    (:func:`caveats`); empty for every other call."""

    read_bytes: float
    write_bytes: float
    l2_bytes: float
    by_kernel: list = field(default_factory=list, repr=False)  # (name, read, write, l2)
    caveats: tuple = ()

    @property
    def total_bytes(self):
        return self.read_bytes + self.write_bytes


def miss(D, C, kappa):
    """Fraction of re-reads at reuse distance ``D`` that miss an L2 of effective capacity ``C``."""
    if D <= 0:
        return 0.0
    r = C / D
    if r == 0:  # C / D underflowed (a capacity of a few subnormal bytes): the limit, not log(0)
        return 1.0
    if kappa == math.inf:
        return 0.0 if r >= 1 else 1.0
    x = kappa * math.log(r)
    return 0.0 if x > 700 else 1.0 / (1.0 + math.exp(x))


def _misses(D, C, kappa):
    """:func:`miss` of each reuse distance in the array ``D``. Element by element with ``math`` on purpose: numpy's
    own log and exp may round differently in the last bit, and the committed predictions are reproduced exactly."""
    return np.array([miss(x, C, kappa) for x in D.tolist()], dtype=float)


def _residue(W, R, p):
    """Bytes of a kernel's ``W`` written bytes still dirty in L2 when it ends (and so never counted as DRAM writes),
    ``R`` its DRAM reads. Fitted: the last ``rho`` bytes, at most ``alpha`` of ``W``: what a kernel whose traffic
    outgrows the L2 leaves. A kernel whose reads and writes fit in ``C_eff`` together evicts nothing, so all of its
    writes stay (an LRU's step, not softened: check8's smallest shape, where each kernel writes 4-13 MB and Nsight
    counts no DRAM write). ``small_writes=0``: the fitted part alone, the rule before this clause."""
    if R + W <= p["C_eff"] and p.get("small_writes", 1):  # (the switch read only where it decides: dram_reads)
        return W
    return min(p["alpha"] * W, p["rho"])


# FlashAttention-2's non-causal walks at a head dim its d = 192 or d = 256 kernel pads (PyTorch's build runs d =
# 144-176 on the first and 224-240 on the second, the last columns masked: schedule.FA2_TILES) leave the lockstep near
# and past the knee, reproducibly and far: check112, apart160, padded and check118 (figures/gpu/NOTES-l2.md,
# "Forty-fourth round") measured up to 68x the lockstep pass in the forward and 53x in the forward+backward, 7-53% of
# what the walk reads if no CTA shared a K/V tile, while the kernels' own d = 192 held at the same calls. How far
# apart moves with the head dim, the length and the heads (a lone head held, and so did check90's grid of a few query
# blocks), and a handful of calls cannot fit that: no rule follows them, and such a prediction is the lockstep state,
# a lower bound. The condition is what was measured: padded2 found the walks coming apart from half the L2 on (30-50
# MiB of K and V a head on the H200: forward+backward 1.8-10x), where every recorded call below it held but check113's
# forward+backward at 20 MiB (1.5x). Their causal walks held far past the knee (80-112 MiB, within 9%); nearer it the
# staggered walk's own misses at d = 160 (check62, check63, check96: up to 1.7x) are listed in the tests.
PADDED_APART = ("FlashAttention-2 at a head dim its kernel pads (d = {d} on its d = {kd} kernel), non-causal, one "
                "head's K and V ({kv:.0f} MiB) at least half the L2 ({l2:.0f} MiB): its waves came apart at such "
                "calls, up to 68x this lockstep prediction (forward) and 53x (forward+backward); read it as a lower "
                "bound")
# flashref's kernel 2 (where kernel 3 cannot run: kernel3_tiles) has no barrier between its rounds of tiles, and near
# and past the knee its non-causal walk keeps the lockstep at some calls and leaves it at others, by amounts that move
# from run to run (check6x, check71, knee32, apart160; README, "What the model cannot say"): with one head's K and V
# at least half the L2, 36 of the 174 recorded rows read more than 4/3 of the prediction, up to 53x (below half, 546
# rows, at most 2.4x). Its causal walk there read at most 1.3x the prediction (138 rows).
KERNEL2_APART = ("flashref's kernel 2 (where kernel 3 cannot run), non-causal, one head's K and V ({kv:.0f} MiB) at "
                 "least half the L2 ({l2:.0f} MiB): with no barrier between its rounds its waves came apart at some "
                 "such calls, up to 53x this lockstep prediction; read it as a lower bound")
# FlashAttention-2's non-causal walks at its kernels' own head dims, with one head's K and V at least the L2, come
# apart the further the longer the grid runs (figures/gpu/NOTES-l2.md, "Forty-fifth round"; apartkv, below: its
# "Forty-sixth round"): the model's passes (the lockstep waves, their drift, the backward's passes that come apart:
# apart_rule) hold such calls whose forward runs
# fewer than FA2_APART_WAVES waves of CTAs (one of 184 recorded rows over 4/3 of the prediction, 1.37x), and past it
# 84 of 278 rows read more than 4/3 of the prediction, up to 21x in the forward (apart256: ten d = 256 heads of 189
# MiB, 114 waves) and 10x in the forward+backward, none less than 0.75 of it. waves256, aimed at the condition with
# the heads and the K and V a head held (ten heads of 189 MiB) and fewer queries, found it: at 14 waves the forward
# read 0.7x (d = 256) and 1.1x (d = 128) the model, at 29 waves 1.3-3.4x and 1.3-1.5x, at 57 waves 8.8-9.0x and
# 1.6-3.2x (apart256, 114 waves: 17-26x and 8.5-9.3x). apartkv held the waves and moved the K and V a head: at 48
# waves the d = 128 forward read 1.25, 1.40, 1.52, 1.63 and 3.1x the model with one head's K and V 1.1, 1.6, 2.2, 3.2
# and 4 times the L2 (medians of two rounds; d = 64, half the bytes over as many keys: 1.20x and 1.15x where d = 128
# read 1.52x and 1.63x, and 2.06x at 3.2 times), and at 29 waves 1.04-1.11x at 1.1-4 times: the waves first, then the
# bytes a head's K and V take past the L2, not the key blocks a CTA walks. How far apart moves from run to run
# (check18's six rounds of one call at 31 waves: 8.7-48.8 GB; padded's d = 256 call 1.3x and 2.4x, apart256's rounds
# of it 7.0x and 7.7x) and between calls of one size (four heads of 393216 at d = 128, split 4 x 1, 2 x 2, 1 x 4:
# 4.1x, 1.2x, 1.2x): no rule found follows it. The waves are a number read off the recorded rows, not fitted to bytes.
FA2_APART_WAVES = 24
FA2_APART = ("FlashAttention-2, non-causal, one head's K and V ({kv:.0f} MiB) at least the L2 ({l2:.0f} MiB) and "
             "{waves:.0f} waves of CTAs in its forward (at least " + str(FA2_APART_WAVES) + "): its waves came apart "
             "at 84 of the 278 recorded such calls (over 4/3 of this prediction), the further the more waves and the "
             "more a head's K and V outgrow the L2, up to 21x (forward) and 10x (forward+backward)")


def fa2_pads_apart(d) -> bool:
    """Whether PyTorch's FlashAttention-2 runs head dim ``d`` on its d = 192 or 256 kernel with the last columns
    masked: the head dims of PADDED_APART's class (d = 80 and 112, padded onto the d = 96 and 128 kernels, are not)."""
    kd = S.fa2_kernel_d(d)
    return kd != d and kd >= 192


def caveats(impl, *, B, H, Nq, Nk, d, causal=False, gpu="h100", dtype_bytes=2):
    """The sentences :func:`dram` attaches to its prediction of a call: a class of calls measured to read far more
    than the model says, where this call is one of them: PADDED_APART, KERNEL2_APART, FA2_APART (one at most: the
    first that holds). The arguments are checked as :func:`dram` checks them (an empty batch or head axis: none)."""
    *sizes, causal, empty, spec = _checked_call(impl, MODES[0], B, H, Nq, Nk, d, causal, gpu, dtype_bytes)
    return () if empty else _caveats(impl, *sizes, causal, spec)


def _caveats(impl, B, H, Nq, Nk, d, dtype_bytes, causal, spec):
    """:func:`caveats` of a call :func:`dram` has checked, on the GPU whose preset is ``spec``."""
    kv, l2 = 2 * Nk * d * dtype_bytes, spec.capacity
    if causal or 2 * kv < l2:  # (every class: non-causal walks, one head's K and V at least half the L2)
        return ()
    if impl == "sdpa_flash" and fa2_pads_apart(d):
        return (PADDED_APART.format(d=d, kd=S.fa2_kernel_d(d), kv=kv / MB, l2=l2 / MB),)
    if impl == "flashref2" or (impl == "flashref" and kernel3_tiles(d, Nq, Nk, causal, dtype_bytes, B * H)[0] is None):
        return (KERNEL2_APART.format(kv=kv / MB, l2=l2 / MB),)
    if impl == "sdpa_flash" and kv >= l2:
        waves = S.waves(S.fa2_fwd(B * H, Nq, Nk, d, e=dtype_bytes, sms=spec.sms))  # the forward's grid
        if waves >= FA2_APART_WAVES:
            return (FA2_APART.format(kv=kv / MB, l2=l2 / MB, waves=waves),)
    return ()


# ------------------------------------------------------------------------- scan kernels, closed form

def scan_bytes(k: S.ScanKernel, p=PARAMS):
    """(DRAM reads, DRAM writes before the end-of-kernel residue, L2 request bytes) of a lockstep kernel.

    Waves are consecutive runs of ``k.resident`` CTAs in grid order; within a wave, a head's CTAs
    cover the union of their tile ranges once (one pass). A pass re-reads what the head's previous
    pass covered with probability ``miss(D)``, ``D`` the footprint of the passes in between.
    """
    k, p = S._checked(k), _full_params(p)
    # A rolling grid (causal, every row block scanning from key 0, longest first: ScanKernel.rolling) starts its
    # later passes one CTA at a time, as the CTAs before them end. Measured, a pass's re-reads of the pass before
    # have a knee of their own: later and sharper than the lockstep waves' (kernel 3's causal d = 64 forward reads its
    # K and V once a head at N = 65536 and 16 heads, where C_eff and kappa had 30% more bytes). So they have their own
    # pair, fitted (fit_rolling). The drift between the CTAs sharing an SM (`lag` below) keeps the lockstep pair:
    # with the rolling pair there too (rolling_drift=0, as check17 was predicted), the sharp knee left no drift past
    # the knee, and the causal forward at N = 196608 came out 19-21% under.
    rolling = k.rolling and p["rolling_rule"]
    C, kappa = (p["C_roll"], p["kappa_roll"]) if rolling else (p["C_eff"], p["kappa"])
    # A pass whose CTAs a barrier starts together (kernel 3's rounds past its knee) has one reuse distance, not the
    # spread of them that the lockstep waves' soft knee stands for, and a knee of its own, sharper (fit_sync):
    # measured, one head of N = 65536 at d = 64 re-reads none of its 16 MiB of K and V, where kappa = 2 had 40% of
    # them (48% with today's 192-row tile: notebook 08), and past 30 MiB a head every synced round re-reads them all
    # (figures/gpu/NOTES-l2.md, "Nineteenth round")
    # Kernel 3's non-causal rounds short of that knee (ScanKernel.rounds_together) start together without the
    # barrier: equal tiles, one CTA an SM. So they take the synced pair too: no number fitted. Measured, the lockstep
    # pair had the forward 17-45% over, at one to 32 heads of 12-15 MiB of K and V at d = 64 (check91, check94 and
    # k3few, which was aimed at them), where the reads run smoothly on across the barrier's threshold; with the synced
    # pair k3few, measured after the rule was written down, is within 22%, and k3few2, predicted with it, within 23%
    # (figures/gpu/NOTES-l2.md, "Forty-second round"). k3_rounds_rule=0: the lockstep pair, as every prediction up to
    # k3few
    if (k.synced or (k.rounds_together and p["k3_rounds_rule"])) and p["sync_rule"]:
        C, kappa = p["C_sync"], p["kappa_sync"]
    C_lag, kappa_lag = (C, kappa) if rolling and not p["rolling_drift"] else (p["C_eff"], p["kappa"])
    per_sm = max(1, k.resident // k.sms)
    # In a rolling grid the next pass rolls in while the last one still runs, and its tiles share the L2 with the
    # groups of an SM's drifting CTAs: measured, the model with C_eff there was 23-36% under kernel 3's causal d = 64
    # forward from 56 MiB of K and V a head on (N = 229376), at every number of heads, and within 5% at 48 MiB
    # (figures/gpu/NOTES-l2.md, "Twentieth round"). The drift's knee keeps its sharpness and gets a capacity of its
    # own, fitted (fit_rolling_drift)
    if rolling and p["rolling_drift"] and p["rdrift_rule"]:
        C_lag = p["C_rdrift"]
        # Three CTAs an SM (kernel 3's causal d = 64 forward, ScanKernel.resident // sms) drift into a knee of their
        # own, sharper and sooner: with C_rdrift, that forward was 19-29% under at every number of heads from 56 MiB
        # of K and V a head on (N = 229376-393216, kernel 3 rows of check19 to check43 and the knee64c probe) and
        # 12-16% over at 40 MiB (163840), where kernel 2's causal forward (two CTAs an SM) is within 14% with it.
        # Fitted (fit_rolling_drift3) on every rolling row of kernel 3 recorded up to check43, and checked on check44,
        # drawn after it (figures/gpu/NOTES-l2.md, "Twenty-second round")
        if per_sm >= 3 and p["rdrift3_rule"]:
            C_lag, kappa_lag = p["C_rdrift3"], p["kappa_rdrift3"]
    # A tile read by a whole wave at once is held in both L2 partitions. A wave that starts on the
    # diagonal (flashref's causal dK/dV) never reads one tile with all its CTAs at once: held once, as
    # in the staggered walk below. (The non-causal dK/dV walk, staggered with wrap-around, should by
    # the same argument be held once too; measured, it fits better held twice: sweep mean error 7.5%
    # against 9.1%. Why is open.) ``partitions_diagonal=2`` gives the model before this rule, which
    # wrote the pre-registered predictions in figures/gpu/*-predicted.json.
    dup = p["partitions_diagonal"] if k.diagonal_starts else p.get("partitions", PARTITIONS)
    unit = k.tile_bytes + k.rmw_bytes
    # Numpy over the passes (a causal grid of many heads has 10^5 of them): each pass against its head's last.
    # Every per-pass value is the same IEEE operations, in the same order, as a loop over the passes would do, and
    # the sums are sequential in pass order (np.cumsum), so the committed predictions are reproduced bit for bit.
    w, h, lo, hi, foot = _passes(k, unit)
    before = np.concatenate([[0.0], np.cumsum(foot)])  # footprint of the waves before each one
    span = _span(k, lo, hi)
    # prev[i]: the same head's pass before pass i (passes are ordered by wave), or -1 for its first
    by_head = np.lexsort((w, h))
    prev = np.full(len(w), -1, dtype=np.int64)
    same = h[by_head[1:]] == h[by_head[:-1]]
    prev[by_head[1:][same]] = by_head[:-1][same]
    again = np.flatnonzero(prev >= 0)
    j = prev[again]  # the previous pass of each pass in `again`
    wa, wp, plo, phi = w[again], w[j], lo[j], hi[j]
    ov = _span(k, np.maximum(lo[again], plo), np.minimum(hi[again], phi))  # tiles shared with the last pass
    # between the two passes: half of each pass's wave, and every wave in between
    D = (foot[wp] + foot[wa]) / 2 + (before[wa] - before[wp + 1])
    m = _misses(dup * D, C, kappa)
    # after the first wave, the CTAs sharing an SM drift apart: per_sm groups, out of phase by 1/per_sm of a
    # scan; a group re-reads what the one ahead of it read if that was evicted, i.e. if 1/per_sm of the head's
    # tiles (held twice) outgrow the L2
    lag = _misses(dup * ov * unit / per_sm, C_lag, kappa_lag) if per_sm > 1 else 0.0
    # (FlashAttention-2's forward kernels but the d = 64 one, ScanKernel.drift_ramp: they get there over the kernel's
    # first drift_waves waves, the drift growing with the wave's index)
    ramp = np.minimum(1.0, wa / p["drift_waves"]) if k.drift_ramp else 1.0
    spread = np.where(wa > 0, 1 + (per_sm - 1) * lag * ramp, 1.0)
    # FlashAttention-2's d = 64 backward (ScanKernel.comes_apart), one CTA an SM, has no SM drift, and its passes
    # come apart the longer it has run instead: measured past the knee, its bytes beyond the lockstep pass's grow with
    # the steps (waves times the query tiles a CTA walks) it has run, none at 32 thousand, 10-35% of the backward's at
    # 100-127 thousand, 8x at 286 thousand (figures/gpu/NOTES-l2.md, "Twenty-first round"). A pass that starts t steps
    # into the kernel reads what it re-reads exp((t - apart_steps) / apart_tau) times: once up to apart_steps, then
    # once for each L2's worth of tiles its spreading CTAs lie apart, at most once for each CTA of a wave. Fitted
    # (fit_apart). Only where its CTAs scan the same query tiles (non-causal): the causal kernel's columns end at their
    # diagonals, and measured its backward stays within 4% of the lockstep passes up to 144 thousand steps, where the
    # rule had it 31-50% over (check19, check30, check41). apart_causal=1: on the causal kernel too, the rule's first
    # form, which wrote the predictions of check37 to check41
    if k.comes_apart and p["apart_rule"] and (k.same_scans or p["apart_causal"]):
        t = wa * float(np.mean([k.span(a, b) for a, b in k.ranges]))  # steps: a wave walks a CTA's scan
        spread = spread * np.minimum(np.exp(np.clip((t - p["apart_steps"]) / p["apart_tau"], 0.0, 50.0)), k.resident)
    read = span * unit  # a head's first pass reads its tiles; a later one what it shares with the last and missed
    read[again] = read[again] - ov * unit + ov * unit * m * spread
    # FlashAttention-2's d = 64 forward (ScanKernel.heads_roll_in): a head's first pass, when it is not in the grid's
    # first wave, starts as the CTAs of the head before it end. Measured, every head after the first reads 0.6-3.7 times
    # its K and V more than the lockstep passes say, more the larger they are against the L2 (from N = 98304 to 262144;
    # its d = 128 forward, whose SM's CTAs drift apart over the first waves, does not). So that pass reads its tiles
    # 1 + head_reads times what misses at its own footprint (held twice). Why a head rolling in costs that much is open
    # (figures/gpu/NOTES-l2.md, "Twenty-first round"). Fitted (fit_head_reads)
    if k.heads_roll_in and p["head_rule"]:
        first = np.flatnonzero((prev < 0) & (w > 0))
        read[first] = read[first] * (1 + p["head_reads"] * _misses(dup * span[first] * unit, C, kappa))
    reads = _sequential_sum(read)
    # the previous pass's dirty fp32 dQ: written back if evicted before this pass, or if this pass leaves it
    dirty = span * k.rmw_bytes
    # (the share left dirty divides tile counts by a span: on a ragged last tile the two differ, and a repeated pass
    # writes back up to (1 - last tile's share) / tiles more of dQ than the LRU does, at most 0.2% of the writes in a
    # review's shapes; kept as it is, since every committed prediction was written with it)
    writes = _sequential_sum(dirty[j] * m + dirty[j] * (1 - m) * ((phi - plo - ov) / np.maximum(1, phi - plo)))
    # each head's last pass: its dirty data reaches DRAM eventually (heads in the order of their first pass)
    last_of_head = by_head[np.r_[~same, True]]  # by_head's last pass of each head, heads ascending
    heads_seen = h[prev < 0]  # heads in the order of their first pass
    last_by_head = dict(zip(h[last_of_head].tolist(), last_of_head.tolist()))
    writes += _sequential_sum(dirty[[last_by_head[x] for x in heads_seen.tolist()]])
    own = k.private_total()  # per head, in full tiles
    reads += k.heads * own * k.private_read
    writes += k.heads * own * k.private_write
    r = k.range_array()
    accesses = k.heads * _sequential_sum(_span(k, r[:, 0], r[:, 1]))  # every CTA's tiles, summed in block order
    l2 = accesses * (k.tile_bytes + 2 * k.rmw_bytes) + k.heads * own * (k.private_read + k.private_write)
    return reads, writes, l2


def _sequential_sum(x) -> float:
    """x[0] + x[1] + ... in order (a loop's rounding, not numpy's pairwise sum)."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def _span(k: S.ScanKernel, lo, hi):
    """:meth:`ScanKernel.span`, vectorised: tiles lo..hi-1 in full tiles, the ragged last one as its share."""
    return np.where(hi > lo, hi - lo - np.where(hi == k.n_tiles, 1.0 - k.last_scan, 0.0), 0.0)


def _passes(k: S.ScanKernel, unit):
    """The lockstep passes of ``k``: one per (wave, head) that a wave's CTAs belong to, ordered by wave, with the
    union ``[lo, hi)`` of the tiles those CTAs scan; and each wave's footprint in bytes (its passes' tiles and its
    CTAs' own tiles). Waves are consecutive runs of ``k.resident`` CTAs in grid order. Numpy over the whole grid:
    a prediction at B·H·N/BLOCK_M of millions of CTAs stays well under a second."""
    heads, blocks = k.grid_arrays()
    wave = np.arange(len(heads), dtype=np.int64) // k.resident
    ranges = k.range_array().astype(np.int64, copy=False)
    key = wave * k.heads + heads  # one key per (wave, head) pair
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])  # where each pair's CTAs start
    lo = np.minimum.reduceat(ranges[blocks[order], 0], first)
    hi = np.maximum.reduceat(ranges[blocks[order], 1], first)
    pass_wave, pass_head = key[first] // k.heads, key[first] % k.heads
    span = _span(k, lo, hi)
    n_waves = int(wave[-1]) + 1 if len(wave) else 0
    own = np.bincount(wave, weights=np.where(blocks == k.ctas_per_head - 1, k.last_cta, 1.0), minlength=n_waves)
    foot = np.bincount(pass_wave, weights=span, minlength=n_waves) * unit + own * (k.private_read + k.private_write)
    return pass_wave, pass_head, lo, hi, foot


def staggered_scan_bytes(k: S.ScanKernel, p=PARAMS):
    """FlashAttention-2's causal forward: CTAs launched shortest first, each walking its key
    blocks from its diagonal down to 0, out of step with one another.

    Row block i re-reads the keys that row block i - 1 read, a little later. How much is touched in
    between (the reuse distance ``D``) follows from the launch order, every CTA walking at one speed:

    * *the first wave* starts together: block i starts ``r`` tiles above block i - 1 (``r = BM / BN``
      key tiles per row block), so it reaches each tile ``r`` steps later, while every resident CTA
      reads ``r`` tiles of its own: ``D = R·r`` tiles (``R`` CTAs in the wave);
    * *later waves*: a CTA starts when one ends, and the resident CTAs spread over every position of
      the head's key prefix; between two reads of a tile they touch about all of it, plus the tiles
      of the blocks started in the meantime: ``D = hi_i + lag·R·r`` tiles. In the one-speed
      simulation (:func:`flashref.schedule.simulate`) ``lag`` is small (the prefix rule, ``lag = 0``,
      follows it, tested); on the H100 the CTAs drift further apart and ``lag`` is fitted
      (:func:`fit_staggered`), as are the capacity and sharpness below. This rule is the model's
      least physical part: read ``lag`` as a measured property of the hardware, not a derivation.
      With ``lag_other`` (the H100's shared set) it counts only the share of the CTAs running at
      that moment that belong to other heads: the same head's tiles are keys its prefix already
      counts, so a head alone re-reads at its prefix (``his_i``) and keeps its K and V in L2 up to
      about the L2's size;
    * *the other heads running* (``overlap``): the grid runs head by head, so while one head's last
      (longest) row blocks run, the next head's first ones start, and for a while both heads' key
      prefixes share the L2 (at N = 131072, d = 64, 673 of the next head's 1024 row blocks start before the
      last block of the one before ends, on the list schedule below). Each re-read's ``D`` adds ``overlap``
      times the key prefix of every other head that has a CTA running at that moment: its whole prefix for a head whose
      CTAs have all started, the longest started block's for the head being launched. The moments come
      from :func:`flashref.schedule.launch_times` (the one-speed list schedule), at ``OVERLAP_SAMPLES``
      points of each CTA's re-reads. ``overlap = 0`` leaves the rule out, as every prediction written
      before it did;
    * *the heads spread* (``spread``, ``spread_time``): the list schedule keeps the heads in grid order, and the
      GPU does not for long. Its CTAs drift apart (as the lockstep waves' do), so more heads run side by side than
      the schedule says: the other heads running at a moment gain ``spread`` heads (whole key prefixes, of heads
      launched before and no longer running on the schedule), reached linearly over the first ``spread_time``
      head-times (one head's CTAs' steps over the resident slots) of the kernel. Measured, the walk's re-reads a
      head rise with the number of heads up to about eight, then stay (figures/gpu/NOTES-l2.md, "Eighteenth
      round"). ``spread = 0`` leaves it out, as every prediction up to check18 did. A head of more than
      ``spread_waves`` waves of CTAs runs mostly alone, and the heads beside it spread in proportion
      (``spread_waves · R / T``; ``swaves_rule = 0``: in full at every N, as every prediction up to check31).

    A re-read misses with ``miss(D)`` of its own effective capacity and sharpness (``C_stag``,
    ``kappa_stag``): no tile is shared by a whole wave at once, so the two partitions do not both
    hold it as in a lockstep pass, and the knee is sharper.
    """
    k, p = S._checked(k), _full_params(p)
    if k.heads_first:
        raise ValueError("k: the staggered rule runs a grid head by head (heads_first=False)")
    C, kappa, lag, overlap = p["C_stag"], p["kappa_stag"], p["lag"], p["overlap"]
    unit, R, T = k.tile_bytes, k.resident, k.ctas_per_head
    his = np.array([k.span(lo, hi) for lo, hi in (k.ranges[c] for c in k.launch)], dtype=float)
    r = max(1.0, float(his[1] - his[0])) if T > 1 else 1.0
    fresh = his[0] * unit + float(np.sum(np.maximum(his[1:] - his[:-1], 0))) * unit  # per head
    # the CTAs that re-read (every one but a head's first launched), in grid order: i = h·T + position
    again = np.flatnonzero(np.arange(k.heads * T) % T > 0)
    at = again % T  # each one's place in its head's launch order
    reuse = np.minimum(his[at], his[at - 1]) * unit  # bytes block i re-reads of what block i - 1 read
    in_first = again < R  # launched with the first wave
    if overlap == 0 and not p["lag_other"]:
        # every head alike: one miss rate per launch position, and one for the first wave (lag_other needs the
        # schedule's heads, below)
        m_first = miss(min(R, k.heads * T) * r * unit, C, kappa)
        m_later = _misses((his[1:] + lag * R * r) * unit, C, kappa)
        m = np.where(in_first, m_first, m_later[at - 1])
    else:
        other, ramp, earlier, other_share = (x[again] for x in _other_heads_prefix(k, his))
        # the heads that spread beside the schedule's: ramped up over spread_time, at most those that have ended
        more_heads = np.minimum(p["spread"] * np.minimum(1.0, ramp / p["spread_time"]), earlier)
        # A head of many waves runs mostly alone: the CTAs of the heads beside it can drift in only while the two
        # overlap, about R of a head's T CTAs. Measured, FlashAttention-2's d = 64 walk reads the same bytes a head at
        # one, two and four heads of N = 262144-327680 (2048-2560 CTAs a head, 8-10 waves), where the spread in
        # full put four heads 49-56% over (figures/gpu/NOTES-l2.md, "Twentieth round"). So the spread is in full
        # up to spread_waves waves of a head's CTAs, and in proportion past them (fitted, fit_spread_waves)
        if p["swaves_rule"]:
            more_heads = more_heads * min(1.0, p["spread_waves"] * R / T)
        if p["lag_other"]:
            # the tiles the lag stands for are other heads' keys: the same head's are in its prefix already
            later = his[at][:, None] + lag * R * r * other_share
        else:
            later = (his[at] + lag * R * r)[:, None]
        D = np.where(in_first[:, None], min(R, k.heads * T) * r, later) \
            + overlap * (other + more_heads * his.max())
        m = _misses_np(D * unit, C, kappa).mean(axis=1)
    # far past the knee a share of the re-reads still hits (a real L2 is not LRU): at most miss_cap of them miss
    m = m * p["miss_cap"]
    reads = k.heads * fresh + _sequential_sum(reuse * m)
    own = k.private_total()
    reads += k.heads * own * k.private_read
    writes = k.heads * own * k.private_write
    l2 = k.heads * (float(his.sum()) * unit + own * (k.private_read + k.private_write))
    return reads, writes, l2


OVERLAP_SAMPLES = 4  # not fitted: moments of a CTA's re-reads at which the heads running beside it are counted


def _other_heads_prefix(k: S.ScanKernel, his):
    """For every CTA of ``k`` (grid order) and each of ``OVERLAP_SAMPLES`` moments of its re-reads, on the one-speed
    schedule (:func:`staggered_scan_bytes`): the key prefix (in tiles) of the other heads with a CTA running then; the
    moment, in head-times (one head's CTA steps over the resident slots); and how many heads launched before are no
    longer running then (all the spread term may add). It depends on the schedule alone, so it is kept for the next
    call on the same kernel (a fit asks hundreds)."""
    # every field the schedule and the spans read (n_tiles: whether a range reaches the ragged last tile)
    key = (k.heads, k.resident, tuple(k.ranges), tuple(k.launch), k.last_scan, k.n_tiles, k.heads_first)
    if key not in _PREFIX_CACHE:
        if len(_PREFIX_CACHE) >= 32:
            _PREFIX_CACHE.pop(next(iter(_PREFIX_CACHE)))
        _PREFIX_CACHE[key] = _compute_other_heads_prefix(k, his)
    return _PREFIX_CACHE[key]


_PREFIX_CACHE: dict = {}


def _compute_other_heads_prefix(k, his):
    T = k.ctas_per_head
    heads, _, start, end = S.launch_times(k)
    at = np.arange(len(heads)) % T
    steps = end - start
    shared = np.where(at > 0, np.minimum(steps, np.roll(steps, 1)), 0.0)  # what block i - 1 of the head also read
    frac = (np.arange(OVERLAP_SAMPLES) + 0.5) / OVERLAP_SAMPLES
    # every head before the one being launched has launched all its CTAs; those whose last CTA has not ended are
    # running. A head's longest block is launched last and every head's is as long, so the heads end in grid order
    # (the running maximum only guards the order)
    last_end = np.maximum.accumulate(np.maximum.reduceat(end, np.arange(k.heads) * T))
    full = his.max()
    head_time = float(np.sum(steps[:T])) / k.resident
    # the CTAs ended by a moment, over all heads; and each head's ends in a band of its own (head h's shifted by h
    # spans), so that one sorted array answers every head: the grid runs head by head and starts never decrease along
    # it, so a head's starts are its own slice of ``start``
    span = float(end.max()) + 1.0
    ends, banded = np.sort(end), np.sort(end + heads * span)
    out = [None] * 4  # each the dtype its first chunk computes (the heads count in integers)
    # CTA by CTA in chunks: the same arithmetic, element for element, with each temporary small enough to stay in the
    # CPU's cache (at 256 heads of 2048 CTAs, whole-grid temporaries made the first prediction 2x slower)
    for a in range(0, len(heads), _PREFIX_CHUNK):
        c = slice(a, a + _PREFIX_CHUNK)
        # a CTA walks down from its diagonal: its fresh tiles first, then the shared ones, at one tile a step
        t = (start[c] + steps[c] - shared[c])[:, None] + shared[c, None] * frac
        started = np.searchsorted(start, t, side="right")  # the CTAs started by then, over all heads
        g = started - 1  # the CTA launched last by then ...
        launching = heads[g]  # ... and its head, the one being launched
        running_before = np.maximum(launching - np.searchsorted(last_end, t, side="right"), 0)
        current = his[at[g]]
        total = running_before * full + current  # every running head's prefix, the CTA's own among them
        own_head = heads[c, None]
        own = np.where(own_head < launching, full, current)
        # the share of the CTAs running at t that belong to other heads: every CTA started by t less every one
        # ended by t, over all heads and over the CTA's own
        ended = np.searchsorted(ends, t, side="right")
        own_started = np.clip(started - own_head * T, 0, T)
        own_ended = np.searchsorted(banded, t + own_head * span, side="right") - own_head * T
        running = np.maximum(started - ended, 1)
        for i, value in enumerate((total - own, t / head_time, launching - running_before,
                                   1.0 - (own_started - own_ended) / running)):
            if out[i] is None:
                out[i] = np.empty((len(heads), OVERLAP_SAMPLES), dtype=value.dtype)
            out[i][c] = value
    return tuple(out)


#: CTAs a chunk of :func:`_compute_other_heads_prefix` (its temporaries, OVERLAP_SAMPLES floats a CTA, stay in cache)
_PREFIX_CHUNK = 1 << 15


def _misses_np(D, C, kappa):
    """:func:`miss` over an array at once (numpy's log and exp: the overlap rule's predictions are new, and need not
    reproduce a committed one to the last bit)."""
    D = np.asarray(D, dtype=float)
    if kappa == math.inf:
        return (D > C).astype(float)
    with np.errstate(divide="ignore", over="ignore"):
        x = kappa * (math.log(C) - np.log(np.where(D > 0, D, 1.0)))
        return np.where(D > 0, 1.0 / (1.0 + np.exp(np.minimum(x, 700.0))), 0.0)


# ------------------------------------------------------------------------- kernel sequences

def _stream(name, R, W, n=1, l2=None):
    """A kernel that streams R bytes in and W bytes out, launched ``n`` times (an elementwise op split in chunks);
    ``l2``: its traffic between L2 and the SMs over all launches, where its CTAs read more than R (default R + W)."""
    return ("stream", name, float(R) * n, float(W) * n, n, float(R + W) * n if l2 is None else float(l2))


def _elementwise_chunks(numel):
    """TensorIterator splits an elementwise kernel whose index would overflow int32 into halves."""
    n = 1
    while numel / n > 2 ** 31 - 1:
        n *= 2
    return n


def kernels(impl, mode, *, B, H, Nq, Nk, d, causal=False, e=2, sms=S.SMS, fa2_split=True, softmax_passes=True):
    """The kernels one call launches: ("scan", ScanKernel, staggered), ("stream", name, R, W, launches, L2) (R, W
    and the L2 traffic over all its launches), ("mask", name, R, W, chunks, heads) (one masked_fill chunk, launched
    ``chunks`` times) or ("rows", name, S bytes, bytes of the rows in flight) (:func:`_softmax`). ``fa2_split=False``:
    FlashAttention-2's forward never splits its keys (the model that predicted every set up to check9);
    ``softmax_passes=False``: the softmax streams S once at any row length (every set up to check13)."""
    _check_impl_mode(impl, mode)
    B, H, Nq, Nk, d, e = _sizes(B, H, Nq, Nk, d, e)
    causal = _causal(causal)
    _check_shape(impl, B, H, Nq, Nk, d, causal)  # (any element size: the kernels' bytes scale with it)
    return _kernels(impl, mode, B, H, Nq, Nk, d, causal, e, positive_int(sms, "sms"), _bool(fa2_split, "fa2_split"),
                    _bool(softmax_passes, "softmax_passes"))


# PyTorch's softmax (aten/src/ATen/native/cuda/SoftMax.cu) keeps a row in shared memory when its elements fit one
# block's 48 KB less the reduction's scratch: 24512 fp16 elements, as Nsight's kernel names show (the softmax probe)
SOFTMAX_SMEM_BYTES = 49024
SOFTMAX_CTAS_PER_SM = 2  # cunn_SoftMaxForward's 1024-thread blocks: Nsight's occupancy limit (warps, registers)


def _softmax(Sb, Nk, e, sms, passes=True):
    """Eager's softmax over rows of ``Nk`` elements of ``e`` bytes, ``Sb`` bytes in all. A row that fits shared
    memory is read once (cunn_SoftMaxForwardSmem); a longer one is read three times by cunn_SoftMaxForward (its
    maximum, the sum of exponentials, then the output), by one block a row, ``sms x SOFTMAX_CTAS_PER_SM`` rows in
    flight: the second and third reads find the row in L2 only while those rows fit (:func:`predict_kernels`)."""
    if not passes or Nk * e <= SOFTMAX_SMEM_BYTES:
        return _stream("softmax", Sb, Sb)
    return ("rows", "softmax (cunn_SoftMaxForward, three passes)", float(Sb), float(sms * SOFTMAX_CTAS_PER_SM * Nk * e))


def _kernels(impl, mode, B, H, Nq, Nk, d, causal, e, sms, fa2_split, softmax_passes=True):
    """:func:`kernels` for arguments already checked (by it, or by :func:`dram`)."""
    BH = B * H
    Xq, Xk = BH * Nq * d * e, BH * Nk * d * e  # one Q-sized (K-sized) fp16 tensor
    out = []
    if impl == "eager":
        Sb = BH * Nq * Nk * e
        ch = _elementwise_chunks(BH * Nq * Nk)
        out += [_stream("bmm S = Q K^T", Xq + Xk, Sb)]
        out += [_stream("mul S * scale", Sb / ch, Sb / ch, ch)]
        if causal:
            out += [("mask", "masked_fill", Sb / ch, Sb / ch, ch, BH)]
        out += [_softmax(Sb, Nk, e, sms, softmax_passes), _stream("bmm O = P V", Sb + Xk, Xq)]
        if mode == "fwd_bwd":
            out += [_stream("bmm dV = P^T dO", Sb + Xq, Xk), _stream("bmm dP = dO V^T", Xq + Xk, Sb)]
            out += [_stream("binary (SoftmaxBackward0)", 2 * Sb / ch, Sb / ch, ch)]
            out += [_stream("softmax_backward", 2 * Sb, Sb)]
            out += [_stream("mul dS * scale", Sb / ch, Sb / ch, ch)]
            if causal:
                out += [("mask", "masked_fill backward", Sb / ch, Sb / ch, ch, BH)]
            out += [_stream("bmm dQ = dS K", Sb + Xk, Xq), _stream("bmm dK = dS^T Q", Sb + Xq, Xk),
                    _stream("copy dK", Xk, Xk)]
        return out
    if impl in ("flashref", "flashref2"):
        fwd3, bwd3 = kernel3_tiles(d, Nq, Nk, causal, e, BH) if impl == "flashref" else (None, None)
        if fwd3 is None:  # kernel 2 (flashref/gpu/kernels.py)
            out.append(("scan", S.flashref_fwd(BH, Nq, Nk, d, causal, e, sms), False))
        else:
            out.append(("scan", S.flashref3_fwd(BH, Nq, Nk, d, causal, e, sms, fwd3), False))
        if mode == "fwd_bwd" and bwd3 is None:  # kernel 2's backward: dQ added atomically into fp32
            out.append(_stream("_bwd_preprocess (D, zero fp32 dQ)", 2 * Xq, 4 * BH * Nq + 2 * Xq))
            out.append(("scan", S.flashref_dkdv(BH, Nq, Nk, d, causal, e, sms), False))
            out.append(_stream("_bwd_dq_scale", 2 * Xq, Xq))
        elif mode == "fwd_bwd":  # kernel 3's: the dK/dV kernel, then the dQ kernel, no atomics
            out.append(_stream("_bwd_preprocess (D)", 2 * Xq, 4 * BH * Nq))
            out.append(("scan", S.flashref3_dkdv(BH, Nq, Nk, d, causal, e, sms, bwd3), False))
            out.append(("scan", S.flashref3_dq(BH, Nq, Nk, d, causal, e, sms, bwd3), False))
        return out
    if impl == "sdpa_flash":
        splits = S.fa2_num_splits(BH, Nq, Nk, d, sms) if fa2_split else 1
        if splits == 1:
            out.append(("scan", S.fa2_fwd(BH, Nq, Nk, d, causal, e, sms), causal))
        else:
            # A grid too small to fill the GPU: each of `splits` CTAs of a 64-row query block scans its share of
            # the keys and writes an fp32 partial O and its LSE; a second kernel merges them. Both grids fit in about
            # one wave, whose CTAs of one split read its K/V tiles together: Q, K and V cross DRAM once.
            part = splits * BH * Nq * (d * 4 + 4)  # fp32 partial O_i and LSE_i of every split
            # through L2: each CTA reads its 64-row Q block and its split's K/V tiles, so every query block reads
            # all of K and V once (Q once per split), and writes its partials
            l2 = splits * Xq + -(-Nq // 64) * 2 * Xk + part
            out += [_stream("FA2 flash_fwd_splitkv_kernel", Xq + 2 * Xk, part, l2=l2),
                    _stream("FA2 flash_fwd_splitkv_combine_kernel", part, Xq + 4 * BH * Nq)]
        if mode == "fwd_bwd":
            out += [_stream("copy (contiguous O)", Xq, Xq), _stream("copy (contiguous dO)", Xq, Xq),
                    _stream("flash_bwd_dot_do_o (D, zero fp32 dQ)", 2 * Xq, 4 * BH * Nq + 2 * Xq),
                    ("scan", S.fa2_bwd(BH, Nq, Nk, d, causal, e, sms), False),
                    _stream("flash_bwd_convert_dq", 2 * Xq, Xq)]
        return out
    raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")


def kernel3_tiles(d, Nq, Nk, causal, e=2, BH=1):
    """``(Tiles3, TilesB)`` where ``flashref.gpu.attention`` runs kernel 3 on a Hopper GPU with Triton 3.6
    (``TilesB`` None: kernel 2's backward after kernel 3's forward), ``(None, None)`` where it runs kernel 2:
    its dispatcher's own pure-Python rules (``kernel3.plan``, ``kernel3.backward_plan``, and B·H within one
    launch, ``gpu.MAX_GRID_Y``) for a call without options on 2-byte inputs; 4-byte inputs go to kernel 2."""
    from ..gpu import MAX_GRID_Y, kernel3
    (d, Nq, Nk, e), causal = (positive_int(v, n) for v, n in ((d, "d"), (Nq, "Nq"), (Nk, "Nk"), (e, "e"))), \
        _causal(causal)  # else a head dim no kernel runs would come back as "kernel 2 runs it"
    if e != 2 or BH > MAX_GRID_Y:
        return None, None
    fwd, why = kernel3.plan(d, Nq, Nk, "float16", causal)
    if why:
        return None, None
    return fwd, kernel3.backward_plan(d, Nq, Nk, "float16", causal)[0]


def predict_kernels(seq, Nq, Nk, p=PARAMS):
    rows = []
    for item in seq:
        if item[0] == "scan":
            _, k, stag = item
            r, w, l2 = (staggered_scan_bytes if stag else scan_bytes)(k, p)
            name = k.name
        elif item[0] == "rows":  # the softmax's three passes: the two re-reads miss while the rows in flight outgrow L2
            _, name, Sb, D = item
            r = Sb * (1 + 2 * miss(D, p["C_rows"], p["kappa_rows"]))
            rows.append((name, r, Sb - _residue(Sb, r, p), 3 * Sb + Sb))
            continue
        elif item[0] == "mask":  # masked_fill: S in and out, and the (Nq, Nk) bool mask, per head
            _, name, Rb, Wb, ch, BH = item
            mask = Nq * Nk
            D = mask + 2 * Rb / max(1, BH / ch)  # between two heads' reads of the mask: one head's S in and out
            r = Rb + mask * (1 + (BH / ch - 1) * miss(D, p["C_eff"], p["kappa"]))
            w, l2 = Wb, Rb + Wb + mask * BH / ch
            # each of the ch launches (chunks of the heads) is alike, with its own end-of-kernel residue
            rows.append(_launches(name, ch, r * ch, ch * (w - _residue(w, r, p)), l2 * ch))
            continue
        else:
            _, name, r, w, n, l2 = item
            rows.append(_launches(name, n, r, n * (w / n - _residue(w / n, r / n, p)), l2))
            continue
        rows.append((name, r, w - _residue(w, r, p), l2))
    return rows


def _launches(name, n, r, w, l2):
    """One row of ``by_kernel`` for a kernel launched ``n`` times (an elementwise op split in chunks)."""
    return (name if n == 1 else f"{name} (x{n} launches)", r, w, l2)


def dram(impl, mode, *, B, H, Nq, Nk, d, causal=False, gpu="h100", dtype_bytes=2, **opts):
    """Predicted DRAM bytes of one call (Nsight Compute's dram__bytes_read/write.sum over its kernels).

    ``gpu`` picks the L2 preset and the GPU's staggered-walk parameters (``GPU_PARAMS``); ``params=``
    overrides entries of PARAMS (for fitting and for what-if sweeps).

    The prediction's ``caveats`` names a class of calls measured to read far more than the model says, where the
    call is one of them (:func:`caveats`: FlashAttention-2 at a head dim its kernel pads, and kernel 2, near and past
    the knee, non-causal; the bytes are then the lockstep state, a lower bound), or where some such calls read far
    more (FlashAttention-2's non-causal walks past the knee at its own head dims).

    ``sdpa_flash`` is FlashAttention-2 at the head dim given: PyTorch pads a head dim that is not a multiple of 8 to
    one before the flash kernels (and copies Q, K, V to do it); the model has neither, and no run measured such a d.

    Time: under a second at N = 131072 for up to 256 heads (B·H; ``examples/dram_speed.py`` times them at d = 64, 128,
    192 and 256); a head dim past 128 runs 64-row tiles, twice the CTAs, and a first causal FlashAttention-2 forward
    there took 0.6-1.0 s at 256 heads on this project's 2-core CPU (1.15 s before its other-heads pass ran in
    cache-sized chunks). For the tiled
    kernels (``flashref``, ``sdpa_flash``) the schedule lays out every CTA of the grid, so time and memory grow with
    B·H·N: at N = 131072 a first call takes about 3 s at 1024 heads and 15 s at 4096 (a second call on the same
    shape about a tenth of that). At 2^30 rows (B·H·max(Nq, Nk)), the most this model takes (MAX_ROWS), on this
    project's 2-core CPU FlashAttention-2's causal forward took 32 s and 6.3 GB, flashref's causal forward+backward
    34 s and 4.3 GB, FlashAttention-2's non-causal forward+backward 12 s, and one query against 2^30 keys 6 s."""
    return _dram(impl, mode, B, H, Nq, Nk, d, causal, gpu, dtype_bytes, opts, Resolved)[0]


def dram_reads(impl, mode, *, B, H, Nq, Nk, d, causal=False, gpu="h100", dtype_bytes=2, **opts):
    """:func:`dram`'s prediction, with the parameters it resolved for the call (PARAMS, the GPU's sets, ``params=``)
    and the names of those the prediction read: ``(DRAMPrediction, resolved, read)``. Any other values of the names
    it did not read give the same prediction (it never looked at them), so a what-if that changes only those needs
    no prediction of its own: ``l2score.ablation`` predicts a row again with a rule off only where the rule's
    resolved parameters differ in a name the row read. The switches that pick a GPU's or a walk's parameter set
    (``overlap_rule``, ``spread_rule``, ``cap_rule``, ...) are the exception: they are resolved into the values they
    pick before the prediction reads anything, so flipping one changes ``resolved``, and the names read are compared
    there, not the switch."""
    prediction, p = _dram(impl, mode, B, H, Nq, Nk, d, causal, gpu, dtype_bytes, opts, ReadParams)
    read = frozenset(p.read)  # before the copy below, which reads every name
    return prediction, Resolved(p), read


def resolved_params(impl, *, d, causal=False, gpu="h100", params=None):
    """The parameters :func:`dram` resolves for a call of ``impl`` at head dim ``d`` on ``gpu`` (what
    :func:`dram_reads` returns as ``resolved``; they depend on the call through these alone)."""
    _check_impl_mode(impl, MODES[0])
    preset(gpu)  # a GPU dram knows, or an error naming gpu (as dram gives)
    d = positive_int(d, "d")
    _check_shape(impl, 1, 1, 1, 1, d, False)  # a head dim the impl's kernels take (one row: no other rule applies)
    return Resolved(_params(gpu.lower(), d, impl == "sdpa_flash" and bool(_causal(causal)), _check_params(params)))


def _dram(impl, mode, B, H, Nq, Nk, d, causal, gpu, dtype_bytes, opts, kind):
    """:func:`dram`, its parameters resolved into a ``kind`` (Resolved, or ReadParams to note the names read):
    ``(DRAMPrediction, the parameters)``."""
    check_options(opts, {"B", "H", "Nq", "Nk", "d", "causal", "gpu", "dtype_bytes", "params"}, "iomodel.dram")
    params = opts.get("params")
    B, H, Nq, Nk, d, dtype_bytes, causal, empty, spec = _checked_call(impl, mode, B, H, Nq, Nk, d, causal, gpu,
                                                                      dtype_bytes)
    p = kind(_params(gpu.lower(), d, impl == "sdpa_flash" and causal, _check_params(params)))
    if empty:
        return DRAMPrediction(0.0, 0.0, 0.0, []), p
    notes = _caveats(impl, B, H, Nq, Nk, d, dtype_bytes, causal, spec)
    # each switch read only where it decides something (a name dram_reads reports read is one the call depends on):
    # FlashAttention-2 splits the keys of a grid too small to fill the GPU only, and only eager runs a softmax
    split = impl == "sdpa_flash" and S.fa2_num_splits(B * H, Nq, Nk, d, spec.sms) > 1 and bool(p["fa2_split"])
    seq = _kernels(impl, mode, B, H, Nq, Nk, d, causal, dtype_bytes, spec.sms, split,
                   impl == "eager" and bool(p["softmax_passes"]))
    rows = predict_kernels(seq, Nq, Nk, p)
    return DRAMPrediction(sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows), rows, notes), p


def _check_impl_mode(impl, mode):
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def _sizes(B, H, Nq, Nk, d, e, e_name="e"):
    """The same value rules as every entry point (flashref.problem), the lengths within SEQ_BOUND."""
    return tuple(positive_int(v, name, SEQ_BOUND if name in ("Nq", "Nk") else None)
                 for v, name in ((B, "B"), (H, "H"), (Nq, "Nq"), (Nk, "Nk"), (d, "d"), (e, e_name)))


def _full_params(p):
    """A closed form's ``p``: PARAMS, overridden by ``p``'s entries, each checked as ``dram(params=...)``'s (taken as
    it is where :func:`dram` resolved and checked it already)."""
    return p if p is PARAMS or isinstance(p, Resolved) else {**PARAMS, **(_check_params(p) or {})}


class Resolved(dict):
    """The parameters :func:`dram` resolved for one call: every name of PARAMS, each checked."""


class ReadParams(Resolved):
    """Resolved parameters that note the names read by name (``p[name]``, ``p.get(name)``) in ``read``. Any other
    way in (iterating, ``keys``, ``items``, ``values``, a copy, ``**p``, which iterates a dict subclass that defines
    ``__iter__``) counts as reading every name: ``read`` may hold names the prediction did not need, never miss one
    it did."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        self.read.add(name)
        return super().get(name, default)

    def _every_name(self):
        self.read.update(super().keys())

    def __iter__(self):
        self._every_name()
        return super().__iter__()

    def keys(self):
        self._every_name()
        return super().keys()

    def items(self):
        self._every_name()
        return super().items()

    def values(self):
        self._every_name()
        return super().values()

    def copy(self):
        self._every_name()
        return Resolved(self)


# the lengths' bound, problem.MAX_N: the kernels index a sequence with 32-bit integers (and so does this model's grid)
SEQ_BOUND = (MAX_N, f"at most {MAX_N} (32-bit sequence indices)")
# The tiled kernels' schedule lays out every CTA (about 600 bytes and 2 us each for FlashAttention-2's causal walk,
# the most): at most 2^30 rows of (batch, head, position), 2^23 CTAs of 128 rows. Q, K, V and O of that many rows
# take 2^33·d bytes, more than one GPU holds from d = 32 on.
MAX_ROWS = 2 ** 30
EAGER_DTYPE_BYTES = (2, 4, 8)  # fp16/bf16, fp32, fp64: what plain PyTorch ops run in


def _checked_call(impl, mode, B, H, Nq, Nk, d, causal, gpu, dtype_bytes):
    """:func:`dram`'s checks of a call (which :func:`caveats` makes too), each error naming its argument:
    ``(B, H, Nq, Nk, d, dtype_bytes, causal, empty, the GPU's preset)``, causal a bool and an empty batch or head axis
    (as every entry point takes one: no kernel has work, nothing crosses DRAM) checked as one of size 1, ``empty``
    saying it was."""
    _check_impl_mode(impl, mode)
    B, H = _nonnegative_int(B, "B"), _nonnegative_int(H, "H")
    empty = B == 0 or H == 0
    B, H, Nq, Nk, d, dtype_bytes = _sizes(max(B, 1), max(H, 1), Nq, Nk, d, dtype_bytes, e_name="dtype_bytes")
    causal = bool(_causal(causal))
    _check_call(impl, B, H, Nq, Nk, d, causal, dtype_bytes)
    return B, H, Nq, Nk, d, dtype_bytes, causal, empty, preset(gpu)  # (a GPU dram knows, or an error naming gpu)


def _check_call(impl, B, H, Nq, Nk, d, causal, dtype_bytes):
    """Refuse a call no modelled kernel runs, or one past MAX_ROWS, naming the argument (a prediction for it would
    describe nothing; the lengths' 32-bit bound is _sizes')."""
    if impl == "eager":
        if dtype_bytes not in EAGER_DTYPE_BYTES:
            raise ValueError(f"dtype_bytes: eager attention runs in fp16/bf16, fp32 or fp64 {EAGER_DTYPE_BYTES}, "
                             f"got {dtype_bytes}")
    elif dtype_bytes != 2:
        raise ValueError(f"dtype_bytes: impl={impl!r} runs fp16 and bf16 only (2 bytes), got {dtype_bytes}")
    _check_shape(impl, B, H, Nq, Nk, d, causal)


def _check_shape(impl, B, H, Nq, Nk, d, causal):
    """:func:`_check_call`'s rules of the shape: MAX_ROWS, the tiled kernels' head dims and causal lengths."""
    if impl == "eager":
        return
    if B * H * max(Nq, Nk) > MAX_ROWS:
        raise ValueError(f"B, H, Nq, Nk: impl={impl!r} is modelled up to 2^30 rows of (batch, head, position), "
                         f"B·H·max(Nq, Nk) = {B}·{H}·{max(Nq, Nk)} here (its schedule lays out every CTA)")
    if d > 256:
        raise ValueError(f"d: impl={impl!r} takes head dimensions up to 256, got {d}")
    if impl == "sdpa_flash" and causal and Nq != Nk:
        # FlashAttention-2 aligns its causal mask bottom-right; SDPA (top-left) refuses the flash backend then
        raise ValueError(f"causal: SDPA's flash backend refuses is_causal when Nq != Nk (got Nq={Nq}, Nk={Nk})")


def _check_params(params):
    """``params=``: known names only, each in its range (a misspelt name would silently change nothing)."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise TypeError(f"params: expected a dict of model parameters, got {type(params).__name__}")
    known = set(PARAMS) | {"partitions"}
    unknown = sorted(repr(k) for k in params if k not in known)  # (repr: a key need not be a string)
    if unknown:
        raise ValueError(f"params: unknown parameter(s) {', '.join(unknown)}; the model's are {sorted(known)}")
    rules = {"C_eff": (0, False), "C_stag": (0, False), "kappa": (0, False), "kappa_stag": (0, False),
             "rho": (0, True), "lag": (0, True), "alpha": (0, True), "partitions": (1, True),
             "partitions_diagonal": (1, True), "small_writes": (0, True), "fa2_split": (0, True),
             "overlap": (0, True), "overlap_rule": (0, True), "C_rows": (0, False), "kappa_rows": (0, False),
             "softmax_passes": (0, True), "C_roll": (0, False), "kappa_roll": (0, False),
             "rolling_rule": (0, True), "rolling_drift": (0, True), "spread": (0, True), "spread_time": (0, False),
             "spread_rule": (0, True), "C_sync": (0, False), "kappa_sync": (0, False),
             "sync_rule": (0, True), "drift_waves": (1, True), "C_rdrift": (0, False), "C_rdrift3": (0, False),
             "kappa_rdrift3": (0, False), "rdrift3_rule": (0, True), "rdrift3_gpu_rule": (0, True),
             "miss_cap": (0, True), "cap_rule": (0, True),
             "rdrift_rule": (0, True), "spread_waves": (0, False), "swaves_rule": (0, True),
             "apart_steps": (0, True), "apart_tau": (0, False), "apart_rule": (0, True), "apart_causal": (0, True),
             "head_reads": (0, True), "head_rule": (0, True), "lag_other": (0, True),
             "lag_rule": (0, True), "d256_rule": (0, True), "one_cta_rule": (0, True),
             "l2_scale_rule": (0, True), "k3_rounds_rule": (0, True)}  # (bound, included)
    switches = ("small_writes", "fa2_split", "overlap_rule", "softmax_passes", "rolling_rule", "rolling_drift",
                "spread_rule", "sync_rule", "rdrift_rule", "swaves_rule", "apart_rule", "apart_causal", "head_rule",
                "rdrift3_rule", "rdrift3_gpu_rule", "cap_rule", "lag_other", "lag_rule", "d256_rule", "one_cta_rule",
                "l2_scale_rule", "k3_rounds_rule")
    checked = {}
    for name, v in params.items():
        lo, incl = rules[name]
        number = not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.integer, np.floating))
        if name in switches and (not number or v not in (0, 1)):  # a rule switch: on or off, nothing between
            raise ValueError(f"params: {name} must be 0 or 1 (the rule on or off), got {v!r}")
        # only a sharpness may be infinite (an exact LRU step); an infinite lag or partition count made an
        # infinite reuse distance, and log(C / inf) a bare "math domain error"
        share = name in ("alpha", "miss_cap")  # a share of bytes: at most all of them
        if number:
            try:
                v = float(v)
            except OverflowError:  # an int past float's range: infinite, as its float would be
                v = math.inf if v > 0 else -math.inf
        if not number or math.isnan(v) or v < lo or (v == lo and not incl) or (share and v > 1) \
                or (math.isinf(v) and not name.startswith("kappa")):
            raise ValueError(f"params: {name} must be {'>=' if incl else '>'} {lo}"
                             f"{' and <= 1' if share else ''}{'' if name.startswith('kappa') else ', finite'}"
                             f", got {v!r}")
        # as given, but an int past float's range is the infinity it stands for (the model takes floats of it)
        checked[name] = v if number and math.isinf(v) else params[name]
    return checked


def _params(gpu, d, staggered, params=None):
    """PARAMS, then the GPU's, then (FlashAttention-2's causal forward on its 128 x 128 tiles) the d = 64
    staggered set (every other head dim: the shared set of STAGGERED_SHARED), then ``params``. ``spread_rule=0``: the
    staggered sets before the spread term, ``overlap_rule=0``: the d = 64 set before the overlap term, ``cap_rule=0``:
    the d = 64 set before ``miss_cap``, ``lag_rule=0``: the shared set before ``lag_other``; ``rdrift3_gpu_rule=0``:
    PARAMS' drift capacity where three CTAs share an SM on every GPU, not the GPU's own (RDRIFT3_GPU); ``d256_rule=0``:
    the d = 256 walk with the shared set's miss_cap, not its own (STAGGERED_D256); ``one_cta_rule=0``: the walk with one
    CTA an SM with the shared set, not its own (STAGGERED_ONE_CTA); ``l2_scale_rule=0``: the capacities
    of L2_SCALED as fitted on the H100 on every GPU, not scaled by its L2. A value given in ``params`` is taken as it
    is."""
    rules = {**PARAMS, **(params or {})}
    before = not rules["spread_rule"]
    gpu_set = STAGGERED_BEFORE_SPREAD[gpu] if before else GPU_PARAMS[gpu]
    today = STAGGERED_D64 if rules["cap_rule"] else STAGGERED_D64_BEFORE_CAP
    sets = (STAGGERED_D64_BEFORE_SPREAD if before else today) if rules["overlap_rule"] else STAGGERED_D64_BEFORE
    if staggered and _d64_tiles(d):
        own = sets[gpu]
    else:  # the shared set, with the lag over other heads' CTAs (lag_rule) where the GPU's was fitted with it
        own = STAGGERED_SHARED[gpu] if staggered and rules["lag_rule"] and not before else {}
        if staggered and rules["d256_rule"] and not before and _d256_tiles(d):  # its own miss_cap, where fitted
            own = {**own, **STAGGERED_D256[gpu]}
        if staggered and rules["one_cta_rule"] and not before and _one_cta_tiles(d):  # its own set, where fitted
            own = {**own, **STAGGERED_ONE_CTA[gpu]}
    drift = RDRIFT3_GPU[gpu] if rules["rdrift3_gpu_rule"] else {}
    out = {**PARAMS, **gpu_set, **drift, **own}
    ratio = preset(gpu).capacity / preset("h100").capacity
    if rules["l2_scale_rule"] and ratio != 1:  # H100-fitted capacities on a GPU of another L2 (not params= values)
        out.update({k: out[k] * ratio for k in L2_SCALED})
    return {**out, **(params or {})}


# The switches _params reads to pick a call's sets; the closed forms read none of them, only the values they pick
SET_SWITCHES = ("spread_rule", "cap_rule", "overlap_rule", "lag_rule", "d256_rule", "one_cta_rule", "rdrift3_gpu_rule",
                "l2_scale_rule")


def _d256_tiles(d):
    """Whether FlashAttention-2's forward at head dim ``d`` runs the d = 256 kernel's tiles (64 x 64), whose walk has
    a miss_cap of its own on a GPU of STAGGERED_D256."""
    return S._pick(S.FA2_TILES["fwd"], d) == S.FA2_TILES["fwd"][256]


def _one_cta_tiles(d):
    """Whether FlashAttention-2's forward at head dim ``d`` runs one CTA an SM (the d = 192 kernel), whose walk has a
    set of its own on a GPU of STAGGERED_ONE_CTA."""
    return S._pick(S.FA2_CTAS_PER_SM["fwd"], d) == 1


def _d64_tiles(d):
    """Whether FlashAttention-2's forward at head dim ``d`` runs the d = 64 kernel's tiles (128 x 128), which walk
    with a staggered set of their own (STAGGERED_D64)."""
    return S._pick(S.FA2_TILES["fwd"], d) == S.FA2_TILES["fwd"][64]
