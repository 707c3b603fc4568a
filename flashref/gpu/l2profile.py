"""``python -m flashref profile-l2``: DRAM and L2 bytes of every kernel, on a grid of shapes.

The measurements that :func:`flashref.iomodel.dram` is checked against. For each implementation
(``eager``: standard attention as plain fp16 PyTorch ops; ``sdpa_flash``; ``sdpa_cudnn``;
``flashref``: ``flashref.gpu.attention`` as a user calls it, kernel 3 where its dispatcher takes the call;
``flashref2``: kernel 2 by name; each flashref row records which kernel ran, ``gpu.which_kernel``'s words)
one child Python process runs every shape of the grid: a warm-up
forward+backward with the profiler off, then, between ``cudaProfilerStart``/``Stop``,

    marker; O = f(q, k, v); marker; O.backward(dO); marker

where a marker is ``torch.cuda._sleep`` (ATen's ``spin_kernel``, which none of the
implementations launches). The child runs under

    ncu --target-processes all --profile-from-start off --clock-control none --metrics M --csv
        --page raw --print-units base

so each kernel's row lands between two markers: the forward's kernels, then the backward's.
Nsight Compute flushes the caches before every kernel it profiles (its default ``--cache-control
all``), so each kernel starts with a cold L2: the model predicts exactly that.

Metrics: ``dram__bytes_read.sum``, ``dram__bytes_write.sum`` (DRAM), ``lts__t_bytes.sum`` (all
traffic through the L2 slices, hits included), ``lts__t_sectors_srcunit_ltcfabric.sum`` (sectors
that one L2 partition fetched from the other: how the H100's two partitions share data), launch
statistics (grid, block, registers, the occupancy limits) and the duration. A probe on a trivial
kernel picks the largest metric set this ncu accepts.

The result goes to ``<out>/<name>.json``: ``rows`` (one per implementation and shape: forward and
forward+backward sums) and ``kernels`` (every kernel, with its phase). The grid (``GRID``) covers
many heads with short N, few heads with long N, past the knee where one head's K and V (2·N·d·2
bytes) no longer fit in the 50 MB L2, causal and not, d = 64 and 128; ``SWEEP`` holds the tokens
fixed (B·H·N = 2^18, d = 128) and moves N across the knee.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import functools
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import _cli

IMPLS = ("flashref", "sdpa_flash", "eager", "sdpa_cudnn", "flashref2")
# (name, B, H, N, d, causal); N is Nq = Nk, or a pair (Nq, Nk) for queries and keys of different lengths
GRID = [
    ("fig2", 8, 16, 1024, 64, False), ("fig2_causal", 8, 16, 1024, 64, True),
    ("long64", 1, 16, 8192, 64, False), ("long64_causal", 1, 16, 8192, 64, True),
    ("many128", 4, 32, 2048, 128, False), ("many128_causal", 4, 32, 2048, 128, True),
    ("few64_65k", 1, 4, 65536, 64, False),
    ("knee64_262k", 1, 1, 262144, 64, False),
    ("few128_32k_causal", 1, 8, 32768, 128, True),
    ("knee128_131k_causal", 1, 2, 131072, 128, True),
]
SWEEP_TOKENS = 2 ** 18
SWEEP = [(f"sweep_{N}", 1, SWEEP_TOKENS // N, N, 128, False) for N in (4096, 8192, 16384, 32768, 65536, 131072, 262144)]
# Out-of-sample shapes, predicted before they were measured (figures/gpu/h100-l2-check-predicted.json)
CHECK = [(f"check64_{N}", 1, 2 ** 19 // N, N, 64, False) for N in (16384, 65536, 131072, 262144, 524288)] + [
    ("check64_131k_causal", 1, 2, 131072, 64, True), ("check128_16k", 2, 8, 16384, 128, False),
    ("check128_16k_causal", 2, 8, 16384, 128, True), ("check_eager64", 2, 8, 4096, 64, False),
    ("check_eager128_causal", 1, 4, 8192, 128, True), ("check128_64k_causal", 1, 4, 65536, 128, True),
]
# A second out-of-sample set, predicted (``--predict``) after the staggered-walk rule was refitted on
# grid + check and before these were measured (figures/gpu/h100-l2-check2-predicted.json).
CHECK2 = [
    ("check2_64_65k_causal", 1, 4, 65536, 64, True), ("check2_64_262k_causal", 1, 1, 262144, 64, True),
    ("check2_64_16k_causal", 2, 16, 16384, 64, True), ("check2_128_24k_causal", 2, 4, 24576, 128, True),
    ("check2_128_98k_causal", 1, 2, 98304, 128, True), ("check2_128_196k_causal", 1, 1, 196608, 128, True),
    ("check2_128_2k_causal", 8, 16, 2048, 128, True), ("check2_128_48k", 1, 4, 49152, 128, False),
    ("check2_64_4k_many", 4, 32, 4096, 64, False),
]
# A third out-of-sample set, predicted (``--predict``) after the diagonal-start rule for flashref's causal
# dK/dV kernel (iomodel.dram.scan_bytes) and before these were measured (h100-l2-check3-predicted.json).
CHECK3 = [
    ("check3_64_32k_causal", 2, 4, 32768, 64, True), ("check3_64_98k_causal", 1, 2, 98304, 64, True),
    ("check3_64_48k_causal", 1, 8, 49152, 64, True), ("check3_128_131k_causal", 1, 1, 131072, 128, True),
    ("check3_128_8k_causal", 4, 16, 8192, 128, True), ("check3_128_32k_causal", 2, 2, 32768, 128, True),
    ("check3_64_196k", 1, 1, 196608, 64, False), ("check3_128_98k", 1, 2, 98304, 128, False),
    ("check3_64_8k_many", 8, 16, 8192, 64, False),
]
# A fourth, predicted after FlashAttention-2's d = 64 forward got its own staggered set (iomodel.dram.
# STAGGERED_D64) and before these were measured (h100-l2-check4-predicted.json, h200-l2-check4-predicted.json).
CHECK4 = [
    ("check4_64_12k_causal", 4, 16, 12288, 64, True), ("check4_64_24k_causal", 2, 8, 24576, 64, True),
    ("check4_64_80k_causal", 1, 2, 81920, 64, True), ("check4_64_114k_causal", 1, 2, 114688, 64, True),
    ("check4_64_160k_causal", 1, 1, 163840, 64, True), ("check4_64_196k_causal", 1, 1, 196608, 64, True),
    ("check4_128_12k_causal", 2, 16, 12288, 128, True), ("check4_128_48k_causal", 1, 4, 49152, 128, True),
    ("check4_128_160k_causal", 1, 1, 163840, 128, True),
]
# A fifth, at head dims no earlier group measured (d = 96: kernel 2's split tiles; d = 256: kernel 3's forward with
# 64-key steps and kernel 2's backward; FlashAttention-2's tiles there are the model's guess, its nearest measured
# d's), predicted before these were measured (h100-l2-check5-predicted.json, h200-l2-check5-predicted.json).
CHECK5 = [
    ("check5_256_4k", 4, 8, 4096, 256, False), ("check5_256_4k_causal", 4, 8, 4096, 256, True),
    ("check5_256_32k", 1, 4, 32768, 256, False), ("check5_256_65k", 1, 1, 65536, 256, False),
    ("check5_256_65k_causal", 1, 2, 65536, 256, True), ("check5_96_16k", 2, 8, 16384, 96, False),
    ("check5_96_16k_causal", 2, 8, 16384, 96, True), ("check5_96_131k", 1, 1, 131072, 96, False),
]
# A sixth, on the drift past the knee: kernel 3's persistent d = 128 forward read 17.4 GB (H100) and 21.9 GB
# (H200) at one head of N = 262144 against 2.2 predicted, where its one-tile-a-program forward read 2.9-3.3 and
# its persistent d = 64 forward, on a head of the same K/V bytes (N = 524288), read what the model says. Where
# the drift starts (one head of N = 163840 to 393216, two heads of 262144) and whether d = 64 drifts further
# out (one head of N = 786432); measured with the default tiles and, with --tiles3, without Q_i's prefetch
# and without the persistent loop (h100-l2-check6*-predicted.json, written before).
CHECK6 = [
    ("check6_128_163k", 1, 1, 163840, 128, False), ("check6_128_196k", 1, 1, 196608, 128, False),
    ("check6_128_393k", 1, 1, 393216, 128, False), ("check6_128_2x262k", 1, 2, 262144, 128, False),
    ("check6_64_786k", 1, 1, 786432, 64, False),
]
# A seventh, of the shapes a training run has rather than the knee: 12 drawn at random (numpy's default_rng(20261127):
# B from 1, 2, 4, 8, 16; H from 8, 12, 16, 24, 32; N from 512 to 16384; d 64 or 128; causal or not; kept if
# 2^15 <= B·H·N <= 2^20), predicted by today's model, no parameter refitted, before they were measured
# (h100-l2-check7-predicted.json, h200-l2-check7-predicted.json).
CHECK7 = [
    ("check7_64_8x12x2048_causal", 8, 12, 2048, 64, True), ("check7_128_4x32x2048_causal", 4, 32, 2048, 128, True),
    ("check7_64_8x24x3072_causal", 8, 24, 3072, 64, True), ("check7_64_2x8x4096", 2, 8, 4096, 64, False),
    ("check7_64_16x32x1024", 16, 32, 1024, 64, False), ("check7_128_4x8x1024", 4, 8, 1024, 128, False),
    ("check7_128_16x8x6144_causal", 16, 8, 6144, 128, True), ("check7_64_2x16x6144_causal", 2, 16, 6144, 64, True),
    ("check7_128_8x8x16384", 8, 8, 16384, 128, False), ("check7_64_8x12x8192", 8, 12, 8192, 64, False),
    ("check7_128_8x32x512", 8, 32, 512, 128, False), ("check7_128_16x16x1024_causal", 16, 16, 1024, 128, True),
]
# An eighth, of queries and keys of different lengths (a prefill chunk against a longer cache, or queries against a
# shorter memory), which no earlier set measured: 10 drawn at random (default_rng(20261128): B from 1, 2, 4, 8; H
# from 8, 16, 32; Nq from 128 to 8192; Nk from 1024 to 65536, Nk != Nq; d 64 or 128; kept if 2^15 <= B·H·max(Nq,
# Nk) <= 2^21), not causal (SDPA refuses is_causal when Nq != Nk; kernel 3 takes Nq = Nk only, so flashref runs
# kernel 2 here), predicted before they were measured (h100-l2-check8-predicted.json, h200-l2-check8-predicted.json).
CHECK8 = [
    ("check8_128_1x32_q4096_k16384", 1, 32, (4096, 16384), 128, False),
    ("check8_64_4x32_q1024_k16384", 4, 32, (1024, 16384), 64, False),
    ("check8_64_2x32_q2048_k16384", 2, 32, (2048, 16384), 64, False),
    ("check8_128_8x32_q1024_k2048", 8, 32, (1024, 2048), 128, False),
    ("check8_64_2x8_q2048_k1024", 2, 8, (2048, 1024), 64, False),
    ("check8_64_1x8_q2048_k16384", 1, 8, (2048, 16384), 64, False),
    ("check8_64_1x32_q2048_k4096", 1, 32, (2048, 4096), 64, False),
    ("check8_64_2x16_q8192_k2048", 2, 16, (8192, 2048), 64, False),
    ("check8_128_4x32_q128_k2048", 4, 32, (128, 2048), 128, False),
    ("check8_128_8x8_q128_k2048", 8, 8, (128, 2048), 128, False),
]
# A ninth, for the small-writes clause (iomodel.dram._residue: a kernel whose reads and writes fit in C_eff keeps
# all its writes in L2), added after check8's smallest shape missed by its writes: 10 small shapes drawn at random
# (default_rng(20261129): B from 1, 2, 4; H from 4, 8, 12, 16; N from 256 to 4096; d 64 or 128; causal or not;
# kept if one of Q, K, V is 1 to 8 MiB), where the clause moves the predictions by 6-38%, predicted with it before
# they were measured (h100-l2-check9-predicted.json, h200-l2-check9-predicted.json).
CHECK9 = [
    ("check9_64_4x4x4096", 4, 4, 4096, 64, False), ("check9_64_1x4x4096_causal", 1, 4, 4096, 64, True),
    ("check9_64_2x16x2048", 2, 16, 2048, 64, False), ("check9_128_4x12x512", 4, 12, 512, 128, False),
    ("check9_128_1x4x4096", 1, 4, 4096, 128, False), ("check9_64_2x16x1024_causal", 2, 16, 1024, 64, True),
    ("check9_64_2x4x2048", 2, 4, 2048, 64, False), ("check9_64_4x8x512_causal", 4, 8, 512, 64, True),
    ("check9_64_1x16x1024", 1, 16, 1024, 64, False), ("check9_64_2x4x1024", 2, 4, 1024, 64, False),
]
# A tenth, for FlashAttention-2's split-KV forward (schedule.fa2_num_splits), added after check9's one miss: 8 shapes
# drawn at random (default_rng(20261130): B 1 or 2; H from 2, 4, 8, 16; Nq from 256 to 4096; Nk = Nq (twice as
# likely) or 4096, 16384, 65536; d 64 or 128; causal at random where Nq = Nk) and kept where the heuristic splits
# (2 to 16 splits; none drawn was causal), predicted before they were measured (h100-l2-check10-predicted.json,
# h200-l2-check10-predicted.json).
CHECK10 = [
    ("check10_128_2x2_q2048_k4096", 2, 2, (2048, 4096), 128, False),
    ("check10_128_2x2_q1024_k4096", 2, 2, (1024, 4096), 128, False),
    ("check10_128_1x8_q512_k65536", 1, 8, (512, 65536), 128, False),
    ("check10_64_1x16_q512_k65536", 1, 16, (512, 65536), 64, False),
    ("check10_64_2x2_q256_k16384", 2, 2, (256, 16384), 64, False),
    ("check10_128_2x2_q512_k4096", 2, 2, (512, 4096), 128, False),
    ("check10_128_1x2_q1024_k4096", 1, 2, (1024, 4096), 128, False),
    ("check10_64_2x8_q256_k16384", 2, 8, (256, 16384), 64, False),
]
# An eleventh, of the validation grid drawn at random rather than chosen: 10 shapes (default_rng(20261131): B from
# 1, 2, 4, 8; H from 1, 2, 4, 8, 16, 32; N from 1024 to 262144 in steps of 1 and 1.5 powers of two; d 64 or 128;
# causal or not; kept if 2^16 <= B·H·N <= 2^20), five of many heads (H >= 8) with short N (<= 16384) and five of
# few (B·H <= 4) with long N (>= 65536, four of them past the knee of one head's K and V), predicted by the model
# of check10, no parameter refitted, before they were measured (h100-l2-check11-predicted.json, h200-).
CHECK11 = [
    ("check11_128_8x32x1024_causal", 8, 32, 1024, 128, True),
    ("check11_128_4x32x6144_causal", 4, 32, 6144, 128, True),
    ("check11_64_1x16x6144_causal", 1, 16, 6144, 64, True),
    ("check11_128_8x8x12288", 8, 8, 12288, 128, False),
    ("check11_128_1x32x12288_causal", 1, 32, 12288, 128, True),
    ("check11_64_1x4x131072_causal", 1, 4, 131072, 64, True),
    ("check11_128_1x4x262144", 1, 4, 262144, 128, False),
    ("check11_64_4x1x98304_causal", 4, 1, 98304, 64, True),
    ("check11_128_1x4x196608_causal", 1, 4, 196608, 128, True),
    ("check11_128_4x1x196608", 4, 1, 196608, 128, False),
]
# A twelfth, for kernel 3's round barrier (kernel3.round_sync, kernel3_bwd.dq_round_sync), added after check11: 6
# shapes past the barrier's threshold drawn at random (default_rng(20261201): B from 1, 2, 4; H from 1, 2, 3, 4, 6,
# 8; N from 65536, 98304, 131072, 196608, 262144; d 64 or 128; causal one time in four; kept if 2 <= B·H <= 8,
# B·H·N <= 2^20 and one head's K and V reach 16 MiB), predicted by the unchanged model before they were measured
# with the barrier (h100-l2-check12-predicted.json, h200-).
CHECK12 = [
    ("check12_64_2x4x98304", 2, 4, 98304, 64, False), ("check12_128_1x2x98304", 1, 2, 98304, 128, False),
    ("check12_64_2x4x131072", 2, 4, 131072, 64, False), ("check12_128_4x2x98304", 4, 2, 98304, 128, False),
    ("check12_64_1x2x196608_causal", 1, 2, 196608, 64, True), ("check12_64_2x2x131072", 2, 2, 131072, 64, False),
]
# check13: FlashAttention-2's d = 64 causal forward at several heads near its knee, after the staggered walk's
# overlap term (iomodel.dram.staggered_scan_bytes): eight shapes drawn with numpy's default_rng(20261127) (B from
# 1, 2; H from 1, 2, 3, 4, 6, 8; N from 65536, 81920, 98304, 114688, 131072, 163840, 196608; kept if B·H <= 8,
# B·H·N <= 2^20 and not drawn before), predicted with the term before they were measured (h100-l2-check13-predicted
# .json, h200-), where the model without it differs by up to 36%.
CHECK13 = [
    ("check13_64_2x3x98304_causal", 2, 3, 98304, 64, True), ("check13_64_1x6x114688_causal", 1, 6, 114688, 64, True),
    ("check13_64_2x2x163840_causal", 2, 2, 163840, 64, True), ("check13_64_1x4x98304_causal", 1, 4, 98304, 64, True),
    ("check13_64_1x3x98304_causal", 1, 3, 98304, 64, True), ("check13_64_1x2x81920_causal", 1, 2, 81920, 64, True),
    ("check13_64_1x4x196608_causal", 1, 4, 196608, 64, True), ("check13_64_2x1x131072_causal", 2, 1, 131072, 64, True),
]
# check14: eager attention's softmax on rows too long for shared memory, after its three-pass rule (iomodel.dram
# ._softmax): eight shapes drawn with numpy's default_rng(20261128) (B from 1, 2; H from 1, 2, 4, 8, 16; Nq from 256,
# 512, 1024, 2048; Nk from 24576 to 131072; d 64 or 128; not causal; kept if S is at most 4 GB and not drawn before),
# predicted with the rule before they were measured (h100-l2-check14-predicted.json, h200-): the model without it
# says 1-24% less for eager's forward.
CHECK14 = [
    ("check14_128_1x16_q1024_k81920", 1, 16, (1024, 81920), 128, False),
    ("check14_64_2x16_q512_k65536", 2, 16, (512, 65536), 64, False),
    ("check14_64_1x16_q1024_k65536", 1, 16, (1024, 65536), 64, False),
    ("check14_128_2x8_q512_k131072", 2, 8, (512, 131072), 128, False),
    ("check14_128_2x8_q512_k40960", 2, 8, (512, 40960), 128, False),
    ("check14_128_1x8_q256_k131072", 1, 8, (256, 131072), 128, False),
    ("check14_128_2x16_q256_k131072", 2, 16, (256, 131072), 128, False),
    ("check14_64_1x1_q2048_k57344", 1, 1, (2048, 57344), 64, False),
]
# check15: the validation grid drawn at random again, as check11 was (the same rule, default_rng(20261129)), after this
# round's two rules, predicted before it was measured (h100-l2-check15-predicted.json, h200-).
CHECK15 = [
    ("check15_128_8x8x3072", 8, 8, 3072, 128, False), ("check15_64_2x16x12288_causal", 2, 16, 12288, 64, True),
    ("check15_64_1x16x4096", 1, 16, 4096, 64, False), ("check15_64_1x32x16384", 1, 32, 16384, 64, False),
    ("check15_64_2x32x12288_causal", 2, 32, 12288, 64, True), ("check15_64_2x2x131072_causal", 2, 2, 131072, 64, True),
    ("check15_128_1x1x262144", 1, 1, 262144, 128, False), ("check15_64_2x1x65536", 2, 1, 65536, 64, False),
    ("check15_128_2x1x196608_causal", 2, 1, 196608, 128, True), ("check15_128_1x4x262144", 1, 4, 262144, 128, False),
]
# check16: many heads at long N, beyond every shape recorded before (B·H·N up to 2^21 tokens, where the earlier sets
# stop at 2^20): eight shapes drawn with numpy's default_rng(20261202) (B from 1, 2, 4; H from 8, 12, 16, 32; N from
# 16384, 24576, 32768, 49152, 65536, 98304, 131072; d 64 or 128; causal or not; kept if 2^19 < B·H·N <= 2^21 and not
# drawn before), predicted by today's model, nothing refitted, before they were measured (h100-l2-check16-predicted
# .json, h200-). Eager's N x N matrices are too large for every one of them.
CHECK16 = [
    ("check16_64_1x12x98304_causal", 1, 12, 98304, 64, True), ("check16_64_2x32x24576_causal", 2, 32, 24576, 64, True),
    ("check16_64_1x12x65536", 1, 12, 65536, 64, False), ("check16_64_2x16x65536_causal", 2, 16, 65536, 64, True),
    ("check16_64_2x8x65536_causal", 2, 8, 65536, 64, True), ("check16_64_4x8x24576_causal", 4, 8, 24576, 64, True),
    ("check16_128_4x8x24576", 4, 8, 24576, 128, False), ("check16_64_1x8x131072_causal", 1, 8, 131072, 64, True),
]
# check17: causal shapes near and past the knee, after the rolling grid's own knee (iomodel.dram.scan_bytes, C_roll
# and kappa_roll): eight shapes drawn with numpy's default_rng(20261203) (B 1 or 2; H from 1, 2, 4, 8, 16; N from
# 49152, 65536, 81920, 98304, 131072, 163840, 196608, 262144; d 64 or 128; causal; kept if 2^18 <= B·H·N <= 2^21
# and not drawn before), predicted with the rule before they were measured (h100-l2-check17-predicted.json, h200-).
CHECK17 = [
    ("check17_64_1x4x163840_causal", 1, 4, 163840, 64, True), ("check17_128_2x4x98304_causal", 2, 4, 98304, 128, True),
    ("check17_64_2x4x98304_causal", 2, 4, 98304, 64, True), ("check17_64_2x1x196608_causal", 2, 1, 196608, 64, True),
    ("check17_128_2x8x131072_causal", 2, 8, 131072, 128, True),
    ("check17_64_1x16x131072_causal", 1, 16, 131072, 64, True),
    ("check17_128_1x16x49152_causal", 1, 16, 49152, 128, True),
    ("check17_128_2x4x81920_causal", 2, 4, 81920, 128, True),
]
# check18: the validation grid drawn at random once more (check11's rule, default_rng(20261204)), with the model as this
# round leaves it (the rolling rule with its drift clause), predicted before it was measured (h100-l2-check18-predicted
# .json, h200-).
CHECK18 = [
    ("check18_128_8x32x1024", 8, 32, 1024, 128, False), ("check18_64_2x32x4096", 2, 32, 4096, 64, False),
    ("check18_64_8x16x8192_causal", 8, 16, 8192, 64, True), ("check18_128_4x32x8192_causal", 4, 32, 8192, 128, True),
    ("check18_128_8x16x2048", 8, 16, 2048, 128, False), ("check18_128_2x2x196608", 2, 2, 196608, 128, False),
    ("check18_64_2x1x65536_causal", 2, 1, 65536, 64, True), ("check18_128_4x1x262144", 4, 1, 262144, 128, False),
    ("check18_128_1x4x131072_causal", 1, 4, 131072, 128, True),
    ("check18_64_2x1x98304_causal", 2, 1, 98304, 64, True),
]
# check19: causal shapes near and past the knee again (check17's rule, default_rng(20261205)), after the staggered
# walk's spread term (iomodel.dram.staggered_scan_bytes: spread, spread_time) and the staggered sets fitted with it,
# predicted before they were measured (h100-l2-check19-predicted.json, h200-).
CHECK19 = [
    ("check19_64_2x2x196608_causal", 2, 2, 196608, 64, True), ("check19_64_1x16x81920_causal", 1, 16, 81920, 64, True),
    ("check19_128_2x4x163840_causal", 2, 4, 163840, 128, True),
    ("check19_128_2x2x81920_causal", 2, 2, 81920, 128, True),
    ("check19_64_1x8x262144_causal", 1, 8, 262144, 64, True), ("check19_64_2x8x98304_causal", 2, 8, 98304, 64, True),
    ("check19_64_1x2x163840_causal", 1, 2, 163840, 64, True), ("check19_128_1x8x81920_causal", 1, 8, 81920, 128, True),
]
# check20: check17's rule once more (default_rng(20261206)), with the model that predicted check19 unchanged: a second
# set drawn blind for the spread term, after check19 had come out 13 of 16 for SDPA flash (the model before it: 15)
# (h100-l2-check20-predicted.json, h200-).
CHECK20 = [
    ("check20_64_1x16x49152_causal", 1, 16, 49152, 64, True), ("check20_64_1x8x65536_causal", 1, 8, 65536, 64, True),
    ("check20_64_2x8x131072_causal", 2, 8, 131072, 64, True),
    ("check20_128_2x1x163840_causal", 2, 1, 163840, 128, True),
    ("check20_128_2x2x65536_causal", 2, 2, 65536, 128, True),
    ("check20_128_1x8x262144_causal", 1, 8, 262144, 128, True),
    ("check20_128_1x4x81920_causal", 1, 4, 81920, 128, True),
    ("check20_128_1x4x163840_causal", 1, 4, 163840, 128, True),
]
# check21: the validation grid drawn at random once more (check11's rule without its count past the knee,
# default_rng(20261207): five shapes of many heads at short N, five of few heads at long N), with the model that
# predicted check19 and check20, before it was measured (h100-l2-check21-predicted.json, h200-).
CHECK21 = [
    ("check21_128_2x32x4096_causal", 2, 32, 4096, 128, True), ("check21_128_2x8x8192", 2, 8, 8192, 128, False),
    ("check21_64_1x16x6144", 1, 16, 6144, 64, False), ("check21_64_4x32x6144", 4, 32, 6144, 64, False),
    ("check21_64_8x8x1024_causal", 8, 8, 1024, 64, True), ("check21_128_4x1x131072", 4, 1, 131072, 128, False),
    ("check21_64_4x1x98304", 4, 1, 98304, 64, False), ("check21_64_2x2x262144", 2, 2, 262144, 64, False),
    ("check21_64_1x2x131072", 1, 2, 131072, 64, False), ("check21_64_2x1x131072", 2, 1, 131072, 64, False),
]
# check22: the validation grid drawn at random once more (check21's rule, default_rng(20261208)), with the model that
# predicted check19-check21 unchanged, before it was measured (h100-l2-check22-predicted.json, h200-).
CHECK22 = [
    ("check22_64_4x16x2048_causal", 4, 16, 2048, 64, True), ("check22_128_1x16x4096_causal", 1, 16, 4096, 128, True),
    ("check22_64_4x8x2048", 4, 8, 2048, 64, False), ("check22_64_2x16x4096_causal", 2, 16, 4096, 64, True),
    ("check22_64_2x32x12288", 2, 32, 12288, 64, False), ("check22_128_4x1x131072_causal", 4, 1, 131072, 128, True),
    ("check22_64_1x1x65536", 1, 1, 65536, 64, False), ("check22_64_2x2x196608", 2, 2, 196608, 64, False),
    ("check22_128_1x1x98304", 1, 1, 98304, 128, False), ("check22_128_4x1x98304_causal", 4, 1, 98304, 128, True),
]
# check23: kernel 3's barrier-synced rounds near the knee, after the sync rule (iomodel.dram.scan_bytes: such a pass
# misses as an LRU's step), which check22's one miss (one head of 65536 at d = 64) led to: eight non-causal shapes
# drawn with default_rng(20261209) (d 64 or 128; N where one head's K and V hold 16-40 MiB: 65536-163840 at d = 64,
# 32768-81920 at d = 128; B from 1, 2, 4; H from 1, 2, 4, 8; kept if B·H·N <= 2^21 and not drawn before), predicted
# with the rule before they were measured (h100-l2-check23-predicted.json, h200-).
CHECK23 = [
    ("check23_128_4x1x40960", 4, 1, 40960, 128, False), ("check23_128_1x1x40960", 1, 1, 40960, 128, False),
    ("check23_128_4x8x40960", 4, 8, 40960, 128, False), ("check23_128_1x1x65536", 1, 1, 65536, 128, False),
    ("check23_64_1x8x163840", 1, 8, 163840, 64, False), ("check23_128_4x1x32768", 4, 1, 32768, 128, False),
    ("check23_64_4x4x81920", 4, 4, 81920, 64, False), ("check23_128_4x8x65536", 4, 8, 65536, 128, False),
]
# check24: check23's rule once more (default_rng(20261210)), after the synced pass's knee was fitted (iomodel.dram
# fit_sync: C_sync, kappa_sync, on every synced row recorded before check23), predicted with it before they were
# measured (h100-l2-check24-predicted.json, h200-).
CHECK24 = [
    ("check24_128_1x4x81920", 1, 4, 81920, 128, False), ("check24_128_1x1x32768", 1, 1, 32768, 128, False),
    ("check24_128_4x1x65536", 4, 1, 65536, 128, False), ("check24_64_4x1x163840", 4, 1, 163840, 64, False),
    ("check24_64_4x1x65536", 4, 1, 65536, 64, False), ("check24_128_2x4x32768", 2, 4, 32768, 128, False),
    ("check24_64_2x8x81920", 2, 8, 81920, 64, False), ("check24_128_4x8x49152", 4, 8, 49152, 128, False),
]
# check25: FlashAttention-2's non-causal forward past the knee in grids of few waves, after its drift ramp (iomodel.dram
# fit_drift_ramp: drift_waves, on every such row recorded before): eight shapes drawn with default_rng(20261211) (d from
# 96, 128, 128, 256; B and H from 1, 2; N from 65536 to 393216; kept if one head's K and V hold at least 32 MiB, the
# forward's grid has at most 16 waves and the shape was not drawn before), predicted with the ramp before they were
# measured (h100-l2-check25-predicted.json, h200-).
CHECK25 = [
    ("check25_96_2x1x98304", 2, 1, 98304, 96, False), ("check25_128_1x2x65536", 1, 2, 65536, 128, False),
    ("check25_128_2x1x65536", 2, 1, 65536, 128, False), ("check25_128_2x2x65536", 2, 2, 65536, 128, False),
    ("check25_96_2x2x98304", 2, 2, 98304, 96, False), ("check25_128_2x2x131072", 2, 2, 131072, 128, False),
    ("check25_96_1x1x163840", 1, 1, 163840, 96, False), ("check25_256_1x2x81920", 1, 2, 81920, 256, False),
]
# check26: the validation grid drawn at random once more (check21's rule, default_rng(20261212)), with the model as the
# nineteenth round leaves it (the synced pass's knee, FlashAttention-2's drift ramp), before it was measured
# (h100-l2-check26-predicted.json, h200-).
CHECK26 = [
    ("check26_64_4x8x4096", 4, 8, 4096, 64, False), ("check26_128_8x8x16384_causal", 8, 8, 16384, 128, True),
    ("check26_128_4x32x1024_causal", 4, 32, 1024, 128, True), ("check26_64_8x8x1536_causal", 8, 8, 1536, 64, True),
    ("check26_64_4x32x2048_causal", 4, 32, 2048, 64, True), ("check26_128_2x1x98304_causal", 2, 1, 98304, 128, True),
    ("check26_128_2x2x131072_causal", 2, 2, 131072, 128, True),
    ("check26_128_1x1x65536_causal", 1, 1, 65536, 128, True), ("check26_128_1x4x196608", 1, 4, 196608, 128, False),
    ("check26_128_2x1x131072_causal", 2, 1, 131072, 128, True),
]
# check27: the validation grid drawn at random once more (check21's rule, each shape once, default_rng(20261213)), with
# the model that predicted check26, before it was measured (h100-l2-check27-predicted.json, h200-).
CHECK27 = [
    ("check27_64_4x16x3072", 4, 16, 3072, 64, False), ("check27_64_4x16x12288", 4, 16, 12288, 64, False),
    ("check27_64_4x16x4096", 4, 16, 4096, 64, False), ("check27_64_8x32x1536", 8, 32, 1536, 64, False),
    ("check27_64_2x32x4096_causal", 2, 32, 4096, 64, True), ("check27_128_2x1x131072", 2, 1, 131072, 128, False),
    ("check27_128_2x2x262144", 2, 2, 262144, 128, False), ("check27_64_2x2x262144_causal", 2, 2, 262144, 64, True),
    ("check27_64_1x2x65536", 1, 2, 65536, 64, False), ("check27_128_1x2x262144_causal", 1, 2, 262144, 128, True),
]
# check28: the validation grid drawn at random once more (check27's rule, default_rng(20261214)), with the model that
# predicted check26 and check27, before it was measured (h100-l2-check28-predicted.json, h200-).
CHECK28 = [
    ("check28_128_8x16x3072", 8, 16, 3072, 128, False), ("check28_128_2x16x6144_causal", 2, 16, 6144, 128, True),
    ("check28_64_2x32x1024_causal", 2, 32, 1024, 64, True), ("check28_64_8x8x2048_causal", 8, 8, 2048, 64, True),
    ("check28_64_1x32x3072", 1, 32, 3072, 64, False), ("check28_64_4x1x262144", 4, 1, 262144, 64, False),
    ("check28_64_2x2x98304", 2, 2, 98304, 64, False), ("check28_128_2x2x98304_causal", 2, 2, 98304, 128, True),
    ("check28_64_4x1x131072_causal", 4, 1, 131072, 64, True),
    ("check28_128_4x1x196608_causal", 4, 1, 196608, 128, True),
]
# check29: the validation grid drawn at random once more (check27's rule, default_rng(20261215)), the same model, before
# it was measured (h100-l2-check29-predicted.json, h200-).
CHECK29 = [
    ("check29_128_4x16x1536", 4, 16, 1536, 128, False), ("check29_128_8x8x6144_causal", 8, 8, 6144, 128, True),
    ("check29_128_8x8x3072_causal", 8, 8, 3072, 128, True), ("check29_128_2x32x6144", 2, 32, 6144, 128, False),
    ("check29_128_2x32x12288_causal", 2, 32, 12288, 128, True), ("check29_64_1x4x196608", 1, 4, 196608, 64, False),
    ("check29_128_2x1x262144", 2, 1, 262144, 128, False), ("check29_128_2x1x65536_causal", 2, 1, 65536, 128, True),
    ("check29_64_1x2x98304", 1, 2, 98304, 64, False), ("check29_64_1x4x262144_causal", 1, 4, 262144, 64, True),
]
# check30: kernel 3's causal d = 64 forward past its knee, after the SM drift's own capacity in a rolling grid
# (iomodel.dram C_rdrift, fitted on the rolling rows recorded before check22): eight shapes drawn with
# default_rng(20261216) (B from 1, 2; H from 1, 2, 3, 4, 6, 8; N from 131072 to 393216; kept if B·H·N <= 2^21 and not
# drawn before), predicted with it before they were measured (h100-l2-check30-predicted.json, h200-).
CHECK30 = [
    ("check30_64_2x4x163840_causal", 2, 4, 163840, 64, True), ("check30_64_1x2x294912_causal", 1, 2, 294912, 64, True),
    ("check30_64_2x3x131072_causal", 2, 3, 131072, 64, True), ("check30_64_2x6x131072_causal", 2, 6, 131072, 64, True),
    ("check30_64_1x3x131072_causal", 1, 3, 131072, 64, True), ("check30_64_2x2x393216_causal", 2, 2, 393216, 64, True),
    ("check30_64_2x3x163840_causal", 2, 3, 163840, 64, True), ("check30_64_1x4x393216_causal", 1, 4, 393216, 64, True),
]
# check31: the validation grid drawn at random once more (check27's rule, default_rng(20261217)), the model with
# C_rdrift, before it was measured (h100-l2-check31-predicted.json, h200-).
CHECK31 = [
    ("check31_128_8x32x2048", 8, 32, 2048, 128, False), ("check31_128_1x16x8192_causal", 1, 16, 8192, 128, True),
    ("check31_64_1x8x16384", 1, 8, 16384, 64, False), ("check31_64_4x8x3072", 4, 8, 3072, 64, False),
    ("check31_128_8x8x8192", 8, 8, 8192, 128, False), ("check31_128_2x2x98304", 2, 2, 98304, 128, False),
    ("check31_128_1x1x131072", 1, 1, 131072, 128, False), ("check31_64_4x1x196608", 4, 1, 196608, 64, False),
    ("check31_128_2x2x262144_causal", 2, 2, 262144, 128, True), ("check31_128_4x1x98304", 4, 1, 98304, 128, False),
]
# check32: FlashAttention-2's and kernel 3's causal forwards with few heads at long N, after the staggered walk's
# spread_waves and kernel 3's C_rdrift: eight shapes drawn with default_rng(20261218) (B from 1, 2; H from 1, 2, 3, 4,
# 6, 8; B·H >= 2; N from 98304 to 393216; d 64 or 128; kept if B·H·N <= 2^21 and not drawn before), predicted with
# both before they were measured (h100-l2-check32-predicted.json, h200-).
CHECK32 = [
    ("check32_64_1x6x163840_causal", 1, 6, 163840, 64, True), ("check32_64_1x2x393216_causal", 1, 2, 393216, 64, True),
    ("check32_64_1x6x262144_causal", 1, 6, 262144, 64, True), ("check32_64_2x1x262144_causal", 2, 1, 262144, 64, True),
    ("check32_64_2x1x294912_causal", 2, 1, 294912, 64, True),
    ("check32_128_1x6x163840_causal", 1, 6, 163840, 128, True),
    ("check32_64_1x8x163840_causal", 1, 8, 163840, 64, True),
    ("check32_128_1x4x262144_causal", 1, 4, 262144, 128, True),
]
# check33: the validation grid drawn at random once more (check27's rule, default_rng(20261219)), the model with both,
# before it was measured (h100-l2-check33-predicted.json, h200-).
CHECK33 = [
    ("check33_64_8x16x6144_causal", 8, 16, 6144, 64, True), ("check33_64_4x8x12288_causal", 4, 8, 12288, 64, True),
    ("check33_128_2x16x4096_causal", 2, 16, 4096, 128, True), ("check33_128_8x32x4096", 8, 32, 4096, 128, False),
    ("check33_128_4x16x12288_causal", 4, 16, 12288, 128, True), ("check33_128_2x1x196608", 2, 1, 196608, 128, False),
    ("check33_64_4x1x131072", 4, 1, 131072, 64, False), ("check33_64_1x1x98304", 1, 1, 98304, 64, False),
    ("check33_64_4x1x65536_causal", 4, 1, 65536, 64, True),
    ("check33_128_1x1x262144_causal", 1, 1, 262144, 128, True),
]
# check34: the validation grid drawn at random once more (check27's rule, default_rng(20261220)), the model of check33,
# before it was measured (h100-l2-check34-predicted.json, h200-).
CHECK34 = [
    ("check34_128_4x16x1024", 4, 16, 1024, 128, False), ("check34_64_2x32x1024", 2, 32, 1024, 64, False),
    ("check34_64_4x16x2048", 4, 16, 2048, 64, False), ("check34_128_8x8x6144", 8, 8, 6144, 128, False),
    ("check34_128_4x8x16384", 4, 8, 16384, 128, False), ("check34_64_1x4x98304", 1, 4, 98304, 64, False),
    ("check34_128_4x1x65536_causal", 4, 1, 65536, 128, True), ("check34_64_1x1x98304_causal", 1, 1, 98304, 64, True),
    ("check34_64_1x1x131072_causal", 1, 1, 131072, 64, True),
    ("check34_128_1x2x196608_causal", 1, 2, 196608, 128, True),
]
# check35: the validation grid drawn at random once more (check27's rule, default_rng(20261221)), the model of check34,
# before it was measured (h100-l2-check35-predicted.json, h200-).
CHECK35 = [
    ("check35_128_2x16x3072_causal", 2, 16, 3072, 128, True), ("check35_64_8x8x12288", 8, 8, 12288, 64, False),
    ("check35_64_8x8x4096", 8, 8, 4096, 64, False), ("check35_128_1x8x12288", 1, 8, 12288, 128, False),
    ("check35_64_1x32x12288_causal", 1, 32, 12288, 64, True),
    ("check35_128_1x4x98304_causal", 1, 4, 98304, 128, True), ("check35_64_2x1x196608", 2, 1, 196608, 64, False),
    ("check35_128_1x4x98304", 1, 4, 98304, 128, False), ("check35_64_1x2x196608", 1, 2, 196608, 64, False),
    ("check35_64_2x2x65536_causal", 2, 2, 65536, 64, True),
]
# check36: the same rule, default_rng(20261222), drawn after check35 and predicted with it.
CHECK36 = [
    ("check36_64_4x32x3072", 4, 32, 3072, 64, False), ("check36_128_4x16x2048_causal", 4, 16, 2048, 128, True),
    ("check36_128_8x16x4096_causal", 8, 16, 4096, 128, True), ("check36_128_1x32x3072", 1, 32, 3072, 128, False),
    ("check36_64_2x16x2048_causal", 2, 16, 2048, 64, True), ("check36_128_1x4x131072", 1, 4, 131072, 128, False),
    ("check36_64_1x4x262144", 1, 4, 262144, 64, False),
    ("check36_128_2x1x262144_causal", 2, 1, 262144, 128, True),
    ("check36_64_4x1x262144_causal", 4, 1, 262144, 64, True), ("check36_64_2x1x262144", 2, 1, 262144, 64, False),
]
# check37: FlashAttention-2's d = 64 backward where its passes come apart (apart_steps, apart_tau), drawn at random
# (default_rng(20261223): B from 1, 2, 4; H from 1, 2, 4, 8; N from 131072 to 524288; causal or not; kept if
# 2^19 <= B·H·N <= 2^21 and not drawn before), predicted with the rule before it was measured
# (h100-l2-check37-predicted.json, h200-).
CHECK37 = [
    ("check37_64_2x4x262144", 2, 4, 262144, 64, False), ("check37_64_4x1x327680", 4, 1, 327680, 64, False),
    ("check37_64_1x2x327680", 1, 2, 327680, 64, False), ("check37_64_2x1x524288", 2, 1, 524288, 64, False),
    ("check37_64_4x1x229376", 4, 1, 229376, 64, False),
    ("check37_64_4x2x131072_causal", 4, 2, 131072, 64, True),
    ("check37_64_2x4x229376_causal", 2, 4, 229376, 64, True),
    ("check37_64_4x1x163840_causal", 4, 1, 163840, 64, True),
]
# check38: the validation grid drawn at random once more (check27's rule, default_rng(20261224)), predicted with the
# apart rule (h100-l2-check38-predicted.json, h200-).
CHECK38 = [
    ("check38_64_2x32x1536", 2, 32, 1536, 64, False), ("check38_128_2x32x3072_causal", 2, 32, 3072, 128, True),
    ("check38_64_4x32x1024", 4, 32, 1024, 64, False), ("check38_128_2x16x8192_causal", 2, 16, 8192, 128, True),
    ("check38_64_2x8x16384_causal", 2, 8, 16384, 64, True), ("check38_128_1x2x196608", 1, 2, 196608, 128, False),
    ("check38_64_2x2x98304_causal", 2, 2, 98304, 64, True), ("check38_64_1x1x65536_causal", 1, 1, 65536, 64, True),
    ("check38_128_2x2x196608_causal", 2, 2, 196608, 128, True),
    ("check38_64_4x1x196608_causal", 4, 1, 196608, 64, True),
]
# check39: the same rule, default_rng(20261225), the model of check38.
CHECK39 = [
    ("check39_128_4x16x1024_causal", 4, 16, 1024, 128, True), ("check39_128_8x16x8192_causal", 8, 16, 8192, 128, True),
    ("check39_128_4x16x16384_causal", 4, 16, 16384, 128, True), ("check39_64_2x16x4096", 2, 16, 4096, 64, False),
    ("check39_64_2x32x6144", 2, 32, 6144, 64, False), ("check39_64_2x1x98304", 2, 1, 98304, 64, False),
    ("check39_64_1x1x131072", 1, 1, 131072, 64, False), ("check39_64_1x2x65536_causal", 1, 2, 65536, 64, True),
    ("check39_128_2x1x98304", 2, 1, 98304, 128, False),
    ("check39_128_4x1x262144_causal", 4, 1, 262144, 128, True),
]
# check40: FlashAttention-2's non-causal d = 64 forward with several heads, where the heads after the first roll in
# (head_reads), drawn at random after the rule (default_rng(20261226): B from 1, 2, 4; H from 1, 2, 4, 8; N from 98304
# to 327680; kept if B·H >= 2, 2^18 <= B·H·N <= 2^21 and not drawn before) and predicted with it
# (h100-l2-check40-predicted.json, h200-).
CHECK40 = [
    ("check40_64_1x2x163840", 1, 2, 163840, 64, False), ("check40_64_4x4x98304", 4, 4, 98304, 64, False),
    ("check40_64_1x4x229376", 1, 4, 229376, 64, False), ("check40_64_4x2x131072", 4, 2, 131072, 64, False),
    ("check40_64_2x1x163840", 2, 1, 163840, 64, False), ("check40_64_1x8x229376", 1, 8, 229376, 64, False),
    ("check40_64_4x2x262144", 4, 2, 262144, 64, False), ("check40_64_1x8x131072", 1, 8, 131072, 64, False),
]
# check41: the validation grid drawn once more with the model of check40, its few-heads half widened (check27's rule
# had left one shape of B·H <= 4 at N >= 65536 undrawn): B·H <= 8, N from 65536 to 393216, B·H·N <= 2^21
# (default_rng(20261227); h100-l2-check41-predicted.json, h200-).
CHECK41 = [
    ("check41_64_8x8x6144_causal", 8, 8, 6144, 64, True), ("check41_64_2x32x2048", 2, 32, 2048, 64, False),
    ("check41_64_4x16x16384", 4, 16, 16384, 64, False), ("check41_64_2x16x8192", 2, 16, 8192, 64, False),
    ("check41_64_2x16x3072", 2, 16, 3072, 64, False), ("check41_128_8x1x131072", 8, 1, 131072, 128, False),
    ("check41_64_4x2x262144_causal", 4, 2, 262144, 64, True), ("check41_128_8x1x65536", 8, 1, 65536, 128, False),
    ("check41_64_2x4x65536_causal", 2, 4, 65536, 64, True),
    ("check41_128_2x4x65536_causal", 2, 4, 65536, 128, True),
]
# check42: check41's rule, default_rng(20261228), the model of check41 with the apart rule on the non-causal backward
# alone (h100-l2-check42-predicted.json, h200-).
CHECK42 = [
    ("check42_128_2x8x4096_causal", 2, 8, 4096, 128, True), ("check42_64_8x32x4096", 8, 32, 4096, 64, False),
    ("check42_128_8x32x3072", 8, 32, 3072, 128, False), ("check42_64_1x8x12288", 1, 8, 12288, 64, False),
    ("check42_64_2x8x12288", 2, 8, 12288, 64, False), ("check42_64_2x2x65536", 2, 2, 65536, 64, False),
    ("check42_128_1x1x393216_causal", 1, 1, 393216, 128, True),
    ("check42_64_8x1x131072_causal", 8, 1, 131072, 64, True), ("check42_64_1x4x393216", 1, 4, 393216, 64, False),
    ("check42_128_8x1x131072_causal", 8, 1, 131072, 128, True),
]
# check43: check41's rule, default_rng(20261229), today's model (h100-l2-check43-predicted.json, h200-)
CHECK43 = [
    ("check43_128_1x32x6144_causal", 1, 32, 6144, 128, True), ("check43_128_2x16x6144", 2, 16, 6144, 128, False),
    ("check43_64_2x32x8192", 2, 32, 8192, 64, False), ("check43_64_8x32x1536_causal", 8, 32, 1536, 64, True),
    ("check43_128_2x32x6144_causal", 2, 32, 6144, 128, True),
    ("check43_64_8x1x262144_causal", 8, 1, 262144, 64, True), ("check43_128_1x8x196608", 1, 8, 196608, 128, False),
    ("check43_128_1x2x393216_causal", 1, 2, 393216, 128, True), ("check43_64_1x8x196608", 1, 8, 196608, 64, False),
    ("check43_128_2x4x196608_causal", 2, 4, 196608, 128, True),
]
# check44: kernel 3's causal d = 64 forward past its knee, after the knee of three CTAs an SM (C_rdrift3,
# kappa_rdrift3): eight shapes drawn with default_rng(20261230), N = 131072-524288, B·H = 1-8, B·H·N <= 2^21
# (h100-l2-check44-predicted.json, h200-)
CHECK44 = [
    ("check44_64_8x1x163840_causal", 8, 1, 163840, 64, True), ("check44_64_8x1x196608_causal", 8, 1, 196608, 64, True),
    ("check44_64_4x2x163840_causal", 4, 2, 163840, 64, True), ("check44_64_4x1x458752_causal", 4, 1, 458752, 64, True),
    ("check44_64_2x1x458752_causal", 2, 1, 458752, 64, True), ("check44_64_1x1x393216_causal", 1, 1, 393216, 64, True),
    ("check44_64_1x3x262144_causal", 1, 3, 262144, 64, True), ("check44_64_1x3x294912_causal", 1, 3, 294912, 64, True),
]
# check45: FlashAttention-2's causal d = 64 walk near and far past its knee, after the cap on its misses (miss_cap and
# the H100's d = 64 set refitted with it): ten shapes drawn with default_rng(20261231), N = 65536-524288, B·H = 1-16,
# B·H·N <= 2^21 (h100-l2-check45-predicted.json, h200-)
CHECK45 = [
    ("check45_64_2x3x262144_causal", 2, 3, 262144, 64, True), ("check45_64_2x1x327680_causal", 2, 1, 327680, 64, True),
    ("check45_64_1x3x196608_causal", 1, 3, 196608, 64, True), ("check45_64_1x3x393216_causal", 1, 3, 393216, 64, True),
    ("check45_64_8x1x98304_causal", 8, 1, 98304, 64, True), ("check45_64_1x3x524288_causal", 1, 3, 524288, 64, True),
    ("check45_64_1x16x98304_causal", 1, 16, 98304, 64, True), ("check45_64_1x3x163840_causal", 1, 3, 163840, 64, True),
    ("check45_64_1x3x458752_causal", 1, 3, 458752, 64, True), ("check45_64_1x3x65536_causal", 1, 3, 65536, 64, True),
]
# check46: check41's rule once more, default_rng(20261232), today's model (with the three-CTA knee and miss_cap;
# h100-l2-check46-predicted.json, h200-)
CHECK46 = [
    ("check46_128_1x8x8192", 1, 8, 8192, 128, False), ("check46_128_8x16x1024_causal", 8, 16, 1024, 128, True),
    ("check46_64_1x32x8192", 1, 32, 8192, 64, False), ("check46_128_2x16x8192", 2, 16, 8192, 128, False),
    ("check46_128_4x16x6144_causal", 4, 16, 6144, 128, True),
    ("check46_128_1x8x196608_causal", 1, 8, 196608, 128, True), ("check46_64_1x1x393216", 1, 1, 393216, 64, False),
    ("check46_64_8x1x131072", 8, 1, 131072, 64, False), ("check46_64_4x2x196608", 4, 2, 196608, 64, False),
    ("check46_64_1x8x262144", 1, 8, 262144, 64, False),
]
# check47: FlashAttention-2's causal d = 128 walk at few heads about its knee, after the H100's shared set was fitted
# again with the lag over other heads' CTAs (lag_other) and miss_cap: ten shapes drawn with default_rng(20261233),
# N = 32768-196608, B·H = 1-8, B·H·N <= 2^21 (h100-l2-check47-predicted.json, h200-)
CHECK47 = [
    ("check47_128_2x3x57344_causal", 2, 3, 57344, 128, True), ("check47_128_4x1x57344_causal", 4, 1, 57344, 128, True),
    ("check47_128_1x1x49152_causal", 1, 1, 49152, 128, True),
    ("check47_128_2x3x114688_causal", 2, 3, 114688, 128, True),
    ("check47_128_1x6x32768_causal", 1, 6, 32768, 128, True), ("check47_128_4x2x73728_causal", 4, 2, 73728, 128, True),
    ("check47_128_2x3x65536_causal", 2, 3, 65536, 128, True),
    ("check47_128_1x1x114688_causal", 1, 1, 114688, 128, True),
    ("check47_128_1x3x57344_causal", 1, 3, 57344, 128, True), ("check47_128_1x2x73728_causal", 1, 2, 73728, 128, True),
]
# check48: check41's rule once more, default_rng(20261234), the same model as check47
# (h100-l2-check48-predicted.json, h200-)
CHECK48 = [
    ("check48_64_1x16x16384", 1, 16, 16384, 64, False), ("check48_128_8x16x6144_causal", 8, 16, 6144, 128, True),
    ("check48_128_2x32x3072", 2, 32, 3072, 128, False), ("check48_128_1x32x6144", 1, 32, 6144, 128, False),
    ("check48_64_8x8x4096_causal", 8, 8, 4096, 64, True), ("check48_128_4x2x131072", 4, 2, 131072, 128, False),
    ("check48_128_2x4x131072", 2, 4, 131072, 128, False),
    ("check48_128_2x4x262144_causal", 2, 4, 262144, 128, True), ("check48_64_8x1x196608", 8, 1, 196608, 64, False),
    ("check48_64_2x4x262144_causal", 2, 4, 262144, 64, True),
]
# check49: check41's rule once more, default_rng(20261235), the same model as check47
# (h100-l2-check49-predicted.json, h200-)
CHECK49 = [
    ("check49_64_8x16x1536", 8, 16, 1536, 64, False), ("check49_128_8x16x1024", 8, 16, 1024, 128, False),
    ("check49_64_2x16x6144", 2, 16, 6144, 64, False), ("check49_128_8x16x6144", 8, 16, 6144, 128, False),
    ("check49_64_4x32x2048", 4, 32, 2048, 64, False), ("check49_64_1x8x98304", 1, 8, 98304, 64, False),
    ("check49_128_1x2x393216", 1, 2, 393216, 128, False), ("check49_128_2x1x393216", 2, 1, 393216, 128, False),
    ("check49_128_4x2x98304_causal", 4, 2, 98304, 128, True),
    ("check49_64_4x1x393216_causal", 4, 1, 393216, 64, True),
]
# check50: FlashAttention-2's causal walk (d = 64 and 128) at one to eight heads, near and far past its knee, after
# the H200's two staggered sets were fitted again with miss_cap and lag_other: ten shapes drawn with
# default_rng(20261236), d from 64, 128; B from 1, 2, 4; H from 1, 2, 3, 4, 6, 8; B·H <= 8; N = 16384·k, k from
# 2 to 28; B·H·N <= 2^21 (h100-l2-check50-predicted.json, h200-)
CHECK50 = [
    ("check50_64_4x2x49152_causal", 4, 2, 49152, 64, True), ("check50_64_1x6x147456_causal", 1, 6, 147456, 64, True),
    ("check50_128_1x6x344064_causal", 1, 6, 344064, 128, True),
    ("check50_64_4x1x458752_causal", 4, 1, 458752, 64, True),
    ("check50_128_1x3x409600_causal", 1, 3, 409600, 128, True),
    ("check50_128_1x3x212992_causal", 1, 3, 212992, 128, True),
    ("check50_64_1x3x327680_causal", 1, 3, 327680, 64, True),
    ("check50_128_1x4x147456_causal", 1, 4, 147456, 128, True),
    ("check50_128_4x1x32768_causal", 4, 1, 32768, 128, True), ("check50_64_1x2x311296_causal", 1, 2, 311296, 64, True),
]
# check51: kernel 3's causal d = 64 forward (three CTAs an SM) near and past the drift's knee, after the H200's own
# capacity for it (dram.RDRIFT3_GPU): ten shapes drawn with default_rng(20261237), B from 1, 2, 4, 8; H from 1, 2, 3, 4,
# 6, 8; B·H <= 8; N = 16384·k, k from 6 to 20; B·H·N <= 2^21 (h100-l2-check51-predicted.json, h200-)
CHECK51 = [
    ("check51_64_2x1x163840_causal", 2, 1, 163840, 64, True), ("check51_64_8x1x98304_causal", 8, 1, 98304, 64, True),
    ("check51_64_4x2x229376_causal", 4, 2, 229376, 64, True), ("check51_64_4x1x98304_causal", 4, 1, 98304, 64, True),
    ("check51_64_1x2x262144_causal", 1, 2, 262144, 64, True), ("check51_64_1x3x212992_causal", 1, 3, 212992, 64, True),
    ("check51_64_2x2x327680_causal", 2, 2, 327680, 64, True), ("check51_64_1x2x327680_causal", 1, 2, 327680, 64, True),
    ("check51_64_1x4x131072_causal", 1, 4, 131072, 64, True), ("check51_64_1x1x229376_causal", 1, 1, 229376, 64, True),
]
# check52: the corners no run had measured: head dims other than 64 and 128 (d from 32, 80, 96, 160, 192, 256), lengths
# that no tile divides (N not a multiple of 64, so flashref runs kernel 2), queries and keys of different lengths (one
# shape in three, never causal), B and H odd: twelve shapes drawn with default_rng(20261238), B from 1, 2, 4, 8; H from
# 1, 2, 3, 5, 6, 7, 12, 16, 24, 32; Nk log-uniform in 1000-200000; B·H·N <= 2^21 (h100-l2-check52-predicted.json, h200-)
CHECK52 = [
    ("check52_256_4x3x39596_causal", 4, 3, 39596, 256, True),
    ("check52_256_1x12x4401x12682", 1, 12, (4401, 12682), 256, False),
    ("check52_32_1x12x21543_causal", 1, 12, 21543, 32, True),
    ("check52_160_1x16x3369x33307", 1, 16, (3369, 33307), 160, False),
    ("check52_192_8x5x4004x23242", 8, 5, (4004, 23242), 192, False),
    ("check52_96_4x7x27987_causal", 4, 7, 27987, 96, True), ("check52_96_2x2x4033_causal", 2, 2, 4033, 96, True),
    ("check52_256_1x16x30907x77162", 1, 16, (30907, 77162), 256, False),
    ("check52_32_8x3x35722", 8, 3, 35722, 32, False), ("check52_96_1x12x6840_causal", 1, 12, 6840, 96, True),
    ("check52_256_2x2x11683x37592", 2, 2, (11683, 37592), 256, False),
    ("check52_80_2x2x62312x66663", 2, 2, (62312, 66663), 80, False),
]
# check53: kernel 3 at d = 256 (its forward; kernel 2's backward), measured at few shapes before: eight shapes drawn
# with default_rng(20261239), B from 1, 2, 4, 8; H from 1, 2, 3, 4, 6, 8, 12, 16, 32; N = 128·k, k log-uniform in
# 8-1536; causal one in two; B·H·N <= 2^21 (h100-l2-check53-predicted.json, h200-)
CHECK53 = [
    ("check53_256_8x1x116224_causal", 8, 1, 116224, 256, True), ("check53_256_1x1x3072_causal", 1, 1, 3072, 256, True),
    ("check53_256_1x3x9344", 1, 3, 9344, 256, False), ("check53_256_8x16x5504_causal", 8, 16, 5504, 256, True),
    ("check53_256_2x12x1024", 2, 12, 1024, 256, False), ("check53_256_1x12x100992_causal", 1, 12, 100992, 256, True),
    ("check53_256_2x8x11008_causal", 2, 8, 11008, 256, True), ("check53_256_1x16x2176_causal", 1, 16, 2176, 256, True),
]
# check54: after the d = 256 walk's own miss_cap (H100) and the launches check52 measured: every other shape
# FlashAttention-2's causal walk at d = 224 (which runs the d = 256 kernel, unmeasured before) or 256, N log-uniform in
# 1024-160000 (half of them a multiple of 64); the others the corners again at head dims never measured (16, 48, 112,
# 160, 224; Nq != Nk one in three, never causal): twelve shapes drawn with default_rng(20261240), B from 1, 2, 4, 8;
# H from 1, 2, 3, 4, 6, 8, 12, 16, 32; B·H·N <= 2^21 (h100-l2-check54-predicted.json, h200-)
CHECK54 = [
    ("check54_224_4x16x1600_causal", 4, 16, 1600, 224, True), ("check54_48_8x3x1803", 8, 3, 1803, 48, False),
    ("check54_256_8x1x135400_causal", 8, 1, 135400, 256, True),
    ("check54_16_8x2x119555_causal", 8, 2, 119555, 16, True), ("check54_256_1x8x1622_causal", 1, 8, 1622, 256, True),
    ("check54_224_4x6x16035", 4, 6, 16035, 224, False), ("check54_256_1x16x3212_causal", 1, 16, 3212, 256, True),
    ("check54_224_8x1x1230", 8, 1, 1230, 224, False), ("check54_224_8x12x2112_causal", 8, 12, 2112, 224, True),
    ("check54_112_1x32x5634_causal", 1, 32, 5634, 112, True),
    ("check54_256_2x3x34688_causal", 2, 3, 34688, 256, True), ("check54_160_1x4x7996", 1, 4, 7996, 160, False),
]
# check55: check41's rule once more, default_rng(20261241), the model of check54 (the launches check52 and check54
# measured, the d = 256 walk's miss_cap; h100-l2-check55-predicted.json, h200-)
CHECK55 = [
    ("check55_64_1x8x8192_causal", 1, 8, 8192, 64, True), ("check55_128_2x16x4096", 2, 16, 4096, 128, False),
    ("check55_64_8x8x3072", 8, 8, 3072, 64, False), ("check55_64_4x32x1536", 4, 32, 1536, 64, False),
    ("check55_128_2x8x12288", 2, 8, 12288, 128, False), ("check55_128_1x8x131072", 1, 8, 131072, 128, False),
    ("check55_64_8x1x98304", 8, 1, 98304, 64, False), ("check55_64_8x1x65536", 8, 1, 65536, 64, False),
    ("check55_128_1x4x393216_causal", 1, 4, 393216, 128, True),
    ("check55_64_2x4x196608_causal", 2, 4, 196608, 64, True),
]
# check56: after the capacities scaled with the GPU's L2 (the H200's 60 MB): check41's rule once more
# (default_rng(20261242)), and four non-causal shapes of few heads at N = 49152-131072, where the H200's lockstep passes
# had read less than the model (default_rng(20261243): B, H from 1, 2, 4, 8, B·H >= 2; h100-l2-check56-predicted.json,
# h200-)
CHECK56 = [
    ("check56_64_2x16x16384", 2, 16, 16384, 64, False), ("check56_128_1x16x12288_causal", 1, 16, 12288, 128, True),
    ("check56_128_2x16x16384_causal", 2, 16, 16384, 128, True), ("check56_128_4x16x8192", 4, 16, 8192, 128, False),
    ("check56_128_4x8x16384_causal", 4, 8, 16384, 128, True),
    ("check56_128_4x2x196608_causal", 4, 2, 196608, 128, True), ("check56_128_8x1x262144", 8, 1, 262144, 128, False),
    ("check56_128_2x4x98304", 2, 4, 98304, 128, False), ("check56_128_8x1x196608_causal", 8, 1, 196608, 128, True),
    ("check56_128_1x8x131072_causal", 1, 8, 131072, 128, True), ("check56_128_1x4x49152", 1, 4, 49152, 128, False),
    ("check56_64_2x4x114688", 2, 4, 114688, 64, False), ("check56_128_1x4x131072", 1, 4, 131072, 128, False),
    ("check56_128_4x2x131072", 4, 2, 131072, 128, False),
]
# Not a check, a probe: the causal d = 64 forwards of kernel 3 and FlashAttention-2 by heads across N = 262144, where
# check19, check27 and check29 found kernel 3 27% under and FlashAttention-2 50-61% over at four and eight heads, and
# both within 5-15% at 196608: where between them it starts, and at one and two heads (predicted before it was
# measured).
KNEE64C = [(f"knee64c_{N}_h{H}", 1, H, N, 64, True) for N in (196608, 229376, 262144, 327680) for H in (1, 2, 4)]
# Not a check, a probe: FlashAttention-2's causal d = 128 forward by the number of heads at and near its knee, after
# check26 found one head of N = 65536 reading 0.14 GB where four heads read 1.3 GB a head (the model: 0.84 and 1.4):
# how the heads that run side by side share the L2 (SDPA flash only; predicted before it was measured).
HEADS128 = [(f"heads128_{N}_h{H}", 1, H, N, 128, True) for N, Hs in ((65536, (1, 2, 3, 4, 8)), (81920, (1, 2, 4)),
                                                                     (98304, (1, 2))) for H in Hs]
# Not a check, a probe: eager attention's softmax over rows of Nk keys, across PyTorch's shared-memory limit for
# its block softmax (about 24512 fp16 elements a row: cunn_SoftMaxForwardSmem below it, cunn_SoftMaxForward's three
# passes above), which check10 found at Nk = 65536; 16 heads of 256 queries each, measured (eager only), not modelled.
SOFTMAX_ROWS = [(f"rows64_{Nk}", 1, 16, (256, Nk), 64, False)
                for Nk in (12288, 16384, 24576, 32768, 49152, 65536, 98304)]
# shares of the time budget
WEIGHT = {"flashref": 1.2, "sdpa_flash": 1.0, "eager": 1.2, "sdpa_cudnn": 0.8, "flashref2": 1.0}
EAGER_MAX_BYTES = 9e9  # eager keeps ~4 N×N fp16 matrices alive: skip shapes whose one matrix is larger
MARKER = "spin_kernel"

BASE = ("dram__bytes_read.sum", "dram__bytes_write.sum")
METRIC_SETS = (
    BASE + ("lts__t_bytes.sum", "lts__t_sectors_srcunit_ltcfabric.sum", "gpu__time_duration.sum",
            "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
            "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
            "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks"),
    BASE + ("lts__t_bytes.sum", "gpu__time_duration.sum", "launch__grid_size", "launch__block_size"),
    BASE + ("lts__t_bytes.sum",),
    BASE,
)


# check57 (check41's rule once more, default_rng(20261244): five shapes of many heads and short N, five of few heads
# and long N), and four shapes for kernel 2 after its spill fix (default_rng(20261245): lengths no tile divides,
# head dims 48, 80, 96, 160; 2^16-2^21 tokens), drawn 2026-11-28 and predicted before any GPU measured them
CHECK57 = [
    ("check57_128_4x16x3072", 4, 16, 3072, 128, False),
    ("check57_64_8x8x16384", 8, 8, 16384, 64, False),
    ("check57_64_8x8x2048", 8, 8, 2048, 64, False),
    ("check57_128_4x32x6144", 4, 32, 6144, 128, False),
    ("check57_64_1x32x6144", 1, 32, 6144, 64, False),
    ("check57_64_1x8x98304_causal", 1, 8, 98304, 64, True),
    ("check57_128_2x4x131072_causal", 2, 4, 131072, 128, True),
    ("check57_128_8x1x98304", 8, 1, 98304, 128, False),
    ("check57_128_4x2x262144_causal", 4, 2, 262144, 128, True),
    ("check57_128_4x2x196608", 4, 2, 196608, 128, False),
    ("check57_80_4x4x32377_causal", 4, 4, 32377, 80, True),
    ("check57_160_8x1x35786", 8, 1, 35786, 160, False),
    ("check57_48_8x16x5660_causal", 8, 16, 5660, 48, True),
    ("check57_80_1x16x17067_causal", 1, 16, 17067, 80, True),
]

# check58 (check41's rule once more, default_rng(20261246): five shapes of many heads and short N, five of few heads
# and long N), and four of the corners (check52's rule, default_rng(20261247): head dims other than 64 and 128, Nk
# log-uniform in 1000-200000, Nq != Nk one in three and never causal), drawn 2026-11-28 and predicted before any GPU
# measured them
CHECK58 = [
    ("check58_128_8x8x1536_causal", 8, 8, 1536, 128, True),
    ("check58_64_2x32x6144_causal", 2, 32, 6144, 64, True),
    ("check58_64_8x16x3072", 8, 16, 3072, 64, False),
    ("check58_128_8x32x1536", 8, 32, 1536, 128, False),
    ("check58_128_8x8x2048", 8, 8, 2048, 128, False),
    ("check58_128_2x2x393216", 2, 2, 393216, 128, False),
    ("check58_64_4x2x65536", 4, 2, 65536, 64, False),
    ("check58_128_4x1x393216_causal", 4, 1, 393216, 128, True),
    ("check58_64_2x4x131072_causal", 2, 4, 131072, 64, True),
    ("check58_64_4x1x393216", 4, 1, 393216, 64, False),
    ("check58_96_2x32x1387x1472", 2, 32, (1387, 1472), 96, False),
    ("check58_256_1x5x23384_causal", 1, 5, 23384, 256, True),
    ("check58_96_8x16x1441x2363", 8, 16, (1441, 2363), 96, False),
    ("check58_48_2x6x42896x55429", 2, 6, (42896, 55429), 48, False),
]

# check59 (check41's rule once more, default_rng(20261248): five shapes of many heads and short N, five of few heads
# and long N), and four of the corners (check52's rule, default_rng(20261249)), drawn 2026-11-28 after kernels 1 and 2
# began launching in pieces past 65535 (batch, head) pairs (none of these shapes has that many), and predicted before
# any GPU measured them
CHECK59 = [
    ("check59_128_1x16x6144_causal", 1, 16, 6144, 128, True),
    ("check59_128_4x8x2048_causal", 4, 8, 2048, 128, True),
    ("check59_64_8x8x1536", 8, 8, 1536, 64, False),
    ("check59_128_4x8x8192", 4, 8, 8192, 128, False),
    ("check59_128_4x32x4096", 4, 32, 4096, 128, False),
    ("check59_128_1x8x65536", 1, 8, 65536, 128, False),
    ("check59_128_4x1x393216", 4, 1, 393216, 128, False),
    ("check59_64_2x4x65536", 2, 4, 65536, 64, False),
    ("check59_64_4x2x65536_causal", 4, 2, 65536, 64, True),
    ("check59_128_1x8x262144", 1, 8, 262144, 128, False),
    ("check59_32_2x12x33915x43122", 2, 12, (33915, 43122), 32, False),
    ("check59_48_1x5x1222x38641", 1, 5, (1222, 38641), 48, False),
    ("check59_112_4x2x41443", 4, 2, 41443, 112, False),
    ("check59_256_8x12x7733x19384", 8, 12, (7733, 19384), 256, False),
]

# check60 (check41's rule once more, default_rng(20261250): five shapes of many heads and short N, five of few heads
# and long N), and four of the corners (check52's rule, default_rng(20261251)), drawn 2026-11-28 with the model
# unchanged since check59, and predicted before any GPU measured them
CHECK60 = [
    ("check60_128_2x32x12288", 2, 32, 12288, 128, False),
    ("check60_128_8x8x2048_causal", 8, 8, 2048, 128, True),
    ("check60_64_2x32x3072", 2, 32, 3072, 64, False),
    ("check60_64_2x8x8192", 2, 8, 8192, 64, False),
    ("check60_128_2x16x2048_causal", 2, 16, 2048, 128, True),
    ("check60_128_4x2x65536_causal", 4, 2, 65536, 128, True),
    ("check60_128_8x1x262144_causal", 8, 1, 262144, 128, True),
    ("check60_128_2x4x65536", 2, 4, 65536, 128, False),
    ("check60_128_4x2x131072_causal", 4, 2, 131072, 128, True),
    ("check60_128_1x8x98304_causal", 1, 8, 98304, 128, True),
    ("check60_192_8x2x15841", 8, 2, 15841, 192, False),
    ("check60_32_1x6x16555", 1, 6, 16555, 32, False),
    ("check60_256_2x7x21767_causal", 2, 7, 21767, 256, True),
    ("check60_32_2x16x15713", 2, 16, 15713, 32, False),
]

# check61 (not drawn: aimed): where a review of the model's predictions on shapes never measured found it least
# sure (2026-11-28), predicted for both GPUs and committed before any GPU measured them. Kernel 2's causal forward
# at d = 128 with 16 heads, which flashref runs at a ragged N (the model: 9.2 GB at 65537 against kernel 3's 1.7 at
# 65536); FlashAttention-2's split-KV forward over 393216 keys; d = 48 forward+backward at a ragged N; and the causal
# walks at head dims no causal long-N run had measured (80, 112, 160)
CHECK61 = [
    ("check61_128_1x16x65537_causal", 1, 16, 65537, 128, True),
    ("check61_128_1x16x65536_causal", 1, 16, 65536, 128, True),
    ("check61_128_1x16x1024x393216", 1, 16, (1024, 393216), 128, False),
    ("check61_48_4x8x20001", 4, 8, 20001, 48, False),
    ("check61_160_1x4x98304_causal", 1, 4, 98304, 160, True),
    ("check61_80_2x2x131072_causal", 2, 2, 131072, 80, True),
    ("check61_112_1x8x65536_causal", 1, 8, 65536, 112, True),
]

# check62 (not drawn: aimed): FlashAttention-2's causal walk with one CTA an SM (the d = 192 kernels, which d = 160 runs
# on this PyTorch build), never measured past its knee but once (check61's 1 x 4 x 98304 at d = 160: 45.5 GB against
# 25.1 predicted). That shape again, and the walk across its knee at both head dims, predicted for both GPUs with the
# unchanged model and committed before any GPU measured them
CHECK62 = [
    ("check62_160_1x4x98304_causal", 1, 4, 98304, 160, True),
    ("check62_192_1x4x98304_causal", 1, 4, 98304, 192, True),
    ("check62_192_1x2x65536_causal", 1, 2, 65536, 192, True),
    ("check62_192_1x8x49152_causal", 1, 8, 49152, 192, True),
    ("check62_192_1x1x131072_causal", 1, 1, 131072, 192, True),
    ("check62_160_1x2x131072_causal", 1, 2, 131072, 160, True),
    ("check62_160_2x8x65536_causal", 2, 8, 65536, 160, True),
    ("check62_192_4x2x81920_causal", 4, 2, 81920, 192, True),
    ("check62_160_1x16x32768_causal", 1, 16, 32768, 160, True),
]

# check63 (drawn: default_rng(20261252)), the blind test of the H200's one-CTA walk set (iomodel.dram.STAGGERED_ONE_CTA,
# fitted on check61 and check62): FlashAttention-2's causal walk at the d = 192 kernel's head dims (d from 136, 144,
# 160, 176, 192; B from 1, 2, 4; H from 1, 2, 4, 8, 16; N a multiple of 8192 from 16384 to 196608; kept if one head's
# K and V hold 16 MiB or more, B·H·N <= 2^21 and not drawn before), eight shapes, predicted with the set before any
# GPU measured them
CHECK63 = [
    ("check63_192_1x2x57344_causal", 1, 2, 57344, 192, True),
    ("check63_176_1x4x196608_causal", 1, 4, 196608, 176, True),
    ("check63_136_4x8x40960_causal", 4, 8, 40960, 136, True),
    ("check63_160_4x4x98304_causal", 4, 4, 98304, 160, True),
    ("check63_192_4x2x155648_causal", 4, 2, 155648, 192, True),
    ("check63_192_1x1x172032_causal", 1, 1, 172032, 192, True),
    ("check63_144_1x16x122880_causal", 1, 16, 122880, 144, True),
    ("check63_144_2x8x122880_causal", 2, 8, 122880, 144, True),
]

# check64: the validation grid once more by check41's rule, and four corners by check52's, now drawn by
# draw_validation(20261253, "check64") (tests/test_l2.py checks this list is that draw), with the model of check63,
# predicted for both GPUs before any GPU measured them
CHECK64 = [
    ("check64_64_4x8x8192", 4, 8, 8192, 64, False),
    ("check64_64_1x32x8192_causal", 1, 32, 8192, 64, True),
    ("check64_64_2x32x16384_causal", 2, 32, 16384, 64, True),
    ("check64_128_8x16x4096", 8, 16, 4096, 128, False),
    ("check64_128_8x16x16384_causal", 8, 16, 16384, 128, True),
    ("check64_128_8x1x196608", 8, 1, 196608, 128, False),
    ("check64_64_8x1x65536_causal", 8, 1, 65536, 64, True),
    ("check64_128_2x4x196608", 2, 4, 196608, 128, False),
    ("check64_64_4x2x196608_causal", 4, 2, 196608, 64, True),
    ("check64_128_8x1x98304_causal", 8, 1, 98304, 128, True),
    ("check64_32_1x1x28132x7302", 1, 1, (28132, 7302), 32, False),
    ("check64_192_4x1x16094_causal", 4, 1, 16094, 192, True),
    ("check64_80_8x2x1972", 8, 2, 1972, 80, False),
    ("check64_256_4x24x6860_causal", 4, 24, 6860, 256, True),
]

# check65: the validation grid and four corners once more, draw_validation(20261254, "check65"), with the model of
# check64 (nothing refitted since), predicted for both GPUs before any GPU measured them
CHECK65 = [
    ('check65_128_8x32x4096_causal', 8, 32, 4096, 128, True),
    ('check65_128_8x16x3072_causal', 8, 16, 3072, 128, True),
    ('check65_64_4x16x8192', 4, 16, 8192, 64, False),
    ('check65_128_4x32x1536_causal', 4, 32, 1536, 128, True),
    ('check65_128_4x16x12288', 4, 16, 12288, 128, False),
    ('check65_64_4x2x98304_causal', 4, 2, 98304, 64, True),
    ('check65_64_4x2x98304', 4, 2, 98304, 64, False),
    ('check65_128_2x2x393216_causal', 2, 2, 393216, 128, True),
    ('check65_64_2x1x393216_causal', 2, 1, 393216, 64, True),
    ('check65_128_2x4x262144', 2, 4, 262144, 128, False),
    ('check65_160_2x7x6048x3161', 2, 7, (6048, 3161), 160, False),
    ('check65_32_8x1x23344_causal', 8, 1, 23344, 32, True),
    ('check65_32_8x16x1717x1277', 8, 16, (1717, 1277), 32, False),
    ('check65_256_2x7x77593x5544', 2, 7, (77593, 5544), 256, False),
]

# check66 (not drawn: aimed, measured three rounds each): FlashAttention-2's non-causal d = 128 forward far past the
# knee with B·H = 4 to 8, where the H200's blind sets missed most (check57 -30%, check59 -35%, check64 -33%, check65
# -40%; 8 x 1 and 1 x 8 at 196608 within). The README calls these waves that come apart by amounts that change from
# run to run, as the H100's repeats showed (check18). Repeated on the H200, a miss that holds run after run would be
# the model's, not chance. Those shapes again and two new ones, predicted with the model of check65 before measuring
CHECK66 = [
    ("check66_128_2x4x196608", 2, 4, 196608, 128, False),
    ("check66_128_2x4x262144", 2, 4, 262144, 128, False),
    ("check66_128_1x8x262144", 1, 8, 262144, 128, False),
    ("check66_128_4x2x196608", 4, 2, 196608, 128, False),
    ("check66_128_8x1x196608", 8, 1, 196608, 128, False),
    ("check66_128_1x8x196608", 1, 8, 196608, 128, False),
    ("check66_128_4x2x262144", 4, 2, 262144, 128, False),
    ("check66_128_1x4x262144", 1, 4, 262144, 128, False),
]

# check67: the validation grid and four corners once more, draw_validation(20261255, "check67"), with the model of
# check66 (nothing refitted since check63), predicted for both GPUs before any GPU measured them
CHECK67 = [
    ('check67_128_1x8x16384', 1, 8, 16384, 128, False),
    ('check67_128_2x32x8192_causal', 2, 32, 8192, 128, True),
    ('check67_128_4x8x4096_causal', 4, 8, 4096, 128, True),
    ('check67_64_4x8x6144_causal', 4, 8, 6144, 64, True),
    ('check67_64_8x8x1024', 8, 8, 1024, 64, False),
    ('check67_64_2x2x393216', 2, 2, 393216, 64, False),
    ('check67_64_1x8x196608_causal', 1, 8, 196608, 64, True),
    ('check67_128_1x4x393216', 1, 4, 393216, 128, False),
    ('check67_64_8x1x262144', 8, 1, 262144, 64, False),
    ('check67_128_4x2x65536', 4, 2, 65536, 128, False),
    ('check67_80_1x2x8202x170744', 1, 2, (8202, 170744), 80, False),
    ('check67_32_2x3x46603x93233', 2, 3, (46603, 93233), 32, False),
    ('check67_256_8x1x180281_causal', 8, 1, 180281, 256, True),
    ('check67_32_8x1x194683x168082', 8, 1, (194683, 168082), 32, False),
]

# check68: the validation grid and four corners once more, draw_validation(20261256, "check68"), with the model of
# check67 (nothing refitted since check63), predicted for both GPUs before any GPU measured them
CHECK68 = [
    ('check68_128_2x8x4096', 2, 8, 4096, 128, False),
    ('check68_128_4x8x3072', 4, 8, 3072, 128, False),
    ('check68_64_2x16x12288', 2, 16, 12288, 64, False),
    ('check68_64_1x16x12288', 1, 16, 12288, 64, False),
    ('check68_64_2x32x8192_causal', 2, 32, 8192, 64, True),
    ('check68_64_1x2x393216', 1, 2, 393216, 64, False),
    ('check68_64_2x1x393216', 2, 1, 393216, 64, False),
    ('check68_128_2x1x393216_causal', 2, 1, 393216, 128, True),
    ('check68_128_1x8x98304', 1, 8, 98304, 128, False),
    ('check68_128_8x1x65536_causal', 8, 1, 65536, 128, True),
    ('check68_160_1x7x40281_causal', 1, 7, 40281, 160, True),
    ('check68_80_4x12x16785x8559', 4, 12, (16785, 8559), 80, False),
    ('check68_192_1x5x93031', 1, 5, 93031, 192, False),
    ('check68_192_4x24x1798_causal', 4, 24, 1798, 192, True),
]

# check69 (aimed, not drawn): check67 missed both of its d = 32 corners, non-causal with more keys than queries, where
# FlashAttention-2 (+26%, +29%) and kernel 2 (+48%, +75%) read less than the model, whose re-reads of K and V below the
# knee follow a soft step (kappa). Across the recorded non-causal forwards whose one head's K and V hold 8-40 MB the
# error falls with d (d = 32 +21% to +75%, d = 48 +3% to +23%, d = 128 -15% to +17%). Is it d, Nq != Nk, or those two
# calls? check67's two calls again; d = 32 with Nq = Nk below, near and past the knee, and with fewer keys than
# queries; d = 48 at one head's K and V of 24 MB; one causal d = 32 walk. Predicted with the model of check67 before
# measuring.
CHECK69 = [
    ("check69_32_8x1x194683x168082", 8, 1, (194683, 168082), 32, False),
    ("check69_32_2x3x46603x93233", 2, 3, (46603, 93233), 32, False),
    ("check69_32_1x8x131072", 1, 8, 131072, 32, False),
    ("check69_32_4x2x196608", 4, 2, 196608, 32, False),
    ("check69_32_2x1x393216", 2, 1, 393216, 32, False),
    ("check69_32_2x2x150001x100001", 2, 2, (150001, 100001), 32, False),
    ("check69_48_2x4x131072", 2, 4, 131072, 48, False),
    ("check69_32_4x2x131072_causal", 4, 2, 131072, 32, True),
]

# check70: the validation grid and four corners once more, draw_validation(20261257, "check70", few=1, long=4): the
# few-heads grid's last shape, and four few-heads shapes by check70's rule, which widens that grid (LONG_N). Predicted
# for both GPUs with the model of check69 (nothing refitted since check63) before any GPU measured them
CHECK70 = [
    ('check70_64_4x32x1024_causal', 4, 32, 1024, 64, True),
    ('check70_128_8x16x8192', 8, 16, 8192, 128, False),
    ('check70_128_1x16x4096', 1, 16, 4096, 128, False),
    ('check70_64_8x32x2048_causal', 8, 32, 2048, 64, True),
    ('check70_64_4x16x1024', 4, 16, 1024, 64, False),
    ('check70_64_2x4x196608', 2, 4, 196608, 64, False),
    ('check70_96_2x1x93479_causal', 2, 1, 93479, 96, True),
    ('check70_160_1x7x9943x32661', 1, 7, (9943, 32661), 160, False),
    ('check70_96_2x2x1956_causal', 2, 2, 1956, 96, True),
    ('check70_96_4x6x1250', 4, 6, 1250, 96, False),
    ('check70_128_8x1x86016', 8, 1, 86016, 128, False),
    ('check70_128_1x7x144384', 1, 7, 144384, 128, False),
    ('check70_128_1x2x80896_causal', 1, 2, 80896, 128, True),
    ('check70_64_1x7x75776_causal', 1, 7, 75776, 64, True),
]

# Not a blind set, a sweep: check69 found the d = 32 knee sharper than the model's, on both sides (FlashAttention-2 and
# kernel 2 read 24-68% less below it, kernel 2 twice as much past it). One head's K and V at d = 32 are 128 bytes a
# key; at a fixed 2^21 tokens these five lengths put them at 4 to 64 MiB, across the H200's 60 MB. Predicted with the
# model of check69 before measuring; what a later rule for d = 32 would be fitted on, or checked against.
KNEE32 = [(f"knee32_{N}", 1, 2 ** 21 // N, N, 32, False) for N in (32768, 65536, 131072, 262144, 524288)]

# check71 (aimed, not drawn): knee32 found FlashAttention-2's d = 32 backward past the knee reading what the lockstep
# passes say, where the d = 64 kernel's passes come apart; the rule now goes with that kernel (schedule.FA2_D64_RULES),
# which d = 48 runs too. d = 32 past the knee at other heads, batches and lengths, one with fewer queries than keys;
# d = 48 past it, where the rule stays. Predicted with that model before measuring.
CHECK71 = [
    ("check71_32_2x2x393216", 2, 2, 393216, 32, False),
    ("check71_32_1x3x327680", 1, 3, 327680, 32, False),
    ("check71_32_2x3x262144", 2, 3, 262144, 32, False),
    ("check71_32_2x2x131072x393216", 2, 2, (131072, 393216), 32, False),
    ("check71_32_1x1x786432", 1, 1, 786432, 32, False),
    ("check71_48_1x4x262144", 1, 4, 262144, 48, False),
    ("check71_48_2x1x393216", 2, 1, 393216, 48, False),
]

# check72: the validation grid and four corners once more, draw_validation(20261258, "check72", few=0, long=5): the
# few heads all by check70's rule. Predicted for both GPUs with the model of check71 (the d = 64 kernel's rules on that
# kernel alone; nothing refitted since check63) before any GPU measured them
CHECK72 = [
    ('check72_64_8x32x1024_causal', 8, 32, 1024, 64, True),
    ('check72_128_4x8x4096', 4, 8, 4096, 128, False),
    ('check72_128_1x32x4096_causal', 1, 32, 4096, 128, True),
    ('check72_128_4x16x6144', 4, 16, 6144, 128, False),
    ('check72_64_1x32x3072_causal', 1, 32, 3072, 64, True),
    ('check72_80_1x7x1247_causal', 1, 7, 1247, 80, True),
    ('check72_32_8x32x5839', 8, 32, 5839, 32, False),
    ('check72_160_2x2x1061_causal', 2, 2, 1061, 160, True),
    ('check72_96_2x2x55567', 2, 2, 55567, 96, False),
    ('check72_128_1x2x427008', 1, 2, 427008, 128, False),
    ('check72_128_1x4x414720', 1, 4, 414720, 128, False),
    ('check72_64_1x3x262144', 1, 3, 262144, 64, False),
    ('check72_64_1x1x421888', 1, 1, 421888, 64, False),
    ('check72_128_1x1x179200', 1, 1, 179200, 128, False),
]

# check73: the validation grid and four corners once more, draw_validation(20261259, "check73", few=0, long=5), with
# the model of check72 (nothing changed since), predicted for both GPUs before any GPU measured them
CHECK73 = [
    ('check73_64_8x8x8192_causal', 8, 8, 8192, 64, True),
    ('check73_64_1x32x12288', 1, 32, 12288, 64, False),
    ('check73_128_1x32x16384_causal', 1, 32, 16384, 128, True),
    ('check73_128_8x8x1536', 8, 8, 1536, 128, False),
    ('check73_64_1x16x12288_causal', 1, 16, 12288, 64, True),
    ('check73_80_1x3x18082', 1, 3, 18082, 80, False),
    ('check73_32_4x6x69283x10122', 4, 6, (69283, 10122), 32, False),
    ('check73_80_8x24x1694_causal', 8, 24, 1694, 80, True),
    ('check73_192_1x16x7835', 1, 16, 7835, 192, False),
    ('check73_128_2x1x181248', 2, 1, 181248, 128, False),
    ('check73_128_2x3x48128_causal', 2, 3, 48128, 128, True),
    ('check73_128_1x7x299008', 1, 7, 299008, 128, False),
    ('check73_64_8x1x55296_causal', 8, 1, 55296, 64, True),
    ('check73_128_2x1x55296', 2, 1, 55296, 128, False),
]

# check74 and check75: the validation grid and four corners twice more, draw_validation(20261260, "check74", few=0,
# long=5) and draw_validation(20261261, "check75", few=0, long=5), with the model of check72 and check73 (nothing
# changed since), predicted for both GPUs before any GPU measured them
CHECK74 = [
    ('check74_128_2x16x12288', 2, 16, 12288, 128, False),
    ('check74_64_8x32x8192', 8, 32, 8192, 64, False),
    ('check74_64_2x8x12288_causal', 2, 8, 12288, 64, True),
    ('check74_128_4x32x8192', 4, 32, 8192, 128, False),
    ('check74_64_2x8x16384', 2, 8, 16384, 64, False),
    ('check74_32_1x6x1435', 1, 6, 1435, 32, False),
    ('check74_80_4x3x9634', 4, 3, 9634, 80, False),
    ('check74_80_1x16x22979x72486', 1, 16, (22979, 72486), 80, False),
    ('check74_256_1x6x12531', 1, 6, 12531, 256, False),
    ('check74_128_4x2x101376_causal', 4, 2, 101376, 128, True),
    ('check74_128_2x3x33792', 2, 3, 33792, 128, False),
    ('check74_128_1x3x518144_causal', 1, 3, 518144, 128, True),
    ('check74_64_2x3x39936_causal', 2, 3, 39936, 64, True),
    ('check74_64_1x3x128000_causal', 1, 3, 128000, 64, True),
]

CHECK75 = [
    ('check75_128_2x32x2048', 2, 32, 2048, 128, False),
    ('check75_64_4x32x12288_causal', 4, 32, 12288, 64, True),
    ('check75_64_1x32x2048', 1, 32, 2048, 64, False),
    ('check75_128_8x8x1024_causal', 8, 8, 1024, 128, True),
    ('check75_64_8x16x6144', 8, 16, 6144, 64, False),
    ('check75_80_2x5x56338_causal', 2, 5, 56338, 80, True),
    ('check75_256_2x3x95053x95562', 2, 3, (95053, 95562), 256, False),
    ('check75_192_4x7x1599', 4, 7, 1599, 192, False),
    ('check75_256_1x3x36269x1041', 1, 3, (36269, 1041), 256, False),
    ('check75_64_1x4x198656', 1, 4, 198656, 64, False),
    ('check75_64_4x2x39936_causal', 4, 2, 39936, 64, True),
    ('check75_128_1x1x74752', 1, 1, 74752, 128, False),
    ('check75_128_1x5x50176_causal', 1, 5, 50176, 128, True),
    ('check75_64_2x3x161792', 2, 3, 161792, 64, False),
]

# knee96c (aimed, not drawn): three blind misses are FlashAttention-2's causal forward on its d = 96 kernel (which
# d = 80 runs too), each +37%: check52's 4 x 7 x 27987 on the H100, check70's 2 x 1 x 93479 and check75's 2 x 5 x
# 56338 on the H200, where check57's 4 x 4 x 32377 and check61's 2 x 2 x 131072 are within. A sweep of N across the
# knee at 2^19 tokens (one head's K and V 6-96 MiB), d = 80 at two of its lengths, and the two H200 misses again.
KNEE96C = ([(f"knee96c_96_{N}", 1, 2 ** 19 // N, N, 96, True) for N in (16384, 32768, 65536, 131072, 262144)]
           + [(f"knee96c_80_{N}", 1, 2 ** 19 // N, N, 80, True) for N in (32768, 65536)]
           + [("knee96c_96_2x1x93479", 2, 1, 93479, 96, True), ("knee96c_80_2x5x56338", 2, 5, 56338, 80, True)])

# check76 and check77: the validation grid and four corners twice more, draw_validation(20261262, "check76", few=0,
# long=5) and draw_validation(20261263, "check77", few=0, long=5), with the model of check75 (nothing changed
# since: knee96c was recorded, not fitted), predicted for both GPUs before any GPU measured them
CHECK76 = [
    ('check76_128_2x32x16384_causal', 2, 32, 16384, 128, True),
    ('check76_128_1x32x2048', 1, 32, 2048, 128, False),
    ('check76_64_8x8x6144', 8, 8, 6144, 64, False),
    ('check76_64_4x8x6144', 4, 8, 6144, 64, False),
    ('check76_128_8x16x16384', 8, 16, 16384, 128, False),
    ('check76_192_8x1x2886_causal', 8, 1, 2886, 192, True),
    ('check76_80_2x6x73551', 2, 6, 73551, 80, False),
    ('check76_160_1x32x20458_causal', 1, 32, 20458, 160, True),
    ('check76_32_1x24x43631', 1, 24, 43631, 32, False),
    ('check76_128_4x1x472064', 4, 1, 472064, 128, False),
    ('check76_128_1x7x49152', 1, 7, 49152, 128, False),
    ('check76_128_1x4x35840', 1, 4, 35840, 128, False),
    ('check76_128_4x2x181248_causal', 4, 2, 181248, 128, True),
    ('check76_128_2x2x102400', 2, 2, 102400, 128, False),
]

CHECK77 = [
    ('check77_64_8x16x2048', 8, 16, 2048, 64, False),
    ('check77_128_4x8x6144', 4, 8, 6144, 128, False),
    ('check77_64_2x8x4096_causal', 2, 8, 4096, 64, True),
    ('check77_128_1x32x3072_causal', 1, 32, 3072, 128, True),
    ('check77_64_8x8x12288_causal', 8, 8, 12288, 64, True),
    ('check77_32_4x3x78841_causal', 4, 3, 78841, 32, True),
    ('check77_256_2x32x7308_causal', 2, 32, 7308, 256, True),
    ('check77_80_1x5x30608x3581', 1, 5, (30608, 3581), 80, False),
    ('check77_32_2x3x68956', 2, 3, 68956, 32, False),
    ('check77_128_1x5x76800', 1, 5, 76800, 128, False),
    ('check77_64_1x6x45056', 1, 6, 45056, 64, False),
    ('check77_128_1x8x155648_causal', 1, 8, 155648, 128, True),
    ('check77_64_1x3x101376_causal', 1, 3, 101376, 64, True),
    ('check77_64_2x3x308224', 2, 3, 308224, 64, False),
]

# k2div16 (aimed, not drawn): schedule.KERNEL2_DIV16_CTAS_PER_SM says kernel 2's d = 32 dK/dV kernel holds 3 CTAs an SM
# where Nq and Nk are multiples of 16 and 2 elsewhere, causal or not; every non-causal length measured before was a
# multiple of 64 or of neither, which the rule before it (lengths that fill every tile) reads alike. Lengths that are
# multiples of 16 and fill no tile, with neighbours that are neither, causal and not, predicted with the rule.
K2DIV16 = [(f"k2div16_32_4x4x{N}" + ("_causal" if c else ""), 4, 4, N, 32, c)
           for N in (23344, 23345, 69648, 69649) for c in (False, True)]

# check78 and check79: the validation grid and four corners twice more, draw_validation(20261264, "check78", few=0,
# long=5) and draw_validation(20261265, "check79", few=0, long=5), with the model of k2div16 (kernel 2's d = 32 builds
# by lengths that are multiples of 16), predicted for both GPUs before any GPU measured them
CHECK78 = [
    ('check78_128_4x32x1536', 4, 32, 1536, 128, False),
    ('check78_64_1x32x2048_causal', 1, 32, 2048, 64, True),
    ('check78_128_1x8x8192_causal', 1, 8, 8192, 128, True),
    ('check78_64_1x8x16384_causal', 1, 8, 16384, 64, True),
    ('check78_64_8x32x4096_causal', 8, 32, 4096, 64, True),
    ('check78_160_2x3x2256x33269', 2, 3, (2256, 33269), 160, False),
    ('check78_256_4x2x56763x1128', 4, 2, (56763, 1128), 256, False),
    ('check78_96_2x6x1042x1770', 2, 6, (1042, 1770), 96, False),
    ('check78_80_2x1x19803_causal', 2, 1, 19803, 80, True),
    ('check78_128_1x2x68608', 1, 2, 68608, 128, False),
    ('check78_64_4x1x36864_causal', 4, 1, 36864, 64, True),
    ('check78_64_2x2x260096', 2, 2, 260096, 64, False),
    ('check78_64_1x8x99328_causal', 1, 8, 99328, 64, True),
    ('check78_64_4x1x468992_causal', 4, 1, 468992, 64, True),
]

CHECK79 = [
    ('check79_64_4x8x12288', 4, 8, 12288, 64, False),
    ('check79_64_4x8x3072_causal', 4, 8, 3072, 64, True),
    ('check79_128_4x16x3072_causal', 4, 16, 3072, 128, True),
    ('check79_64_8x8x16384_causal', 8, 8, 16384, 64, True),
    ('check79_64_4x32x1536_causal', 4, 32, 1536, 64, True),
    ('check79_160_2x12x21905_causal', 2, 12, 21905, 160, True),
    ('check79_96_1x1x2098x12939', 1, 1, (2098, 12939), 96, False),
    ('check79_96_8x5x12419_causal', 8, 5, 12419, 96, True),
    ('check79_80_4x3x1099_causal', 4, 3, 1099, 80, True),
    ('check79_128_8x1x219136', 8, 1, 219136, 128, False),
    ('check79_128_1x8x61440_causal', 1, 8, 61440, 128, True),
    ('check79_128_1x8x235520', 1, 8, 235520, 128, False),
    ('check79_64_2x3x108544', 2, 3, 108544, 64, False),
    ('check79_128_2x3x333824', 2, 3, 333824, 128, False),
]

# check80 and check81: the validation grid and four corners twice more, draw_validation(20261266, "check80", few=0,
# long=5) and draw_validation(20261267, "check81", few=0, long=5), with the model of check79 (the split-KV forward's
# L2 bytes aside, which no DRAM byte depends on), predicted for both GPUs before any GPU measured them
CHECK80 = [
    ('check80_128_1x16x12288', 1, 16, 12288, 128, False),
    ('check80_128_1x8x16384_causal', 1, 8, 16384, 128, True),
    ('check80_128_4x8x8192_causal', 4, 8, 8192, 128, True),
    ('check80_128_1x16x8192', 1, 16, 8192, 128, False),
    ('check80_64_4x8x2048_causal', 4, 8, 2048, 64, True),
    ('check80_32_2x24x3089', 2, 24, 3089, 32, False),
    ('check80_32_1x2x4200x21433', 1, 2, (4200, 21433), 32, False),
    ('check80_32_8x12x2149', 8, 12, 2149, 32, False),
    ('check80_160_4x6x19980x1612', 4, 6, (19980, 1612), 160, False),
    ('check80_64_2x1x89088_causal', 2, 1, 89088, 64, True),
    ('check80_128_1x2x215040', 1, 2, 215040, 128, False),
    ('check80_128_2x2x108544', 2, 2, 108544, 128, False),
    ('check80_64_1x2x179200', 1, 2, 179200, 64, False),
    ('check80_128_1x6x37888', 1, 6, 37888, 128, False),
]

CHECK81 = [
    ('check81_128_8x16x12288', 8, 16, 12288, 128, False),
    ('check81_128_4x8x3072_causal', 4, 8, 3072, 128, True),
    ('check81_128_1x32x2048_causal', 1, 32, 2048, 128, True),
    ('check81_128_4x32x3072', 4, 32, 3072, 128, False),
    ('check81_128_8x16x1536', 8, 16, 1536, 128, False),
    ('check81_192_8x12x1086', 8, 12, 1086, 192, False),
    ('check81_96_1x5x1458x82511', 1, 5, (1458, 82511), 96, False),
    ('check81_256_8x1x2971_causal', 8, 1, 2971, 256, True),
    ('check81_256_1x1x50562_causal', 1, 1, 50562, 256, True),
    ('check81_128_4x1x37888_causal', 4, 1, 37888, 128, True),
    ('check81_128_2x1x224256_causal', 2, 1, 224256, 128, True),
    ('check81_64_1x7x199680', 1, 7, 199680, 64, False),
    ('check81_128_2x3x71680_causal', 2, 3, 71680, 128, True),
    ('check81_64_4x2x110592', 4, 2, 110592, 64, False),
]

# heads256 (aimed, not drawn): check81 found FlashAttention-2's causal d = 256 forward on one head of N = 50562 reading
# 0.77 GB on the H200, the model 1.95 (+152%): one head's K and V (49 MiB) under the H200's 60 MB of L2, a class no
# earlier set measured (every earlier causal d = 256 row on the H200 had three heads or more, or lay far past the knee,
# or far below it). The d = 256 walk by heads across that knee (one head's K and V 32-96 MiB, 1, 2 and 4 heads), and
# the d = 128 walk's lone head at 48-72 MiB beside it; SDPA flash only, predicted with the model of check81.
HEADS256 = ([(f"heads256_256_{N}_h{H}", 1, H, N, 256, True) for N in (32768, 45056, 53248, 61440, 73728, 98304)
             for H in (1, 2, 4)]
            + [(f"heads256_128_{N}_h1", 1, 1, N, 128, True) for N in (98304, 122880, 147456)])

# check82 and check83: the validation grid and four corners twice more, draw_validation(20261268, "check82", few=0,
# long=5) and draw_validation(20261269, "check83", few=0, long=5), with the model of check81 (nothing changed since),
# predicted for both GPUs before any GPU measured them
CHECK82 = [
    ('check82_64_8x16x3072_causal', 8, 16, 3072, 64, True),
    ('check82_128_8x16x1536_causal', 8, 16, 1536, 128, True),
    ('check82_128_4x8x2048', 4, 8, 2048, 128, False),
    ('check82_128_2x16x3072', 2, 16, 3072, 128, False),
    ('check82_64_8x16x2048_causal', 8, 16, 2048, 64, True),
    ('check82_80_1x24x7993', 1, 24, 7993, 80, False),
    ('check82_80_1x2x14328', 1, 2, 14328, 80, False),
    ('check82_80_1x3x163367', 1, 3, 163367, 80, False),
    ('check82_80_2x2x2504_causal', 2, 2, 2504, 80, True),
    ('check82_64_4x2x71680_causal', 4, 2, 71680, 64, True),
    ('check82_64_2x2x333824', 2, 2, 333824, 64, False),
    ('check82_64_1x4x36864', 1, 4, 36864, 64, False),
    ('check82_64_1x1x479232_causal', 1, 1, 479232, 64, True),
    ('check82_64_4x2x91136', 4, 2, 91136, 64, False),
]
CHECK83 = [
    ('check83_128_4x16x16384', 4, 16, 16384, 128, False),
    ('check83_128_2x32x1536_causal', 2, 32, 1536, 128, True),
    ('check83_128_8x8x12288_causal', 8, 8, 12288, 128, True),
    ('check83_64_8x32x2048', 8, 32, 2048, 64, False),
    ('check83_64_1x32x6144_causal', 1, 32, 6144, 64, True),
    ('check83_256_8x7x19161', 8, 7, 19161, 256, False),
    ('check83_32_4x12x2713', 4, 12, 2713, 32, False),
    ('check83_96_2x2x139593_causal', 2, 2, 139593, 96, True),
    ('check83_160_1x2x75810x1291', 1, 2, (75810, 1291), 160, False),
    ('check83_128_2x4x41984_causal', 2, 4, 41984, 128, True),
    ('check83_64_4x1x477184', 4, 1, 477184, 64, False),
    ('check83_128_2x1x172032', 2, 1, 172032, 128, False),
    ('check83_128_1x6x74752', 1, 6, 74752, 128, False),
    ('check83_128_1x1x140288', 1, 1, 140288, 128, False),
]

# check84-check87: the validation grid and four corners four times more, draw_validation(20261270-20261273,
# "checkNN", few=0, long=5), with the model of check81 (nothing changed since), predicted for both GPUs before any
# GPU measured them
CHECK84 = [
    ('check84_64_4x16x4096_causal', 4, 16, 4096, 64, True),
    ('check84_128_4x32x4096_causal', 4, 32, 4096, 128, True),
    ('check84_128_8x16x12288_causal', 8, 16, 12288, 128, True),
    ('check84_128_2x32x16384', 2, 32, 16384, 128, False),
    ('check84_64_1x16x4096_causal', 1, 16, 4096, 64, True),
    ('check84_32_8x16x6332x6339', 8, 16, (6332, 6339), 32, False),
    ('check84_192_1x5x9390x6572', 1, 5, (9390, 6572), 192, False),
    ('check84_160_1x2x1556x7240', 1, 2, (1556, 7240), 160, False),
    ('check84_80_1x24x17835_causal', 1, 24, 17835, 80, True),
    ('check84_128_1x4x73728', 1, 4, 73728, 128, False),
    ('check84_64_2x2x416768', 2, 2, 416768, 64, False),
    ('check84_64_1x6x328704_causal', 1, 6, 328704, 64, True),
    ('check84_64_1x5x140288_causal', 1, 5, 140288, 64, True),
    ('check84_64_4x2x36864_causal', 4, 2, 36864, 64, True),
]
CHECK85 = [
    ('check85_64_4x16x3072_causal', 4, 16, 3072, 64, True),
    ('check85_128_2x16x2048', 2, 16, 2048, 128, False),
    ('check85_64_4x32x8192_causal', 4, 32, 8192, 64, True),
    ('check85_64_4x16x1536_causal', 4, 16, 1536, 64, True),
    ('check85_128_8x32x1536_causal', 8, 32, 1536, 128, True),
    ('check85_32_8x1x56423', 8, 1, 56423, 32, False),
    ('check85_96_2x12x1348_causal', 2, 12, 1348, 96, True),
    ('check85_160_2x24x38220x1973', 2, 24, (38220, 1973), 160, False),
    ('check85_192_8x7x11418_causal', 8, 7, 11418, 192, True),
    ('check85_128_1x4x450560_causal', 1, 4, 450560, 128, True),
    ('check85_128_1x4x108544_causal', 1, 4, 108544, 128, True),
    ('check85_64_1x4x280576_causal', 1, 4, 280576, 64, True),
    ('check85_128_2x1x101376_causal', 2, 1, 101376, 128, True),
    ('check85_64_1x8x139264_causal', 1, 8, 139264, 64, True),
]
CHECK86 = [
    ('check86_128_2x16x16384', 2, 16, 16384, 128, False),
    ('check86_128_4x32x16384_causal', 4, 32, 16384, 128, True),
    ('check86_128_1x32x16384', 1, 32, 16384, 128, False),
    ('check86_128_2x32x8192', 2, 32, 8192, 128, False),
    ('check86_64_4x16x16384_causal', 4, 16, 16384, 64, True),
    ('check86_160_1x6x55089x3122', 1, 6, (55089, 3122), 160, False),
    ('check86_160_2x12x1771', 2, 12, 1771, 160, False),
    ('check86_80_2x3x6454x3469', 2, 3, (6454, 3469), 80, False),
    ('check86_32_8x1x2217_causal', 8, 1, 2217, 32, True),
    ('check86_64_1x3x186368_causal', 1, 3, 186368, 64, True),
    ('check86_128_4x1x51200_causal', 4, 1, 51200, 128, True),
    ('check86_64_2x3x37888_causal', 2, 3, 37888, 64, True),
    ('check86_128_1x8x191488_causal', 1, 8, 191488, 128, True),
    ('check86_64_1x7x203776', 1, 7, 203776, 64, False),
]
CHECK87 = [
    ('check87_128_4x16x1536_causal', 4, 16, 1536, 128, True),
    ('check87_64_8x16x12288_causal', 8, 16, 12288, 64, True),
    ('check87_128_2x32x4096', 2, 32, 4096, 128, False),
    ('check87_64_8x8x3072_causal', 8, 8, 3072, 64, True),
    ('check87_64_4x32x8192', 4, 32, 8192, 64, False),
    ('check87_80_1x32x3491_causal', 1, 32, 3491, 80, True),
    ('check87_96_1x24x11435x5007', 1, 24, (11435, 5007), 96, False),
    ('check87_96_1x7x92938_causal', 1, 7, 92938, 96, True),
    ('check87_96_4x3x1336x9757', 4, 3, (1336, 9757), 96, False),
    ('check87_128_2x4x222208_causal', 2, 4, 222208, 128, True),
    ('check87_128_1x7x274432', 1, 7, 274432, 128, False),
    ('check87_64_2x1x321536_causal', 2, 1, 321536, 64, True),
    ('check87_64_8x1x73728', 8, 1, 73728, 64, False),
    ('check87_128_1x8x38912', 1, 8, 38912, 128, False),
]
# check88 and check89: draw_validation(20261274 / 20261275, "checkNN", few=0, long=5), as check84-check87, predicted
# for both GPUs before any GPU measured them
CHECK88 = [
    ('check88_64_4x32x3072_causal', 4, 32, 3072, 64, True),
    ('check88_64_2x8x8192_causal', 2, 8, 8192, 64, True),
    ('check88_128_4x8x6144_causal', 4, 8, 6144, 128, True),
    ('check88_128_8x8x1024', 8, 8, 1024, 128, False),
    ('check88_64_4x32x12288', 4, 32, 12288, 64, False),
    ('check88_80_4x16x1528', 4, 16, 1528, 80, False),
    ('check88_256_2x24x20199_causal', 2, 24, 20199, 256, True),
    ('check88_192_8x3x10002_causal', 8, 3, 10002, 192, True),
    ('check88_256_1x12x1942', 1, 12, 1942, 256, False),
    ('check88_128_1x7x169984_causal', 1, 7, 169984, 128, True),
    ('check88_64_2x2x514048', 2, 2, 514048, 64, False),
    ('check88_128_1x4x477184_causal', 1, 4, 477184, 128, True),
    ('check88_128_1x3x35840', 1, 3, 35840, 128, False),
    ('check88_64_2x1x115712_causal', 2, 1, 115712, 64, True),
]
CHECK89 = [
    ('check89_64_2x8x6144_causal', 2, 8, 6144, 64, True),
    ('check89_128_1x32x4096', 1, 32, 4096, 128, False),
    ('check89_64_1x32x16384_causal', 1, 32, 16384, 64, True),
    ('check89_64_8x32x6144_causal', 8, 32, 6144, 64, True),
    ('check89_128_8x32x8192_causal', 8, 32, 8192, 128, True),
    ('check89_192_1x3x46073', 1, 3, 46073, 192, False),
    ('check89_160_8x5x2864x6930', 8, 5, (2864, 6930), 160, False),
    ('check89_96_1x24x3087', 1, 24, 3087, 96, False),
    ('check89_192_8x1x40247x18577', 8, 1, (40247, 18577), 192, False),
    ('check89_64_4x1x331776_causal', 4, 1, 331776, 64, True),
    ('check89_64_8x1x175104_causal', 8, 1, 175104, 64, True),
    ('check89_128_4x1x489472', 4, 1, 489472, 128, False),
    ('check89_64_1x5x409600', 1, 5, 409600, 64, False),
    ('check89_128_1x1x133120', 1, 1, 133120, 128, False),
]

# check90 and check91: draw_validation(20261276 / 20261277, "checkNN", few=0, long=5), as check84-check89, predicted
# for both GPUs before any GPU measured them
CHECK90 = [
    ('check90_128_4x16x2048', 4, 16, 2048, 128, False),
    ('check90_64_4x16x1536', 4, 16, 1536, 64, False),
    ('check90_64_8x16x12288', 8, 16, 12288, 64, False),
    ('check90_64_8x32x3072', 8, 32, 3072, 64, False),
    ('check90_64_8x16x4096', 8, 16, 4096, 64, False),
    ('check90_32_2x16x5170x2024', 2, 16, (5170, 2024), 32, False),
    ('check90_32_1x6x1407', 1, 6, 1407, 32, False),
    ('check90_160_8x2x1411x106925', 8, 2, (1411, 106925), 160, False),
    ('check90_256_8x7x17358', 8, 7, 17358, 256, False),
    ('check90_64_2x2x80896_causal', 2, 2, 80896, 64, True),
    ('check90_64_4x2x45056_causal', 4, 2, 45056, 64, True),
    ('check90_64_1x6x84992_causal', 1, 6, 84992, 64, True),
    ('check90_128_1x2x133120', 1, 2, 133120, 128, False),
    ('check90_128_2x4x55296', 2, 4, 55296, 128, False),
]
CHECK91 = [
    ('check91_64_2x32x3072_causal', 2, 32, 3072, 64, True),
    ('check91_128_4x32x12288_causal', 4, 32, 12288, 128, True),
    ('check91_128_1x16x16384_causal', 1, 16, 16384, 128, True),
    ('check91_128_8x8x8192_causal', 8, 8, 8192, 128, True),
    ('check91_64_4x16x1024_causal', 4, 16, 1024, 64, True),
    ('check91_32_4x5x32100x1082', 4, 5, (32100, 1082), 32, False),
    ('check91_256_1x12x4805x36390', 1, 12, (4805, 36390), 256, False),
    ('check91_80_8x2x127054_causal', 8, 2, 127054, 80, True),
    ('check91_160_4x12x5722', 4, 12, 5722, 160, False),
    ('check91_64_2x3x67584', 2, 3, 67584, 64, False),
    ('check91_64_1x3x47104_causal', 1, 3, 47104, 64, True),
    ('check91_64_2x3x65536', 2, 3, 65536, 64, False),
    ('check91_64_1x6x111616', 1, 6, 111616, 64, False),
    ('check91_64_8x1x48128', 8, 1, 48128, 64, False),
]

# check92-check95: draw_validation(20261278-20261281, "checkNN", few=0, long=5), as check84-check91, predicted for
# both GPUs before any GPU measured them
CHECK92 = [
    ('check92_64_4x32x6144_causal', 4, 32, 6144, 64, True),
    ('check92_128_2x32x1024_causal', 2, 32, 1024, 128, True),
    ('check92_64_4x16x8192_causal', 4, 16, 8192, 64, True),
    ('check92_64_4x8x8192_causal', 4, 8, 8192, 64, True),
    ('check92_64_2x32x2048_causal', 2, 32, 2048, 64, True),
    ('check92_160_8x2x20237x55991', 8, 2, (20237, 55991), 160, False),
    ('check92_96_8x2x59269', 8, 2, 59269, 96, False),
    ('check92_192_4x2x99002_causal', 4, 2, 99002, 192, True),
    ('check92_256_4x1x17915_causal', 4, 1, 17915, 256, True),
    ('check92_64_2x4x129024_causal', 2, 4, 129024, 64, True),
    ('check92_128_1x5x282624', 1, 5, 282624, 128, False),
    ('check92_128_4x2x175104', 4, 2, 175104, 128, False),
    ('check92_64_2x1x53248_causal', 2, 1, 53248, 64, True),
    ('check92_128_1x7x72704_causal', 1, 7, 72704, 128, True),
]

CHECK93 = [
    ('check93_128_2x8x6144', 2, 8, 6144, 128, False),
    ('check93_64_8x16x4096_causal', 8, 16, 4096, 64, True),
    ('check93_64_4x8x4096_causal', 4, 8, 4096, 64, True),
    ('check93_128_1x8x12288_causal', 1, 8, 12288, 128, True),
    ('check93_64_8x16x16384', 8, 16, 16384, 64, False),
    ('check93_80_2x12x46614x69753', 2, 12, (46614, 69753), 80, False),
    ('check93_192_2x2x1043', 2, 2, 1043, 192, False),
    ('check93_80_1x24x73380', 1, 24, 73380, 80, False),
    ('check93_160_2x5x8858_causal', 2, 5, 8858, 160, True),
    ('check93_64_1x6x99328_causal', 1, 6, 99328, 64, True),
    ('check93_64_2x2x138240_causal', 2, 2, 138240, 64, True),
    ('check93_64_8x1x159744', 8, 1, 159744, 64, False),
    ('check93_64_1x2x43008_causal', 1, 2, 43008, 64, True),
    ('check93_128_1x7x248832_causal', 1, 7, 248832, 128, True),
]

CHECK94 = [
    ('check94_128_4x32x3072_causal', 4, 32, 3072, 128, True),
    ('check94_64_4x32x16384', 4, 32, 16384, 64, False),
    ('check94_64_2x32x1536_causal', 2, 32, 1536, 64, True),
    ('check94_128_2x8x6144_causal', 2, 8, 6144, 128, True),
    ('check94_128_2x32x1536', 2, 32, 1536, 128, False),
    ('check94_160_4x12x3275x23745', 4, 12, (3275, 23745), 160, False),
    ('check94_32_4x1x12755_causal', 4, 1, 12755, 32, True),
    ('check94_192_2x6x3091x16390', 2, 6, (3091, 16390), 192, False),
    ('check94_80_8x2x3177', 8, 2, 3177, 80, False),
    ('check94_128_1x6x239616_causal', 1, 6, 239616, 128, True),
    ('check94_128_1x5x126976', 1, 5, 126976, 128, False),
    ('check94_64_8x1x61440', 8, 1, 61440, 64, False),
    ('check94_64_1x3x68608', 1, 3, 68608, 64, False),
    ('check94_128_1x2x74752_causal', 1, 2, 74752, 128, True),
]

CHECK95 = [
    ('check95_128_2x32x1024', 2, 32, 1024, 128, False),
    ('check95_128_8x32x3072_causal', 8, 32, 3072, 128, True),
    ('check95_128_2x8x12288_causal', 2, 8, 12288, 128, True),
    ('check95_64_4x8x16384_causal', 4, 8, 16384, 64, True),
    ('check95_64_8x32x6144', 8, 32, 6144, 64, False),
    ('check95_96_1x3x4997', 1, 3, 4997, 96, False),
    ('check95_192_4x16x9516', 4, 16, 9516, 192, False),
    ('check95_192_8x6x4786x3189', 8, 6, (4786, 3189), 192, False),
    ('check95_192_1x16x2545x19358', 1, 16, (2545, 19358), 192, False),
    ('check95_128_1x3x46080', 1, 3, 46080, 128, False),
    ('check95_128_1x4x53248_causal', 1, 4, 53248, 128, True),
    ('check95_128_1x6x244736_causal', 1, 6, 244736, 128, True),
    ('check95_128_1x2x87040_causal', 1, 2, 87040, 128, True),
    ('check95_64_1x7x253952_causal', 1, 7, 253952, 64, True),
]

# check96-check99: draw_validation(20261282-20261285, "checkNN", few=0, long=5), as check84-check95, predicted for
# both GPUs before any GPU measured them (drawn after k3few and k3few2, so that no shape of theirs is drawn again)
CHECK96 = [
    ('check96_128_8x32x6144_causal', 8, 32, 6144, 128, True),
    ('check96_64_4x16x6144_causal', 4, 16, 6144, 64, True),
    ('check96_128_8x32x2048_causal', 8, 32, 2048, 128, True),
    ('check96_64_1x8x8192', 1, 8, 8192, 64, False),
    ('check96_128_1x32x12288', 1, 32, 12288, 128, False),
    ('check96_192_1x5x29855', 1, 5, 29855, 192, False),
    ('check96_160_4x3x73084_causal', 4, 3, 73084, 160, True),
    ('check96_32_1x6x17282x1093', 1, 6, (17282, 1093), 32, False),
    ('check96_80_2x2x17017', 2, 2, 17017, 80, False),
    ('check96_128_2x2x33792', 2, 2, 33792, 128, False),
    ('check96_64_8x1x146432_causal', 8, 1, 146432, 64, True),
    ('check96_64_1x5x78848_causal', 1, 5, 78848, 64, True),
    ('check96_64_2x1x273408_causal', 2, 1, 273408, 64, True),
    ('check96_64_8x1x250880', 8, 1, 250880, 64, False),
]

CHECK97 = [
    ('check97_64_8x16x16384_causal', 8, 16, 16384, 64, True),
    ('check97_64_1x32x4096_causal', 1, 32, 4096, 64, True),
    ('check97_64_4x16x6144', 4, 16, 6144, 64, False),
    ('check97_64_8x32x1024', 8, 32, 1024, 64, False),
    ('check97_128_4x16x4096_causal', 4, 16, 4096, 128, True),
    ('check97_96_8x1x8873x40641', 8, 1, (8873, 40641), 96, False),
    ('check97_32_2x16x1696x26653', 2, 16, (1696, 26653), 32, False),
    ('check97_96_1x32x20115', 1, 32, 20115, 96, False),
    ('check97_192_1x2x50427', 1, 2, 50427, 192, False),
    ('check97_128_8x1x59392_causal', 8, 1, 59392, 128, True),
    ('check97_64_1x7x246784', 1, 7, 246784, 64, False),
    ('check97_64_1x6x40960_causal', 1, 6, 40960, 64, True),
    ('check97_64_1x6x304128_causal', 1, 6, 304128, 64, True),
    ('check97_128_1x3x61440', 1, 3, 61440, 128, False),
]

CHECK98 = [
    ('check98_128_4x32x12288', 4, 32, 12288, 128, False),
    ('check98_64_8x16x1536_causal', 8, 16, 1536, 64, True),
    ('check98_64_4x8x16384', 4, 8, 16384, 64, False),
    ('check98_128_2x32x2048_causal', 2, 32, 2048, 128, True),
    ('check98_128_4x8x12288_causal', 4, 8, 12288, 128, True),
    ('check98_96_4x12x29332_causal', 4, 12, 29332, 96, True),
    ('check98_160_4x24x2281', 4, 24, 2281, 160, False),
    ('check98_160_2x12x9100', 2, 12, 9100, 160, False),
    ('check98_80_1x5x18503', 1, 5, 18503, 80, False),
    ('check98_64_2x2x38912', 2, 2, 38912, 64, False),
    ('check98_64_1x7x56320_causal', 1, 7, 56320, 64, True),
    ('check98_128_4x1x52224', 4, 1, 52224, 128, False),
    ('check98_64_1x3x124928_causal', 1, 3, 124928, 64, True),
    ('check98_128_1x6x67584_causal', 1, 6, 67584, 128, True),
]

CHECK99 = [
    ('check99_128_4x32x16384', 4, 32, 16384, 128, False),
    ('check99_64_2x8x6144', 2, 8, 6144, 64, False),
    ('check99_64_1x16x16384_causal', 1, 16, 16384, 64, True),
    ('check99_128_8x32x8192', 8, 32, 8192, 128, False),
    ('check99_128_8x8x4096_causal', 8, 8, 4096, 128, True),
    ('check99_160_4x24x20296', 4, 24, 20296, 160, False),
    ('check99_80_4x24x11799_causal', 4, 24, 11799, 80, True),
    ('check99_256_4x12x1534x7500', 4, 12, (1534, 7500), 256, False),
    ('check99_256_1x24x1945_causal', 1, 24, 1945, 256, True),
    ('check99_128_8x1x81920_causal', 8, 1, 81920, 128, True),
    ('check99_128_1x5x59392_causal', 1, 5, 59392, 128, True),
    ('check99_128_1x6x34816', 1, 6, 34816, 128, False),
    ('check99_128_1x2x67584', 1, 2, 67584, 128, False),
    ('check99_64_1x2x66560', 1, 2, 66560, 64, False),
]

# check100-check102: draw_validation(20261286-20261288, "checkNN", few=0, long=5), as check96-check99, predicted for
# both GPUs before any GPU measured them. They leave three shapes of the many-heads grid (MANY_HEADS_N): a fourth
# set of five would be refused
CHECK100 = [
    ('check100_128_2x8x8192_causal', 2, 8, 8192, 128, True),
    ('check100_64_1x32x4096', 1, 32, 4096, 64, False),
    ('check100_64_2x16x3072_causal', 2, 16, 3072, 64, True),
    ('check100_128_4x32x1024', 4, 32, 1024, 128, False),
    ('check100_64_8x8x8192', 8, 8, 8192, 64, False),
    ('check100_32_1x3x31801x3487', 1, 3, (31801, 3487), 32, False),
    ('check100_160_8x16x9908x14567', 8, 16, (9908, 14567), 160, False),
    ('check100_32_8x6x14069_causal', 8, 6, 14069, 32, True),
    ('check100_256_4x6x82871', 4, 6, 82871, 256, False),
    ('check100_128_4x1x96256_causal', 4, 1, 96256, 128, True),
    ('check100_64_4x2x38912_causal', 4, 2, 38912, 64, True),
    ('check100_128_1x8x121856_causal', 1, 8, 121856, 128, True),
    ('check100_64_1x5x267264_causal', 1, 5, 267264, 64, True),
    ('check100_64_8x1x106496', 8, 1, 106496, 64, False),
]

CHECK101 = [
    ('check101_64_8x32x8192_causal', 8, 32, 8192, 64, True),
    ('check101_64_2x16x8192_causal', 2, 16, 8192, 64, True),
    ('check101_128_4x16x4096', 4, 16, 4096, 128, False),
    ('check101_64_4x32x4096_causal', 4, 32, 4096, 64, True),
    ('check101_128_1x16x6144', 1, 16, 6144, 128, False),
    ('check101_80_4x32x5057', 4, 32, 5057, 80, False),
    ('check101_256_2x2x4146', 2, 2, 4146, 256, False),
    ('check101_256_8x2x3650x1389', 8, 2, (3650, 1389), 256, False),
    ('check101_96_1x7x3309_causal', 1, 7, 3309, 96, True),
    ('check101_64_2x3x292864', 2, 3, 292864, 64, False),
    ('check101_128_2x2x90112', 2, 2, 90112, 128, False),
    ('check101_128_2x2x159744', 2, 2, 159744, 128, False),
    ('check101_128_1x3x114688', 1, 3, 114688, 128, False),
    ('check101_64_2x2x447488', 2, 2, 447488, 64, False),
]

CHECK102 = [
    ('check102_128_8x8x4096', 8, 8, 4096, 128, False),
    ('check102_64_4x32x16384_causal', 4, 32, 16384, 64, True),
    ('check102_64_1x8x12288_causal', 1, 8, 12288, 64, True),
    ('check102_64_8x32x3072_causal', 8, 32, 3072, 64, True),
    ('check102_128_8x32x6144', 8, 32, 6144, 128, False),
    ('check102_256_4x12x2352', 4, 12, 2352, 256, False),
    ('check102_96_2x2x115308_causal', 2, 2, 115308, 96, True),
    ('check102_192_1x16x1635_causal', 1, 16, 1635, 192, True),
    ('check102_32_2x12x14472_causal', 2, 12, 14472, 32, True),
    ('check102_128_1x2x64512_causal', 1, 2, 64512, 128, True),
    ('check102_64_1x4x48128_causal', 1, 4, 48128, 64, True),
    ('check102_128_4x1x84992', 4, 1, 84992, 128, False),
    ('check102_128_1x2x269312_causal', 1, 2, 269312, 128, True),
    ('check102_128_1x8x159744', 1, 8, 159744, 128, False),
]

CHECK103 = [
    ('check103_64_2x32x16384', 2, 32, 16384, 64, False),
    ('check103_128_1x32x8192_causal', 1, 32, 8192, 128, True),
    ('check103_128_4x8x12288', 4, 8, 12288, 128, False),
    ('check103_96_1x3x25324x62060', 1, 3, (25324, 62060), 96, False),
    ('check103_96_8x3x7595', 8, 3, 7595, 96, False),
    ('check103_80_1x24x19626x49870', 1, 24, (19626, 49870), 80, False),
    ('check103_256_8x12x10987_causal', 8, 12, 10987, 256, True),
    ('check103_64_2x1x67584_causal', 2, 1, 67584, 64, True),
    ('check103_64_1x3x33792_causal', 1, 3, 33792, 64, True),
    ('check103_64_4x2x214016_causal', 4, 2, 214016, 64, True),
    ('check103_128_2x3x91136', 2, 3, 91136, 128, False),
    ('check103_128_8x1x109568_causal', 8, 1, 109568, 128, True),
]

CHECK104 = [
    ('check104_32_4x2x1480', 4, 2, 1480, 32, False),
    ('check104_192_8x6x3356_causal', 8, 6, 3356, 192, True),
    ('check104_32_1x3x1865', 1, 3, 1865, 32, False),
    ('check104_96_4x3x21355', 4, 3, 21355, 96, False),
    ('check104_64_1x3x41984', 1, 3, 41984, 64, False),
    ('check104_128_1x3x34816', 1, 3, 34816, 128, False),
    ('check104_128_8x1x181248', 8, 1, 181248, 128, False),
    ('check104_128_1x2x93184', 1, 2, 93184, 128, False),
    ('check104_128_1x4x45056', 1, 4, 45056, 128, False),
    ('check104_64_2x4x48128', 2, 4, 48128, 64, False),
    ('check104_128_1x8x36864', 1, 8, 36864, 128, False),
    ('check104_64_2x2x208896_causal', 2, 2, 208896, 64, True),
]

CHECK105 = [
    ('check105_80_2x32x3344_causal', 2, 32, 3344, 80, True),
    ('check105_96_1x6x62441_causal', 1, 6, 62441, 96, True),
    ('check105_80_2x2x35868x1796', 2, 2, (35868, 1796), 80, False),
    ('check105_80_8x5x23805', 8, 5, 23805, 80, False),
    ('check105_64_2x2x283648_causal', 2, 2, 283648, 64, True),
    ('check105_64_1x3x74752_causal', 1, 3, 74752, 64, True),
    ('check105_128_4x1x253952_causal', 4, 1, 253952, 128, True),
    ('check105_64_1x3x35840_causal', 1, 3, 35840, 64, True),
    ('check105_64_2x1x52224', 2, 1, 52224, 64, False),
    ('check105_128_2x1x90112', 2, 1, 90112, 128, False),
    ('check105_128_1x7x38912_causal', 1, 7, 38912, 128, True),
    ('check105_128_2x2x50176_causal', 2, 2, 50176, 128, True),
]

CHECK106 = [
    ('check106_256_1x3x175885', 1, 3, 175885, 256, False),
    ('check106_256_1x12x9033_causal', 1, 12, 9033, 256, True),
    ('check106_256_2x32x2753_causal', 2, 32, 2753, 256, True),
    ('check106_96_4x24x17353x9206', 4, 24, (17353, 9206), 96, False),
    ('check106_64_1x7x212992_causal', 1, 7, 212992, 64, True),
    ('check106_64_4x2x225280_causal', 4, 2, 225280, 64, True),
    ('check106_64_1x3x36864', 1, 3, 36864, 64, False),
    ('check106_128_1x5x212992_causal', 1, 5, 212992, 128, True),
    ('check106_64_1x5x57344', 1, 5, 57344, 64, False),
    ('check106_64_1x4x488448_causal', 1, 4, 488448, 64, True),
    ('check106_128_1x5x153600', 1, 5, 153600, 128, False),
    ('check106_64_2x2x139264_causal', 2, 2, 139264, 64, True),
]

CHECK107 = [
    ('check107_80_4x24x9353', 4, 24, 9353, 80, False),
    ('check107_160_4x16x1353_causal', 4, 16, 1353, 160, True),
    ('check107_160_8x16x3716', 8, 16, 3716, 160, False),
    ('check107_160_8x3x1196', 8, 3, 1196, 160, False),
    ('check107_128_1x2x91136_causal', 1, 2, 91136, 128, True),
    ('check107_64_2x1x46080', 2, 1, 46080, 64, False),
    ('check107_128_2x2x216064', 2, 2, 216064, 128, False),
    ('check107_128_2x1x109568_causal', 2, 1, 109568, 128, True),
    ('check107_128_2x2x86016', 2, 2, 86016, 128, False),
    ('check107_64_2x1x354304', 2, 1, 354304, 64, False),
    ('check107_128_4x1x110592', 4, 1, 110592, 128, False),
    ('check107_64_2x2x464896_causal', 2, 2, 464896, 64, True),
]

CHECK108 = [
    ('check108_96_1x3x12721_causal', 1, 3, 12721, 96, True),
    ('check108_32_2x2x50358', 2, 2, 50358, 32, False),
    ('check108_96_4x2x17904', 4, 2, 17904, 96, False),
    ('check108_80_1x5x82251_causal', 1, 5, 82251, 80, True),
    ('check108_64_1x6x63488', 1, 6, 63488, 64, False),
    ('check108_64_1x8x153600', 1, 8, 153600, 64, False),
    ('check108_128_1x2x308224', 1, 2, 308224, 128, False),
    ('check108_64_2x4x221184', 2, 4, 221184, 64, False),
    ('check108_128_1x5x78848_causal', 1, 5, 78848, 128, True),
    ('check108_128_1x3x175104_causal', 1, 3, 175104, 128, True),
    ('check108_64_1x2x67584_causal', 1, 2, 67584, 64, True),
    ('check108_128_1x7x101376', 1, 7, 101376, 128, False),
]

CHECK109 = [
    ('check109_32_4x7x10396_causal', 4, 7, 10396, 32, True),
    ('check109_32_4x16x2512', 4, 16, 2512, 32, False),
    ('check109_256_1x1x19728', 1, 1, 19728, 256, False),
    ('check109_192_8x12x4765x3110', 8, 12, (4765, 3110), 192, False),
    ('check109_128_1x1x240640', 1, 1, 240640, 128, False),
    ('check109_64_4x1x125952', 4, 1, 125952, 64, False),
    ('check109_128_2x2x74752_causal', 2, 2, 74752, 128, True),
    ('check109_128_2x4x135168_causal', 2, 4, 135168, 128, True),
    ('check109_128_1x2x39936_causal', 1, 2, 39936, 128, True),
    ('check109_64_2x4x155648', 2, 4, 155648, 64, False),
    ('check109_64_4x1x102400', 4, 1, 102400, 64, False),
    ('check109_64_2x2x40960_causal', 2, 2, 40960, 64, True),
]

CHECK110 = [
    ('check110_96_4x2x3918', 4, 2, 3918, 96, False),
    ('check110_160_8x6x23103', 8, 6, 23103, 160, False),
    ('check110_80_8x6x3478_causal', 8, 6, 3478, 80, True),
    ('check110_80_4x6x23518_causal', 4, 6, 23518, 80, True),
    ('check110_64_1x6x211968', 1, 6, 211968, 64, False),
    ('check110_64_1x1x505856_causal', 1, 1, 505856, 64, True),
    ('check110_64_2x3x41984_causal', 2, 3, 41984, 64, True),
    ('check110_64_2x2x69632_causal', 2, 2, 69632, 64, True),
    ('check110_64_4x1x330752', 4, 1, 330752, 64, False),
    ('check110_64_8x1x93184_causal', 8, 1, 93184, 64, True),
    ('check110_128_1x6x47104_causal', 1, 6, 47104, 128, True),
    ('check110_128_1x2x157696', 1, 2, 157696, 128, False),
]

CHECK111 = [
    ('check111_32_4x32x3285x15699', 4, 32, (3285, 15699), 32, False),
    ('check111_32_4x3x6110x16051', 4, 3, (6110, 16051), 32, False),
    ('check111_192_1x12x87069_causal', 1, 12, 87069, 192, True),
    ('check111_192_8x3x11882', 8, 3, 11882, 192, False),
    ('check111_128_2x2x43008', 2, 2, 43008, 128, False),
    ('check111_128_1x2x41984_causal', 1, 2, 41984, 128, True),
    ('check111_64_1x8x43008_causal', 1, 8, 43008, 64, True),
    ('check111_128_1x1x162816', 1, 1, 162816, 128, False),
    ('check111_128_1x5x129024', 1, 5, 129024, 128, False),
    ('check111_64_2x2x46080_causal', 2, 2, 46080, 64, True),
    ('check111_64_1x4x427008', 1, 4, 427008, 64, False),
    ('check111_128_1x6x173056_causal', 1, 6, 173056, 128, True),
]

CHECK112 = [
    ('check112_80_4x16x3109_causal', 4, 16, 3109, 80, True),
    ('check112_32_8x24x1494_causal', 8, 24, 1494, 32, True),
    ('check112_192_2x16x4707_causal', 2, 16, 4707, 192, True),
    ('check112_160_2x5x168710', 2, 5, 168710, 160, False),
    ('check112_128_4x2x35840_causal', 4, 2, 35840, 128, True),
    ('check112_128_2x1x50176', 2, 1, 50176, 128, False),
    ('check112_128_2x4x242688_causal', 2, 4, 242688, 128, True),
    ('check112_64_1x5x33792', 1, 5, 33792, 64, False),
    ('check112_128_4x2x55296', 4, 2, 55296, 128, False),
    ('check112_128_2x3x45056', 2, 3, 45056, 128, False),
    ('check112_64_1x7x36864_causal', 1, 7, 36864, 64, True),
    ('check112_128_1x1x494592', 1, 1, 494592, 128, False),
]

CHECK113 = [
    ('check113_80_1x7x93842x183912', 1, 7, (93842, 183912), 80, False),
    ('check113_80_2x6x64436_causal', 2, 6, 64436, 80, True),
    ('check113_96_4x1x6011', 4, 1, 6011, 96, False),
    ('check113_160_4x5x32670', 4, 5, 32670, 160, False),
    ('check113_64_4x1x432128', 4, 1, 432128, 64, False),
    ('check113_64_2x2x35840_causal', 2, 2, 35840, 64, True),
    ('check113_64_1x5x167936', 1, 5, 167936, 64, False),
    ('check113_128_1x4x163840', 1, 4, 163840, 128, False),
    ('check113_128_1x7x37888_causal', 1, 7, 37888, 128, True),
    ('check113_64_2x1x62464', 2, 1, 62464, 64, False),
    ('check113_128_1x8x92160_causal', 1, 8, 92160, 128, True),
    ('check113_64_1x4x53248', 1, 4, 53248, 64, False),
]

CHECK114 = [
    ('check114_96_2x6x36406x41392', 2, 6, (36406, 41392), 96, False),
    ('check114_160_2x7x1976_causal', 2, 7, 1976, 160, True),
    ('check114_160_4x32x4258x7709', 4, 32, (4258, 7709), 160, False),
    ('check114_80_1x3x14850', 1, 3, 14850, 80, False),
    ('check114_64_2x4x212992', 2, 4, 212992, 64, False),
    ('check114_64_2x3x110592', 2, 3, 110592, 64, False),
    ('check114_128_1x5x90112_causal', 1, 5, 90112, 128, True),
    ('check114_128_2x4x190464_causal', 2, 4, 190464, 128, True),
    ('check114_64_1x8x50176', 1, 8, 50176, 64, False),
    ('check114_64_2x2x315392_causal', 2, 2, 315392, 64, True),
    ('check114_128_1x1x248832', 1, 1, 248832, 128, False),
    ('check114_64_1x7x35840_causal', 1, 7, 35840, 64, True),
]

# check103-check118: draw_validation(20261289-20261304, "checkNN", many=0, few=0, long=8), check103 with many=3 (the
# many-heads grid's last three shapes), so that every set still holds twelve shapes; predicted for both GPUs before
# any GPU measured them
CHECK115 = [
    ('check115_256_8x7x5105_causal', 8, 7, 5105, 256, True),
    ('check115_96_2x16x7155', 2, 16, 7155, 96, False),
    ('check115_256_1x12x5425x138767', 1, 12, (5425, 138767), 256, False),
    ('check115_256_1x32x10615x1720', 1, 32, (10615, 1720), 256, False),
    ('check115_128_1x5x68608_causal', 1, 5, 68608, 128, True),
    ('check115_128_4x1x141312_causal', 4, 1, 141312, 128, True),
    ('check115_64_4x1x41984', 4, 1, 41984, 64, False),
    ('check115_128_1x2x144384', 1, 2, 144384, 128, False),
    ('check115_64_1x5x75776_causal', 1, 5, 75776, 64, True),
    ('check115_64_1x2x211968_causal', 1, 2, 211968, 64, True),
    ('check115_64_8x1x136192_causal', 8, 1, 136192, 64, True),
    ('check115_128_2x4x49152_causal', 2, 4, 49152, 128, True),
]

CHECK116 = [
    ('check116_80_2x3x40560x52968', 2, 3, (40560, 52968), 80, False),
    ('check116_80_2x3x26812', 2, 3, 26812, 80, False),
    ('check116_160_1x5x14246x90553', 1, 5, (14246, 90553), 160, False),
    ('check116_32_2x1x122037_causal', 2, 1, 122037, 32, True),
    ('check116_128_1x5x53248_causal', 1, 5, 53248, 128, True),
    ('check116_64_1x7x59392_causal', 1, 7, 59392, 64, True),
    ('check116_128_1x8x78848_causal', 1, 8, 78848, 128, True),
    ('check116_128_1x2x39936', 1, 2, 39936, 128, False),
    ('check116_64_2x3x33792_causal', 2, 3, 33792, 64, True),
    ('check116_128_8x1x152576_causal', 8, 1, 152576, 128, True),
    ('check116_128_1x1x156672', 1, 1, 156672, 128, False),
    ('check116_64_1x4x103424', 1, 4, 103424, 64, False),
]

CHECK117 = [
    ('check117_96_2x6x19886x14724', 2, 6, (19886, 14724), 96, False),
    ('check117_192_4x6x18922', 4, 6, 18922, 192, False),
    ('check117_192_8x3x1455x28065', 8, 3, (1455, 28065), 192, False),
    ('check117_80_2x24x1901x1978', 2, 24, (1901, 1978), 80, False),
    ('check117_64_1x1x346112_causal', 1, 1, 346112, 64, True),
    ('check117_128_2x4x38912', 2, 4, 38912, 128, False),
    ('check117_128_2x3x146432', 2, 3, 146432, 128, False),
    ('check117_64_1x8x112640', 1, 8, 112640, 64, False),
    ('check117_64_2x3x47104_causal', 2, 3, 47104, 64, True),
    ('check117_128_2x1x57344', 2, 1, 57344, 128, False),
    ('check117_64_2x2x135168_causal', 2, 2, 135168, 64, True),
    ('check117_64_4x1x81920', 4, 1, 81920, 64, False),
]

CHECK118 = [
    ('check118_192_1x5x2790', 1, 5, 2790, 192, False),
    ('check118_160_4x1x190852x122832', 4, 1, (190852, 122832), 160, False),
    ('check118_32_8x2x3475', 8, 2, 3475, 32, False),
    ('check118_192_1x6x4328x1148', 1, 6, (4328, 1148), 192, False),
    ('check118_128_8x1x36864', 8, 1, 36864, 128, False),
    ('check118_64_1x8x67584_causal', 1, 8, 67584, 64, True),
    ('check118_128_1x2x40960_causal', 1, 2, 40960, 128, True),
    ('check118_128_2x2x43008_causal', 2, 2, 43008, 128, True),
    ('check118_64_2x1x334848_causal', 2, 1, 334848, 64, True),
    ('check118_128_1x2x132096', 1, 2, 132096, 128, False),
    ('check118_128_1x2x294912_causal', 1, 2, 294912, 128, True),
    ('check118_64_1x6x132096', 1, 6, 132096, 64, False),
]

# apart160 (aimed, not drawn; measured twice, --repeat 2): check112's FlashAttention-2 non-causal d = 160 forward at
# 2 x 5 x 168710 read 463 GB where its lockstep pass reads 12 GB and kernel 2 read 12.3 at the same call: its waves
# came apart (as the d = 128 and 256 kernels' do far past the knee, check66, check100, check106) by more than any
# measured before. That shape again, and its neighbours in one thing at a time: one head, the length (60-160 MiB of K
# and V a head), and the head dim (d = 192 runs the same kernel, Flash_fwd_kernel_traits<192, 128, 64, 8>; d = 128
# its own). Predicted for both GPUs before any GPU measured them
APART160 = ([("apart160_160_2x5x168710", 2, 5, 168710, 160, False),
             ("apart160_160_1x1x168710", 1, 1, 168710, 160, False)]
            + [(f"apart160_160_2x5x{N}", 2, 5, N, 160, False) for N in (98304, 131072)]
            + [("apart160_160_1x2x262144", 1, 2, 262144, 160, False)]
            + [(f"apart160_{d}_2x5x168710", 2, 5, 168710, d, False) for d in (192, 128)])

# padded (aimed, not drawn; measured twice, --repeat 2, SDPA flash alone), after apart160: FlashAttention-2's
# d = 160 runs its d = 192 kernel (Flash_fwd_kernel_traits<192, 128, 64, 8>) with the last 32 columns masked, and came
# apart at 2 x 5 x 131072 in each of three rounds (140-177 GB forward against the model's 7.6) where d = 192 on the
# same kernel and the same call held together. Is it d = 160, or any head dim a kernel pads? Other padded head dims at
# that shape (d = 144 and 176 on the d = 192 kernel, 224 and 240 on the d = 256 one, 80 and 112 on the d = 96 and 128
# ones) beside the kernels' own (96, 128, 192, 256). Predicted for both GPUs before any GPU measured them
PADDED = [(f"padded_{d}_2x5x131072", 2, 5, 131072, d, False) for d in (80, 96, 112, 128, 144, 176, 192, 224, 240, 256)]

# padded2 (aimed, not drawn; two rounds, SDPA flash alone), after padded: iomodel.dram's caveat (PADDED_APART) marks
# FlashAttention-2's non-causal walks at a padded head dim with one head's K and V at least the L2, and no other
# call. Its two edges had not been measured: the same walks below the L2 (d = 160 at 30-50 MiB of K and V a head;
# d = 224 at 49 MiB), and causal walks at padded head dims past it (d = 160 and 224 at 80-112 MiB a head); one
# head of d = 176 past it too. Predicted for both GPUs before any GPU measured them
PADDED2 = ([(f"padded2_160_2x5x{N}", 2, 5, N, 160, False) for N in (49152, 65536, 81920)]
           + [("padded2_224_2x5x57344", 2, 5, 57344, 224, False), ("padded2_176_1x1x131072", 1, 1, 131072, 176, False)]
           + [(f"padded2_{d}_2x5x131072_causal", 2, 5, 131072, d, True) for d in (160, 224)]
           + [("padded2_160_2x5x168710_causal", 2, 5, 168710, 160, True)])

# check119-check122: draw_validation(20261305-20261308, "checkNN", many=0, few=0, long=8), after padded2 (whose
# shapes they therefore never draw); predicted for both GPUs before any GPU measured them
CHECK119 = [
    ('check119_160_4x12x1289x3665', 4, 12, (1289, 3665), 160, False),
    ('check119_80_2x16x28053', 2, 16, 28053, 80, False),
    ('check119_160_8x3x9878_causal', 8, 3, 9878, 160, True),
    ('check119_96_8x5x36373', 8, 5, 36373, 96, False),
    ('check119_64_1x5x47104_causal', 1, 5, 47104, 64, True),
    ('check119_64_2x2x73728_causal', 2, 2, 73728, 64, True),
    ('check119_128_1x5x73728_causal', 1, 5, 73728, 128, True),
    ('check119_128_1x1x156672_causal', 1, 1, 156672, 128, True),
    ('check119_64_1x1x107520_causal', 1, 1, 107520, 64, True),
    ('check119_64_1x8x53248_causal', 1, 8, 53248, 64, True),
    ('check119_64_1x4x200704_causal', 1, 4, 200704, 64, True),
    ('check119_64_4x2x145408_causal', 4, 2, 145408, 64, True),
]

CHECK120 = [
    ('check120_96_8x7x16236', 8, 7, 16236, 96, False),
    ('check120_192_1x3x2038_causal', 1, 3, 2038, 192, True),
    ('check120_80_1x3x7878', 1, 3, 7878, 80, False),
    ('check120_96_4x1x30546x2541', 4, 1, (30546, 2541), 96, False),
    ('check120_128_2x1x99328_causal', 2, 1, 99328, 128, True),
    ('check120_128_2x2x87040_causal', 2, 2, 87040, 128, True),
    ('check120_128_1x4x37888', 1, 4, 37888, 128, False),
    ('check120_64_1x6x67584', 1, 6, 67584, 64, False),
    ('check120_128_8x1x34816', 8, 1, 34816, 128, False),
    ('check120_64_1x6x133120_causal', 1, 6, 133120, 64, True),
    ('check120_64_2x1x106496_causal', 2, 1, 106496, 64, True),
    ('check120_64_2x2x305152_causal', 2, 2, 305152, 64, True),
]

CHECK121 = [
    ('check121_80_1x3x5046x36622', 1, 3, (5046, 36622), 80, False),
    ('check121_96_2x7x58208_causal', 2, 7, 58208, 96, True),
    ('check121_256_2x3x67242x6796', 2, 3, (67242, 6796), 256, False),
    ('check121_192_1x1x2114_causal', 1, 1, 2114, 192, True),
    ('check121_64_1x5x33792_causal', 1, 5, 33792, 64, True),
    ('check121_64_2x1x364544_causal', 2, 1, 364544, 64, True),
    ('check121_64_1x6x134144', 1, 6, 134144, 64, False),
    ('check121_128_1x8x60416_causal', 1, 8, 60416, 128, True),
    ('check121_64_2x3x119808_causal', 2, 3, 119808, 64, True),
    ('check121_64_1x4x168960_causal', 1, 4, 168960, 64, True),
    ('check121_64_1x3x78848_causal', 1, 3, 78848, 64, True),
    ('check121_64_2x1x233472', 2, 1, 233472, 64, False),
]

CHECK122 = [
    ('check122_256_2x5x193126', 2, 5, 193126, 256, False),
    ('check122_32_1x16x5733x41401', 1, 16, (5733, 41401), 32, False),
    ('check122_32_1x2x3075_causal', 1, 2, 3075, 32, True),
    ('check122_160_2x6x3305', 2, 6, 3305, 160, False),
    ('check122_128_1x6x119808_causal', 1, 6, 119808, 128, True),
    ('check122_128_1x2x210944', 1, 2, 210944, 128, False),
    ('check122_64_1x8x34816', 1, 8, 34816, 64, False),
    ('check122_64_2x2x203776', 2, 2, 203776, 64, False),
    ('check122_128_2x1x66560_causal', 2, 1, 66560, 128, True),
    ('check122_64_1x6x34816_causal', 1, 6, 34816, 64, True),
    ('check122_128_2x1x59392_causal', 2, 1, 59392, 128, True),
    ('check122_64_1x1x95232', 1, 1, 95232, 64, False),
]

# apart256 (aimed, not drawn; two rounds, --repeat 2, SDPA flash alone), after check122: FlashAttention-2's non-causal
# d = 256 forward at 2 x 5 x 193126, its kernel's own head dim, read 851 GB where the lockstep passes read 46 (check122,
# blind), and padded's d = 256 at 2 x 5 x 131072 1.3x and 2.4x in its two rounds. Does that call come apart again,
# and how does it move with the heads (one, two, five, ten), the length (131072, 163840), and the kernel (d = 192 and
# d = 128 with the same K and V bytes a head, 189 MiB)? Predicted for both GPUs before any GPU measured them
APART256 = ([(f"apart256_256_{shape}", *dims, 256, False) for shape, dims in (
                ("2x5x193126", (2, 5, 193126)), ("1x1x193126", (1, 1, 193126)), ("1x2x193126", (1, 2, 193126)),
                ("1x5x193126", (1, 5, 193126)), ("2x5x163840", (2, 5, 163840)), ("2x5x131072", (2, 5, 131072)))]
            + [("apart256_192_2x5x257501", 2, 5, 257501, 192, False),
               ("apart256_128_2x5x386252", 2, 5, 386252, 128, False)])

# check123-check124: draw_validation(20261309-20261310, "checkNN", many=0, few=0, long=8), after apart256; predicted
# for both GPUs before any GPU measured them
CHECK123 = [
    ('check123_192_4x12x4399x12641', 4, 12, (4399, 12641), 192, False),
    ('check123_256_8x12x21231', 8, 12, 21231, 256, False),
    ('check123_256_4x3x78922_causal', 4, 3, 78922, 256, True),
    ('check123_80_4x5x2874', 4, 5, 2874, 80, False),
    ('check123_128_1x3x69632_causal', 1, 3, 69632, 128, True),
    ('check123_64_1x4x37888_causal', 1, 4, 37888, 64, True),
    ('check123_128_1x8x56320', 1, 8, 56320, 128, False),
    ('check123_64_1x1x269312', 1, 1, 269312, 64, False),
    ('check123_128_1x8x254976_causal', 1, 8, 254976, 128, True),
    ('check123_64_2x3x164864_causal', 2, 3, 164864, 64, True),
    ('check123_64_2x1x281600_causal', 2, 1, 281600, 64, True),
    ('check123_128_1x3x308224_causal', 1, 3, 308224, 128, True),
]

CHECK124 = [
    ('check124_160_4x3x6363x4502', 4, 3, (6363, 4502), 160, False),
    ('check124_80_2x7x6882', 2, 7, 6882, 80, False),
    ('check124_96_2x6x17828_causal', 2, 6, 17828, 96, True),
    ('check124_192_1x16x31521', 1, 16, 31521, 192, False),
    ('check124_128_1x4x47104_causal', 1, 4, 47104, 128, True),
    ('check124_64_2x3x93184_causal', 2, 3, 93184, 64, True),
    ('check124_64_2x2x34816', 2, 2, 34816, 64, False),
    ('check124_128_2x1x51200_causal', 2, 1, 51200, 128, True),
    ('check124_128_1x2x384000_causal', 1, 2, 384000, 128, True),
    ('check124_64_1x5x92160_causal', 1, 5, 92160, 64, True),
    ('check124_128_1x4x40960_causal', 1, 4, 40960, 128, True),
    ('check124_64_1x6x268288_causal', 1, 6, 268288, 64, True),
]

# waves256 (aimed, not drawn; two rounds, SDPA flash alone), after check124: apart256 found FlashAttention-2's
# non-causal walks past the L2 coming apart with more heads, which also means more waves of CTAs, and iomodel.dram's
# caveat (FA2_APART) names the waves. Here the heads and the K and V a head stay (ten heads of 189 MiB, d = 256 and
# d = 128) and the queries, so the waves, change: 14, 29 and 57 waves in the forward (Nq = 24141, 48282 and 96563 at
# d = 256; twice those at d = 128, whose 128-row blocks halve the CTAs). Predicted for both GPUs before any GPU
# measured them
WAVES256 = ([(f"waves256_256_2x5x{Nq}x193126", 2, 5, (Nq, 193126), 256, False) for Nq in (24141, 48282, 96563)]
            + [(f"waves256_128_2x5x{Nq}x386252", 2, 5, (Nq, 386252), 128, False) for Nq in (48282, 96563, 193126)])

# check125-check126: draw_validation(20261311-20261312, "checkNN", many=0, few=0, long=8), after waves256; predicted
# for both GPUs before any GPU measured them
CHECK125 = [
    ('check125_32_4x6x3283x2428', 4, 6, (3283, 2428), 32, False),
    ('check125_160_1x7x1318x165537', 1, 7, (1318, 165537), 160, False),
    ('check125_256_4x6x25165', 4, 6, 25165, 256, False),
    ('check125_96_4x5x4504', 4, 5, 4504, 96, False),
    ('check125_128_1x6x131072_causal', 1, 6, 131072, 128, True),
    ('check125_128_1x7x157696', 1, 7, 157696, 128, False),
    ('check125_128_1x5x155648_causal', 1, 5, 155648, 128, True),
    ('check125_64_1x4x220160_causal', 1, 4, 220160, 64, True),
    ('check125_64_4x2x37888_causal', 4, 2, 37888, 64, True),
    ('check125_128_2x4x43008_causal', 2, 4, 43008, 128, True),
    ('check125_128_1x8x39936_causal', 1, 8, 39936, 128, True),
    ('check125_64_2x3x144384', 2, 3, 144384, 64, False),
]

CHECK126 = [
    ('check126_256_1x1x67176_causal', 1, 1, 67176, 256, True),
    ('check126_160_8x1x8823', 8, 1, 8823, 160, False),
    ('check126_256_8x2x87868_causal', 8, 2, 87868, 256, True),
    ('check126_160_1x7x53541_causal', 1, 7, 53541, 160, True),
    ('check126_64_1x6x33792_causal', 1, 6, 33792, 64, True),
    ('check126_128_1x1x122880', 1, 1, 122880, 128, False),
    ('check126_64_2x2x76800', 2, 2, 76800, 64, False),
    ('check126_128_2x3x149504_causal', 2, 3, 149504, 128, True),
    ('check126_64_1x4x207872', 1, 4, 207872, 64, False),
    ('check126_64_1x6x293888_causal', 1, 6, 293888, 64, True),
    ('check126_128_1x3x275456_causal', 1, 3, 275456, 128, True),
    ('check126_128_1x7x154624_causal', 1, 7, 154624, 128, True),
]

# check127-check130: draw_validation(20261313-20261316, "checkNN", many=0, few=0, long=8), after check126; predicted
# for both GPUs before any GPU measured them
CHECK127 = [
    ('check127_80_1x6x1557x60134', 1, 6, (1557, 60134), 80, False),
    ('check127_256_4x3x32080_causal', 4, 3, 32080, 256, True),
    ('check127_96_1x12x7286x4335', 1, 12, (7286, 4335), 96, False),
    ('check127_160_8x6x23302_causal', 8, 6, 23302, 160, True),
    ('check127_128_1x8x36864_causal', 1, 8, 36864, 128, True),
    ('check127_128_1x6x231424', 1, 6, 231424, 128, False),
    ('check127_64_1x7x175104', 1, 7, 175104, 64, False),
    ('check127_128_8x1x75776', 8, 1, 75776, 128, False),
    ('check127_64_2x4x91136', 2, 4, 91136, 64, False),
    ('check127_64_1x4x189440', 1, 4, 189440, 64, False),
    ('check127_128_2x1x39936', 2, 1, 39936, 128, False),
    ('check127_64_4x1x483328_causal', 4, 1, 483328, 64, True),
]

CHECK128 = [
    ('check128_96_2x7x62751_causal', 2, 7, 62751, 96, True),
    ('check128_32_8x12x7470_causal', 8, 12, 7470, 32, True),
    ('check128_256_8x2x4042x33183', 8, 2, (4042, 33183), 256, False),
    ('check128_32_1x24x5547x11538', 1, 24, (5547, 11538), 32, False),
    ('check128_128_2x2x41984', 2, 2, 41984, 128, False),
    ('check128_64_2x3x50176', 2, 3, 50176, 64, False),
    ('check128_128_1x5x80896', 1, 5, 80896, 128, False),
    ('check128_64_4x1x375808', 4, 1, 375808, 64, False),
    ('check128_64_1x6x119808', 1, 6, 119808, 64, False),
    ('check128_64_1x4x507904_causal', 1, 4, 507904, 64, True),
    ('check128_64_1x3x205824_causal', 1, 3, 205824, 64, True),
    ('check128_64_2x2x109568_causal', 2, 2, 109568, 64, True),
]

CHECK129 = [
    ('check129_256_2x12x25388_causal', 2, 12, 25388, 256, True),
    ('check129_32_2x32x21639_causal', 2, 32, 21639, 32, True),
    ('check129_192_8x24x7911', 8, 24, 7911, 192, False),
    ('check129_32_1x12x4402x1426', 1, 12, (4402, 1426), 32, False),
    ('check129_64_2x3x178176_causal', 2, 3, 178176, 64, True),
    ('check129_128_2x1x40960_causal', 2, 1, 40960, 128, True),
    ('check129_128_2x1x361472_causal', 2, 1, 361472, 128, True),
    ('check129_64_1x4x94208_causal', 1, 4, 94208, 64, True),
    ('check129_64_4x2x48128_causal', 4, 2, 48128, 64, True),
    ('check129_64_2x1x238592', 2, 1, 238592, 64, False),
    ('check129_64_2x3x327680_causal', 2, 3, 327680, 64, True),
    ('check129_128_1x5x43008_causal', 1, 5, 43008, 128, True),
]

CHECK130 = [
    ('check130_160_1x16x88433_causal', 1, 16, 88433, 160, True),
    ('check130_256_1x5x51208', 1, 5, 51208, 256, False),
    ('check130_96_1x2x27880x3320', 1, 2, (27880, 3320), 96, False),
    ('check130_96_4x24x5036', 4, 24, 5036, 96, False),
    ('check130_64_1x1x102400', 1, 1, 102400, 64, False),
    ('check130_64_2x2x112640', 2, 2, 112640, 64, False),
    ('check130_128_1x7x128000', 1, 7, 128000, 128, False),
    ('check130_128_1x8x86016_causal', 1, 8, 86016, 128, True),
    ('check130_128_1x6x249856', 1, 6, 249856, 128, False),
    ('check130_64_1x8x155648', 1, 8, 155648, 64, False),
    ('check130_128_4x1x156672_causal', 4, 1, 156672, 128, True),
    ('check130_64_2x2x39936_causal', 2, 2, 39936, 64, True),
]

# apartkv (aimed, not drawn; two rounds, SDPA flash alone), after check130: of the recorded non-causal
# FlashAttention-2 forwards at its own head dims past the L2 with 24 or more waves (FA2_APART's class), those whose
# head's K and V are at least 2.5 times the H200's L2 came apart more often (20 of 27 over 4/3 of the model) than
# those under 1.5 times (3 of 88). Here the waves stay (eight heads, 48 and 29 waves in the forward: Nq = 202752 and
# 122880 at d = 128 and 64) and the keys change: one head's K and V 1.1, 1.6, 2.2, 3.2 and 4 times the H200's L2 at
# d = 128. At d = 64 the same key counts hold half the bytes, so that the set tells the bytes a head's K and V take
# (against the L2) from the key blocks a CTA walks. Written down before any GPU measured them: at 48 waves, the
# forwards at 3.2 and 4 times read over 4/3 of the model and those at 1.1 and 1.6 times do not. Predicted for both
# GPUs before any GPU measured them
APARTKV = ([(f"apartkv_128_2x4x{Nq}x{Nk}", 2, 4, (Nq, Nk), 128, False)
            for Nq, Nks in ((202752, (135168, 196608, 270336, 393216, 491520)), (122880, (135168, 270336, 491520)))
            for Nk in Nks]
           + [(f"apartkv_64_2x4x202752x{Nk}", 2, 4, (202752, Nk), 64, False) for Nk in (270336, 393216, 786432)])

# check131-check134: draw_validation(20261317-20261320, "checkNN", many=0, few=0, long=8), after apartkv; predicted
# for both GPUs before any GPU measured them
CHECK131 = [
    ('check131_80_1x5x57895_causal', 1, 5, 57895, 80, True),
    ('check131_160_1x1x50588x6627', 1, 1, (50588, 6627), 160, False),
    ('check131_96_4x12x8372', 4, 12, 8372, 96, False),
    ('check131_96_2x32x3482x4167', 2, 32, (3482, 4167), 96, False),
    ('check131_128_1x4x151552_causal', 1, 4, 151552, 128, True),
    ('check131_128_1x2x155648_causal', 1, 2, 155648, 128, True),
    ('check131_64_2x2x403456_causal', 2, 2, 403456, 64, True),
    ('check131_128_2x3x54272', 2, 3, 54272, 128, False),
    ('check131_64_1x1x100352_causal', 1, 1, 100352, 64, True),
    ('check131_128_1x4x48128_causal', 1, 4, 48128, 128, True),
    ('check131_128_8x1x166912_causal', 8, 1, 166912, 128, True),
    ('check131_64_1x1x73728', 1, 1, 73728, 64, False),
]

CHECK132 = [
    ('check132_32_4x16x1719_causal', 4, 16, 1719, 32, True),
    ('check132_32_2x3x2183_causal', 2, 3, 2183, 32, True),
    ('check132_80_1x12x4541x37194', 1, 12, (4541, 37194), 80, False),
    ('check132_256_8x1x17041x42369', 8, 1, (17041, 42369), 256, False),
    ('check132_64_2x4x34816_causal', 2, 4, 34816, 64, True),
    ('check132_64_1x2x203776', 1, 2, 203776, 64, False),
    ('check132_64_2x1x61440_causal', 2, 1, 61440, 64, True),
    ('check132_128_1x3x87040', 1, 3, 87040, 128, False),
    ('check132_128_8x1x43008_causal', 8, 1, 43008, 128, True),
    ('check132_128_2x4x123904', 2, 4, 123904, 128, False),
    ('check132_128_1x3x36864_causal', 1, 3, 36864, 128, True),
    ('check132_64_1x8x100352', 1, 8, 100352, 64, False),
]

CHECK133 = [
    ('check133_160_2x3x16940_causal', 2, 3, 16940, 160, True),
    ('check133_192_2x16x5777x7613', 2, 16, (5777, 7613), 192, False),
    ('check133_192_8x3x1450x7151', 8, 3, (1450, 7151), 192, False),
    ('check133_160_1x2x19578_causal', 1, 2, 19578, 160, True),
    ('check133_128_1x3x159744_causal', 1, 3, 159744, 128, True),
    ('check133_128_8x1x100352_causal', 8, 1, 100352, 128, True),
    ('check133_64_1x2x82944', 1, 2, 82944, 64, False),
    ('check133_128_4x2x39936', 4, 2, 39936, 128, False),
    ('check133_128_2x3x143360_causal', 2, 3, 143360, 128, True),
    ('check133_128_2x3x115712_causal', 2, 3, 115712, 128, True),
    ('check133_128_4x2x89088_causal', 4, 2, 89088, 128, True),
    ('check133_64_1x4x408576_causal', 1, 4, 408576, 64, True),
]

CHECK134 = [
    ('check134_256_2x3x12441', 2, 3, 12441, 256, False),
    ('check134_192_1x1x2602_causal', 1, 1, 2602, 192, True),
    ('check134_256_1x6x1421', 1, 6, 1421, 256, False),
    ('check134_256_2x6x4881x56063', 2, 6, (4881, 56063), 256, False),
    ('check134_64_8x1x58368_causal', 8, 1, 58368, 64, True),
    ('check134_128_1x6x41984', 1, 6, 41984, 128, False),
    ('check134_128_4x1x77824', 4, 1, 77824, 128, False),
    ('check134_128_1x1x378880_causal', 1, 1, 378880, 128, True),
    ('check134_128_1x6x232448_causal', 1, 6, 232448, 128, True),
    ('check134_64_1x5x83968', 1, 5, 83968, 64, False),
    ('check134_128_2x2x38912_causal', 2, 2, 38912, 128, True),
    ('check134_64_1x6x73728', 1, 6, 73728, 64, False),
]

# check135-check138: draw_validation(20261321-20261324, "checkNN", many=0, few=0, long=8), after check134; predicted
# for both GPUs before any GPU measured them
CHECK135 = [
    ('check135_32_2x3x4978_causal', 2, 3, 4978, 32, True),
    ('check135_80_1x16x1372_causal', 1, 16, 1372, 80, True),
    ('check135_160_4x5x4748x2081', 4, 5, (4748, 2081), 160, False),
    ('check135_256_2x2x1802', 2, 2, 1802, 256, False),
    ('check135_64_2x1x208896', 2, 1, 208896, 64, False),
    ('check135_64_1x5x177152_causal', 1, 5, 177152, 64, True),
    ('check135_64_4x2x165888', 4, 2, 165888, 64, False),
    ('check135_64_1x1x145408', 1, 1, 145408, 64, False),
    ('check135_64_4x2x239616', 4, 2, 239616, 64, False),
    ('check135_64_1x7x116736_causal', 1, 7, 116736, 64, True),
    ('check135_64_1x6x277504', 1, 6, 277504, 64, False),
    ('check135_64_1x4x33792', 1, 4, 33792, 64, False),
]

CHECK136 = [
    ('check136_192_8x7x4584', 8, 7, 4584, 192, False),
    ('check136_256_4x12x3853', 4, 12, 3853, 256, False),
    ('check136_96_1x16x4271', 1, 16, 4271, 96, False),
    ('check136_32_1x2x111942x99874', 1, 2, (111942, 99874), 32, False),
    ('check136_128_1x4x51200_causal', 1, 4, 51200, 128, True),
    ('check136_128_1x8x82944_causal', 1, 8, 82944, 128, True),
    ('check136_128_4x2x44032', 4, 2, 44032, 128, False),
    ('check136_64_1x3x154624_causal', 1, 3, 154624, 64, True),
    ('check136_128_4x1x52224_causal', 4, 1, 52224, 128, True),
    ('check136_64_2x4x60416_causal', 2, 4, 60416, 64, True),
    ('check136_64_1x8x107520_causal', 1, 8, 107520, 64, True),
    ('check136_64_4x1x401408_causal', 4, 1, 401408, 64, True),
]

CHECK137 = [
    ('check137_192_4x1x71589_causal', 4, 1, 71589, 192, True),
    ('check137_32_4x6x11836x32250', 4, 6, (11836, 32250), 32, False),
    ('check137_80_2x6x132042', 2, 6, 132042, 80, False),
    ('check137_160_8x16x1004x10296', 8, 16, (1004, 10296), 160, False),
    ('check137_128_2x4x234496', 2, 4, 234496, 128, False),
    ('check137_128_1x5x381952_causal', 1, 5, 381952, 128, True),
    ('check137_64_8x1x125952_causal', 8, 1, 125952, 64, True),
    ('check137_64_1x1x185344_causal', 1, 1, 185344, 64, True),
    ('check137_128_2x4x200704', 2, 4, 200704, 128, False),
    ('check137_128_2x1x43008_causal', 2, 1, 43008, 128, True),
    ('check137_64_1x7x126976', 1, 7, 126976, 64, False),
    ('check137_64_1x1x76800_causal', 1, 1, 76800, 64, True),
]

CHECK138 = [
    ('check138_192_2x12x2035', 2, 12, 2035, 192, False),
    ('check138_80_2x1x10974_causal', 2, 1, 10974, 80, True),
    ('check138_256_1x16x121247_causal', 1, 16, 121247, 256, True),
    ('check138_32_4x1x134129_causal', 4, 1, 134129, 32, True),
    ('check138_64_4x1x427008', 4, 1, 427008, 64, False),
    ('check138_64_4x2x58368_causal', 4, 2, 58368, 64, True),
    ('check138_128_4x2x35840', 4, 2, 35840, 128, False),
    ('check138_128_1x4x522240', 1, 4, 522240, 128, False),
    ('check138_128_1x2x43008_causal', 1, 2, 43008, 128, True),
    ('check138_128_2x2x201728_causal', 2, 2, 201728, 128, True),
    ('check138_64_1x4x243712', 1, 4, 243712, 64, False),
    ('check138_64_8x1x129024_causal', 8, 1, 129024, 64, True),
]

# check139-check142: draw_validation(20261325-20261328, "checkNN", many=0, few=0, long=8), after check138; predicted
# for both GPUs before any GPU measured them
CHECK139 = [
    ('check139_96_2x5x1917_causal', 2, 5, 1917, 96, True),
    ('check139_160_1x16x2687_causal', 1, 16, 2687, 160, True),
    ('check139_32_4x6x8786', 4, 6, 8786, 32, False),
    ('check139_80_1x32x2610', 1, 32, 2610, 80, False),
    ('check139_64_8x1x37888_causal', 8, 1, 37888, 64, True),
    ('check139_128_8x1x116736', 8, 1, 116736, 128, False),
    ('check139_64_8x1x50176', 8, 1, 50176, 64, False),
    ('check139_64_2x1x375808', 2, 1, 375808, 64, False),
    ('check139_64_1x7x158720', 1, 7, 158720, 64, False),
    ('check139_64_1x2x461824_causal', 1, 2, 461824, 64, True),
    ('check139_64_1x1x148480', 1, 1, 148480, 64, False),
    ('check139_128_8x1x51200_causal', 8, 1, 51200, 128, True),
]

CHECK140 = [
    ('check140_160_2x3x21842', 2, 3, 21842, 160, False),
    ('check140_32_1x12x41150_causal', 1, 12, 41150, 32, True),
    ('check140_80_1x16x12423', 1, 16, 12423, 80, False),
    ('check140_192_2x1x65548_causal', 2, 1, 65548, 192, True),
    ('check140_128_1x8x50176', 1, 8, 50176, 128, False),
    ('check140_128_4x2x41984_causal', 4, 2, 41984, 128, True),
    ('check140_64_1x1x192512_causal', 1, 1, 192512, 64, True),
    ('check140_64_1x8x64512_causal', 1, 8, 64512, 64, True),
    ('check140_128_2x1x56320_causal', 2, 1, 56320, 128, True),
    ('check140_128_4x1x33792_causal', 4, 1, 33792, 128, True),
    ('check140_64_4x1x50176', 4, 1, 50176, 64, False),
    ('check140_128_2x2x56320_causal', 2, 2, 56320, 128, True),
]

CHECK141 = [
    ('check141_192_2x2x98746_causal', 2, 2, 98746, 192, True),
    ('check141_256_8x1x9298', 8, 1, 9298, 256, False),
    ('check141_256_2x1x1467', 2, 1, 1467, 256, False),
    ('check141_32_2x24x35973', 2, 24, 35973, 32, False),
    ('check141_128_1x2x71680', 1, 2, 71680, 128, False),
    ('check141_64_1x5x62464', 1, 5, 62464, 64, False),
    ('check141_64_1x3x147456', 1, 3, 147456, 64, False),
    ('check141_128_2x3x52224_causal', 2, 3, 52224, 128, True),
    ('check141_128_1x4x46080_causal', 1, 4, 46080, 128, True),
    ('check141_128_1x6x324608_causal', 1, 6, 324608, 128, True),
    ('check141_128_1x1x129024_causal', 1, 1, 129024, 128, True),
    ('check141_128_1x5x47104_causal', 1, 5, 47104, 128, True),
]

CHECK142 = [
    ('check142_96_1x1x3051', 1, 1, 3051, 96, False),
    ('check142_192_8x2x2937', 8, 2, 2937, 192, False),
    ('check142_192_4x2x1196_causal', 4, 2, 1196, 192, True),
    ('check142_256_2x3x2294x27686', 2, 3, (2294, 27686), 256, False),
    ('check142_64_2x4x243712', 2, 4, 243712, 64, False),
    ('check142_64_1x4x38912_causal', 1, 4, 38912, 64, True),
    ('check142_64_4x2x55296_causal', 4, 2, 55296, 64, True),
    ('check142_128_1x5x415744_causal', 1, 5, 415744, 128, True),
    ('check142_128_2x2x373760', 2, 2, 373760, 128, False),
    ('check142_64_8x1x36864', 8, 1, 36864, 64, False),
    ('check142_128_8x1x54272', 8, 1, 54272, 128, False),
    ('check142_128_4x1x223232', 4, 1, 223232, 128, False),
]

# check143-check146: draw_validation(20261329-20261332, "checkNN", many=0, few=0, long=8), after check142; predicted
# for both GPUs before any GPU measured them
CHECK143 = [
    ('check143_256_4x3x118906', 4, 3, 118906, 256, False),
    ('check143_256_4x12x2598_causal', 4, 12, 2598, 256, True),
    ('check143_80_4x6x44247', 4, 6, 44247, 80, False),
    ('check143_192_4x24x18258_causal', 4, 24, 18258, 192, True),
    ('check143_64_1x8x240640', 1, 8, 240640, 64, False),
    ('check143_64_1x4x76800_causal', 1, 4, 76800, 64, True),
    ('check143_64_1x5x347136_causal', 1, 5, 347136, 64, True),
    ('check143_64_1x4x72704_causal', 1, 4, 72704, 64, True),
    ('check143_128_1x8x145408_causal', 1, 8, 145408, 128, True),
    ('check143_128_4x2x109568_causal', 4, 2, 109568, 128, True),
    ('check143_128_2x3x84992_causal', 2, 3, 84992, 128, True),
    ('check143_128_1x3x437248_causal', 1, 3, 437248, 128, True),
]

CHECK144 = [
    ('check144_32_8x2x1435_causal', 8, 2, 1435, 32, True),
    ('check144_96_1x6x4393_causal', 1, 6, 4393, 96, True),
    ('check144_80_2x12x31863', 2, 12, 31863, 80, False),
    ('check144_32_1x1x130419x3756', 1, 1, (130419, 3756), 32, False),
    ('check144_128_2x1x67584_causal', 2, 1, 67584, 128, True),
    ('check144_64_4x1x46080_causal', 4, 1, 46080, 64, True),
    ('check144_128_1x6x75776_causal', 1, 6, 75776, 128, True),
    ('check144_128_1x7x95232_causal', 1, 7, 95232, 128, True),
    ('check144_128_1x4x53248', 1, 4, 53248, 128, False),
    ('check144_128_1x5x83968_causal', 1, 5, 83968, 128, True),
    ('check144_64_1x7x117760_causal', 1, 7, 117760, 64, True),
    ('check144_128_1x1x159744', 1, 1, 159744, 128, False),
]

CHECK145 = [
    ('check145_96_8x3x2465_causal', 8, 3, 2465, 96, True),
    ('check145_160_8x3x8307x2677', 8, 3, (8307, 2677), 160, False),
    ('check145_80_1x7x159343_causal', 1, 7, 159343, 80, True),
    ('check145_80_1x16x16045', 1, 16, 16045, 80, False),
    ('check145_64_2x3x38912_causal', 2, 3, 38912, 64, True),
    ('check145_128_1x4x36864', 1, 4, 36864, 128, False),
    ('check145_64_1x8x41984_causal', 1, 8, 41984, 64, True),
    ('check145_64_1x4x125952_causal', 1, 4, 125952, 64, True),
    ('check145_64_1x8x143360', 1, 8, 143360, 64, False),
    ('check145_128_1x2x126976', 1, 2, 126976, 128, False),
    ('check145_64_2x4x117760_causal', 2, 4, 117760, 64, True),
    ('check145_64_8x1x219136_causal', 8, 1, 219136, 64, True),
]

CHECK146 = [
    ('check146_192_8x1x171333x21307', 8, 1, (171333, 21307), 192, False),
    ('check146_96_8x5x7316x1284', 8, 5, (7316, 1284), 96, False),
    ('check146_192_8x7x4606', 8, 7, 4606, 192, False),
    ('check146_160_2x1x124711', 2, 1, 124711, 160, False),
    ('check146_128_1x5x104448_causal', 1, 5, 104448, 128, True),
    ('check146_64_1x2x86016', 1, 2, 86016, 64, False),
    ('check146_64_1x1x195584', 1, 1, 195584, 64, False),
    ('check146_64_2x3x119808', 2, 3, 119808, 64, False),
    ('check146_128_2x1x60416_causal', 2, 1, 60416, 128, True),
    ('check146_128_2x1x120832_causal', 2, 1, 120832, 128, True),
    ('check146_128_2x3x80896', 2, 3, 80896, 128, False),
    ('check146_128_2x1x48128_causal', 2, 1, 48128, 128, True),
]

# Not a blind set: aimed at kernel 3's non-causal walk short of its barrier's threshold (one head's K and V under
# 16 MiB), where every call recorded with four to eight heads of 9-15 MiB at d = 64 came out 17-32% under the model
# (check82, check77, check91, check94): one to 32 heads, 9-15 MiB of K and V a head, at d = 64 and at d = 128 (where
# nothing was recorded between 8 and 16 MiB a head). Predicted for both GPUs before any GPU measured them
K3FEW = [(f"k3few_{d}_1x{H}x{N}", 1, H, N, d, False)
         for d, Ns in ((64, (36864, 49152, 61440)), (128, (18432, 24576, 30720))) for N in Ns
         for H in (1, 2, 4, 8, 16, 32)]

# Not a blind set: kernel 3's non-causal walk short of its barrier again, at lengths, head counts and batches k3few did
# not measure (3-48 heads, B = 1-4, 7-15.75 MiB of K and V a head), predicted for both GPUs with k3_rounds_rule
# (written from check91, check94 and k3few) before any GPU measured them
K3FEW2 = [(f"k3few2_{d}_{B}x{H}x{N}", B, H, N, d, False)
          for d, Ns, BHs in ((64, (28672, 43008, 55296, 64512), ((1, 3), (2, 3), (4, 3), (2, 12), (4, 12))),
                             (128, (14336, 21504, 27648, 32256), ((1, 3), (2, 3), (4, 3), (2, 12))))
          for N in Ns for B, H in BHs]

# Not a blind set: kernel 2's dK/dV kernel wrote 74-84 MB to DRAM at three small non-causal shapes (check53,
# check54), more than all it writes, and 0 at others. These shapes pair each of those with its neighbours in one
# thing at a time: the head dim (48 and 160 are padded; 64 and 128 are not), N (1792 and 8064 fill every tile),
# the number of heads. ``python -m flashref.gpu.writes_probe`` measures them with and without the cache flush.
K2WRITES = [
    ("k2writes_48_8x3x1803", 8, 3, 1803, 48, False), ("k2writes_48_8x3x1792", 8, 3, 1792, 48, False),
    ("k2writes_64_8x3x1803", 8, 3, 1803, 64, False), ("k2writes_64_8x3x1792", 8, 3, 1792, 64, False),
    ("k2writes_48_1x1x1803", 1, 1, 1803, 48, False),
    ("k2writes_160_1x4x7996", 1, 4, 7996, 160, False), ("k2writes_160_1x4x8064", 1, 4, 8064, 160, False),
    ("k2writes_128_1x4x7996", 1, 4, 7996, 128, False),
    ("k2writes_256_1x3x9344", 1, 3, 9344, 256, False), ("k2writes_256_2x12x1024", 2, 12, 1024, 256, False),
    ("k2writes_128_1x3x9344", 1, 3, 9344, 128, False),
]

GROUPS = {"grid": GRID, "sweep": SWEEP, "check": CHECK, "check2": CHECK2, "check3": CHECK3, "check4": CHECK4,
          "check5": CHECK5, "check6": CHECK6, "check7": CHECK7, "check8": CHECK8, "check9": CHECK9, "check10": CHECK10,
          "softmax_rows": SOFTMAX_ROWS, "check11": CHECK11, "check12": CHECK12, "check13": CHECK13, "check14": CHECK14,
          "check15": CHECK15, "check16": CHECK16, "check17": CHECK17, "check18": CHECK18, "check19": CHECK19,
          "check20": CHECK20, "check21": CHECK21, "check22": CHECK22, "check23": CHECK23, "check24": CHECK24,
          "check25": CHECK25, "check26": CHECK26, "heads128": HEADS128, "check27": CHECK27, "check28": CHECK28,
          "check29": CHECK29, "knee64c": KNEE64C, "check30": CHECK30, "check31": CHECK31, "check32": CHECK32,
          "check33": CHECK33, "check34": CHECK34, "check35": CHECK35, "check36": CHECK36, "check37": CHECK37,
          "check38": CHECK38, "check39": CHECK39, "check40": CHECK40, "check41": CHECK41, "check42": CHECK42,
          "check43": CHECK43, "check44": CHECK44, "check45": CHECK45, "check46": CHECK46, "check47": CHECK47,
          "check48": CHECK48, "check49": CHECK49, "check50": CHECK50, "check51": CHECK51, "check52": CHECK52,
          "check53": CHECK53, "check54": CHECK54, "check55": CHECK55, "check56": CHECK56, "k2writes": K2WRITES,
          "check57": CHECK57, "check58": CHECK58, "check59": CHECK59, "check60": CHECK60, "check61": CHECK61,
          "check62": CHECK62, "check63": CHECK63, "check64": CHECK64, "check65": CHECK65, "check66": CHECK66,
          "check67": CHECK67, "check68": CHECK68, "check69": CHECK69, "check70": CHECK70, "knee32": KNEE32,
          "check71": CHECK71, "check72": CHECK72, "check73": CHECK73, "check74": CHECK74, "check75": CHECK75,
          "knee96c": KNEE96C, "check76": CHECK76, "check77": CHECK77, "k2div16": K2DIV16, "check78": CHECK78,
          "check79": CHECK79, "check80": CHECK80, "check81": CHECK81, "heads256": HEADS256, "check82": CHECK82,
          "check83": CHECK83, "check84": CHECK84, "check85": CHECK85, "check86": CHECK86, "check87": CHECK87,
          "check88": CHECK88, "check89": CHECK89, "check90": CHECK90, "check91": CHECK91, "check92": CHECK92,
          "check93": CHECK93, "check94": CHECK94, "check95": CHECK95, "k3few": K3FEW, "k3few2": K3FEW2,
          "check96": CHECK96, "check97": CHECK97, "check98": CHECK98, "check99": CHECK99, "check100": CHECK100,
          "check101": CHECK101, "check102": CHECK102, "check103": CHECK103, "check104": CHECK104, "check105": CHECK105,
          "check106": CHECK106, "check107": CHECK107, "check108": CHECK108, "check109": CHECK109, "check110": CHECK110,
          "check111": CHECK111, "check112": CHECK112, "check113": CHECK113, "check114": CHECK114, "apart160": APART160,
          "check115": CHECK115, "check116": CHECK116, "check117": CHECK117, "check118": CHECK118, "padded": PADDED,
          "padded2": PADDED2, "check119": CHECK119, "check120": CHECK120, "check121": CHECK121, "check122": CHECK122,
          "apart256": APART256, "check123": CHECK123, "check124": CHECK124,
          "waves256": WAVES256, "check125": CHECK125, "check126": CHECK126,
          "check127": CHECK127, "check128": CHECK128, "check129": CHECK129, "check130": CHECK130, "apartkv": APARTKV,
          "check131": CHECK131, "check132": CHECK132, "check133": CHECK133, "check134": CHECK134,
          "check135": CHECK135, "check136": CHECK136, "check137": CHECK137, "check138": CHECK138,
          "check139": CHECK139, "check140": CHECK140, "check141": CHECK141, "check142": CHECK142,
          "check143": CHECK143, "check144": CHECK144, "check145": CHECK145, "check146": CHECK146}


def lengths(N):
    """(Nq, Nk) of a shape's ``N``: one length for both, or a pair."""
    return (N, N) if isinstance(N, int) else (int(N[0]), int(N[1]))


def shapes(groups=("grid", "sweep")):
    """(group, name, B, H, N, d, causal) of every shape of the chosen groups, in GROUPS' order."""
    return [(g, *s) for g, group in GROUPS.items() if g in groups for s in group]


# The validation grid's rule as check41 worded it (the README defines the grid), and the corners' as check52 worded it.
# Sets up to check60 were drawn by scripts kept outside the repository; from check64 on, draw_validation draws them,
# so that a seed names its set.
MANY_HEADS_N = (1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)  # one and one and a half powers of two
FEW_HEADS_N = (65536, 98304, 131072, 196608, 262144, 393216)
CORNER_D = (32, 80, 96, 160, 192, 256)
CORNER_H = (1, 2, 3, 5, 6, 7, 12, 16, 24, 32)
# check70's rule, for few heads at long N once the few-heads grid ran out (check68 left one shape of it): N a multiple
# of 1024 (so flashref runs kernel 3), log-uniform in LONG_N; H from 1 to 8 (odd counts among them), B·H <= 8
LONG_N = (32768, 524288)


def draw_validation(seed: int, prefix: str, many: int = 5, few: int = 5, corners: int = 4, long: int = 0) -> list:
    """A blind set drawn with ``numpy.random.default_rng(seed)``, its shapes named ``<prefix>_<d>_<B>x<H>x<N>``:

    * ``many`` shapes of many heads at short N: B from 1, 2, 4, 8; H from 8, 16, 32; N from MANY_HEADS_N;
    * ``few`` of few heads at long N: B·H <= 8 (B and H from 1, 2, 4, 8); N from FEW_HEADS_N;

    both with d = 64 or 128, causal or not, 2^16 <= B·H·N <= 2^21 (check41's rule); and ``corners`` shapes by
    check52's rule: d from CORNER_D, B from 1, 2, 4, 8, H from CORNER_H, N log-uniform in 1000-200000 and not a
    multiple of 64 (flashref then runs kernel 2), one in three with Nq != Nk (drawn alike; never causal), B·H·N <=
    2^21; then ``long`` shapes of few heads at long N by check70's rule: B from 1, 2, 4, 8, H from 1 to 8, B·H <= 8,
    N a multiple of 1024 log-uniform in LONG_N, d = 64 or 128, causal or not, 2^16 <= B·H·N <= 2^21 (drawn last, so
    that ``long=0``, the default, draws every earlier set as it was). A shape of a group listed before ``prefix`` in
    GROUPS (of every group, for a set not yet listed) is never drawn again: GROUPS lists the groups in the order they
    were written, so that a set drawn and listed draws the same again. The two grids are finite and each set takes
    shapes out of them (check68 left one of the few-heads grid): a count larger than the shapes left is refused with a
    ValueError naming ``many`` or ``few``; ``long`` draws from 481 lengths, which is what widens that grid."""
    import numpy as np  # only drawing a set needs it

    from .._numbers import _nonnegative_int

    many, few, corners, long = (_nonnegative_int(n, name) for n, name in
                                ((many, "many"), (few, "few"), (corners, "corners"), (long, "long")))
    rng = np.random.default_rng(seed)
    # the shapes of every group before the set (all of them for a new set): a set drawn and listed in GROUPS draws the
    # same again, whatever sets were listed after it (an aimed set may measure a drawn set's shape again)
    order = list(GROUPS)
    before = order[:order.index(prefix)] if prefix in GROUPS else order
    seen = {(B, H, lengths(N), d, c) for _, _, B, H, N, d, c in shapes(tuple(before))}
    out = []

    def take(B, H, N, d, causal):
        key = (B, H, lengths(N), d, causal)
        if key in seen:
            return False
        seen.add(key)
        n = f"{N}" if isinstance(N, int) else f"{N[0]}x{N[1]}"
        out.append((f"{prefix}_{d}_{B}x{H}x{n}{'_causal' if causal else ''}", B, H, N, d, causal))
        return True

    def allowed(B, H, N, few_heads):
        return (B * H <= 8 or not few_heads) and 2 ** 16 <= B * H * N <= 2 ** 21

    def room(name, count, Bs, Hs, Ns, grid):
        """The grids are finite and every set takes shapes out of them: refuse a count the shapes left cannot meet
        (the draw would loop for ever), naming what is left."""
        left = sum(allowed(B, H, N, name != "many") and (B, H, (N, N), d, c) not in seen
                   for B in Bs for H in Hs for N in Ns for d in (64, 128) for c in (False, True))
        if count > left:
            raise ValueError(f"{name}: {count} shapes asked, but the {grid} has only {left} not drawn yet")

    def draw(count, candidate):
        """Take ``count`` shapes not drawn before from ``candidate`` (one draw by a rule: a shape (B, H, N, d, causal),
        or None where the rule refuses what it drew)."""
        done = 0
        while done < count:
            shape = candidate()
            if shape is not None and take(*shape):
                done += 1

    def log_uniform(lo, hi):
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))

    def grid_shape(Bs, Hs, Ns, few_heads):
        B, H, N = int(rng.choice(Bs)), int(rng.choice(Hs)), int(rng.choice(Ns))
        d, causal = int(rng.choice((64, 128))), bool(rng.integers(2))
        return (B, H, N, d, causal) if allowed(B, H, N, few_heads) else None

    def corner_shape():
        B, H, d = int(rng.choice((1, 2, 4, 8))), int(rng.choice(CORNER_H)), int(rng.choice(CORNER_D))
        Nk = int(round(log_uniform(1000, 200000)))
        pair = rng.integers(3) == 0
        Nq = int(round(log_uniform(1000, 200000))) if pair else Nk
        causal = not pair and bool(rng.integers(2))
        if Nk % 64 == 0 or Nq % 64 == 0 or B * H * max(Nq, Nk) > 2 ** 21:
            return None
        return B, H, (Nq, Nk) if pair else Nk, d, causal

    def long_shape():
        B, H = int(rng.choice((1, 2, 4, 8))), int(rng.integers(1, 9))
        N = 1024 * round(log_uniform(*LONG_N) / 1024)
        d, causal = int(rng.choice((64, 128))), bool(rng.integers(2))
        return (B, H, N, d, causal) if allowed(B, H, N, True) else None

    for name, count, Bs, Hs, Ns in (("many", many, (1, 2, 4, 8), (8, 16, 32), MANY_HEADS_N),
                                    ("few", few, (1, 2, 4, 8), (1, 2, 4, 8), FEW_HEADS_N)):
        room(name, count, Bs, Hs, Ns, f"{name}-heads grid")
        draw(count, functools.partial(grid_shape, Bs, Hs, Ns, name == "few"))
    draw(corners, corner_shape)
    room("long", long, (1, 2, 4, 8), range(1, 9), range(LONG_N[0], LONG_N[1] + 1, 1024), "long-N rule's grid")
    draw(long, long_shape)
    return out


def runs_for(impl, shape_list):
    """The shapes ``impl`` is measured at (eager only where one Nq×Nk fp16 matrix fits the budget)."""
    keep = []
    for g, name, B, H, N, d, causal, *rep in shape_list:
        Nq, Nk = lengths(N)
        if impl == "eager" and B * H * Nq * Nk * 2 > EAGER_MAX_BYTES:
            continue
        keep.append((g, name, B, H, N, d, causal, *rep))
    return keep


# --------------------------------------------------------------------------------------------
# the child: one process per implementation, every shape
# --------------------------------------------------------------------------------------------

def _make_fn(impl, q, k, v, causal):
    import torch
    import torch.nn.functional as F  # noqa: N812

    d = q.shape[-1]
    scale = d ** -0.5
    if impl == "eager":  # standard attention as plain fp16 PyTorch ops (nanoGPT's order)
        Nq, Nk = q.shape[-2], k.shape[-2]  # causal: top-left, as SDPA's is_causal
        mask = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).triu(1) if causal else None

        def f():
            s = (q @ k.transpose(-1, -2)) * scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ v
        return f
    if impl in ("flashref", "flashref2"):  # gpu.attention's default (kernel 3 where it takes the call), kernel 2
        from . import attention

        def f():
            return attention(q, k, v, causal=causal, **_flashref_options(impl))
        return f
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}[impl]

    def f():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def _flashref_options(impl):
    from .kernels import Config
    return {"config": Config()} if impl == "flashref2" else {}


def _marker():
    import torch
    torch.cuda._sleep(1)


def tiles3_overrides(specs):
    """``{(d, causal): Tiles3}`` from ``--tiles3`` values ``D=SPEC`` or ``Dc=SPEC`` (causal), ``SPEC`` in
    ``python -m flashref.gpu.kernel3 --tiles``'s words (``128,128,8,3,pp,persist``): kernel 3's forward tiles to
    measure (or predict) instead of its defaults. A bad value raises ValueError naming ``--tiles3``."""
    from .kernel3 import _parse_tiles, plan

    out = {}
    for spec in specs or ():
        key, sep, tiles = spec.partition("=")
        causal = key.endswith("c")
        if not sep or not key.removesuffix("c").isdigit() or len(tiles.split(",")) < 4:
            raise ValueError(f"--tiles3: expected D=SPEC or Dc=SPEC (e.g. 128=128,128,8,3,pp,persist), got {spec!r}")
        try:
            t = _parse_tiles(tiles)
        except (TypeError, ValueError) as err:
            raise ValueError(f"--tiles3: cannot read the tiles of {spec!r} ({err})") from None
        # tiles kernel 3 would refuse at every length would be measured (and predicted) as kernel 2 runs them,
        # under their name: refuse them here, asking the planner at a length the tiles divide
        d, n = int(key.removesuffix("c")), math.lcm(t.rows_multiple, t.block_n)
        _, why = plan(d, n, n, "float16", causal, tiles=t)
        if why:
            raise ValueError(f"--tiles3: kernel 3 would not run {spec!r}: {why}")
        out[(d, causal)] = t
    return out


def _child(impl, shapes_json, out_json, deadline="inf", tiles3="[]"):
    import torch

    from . import kernel3
    kernel3.TILES.update(tiles3_overrides(json.loads(tiles3)))  # --tiles3: the launches below run these
    todo = json.loads(Path(shapes_json).read_text())
    done = []
    cudart = torch.cuda.cudart()
    for g, name, B, H, N, d, causal, *rep in todo:
        Nq, Nk = lengths(N)
        entry = dict(group=g, shape=name, B=B, H=H, N=Nq, Nk=Nk, d=d, causal=causal)
        if rep:  # --repeat: the same shape measured again later in the same process
            entry["rep"] = rep[0]
        if time.time() > float(deadline):  # stop in time for ncu to print what it has
            entry["error"] = "skipped: out of time"
            done.append(entry)
            continue
        try:
            gen = torch.Generator(device="cuda").manual_seed(0)
            q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.float16, generator=gen)
                           for n in (Nq, Nk, Nk, Nq))
            q, k, v = (x.requires_grad_() for x in (q, k, v))
            f = _make_fn(impl, q, k, v, causal)
            if impl in ("flashref", "flashref2"):  # which kernel ran (iomodel.l2fit.recorded_impl reads it)
                from . import which_kernel
                entry["kernel"] = which_kernel(q, k, v, causal=causal, **_flashref_options(impl))
            f().backward(do)  # warm-up: compilation, plans, heuristics
            q.grad = k.grad = v.grad = None
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001 - out of memory, unsupported shape: record and go on
            entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            done.append(entry)
            Path(out_json).write_text(json.dumps(done))
            q = k = v = do = f = None
            torch.cuda.empty_cache()
            continue
        cudart.cudaProfilerStart()
        marks = 0
        try:
            _marker()
            marks += 1
            o = f()
            _marker()
            marks += 1
            o.backward(do)
            _marker()
            marks += 1
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001
            entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
        finally:
            for _ in range(3 - marks):  # always three markers, so the parent's segments stay aligned
                _marker()
            torch.cuda.synchronize()
            cudart.cudaProfilerStop()
        entry["measured"] = True
        done.append(entry)
        Path(out_json).write_text(json.dumps(done))
        q = k = v = do = f = o = None
        torch.cuda.empty_cache()
    info = {}
    if impl in ("flashref", "flashref2"):
        from . import kernel3, kernel3_bwd, kernels
        # the resolved launch configuration the measurements ran with (tiles, split, heads first, ...)
        info = {f"d{dd}{'_causal' if c else ''}": kernels.Config().resolve(dd, c, False).describe()
                for dd in (64, 128) for c in (False, True)}
        if impl == "flashref":  # and kernel 3's tiles, where the rows' ``kernel`` says kernel 3 ran
            info["kernel3"] = {f"d{dd}{'_causal' if c else ''}": dict(fwd=repr(kernel3.TILES[(dd, c)]),
                                                                       bwd=repr(kernel3_bwd.BWD_TILES[(dd, c)]))
                               for dd in (64, 128) for c in (False, True)}
    Path(out_json).write_text(json.dumps(dict(measurements=done, info=info)))


# --------------------------------------------------------------------------------------------
# parsing ncu's output
# --------------------------------------------------------------------------------------------

def _num(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def parse_kernels(text, metrics):
    """ncu ``--csv --page raw`` text -> list of {name, metric: value, ...} in launch order."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return None
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    name_col = next((c for c in ("Kernel Name", "Function Name", "Name") if c in header), None)
    if any(m not in header for m in metrics) or name_col is None:
        return None
    out = []
    for r in rows[1:]:
        if len(r) != len(header):
            continue
        rec = dict(zip(header, r))
        vals = {m: _num(rec[m]) for m in metrics}
        if vals[metrics[0]] is None:
            continue  # the units row
        rec_id = _num(rec.get("ID", ""))
        out.append(dict(id=rec_id, name=rec[name_col], grid=rec.get("Grid Size"),
                        block=rec.get("Block Size"), **vals))
    out.sort(key=lambda x: (x["id"] is None, x["id"]))
    return out


def segment(kernels, measurements):
    """Split the kernel list at the markers: three per measured shape (start, forward end, end).

    Returns one dict per measured shape: its entry plus ``fwd`` and ``bwd`` kernel lists.
    """
    measured = [m for m in measurements if m.get("measured")]
    seg, phases = 0, {}
    for kern in kernels:
        if MARKER in kern["name"]:
            seg += 1
            continue
        if seg == 0 or seg % 3 == 0:
            continue  # outside any measurement (should not happen)
        i, ph = (seg - 1) // 3, ("fwd", "bwd")[(seg - 1) % 3]
        phases.setdefault(i, {"fwd": [], "bwd": []})[ph].append(kern)
    out = []
    for i, m in enumerate(measured):
        ph = phases.get(i, {"fwd": [], "bwd": []})
        out.append(dict(m, **ph, markers_seen=seg))
    return out


def summarise(impl, seg, metrics):
    """One row: forward and forward+backward sums of each byte metric."""
    byte_metrics = [m for m in metrics if m.startswith(("dram__", "lts__"))]

    def total(ks):
        return {m: sum(k[m] or 0.0 for k in ks) for m in byte_metrics}

    fwd, allk = total(seg["fwd"]), total(seg["fwd"] + seg["bwd"])
    row = {k: seg[k] for k in ("group", "shape", "B", "H", "N", "Nk", "d", "causal", "rep", "kernel") if k in seg}
    row["impl"] = impl
    if seg.get("error"):
        row["error"] = seg["error"]
    for mode, t, ks in (("fwd", fwd, seg["fwd"]), ("fwd_bwd", allk, seg["fwd"] + seg["bwd"])):
        row[mode] = dict(read_bytes=t[BASE[0]], write_bytes=t[BASE[1]], total_bytes=t[BASE[0]] + t[BASE[1]],
                         l2_bytes=t.get("lts__t_bytes.sum"),
                         l2_fabric_bytes=(32 * t["lts__t_sectors_srcunit_ltcfabric.sum"]
                                          if "lts__t_sectors_srcunit_ltcfabric.sum" in t else None),
                         kernels=len(ks))
    return row


# --------------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------------

def _ncu_cmd(ncu, metrics, argv, flags=()):
    """The ncu command line: ``flags`` are Nsight settings beyond these (writes_probe's cache and replay modes)."""
    return [ncu, "--target-processes", "all", "--profile-from-start", "off", "--clock-control", "none", *flags,
            "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base", *argv]


PROBE = ("import torch; torch.cuda.cudart().cudaProfilerStart(); torch.cuda._sleep(1); "
         "torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStop()")


def probe_metrics(ncu, timeout=120):
    """The first metric set of METRIC_SETS that ncu accepts here."""
    for metrics in METRIC_SETS:
        proc = subprocess.run(_ncu_cmd(ncu, metrics, [sys.executable, "-c", PROBE]), capture_output=True,
                              text=True, timeout=timeout)
        ks = parse_kernels(proc.stdout, metrics)
        if proc.returncode == 0 and ks:
            if not any(MARKER in k["name"] for k in ks):
                print(f"  warning: no {MARKER} among {[k['name'] for k in ks]}", flush=True)
            return metrics
        print(f"  metric set rejected ({len(metrics)} metrics): rc={proc.returncode} "
              f"{proc.stdout[-400:]} {proc.stderr[-400:]}", flush=True)
    return None


def run_impl(ncu, impl, shape_list, metrics, timeout, tiles3=(), ncu_flags=()):
    """Profile one implementation over its shapes: (rows, kernels, info, log, ncu's raw output).

    The child starts no new shape after ``timeout`` - 20 s; the parent kills it at ``timeout`` + 90 s. ``ncu_flags``:
    Nsight settings beyond the default ones (``_ncu_cmd``)."""
    with tempfile.TemporaryDirectory() as tmp:
        sj, oj = os.path.join(tmp, "shapes.json"), os.path.join(tmp, "out.json")
        Path(sj).write_text(json.dumps(shape_list))
        deadline = time.time() + max(10.0, timeout - 20)
        cmd = _ncu_cmd(ncu, metrics, [sys.executable, "-m", "flashref.gpu.l2profile", "--child", impl, sj, oj,
                                      str(deadline), json.dumps(list(tiles3))], ncu_flags)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 90)
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr, rc = "timeout", -9
        child = json.loads(Path(oj).read_text()) if os.path.exists(oj) else {}
    if isinstance(child, list):  # the child died before its last write
        child = dict(measurements=child, info={})
    kernels = parse_kernels(stdout, metrics) or []
    segs = segment(kernels, child.get("measurements", []))
    rows = [summarise(impl, s, metrics) for s in segs]
    errors = [dict(impl=impl, shape=m["shape"], error=m["error"]) for m in child.get("measurements", [])
              if m.get("error") and not m.get("measured")]
    klist = []
    for s in segs:
        for ph in ("fwd", "bwd"):
            for kern in s[ph]:
                klist.append(dict(impl=impl, shape=s["shape"], phase=ph,
                                  **{k: v for k, v in kern.items() if k != "id"}))
    log = dict(impl=impl, rc=rc, kernels=len(kernels), stderr_tail=stderr[-1500:],
               stdout_tail="" if kernels else stdout[-1500:], errors=errors)
    return rows, klist, child.get("info", {}), log, stdout


def main(argv=None) -> int:
    if argv and argv[0] == "--child":
        _child(*argv[1:6])
        return 0
    p = argparse.ArgumentParser(prog="python -m flashref profile-l2", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=_cli.folder, default="figures/gpu")
    p.add_argument("--name", type=_cli.stem, default=None, help="file stem (default: <device>-l2-grid)")
    p.add_argument("--impls", type=lambda s: tuple(s.split(",")), default=IMPLS)
    p.add_argument("--groups", type=lambda s: tuple(s.split(",")), default=("grid", "sweep"))
    p.add_argument("--only", type=lambda s: tuple(s.split(",")), default=None, help="shape names")
    p.add_argument("--budget", type=float, default=520.0, help="seconds for the whole run")
    p.add_argument("--ncu", default=None)
    p.add_argument("--raw", action="store_true", help="also save ncu's raw CSV per implementation")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure every shape this many times (round by round), each row tagged with its round "
                        "``rep``: how much one measurement varies from run to run")
    p.add_argument("--predict", action="store_true",
                   help="write iomodel.dram's predictions for the chosen shapes (<name>-predicted.json) and stop: "
                        "no GPU, no ncu; commit the file before measuring")
    p.add_argument("--gpu", default=None, type=str.lower, help="with --predict: the L2 preset (h100, h200; default "
                   "h100); a measurement reads its GPU off the device")
    p.add_argument("--tiles3", action="append", default=[], metavar="D=SPEC",
                   help="kernel 3's forward tiles at head dim D (Dc: causal) instead of the default, in "
                        "python -m flashref.gpu.kernel3 --tiles's words, e.g. 128=128,128,8,3,pp,persist "
                        "(repeatable); the JSON's info records the tiles that ran, and --predict uses them")
    p.add_argument("--force", action="store_true", help="with --predict: write over an existing predictions file "
                   "(a prediction committed before its measurement is the record: never replaced without it)")
    args = p.parse_args(argv)
    unknown = sorted(set(args.impls) - set(IMPLS))
    if unknown:
        p.error(f"--impls: unknown {unknown}; expected some of {list(IMPLS)}")
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        p.error(f"--groups: unknown {unknown}; expected some of {list(GROUPS)}")
    names = [s[1] for s in shapes(args.groups)]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        p.error(f"--only: {unknown} not among the shapes of --groups {','.join(args.groups)} ({', '.join(names)})")
    from ..iomodel.dram import GPU_PARAMS
    if args.gpu is not None and not args.predict:  # a measurement would drop it unnoticed
        p.error("--gpu: only with --predict (a measurement records the GPU it runs on)")
    args.gpu = args.gpu or "h100"
    if args.gpu not in GPU_PARAMS:
        p.error(f"--gpu: expected one of {sorted(GPU_PARAMS)}, got {args.gpu!r}")
    if args.repeat < 1:
        p.error(f"--repeat: expected a positive number of runs, got {args.repeat}")
    if not args.budget > 0:
        p.error(f"--budget: expected a positive number of seconds, got {args.budget}")
    try:
        overrides = tiles3_overrides(args.tiles3)
    except ValueError as err:
        p.error(str(err))
    blocked = _cli.file_in_the_way(Path(args.out) / "x")  # --out itself, or a folder above it, is a file
    if blocked is not None:
        p.error(f"--out: {blocked} is a file, not a folder")
    if args.force and not args.predict:
        p.error("--force: only with --predict (a measurement writes a new file of its own name)")
    if args.predict:
        from . import kernel3
        path = _predictions_path(args)
        if path.exists() and not args.force:
            p.error(f"--name: {path} exists; predictions written before a measurement are its record and are not "
                    "written over: name another file, or pass --force (a set not measured yet)")
        kernel3.TILES.update(overrides)  # the model builds kernel 3's schedules from kernel3.TILES
        try:
            return _write_predictions(args, path)
        except NotImplementedError as err:  # tiles kernel 3 runs but the model has no schedule for
            if not args.tiles3:
                raise
            p.error(f"--tiles3: {err}")
    t0 = time.time()
    ncu = args.ncu or shutil.which("ncu")
    if ncu is None:
        print("profile-l2 needs Nsight Compute's ncu on PATH (and a CUDA GPU); recorded results are in "
              "figures/gpu/*-l2-grid.json", file=sys.stderr)
        return 1
    device, versions = _device_info(ncu)
    metrics = probe_metrics(ncu)
    if metrics is None:
        print("ncu accepted none of the metric sets", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or _slug(device) + "-l2-grid"
    todo = shapes(args.groups)
    if args.only:
        todo = [s for s in todo if s[1] in args.only]
    if args.repeat > 1:  # round by round, so the repeats of one shape are minutes apart, not back to back
        todo = [s + (r,) for r in range(args.repeat) for s in todo]
    result = dict(metadata=dict(device=device, **versions, metrics=list(metrics),
                                date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                dtype="float16", tiles3=args.tiles3,
                                ncu_cache_control="all (default: caches flushed before each kernel)",
                                note="one forward+backward after one warm-up per shape; kernels split at "
                                     "spin_kernel markers"),
                  rows=[], kernels=[], info={}, log=[])
    n_impl = len(args.impls)
    for i, impl in enumerate(args.impls):
        left = args.budget - (time.time() - t0)
        # a weighted share of what is left (time a child does not use passes on), so a slow one cannot starve the rest
        share = left * WEIGHT.get(impl, 1.0) / sum(WEIGHT.get(x, 1.0) for x in args.impls[i:])
        if left < 40:
            result["log"].append(dict(impl=impl, skipped="out of time"))
            continue
        print(f"[{time.time() - t0:5.0f}s] {impl}: {len(runs_for(impl, todo))} shapes, timeout {share:.0f}s",
              flush=True)
        rows, klist, info, log, raw = run_impl(ncu, impl, runs_for(impl, todo), metrics,
                                          timeout=max(40, share if i < n_impl - 1 else left), tiles3=args.tiles3)
        result["rows"] += rows
        result["kernels"] += klist
        result["info"][impl] = info
        result["log"].append(log)
        if args.raw:
            (out / f"{stem}-{impl}-ncu.csv").write_text(raw)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=0))
        for r in rows:
            fb = r["fwd_bwd"]
            print(f"  {r['shape']:22s} fwd {r['fwd']['total_bytes'] / 1e9:8.3f} GB  fwd+bwd "
                  f"{fb['total_bytes'] / 1e9:8.3f} GB (r {fb['read_bytes'] / 1e9:.3f} "
                  f"w {fb['write_bytes'] / 1e9:.3f}, L2 "
                  f"{(fb['l2_bytes'] or 0) / 1e9:.2f}, {fb['kernels']} kernels) {r.get('error', '')}",
                  flush=True)
        if log["errors"] or log["rc"] != 0:
            print(f"  rc={log['rc']} errors={log['errors']} {log['stderr_tail'][-500:]}", flush=True)
    print(f"done in {time.time() - t0:.0f}s: {out / (stem + '.json')}")
    return 0


def predictions(shape_list, gpu="h100", impls=IMPLS):
    """iomodel.dram's prediction of every (impl, shape, mode) that ``profile-l2`` would measure. A flashref
    row says which kernel the model ran (``kernel``: ``"kernel 3"`` or ``"kernel 2"``), as a measured row
    says which ran on the GPU."""
    from ..iomodel import dram
    from ..iomodel.dram import IMPLS as MODELLED
    from ..iomodel.dram import MODES, kernel3_tiles

    rows = []
    for impl in (i for i in impls if i in MODELLED):
        for _, name, B, H, N, d, causal in runs_for(impl, shape_list):
            Nq, Nk = lengths(N)
            for mode in MODES:
                pred = dram(impl, mode, B=B, H=H, Nq=Nq, Nk=Nk, d=d, causal=causal, gpu=gpu)
                row = dict(impl=impl, shape=name, mode=mode, B=B, H=H, N=Nq, Nk=Nk, d=d, causal=causal,
                           predicted_bytes=pred.total_bytes)
                if impl == "flashref":
                    row["kernel"] = "kernel 3" if kernel3_tiles(d, Nq, Nk, causal, BH=B * H)[0] else "kernel 2"
                elif impl == "flashref2":
                    row["kernel"] = "kernel 2"
                rows.append(row)
    return rows


def _predictions_path(args) -> Path:
    """Where ``--predict`` writes: ``<out>/<name>-predicted.json`` (name: ``<gpu>-l2-<groups>`` by default)."""
    return Path(args.out) / f"{args.name or args.gpu + '-l2-' + '-'.join(args.groups)}-predicted.json"


def _write_predictions(args, path):
    from ..iomodel.dram import GPU_PARAMS, IMPLS, PARAMS, STAGGERED_D64, resolved_params

    todo = shapes(args.groups)
    if args.only:
        todo = [s for s in todo if s[1] in args.only]
    path.parent.mkdir(parents=True, exist_ok=True)
    for impl in args.impls:
        if impl not in IMPLS:  # (sdpa_cudnn: measured by profile-l2, not modelled)
            print(f"{impl}: not modelled by iomodel.dram, no predictions for it")
    rows = predictions(todo, args.gpu, args.impls)
    # what each prediction used: the base sets resolve per call into one set for each kernel, head dim and (for
    # FlashAttention-2's staggered walk) causal flag, the L2 scaling of the GPU included
    resolved = {f"{r['impl']} d={r['d']}{' causal' if r['causal'] else ''}":
                dict(resolved_params(r["impl"], d=r["d"], causal=r["causal"], gpu=args.gpu)) for r in rows}
    meta = dict(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                params={**PARAMS, **GPU_PARAMS[args.gpu]}, staggered_d64=STAGGERED_D64[args.gpu], gpu=args.gpu,
                tiles3=args.tiles3, resolved=resolved,
                note="iomodel.dram's predictions, written before these shapes were measured; params and "
                     "staggered_d64 are the base sets, resolved the parameters each kernel, head dim and causal "
                     "flag predicted with (iomodel.dram.resolved_params)")
    path.write_text(json.dumps(dict(metadata=meta, rows=rows), indent=0))
    print(f"{path}: {len(rows)} predictions")
    return 0


def _slug(name):
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def _device_info(ncu):
    try:
        import torch
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "unknown"
        props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
        v = dict(torch=torch.__version__, sms=getattr(props, "multi_processor_count", None),
                 l2_bytes=getattr(props, "L2_cache_size", None))
    except ImportError:
        name, v = "unknown", {}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        v["ncu"] = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except (OSError, IndexError):
        pass
    return name, v


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
