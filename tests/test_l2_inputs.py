"""Bad input to the three-level model (flashref.l2, flashref.schedule, iomodel.dram): a clear error naming the
argument, never a raw internal error, a hang, negative bytes or a silently wrong answer."""

from __future__ import annotations

import dataclasses
import importlib
import math

import numpy as np
import pytest

from flashref import iomodel, schedule
from flashref.iomodel import l2fit
from flashref.l2 import L2Cache

D = importlib.import_module("flashref.iomodel.dram")  # the module; iomodel.dram is the function
SHAPE = dict(B=1, H=1, Nq=1024, Nk=1024, d=64)


# ----------------------------------------------------------------------------- the cache


@pytest.mark.parametrize("capacity,exc", [
    (float("nan"), TypeError), (math.inf, TypeError), ("1024", TypeError), (True, TypeError), (1.5, TypeError),
    (-8, ValueError),
])
def test_cache_capacity_must_be_a_positive_integer(capacity, exc):
    with pytest.raises(exc, match="capacity"):
        L2Cache(capacity)


@pytest.mark.parametrize("line_bytes,exc", [(0, ValueError), (-4, ValueError), (0.5, TypeError)])
def test_cache_line_bytes_must_be_a_positive_integer(line_bytes, exc):
    with pytest.raises(exc, match="line_bytes"):
        L2Cache(1024, line_bytes=line_bytes)


@pytest.mark.parametrize("nbytes,exc", [(-5, ValueError), (0, ValueError), (float("nan"), TypeError), (1.5, TypeError),
                                        (True, TypeError)])
def test_cache_access_refuses_a_bad_size(nbytes, exc):
    cache = L2Cache(1024)
    with pytest.raises(exc, match="nbytes"):
        cache.access("a", nbytes)
    assert cache.reads == cache.dram_reads == cache.misses == 0  # nothing was counted


def test_cache_access_write_must_be_a_bool():
    with pytest.raises(TypeError, match="write"):
        L2Cache(1024).access("a", 8, write="no")


def test_cache_block_keeps_its_size():
    """A key is one block of one size: touching it again with another size would count bytes the cache never
    holds (reads grew by 50 while ``used`` stayed at 1)."""
    cache = L2Cache(1024)
    cache.access("a", 1)
    with pytest.raises(ValueError, match="nbytes"):
        cache.access("a", 50)
    assert cache.access("a", 1) and cache.reads == 2


# ----------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("kw,exc,match", [
    (dict(BH=0), ValueError, "BH"), (dict(Nq=0), ValueError, "Nq"), (dict(Nk=-5), ValueError, "Nk"),
    (dict(Nq=1.5), TypeError, "Nq"), (dict(d=0), ValueError, "d"), (dict(e=0), ValueError, "e"),
    (dict(sms=0), ValueError, "sms"), (dict(BH=True), TypeError, "BH"),
])
@pytest.mark.parametrize("builder", [schedule.flashref_fwd, schedule.flashref_dkdv, schedule.fa2_fwd,
                                     schedule.fa2_bwd, schedule.flashref3_fwd])
def test_builders_refuse_bad_shapes(builder, kw, exc, match):
    args = dict(BH=1, Nq=1024, Nk=1024, d=64, causal=False, e=2, sms=4, **{})
    with pytest.raises(exc, match=match):
        builder(**{**args, **kw})


def test_kernel3_builders_name_a_head_dim_without_tiles():
    with pytest.raises(ValueError, match="d=100"):
        schedule.flashref3_fwd(1, 1024, 1024, 100)
    with pytest.raises(ValueError, match="d=100"):
        schedule.flashref3_dkdv(1, 1024, 1024, 100)


def test_no_resident_ctas_is_refused_not_a_hang():
    """``simulate`` with no CTA resident used to loop forever; ``scan_bytes`` divided by zero."""
    k = schedule.flashref_fwd(1, 1024, 1024, 64, sms=1)
    k.resident = 0  # as notebook 08 sets it
    for f in (lambda: schedule.simulate(k, L2Cache(2 ** 20)), lambda: D.scan_bytes(k), lambda: schedule.waves(k)):
        with pytest.raises(ValueError, match="resident"):
            f()


def test_scan_bytes_names_a_bad_kernel_and_takes_partial_params():
    with pytest.raises(TypeError, match="k: expected a schedule.ScanKernel"):
        D.scan_bytes("flashref fwd")
    k = schedule.flashref_fwd(2, 4096, 4096, 64, sms=4)
    assert D.scan_bytes(k, {"kappa": 2.0}) == D.scan_bytes(k)  # the rest from PARAMS, as dram's params=
    with pytest.raises(ValueError, match="params: unknown"):
        D.scan_bytes(k, {"C_ef": 1})


# ----------------------------------------------------------------------------- iomodel.dram and friends


@pytest.mark.parametrize("params", [dict(lag=math.inf), dict(partitions=math.inf), dict(C_eff=math.inf),
                                    dict(rho=math.inf)])
def test_dram_params_must_be_finite(params):
    """``lag=inf`` used to end in a bare "math domain error"; only kappa may be infinite (an exact LRU)."""
    with pytest.raises(ValueError, match=f"params: {next(iter(params))}"):
        iomodel.dram("sdpa_flash", "fwd", **SHAPE, causal=True, params=params)
    lru = iomodel.dram("flashref", "fwd", **SHAPE, params=dict(kappa=math.inf, kappa_stag=math.inf))
    assert math.isfinite(lru.total_bytes)


@pytest.mark.parametrize("params,match", [(dict(overlap=-0.5), "overlap must be >= 0"),
                                          (dict(overlap=math.inf), "overlap must be >= 0, finite"),
                                          (dict(overlap_rule=2), "overlap_rule must be 0 or 1"),
                                          (dict(C_rows=0), "C_rows must be > 0"),
                                          (dict(softmax_passes=0.5), "softmax_passes must be 0 or 1"),
                                          (dict(rolling_rule=True), "rolling_rule must be 0 or 1"),
                                          (dict(rolling_drift=-1), "rolling_drift must be 0 or 1"),
                                          (dict(C_roll=0), "C_roll must be > 0"),
                                          (dict(C_roll=math.inf), "C_roll must be > 0, finite"),
                                          (dict(kappa_roll=-2.0), "kappa_roll must be > 0"),
                                          (dict(spread=-1.0), "spread must be >= 0"),
                                          (dict(spread=math.inf), "spread must be >= 0, finite"),
                                          (dict(spread_time=0), "spread_time must be > 0"),
                                          (dict(spread_rule=2), "spread_rule must be 0 or 1")])
def test_dram_refuses_a_bad_rule_parameter(params, match):
    with pytest.raises(ValueError, match=f"params: {match}"):
        iomodel.dram("sdpa_flash", "fwd", **SHAPE, causal=True, params=params)


def test_staggered_rule_refuses_a_heads_first_grid():
    """The overlap term reads the heads' order off a head-by-head grid; a heads-first one is named, not misread."""
    k = dataclasses.replace(schedule.fa2_fwd(4, 2048, 2048, 64, True), heads_first=True)
    with pytest.raises(ValueError, match="heads_first"):
        D.staggered_scan_bytes(k)


def test_miss_of_a_vanishing_capacity_is_one():
    """C / D underflowing to 0 is the limit of a cache too small to hold anything, not a math domain error."""
    assert D.miss(1e9, 1e-320, 2.0) == 1.0
    p = iomodel.dram("flashref2", "fwd", B=1, H=1, Nq=65536, Nk=65536, d=64, params=dict(C_eff=1e-320))
    assert math.isfinite(p.total_bytes) and p.read_bytes > 0


@pytest.mark.parametrize("impl", D.IMPLS)
@pytest.mark.parametrize("mode", D.MODES)
def test_dram_of_an_empty_batch_or_head_axis_is_nothing(impl, mode):
    """As every entry point takes an empty leading axis: no work, no DRAM bytes; a negative size is still refused."""
    for B, H in ((0, 2), (2, 0), (np.int64(0), 0)):
        p = iomodel.dram(impl, mode, B=B, H=H, Nq=128, Nk=128, d=64)
        assert (p.read_bytes, p.write_bytes, p.l2_bytes) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="B: expected a non-negative integer, got -1"):
        iomodel.dram(impl, mode, B=-1, H=2, Nq=128, Nk=128, d=64)
    with pytest.raises(TypeError, match="H: expected a non-negative integer"):
        iomodel.dram(impl, mode, B=0, H="2", Nq=128, Nk=128, d=64)


def test_kernels_refuses_an_unknown_mode_and_bad_shapes():
    """``kernels("eager", "bogus", ...)`` used to return the forward's kernels."""
    with pytest.raises(ValueError, match="mode"):
        D.kernels("eager", "bogus", B=1, H=1, Nq=8, Nk=8, d=8)
    with pytest.raises(ValueError, match="B"):
        D.kernels("flashref", "fwd", B=0, H=1, Nq=8, Nk=8, d=8)


@pytest.mark.parametrize("args,exc,match", [((-1, 1024, 1024, False), ValueError, "d"),
                                            (("64", 1024, 1024, False), TypeError, "d"),
                                            ((64, 0, 1024, False), ValueError, "Nq"),
                                            ((64, 1024, 1024, "yes"), TypeError, "causal")])
def test_kernel3_tiles_refuses_bad_shapes(args, exc, match):
    """It used to answer (None, None), "kernel 2 runs", for a head dim no kernel runs."""
    with pytest.raises(exc, match=match):
        D.kernel3_tiles(*args)


@pytest.mark.parametrize("row", [{}, None, {"kernel": "kernel 3"}])
def test_recorded_impl_names_a_row_without_impl(row):
    with pytest.raises((TypeError, ValueError), match="row"):
        l2fit.recorded_impl(row)


@pytest.mark.parametrize("fit", [lambda: l2fit.fit({"rows": []}), lambda: l2fit.fit_staggered([{"rows": []}])])
def test_fit_without_rows_says_so(fit):
    with pytest.raises(ValueError, match="no measured rows"):
        fit()


def test_numpy_sizes_agree_with_python_ones():
    a = iomodel.dram("sdpa_flash", "fwd_bwd", B=np.int16(2), H=np.uint8(3), Nq=np.int64(1000), Nk=1000, d=64)
    b = iomodel.dram("sdpa_flash", "fwd_bwd", B=2, H=3, Nq=1000, Nk=1000, d=64)
    assert (a.read_bytes, a.write_bytes, a.l2_bytes) == (b.read_bytes, b.write_bytes, b.l2_bytes)


@pytest.mark.parametrize("blocks,err", [((0, 64), ValueError), ((64,), TypeError), ((64, 2.5), TypeError)])
def test_builder_blocks_are_checked(blocks, err):
    for build in (schedule.flashref_fwd, schedule.flashref_dkdv):
        with pytest.raises(err, match="blocks"):
            build(1, 256, 256, 64, blocks=blocks)
    assert schedule.flashref_fwd(1, 256, 256, 64, blocks=(64, 32)).ctas_per_head == 4


# ----------------------------------------------------------------------------- a hostile review's findings (2026-11-28)


@pytest.mark.parametrize("params,match", [
    ({"C_eff": 10**400}, "C_eff must be > 0, finite"), ({"lag": 10**400}, "lag must be >= 0, finite"),
    ({1: 2, "a": 3}, r"params: unknown parameter\(s\) 'a', 1;"),
])
def test_params_past_floats_range_or_not_named_by_strings_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        iomodel.dram("flashref", "fwd", **SHAPE, params=params)
    # an int past float's range is infinite, which a sharpness may be (an exact LRU step): the same bytes as inf
    # (FlashAttention-2's walk multiplied the int itself and raised a bare OverflowError)
    past_the_knee = dict(B=1, H=1, Nq=65536, Nk=65536, d=128)  # where the sharpness is read
    for impl in ("flashref", "sdpa_flash"):
        for kappa in ("kappa", "kappa_roll", "kappa_sync"):
            huge, inf = (iomodel.dram(impl, "fwd", **past_the_knee, params={kappa: k}).total_bytes
                         for k in (10**400, math.inf))
            assert huge == inf > 0, (impl, kappa)


@pytest.mark.parametrize("impl", ["flashref", "flashref2", "sdpa_flash"])
def test_rows_past_max_rows_are_refused_before_any_grid_is_laid_out(impl):
    """The tiled kernels' schedule lays out every CTA: past D.MAX_ROWS rows of (batch, head, position) it refuses,
    naming B, H and the lengths, instead of allocating terabytes. Eager's closed form takes any batch."""
    with pytest.raises(ValueError, match="B, H, Nq, Nk"):
        iomodel.dram(impl, "fwd", B=1, H=2048, Nq=2**20, Nk=2**20, d=64)
    with pytest.raises(ValueError, match="B, H, Nq, Nk"):
        D.kernels(impl, "fwd", B=1, H=2, Nq=2**30, Nk=2**30, d=64)
    assert iomodel.dram("eager", "fwd", B=2**40, H=1, Nq=1024, Nk=1024, d=64).total_bytes > 0


def test_flashref_past_one_grid_is_kernel_2():
    """Past gpu.MAX_GRID_Y (batch, head) pairs, one launch's grid y, kernel 3 leaves the call to kernel 2, which
    launches in pieces: dram's "flashref" is kernel 2 there, as gpu.attention runs it (the pieces run in one grid's
    order; the drain between two of them is not modelled)."""
    from flashref import gpu

    assert D.kernel3_tiles(64, 128, 128, False, BH=gpu.MAX_GRID_Y)[0] is not None
    assert D.kernel3_tiles(64, 128, 128, False, BH=gpu.MAX_GRID_Y + 1) == (None, None)
    for BH in (gpu.MAX_GRID_Y, gpu.MAX_GRID_Y + 1):
        one, two = (iomodel.dram(impl, "fwd_bwd", B=1, H=BH, Nq=128, Nk=128, d=64)
                    for impl in ("flashref", "flashref2"))
        assert (one.total_bytes == two.total_bytes) == (BH > gpu.MAX_GRID_Y)


def test_kernels_checks_what_dram_checks():
    with pytest.raises(ValueError, match="d: impl='sdpa_flash' takes head dimensions up to 256"):
        D.kernels("sdpa_flash", "fwd", **dict(SHAPE, d=512))
    with pytest.raises(TypeError, match="fa2_split"):
        D.kernels("sdpa_flash", "fwd", **SHAPE, fa2_split="no")
    with pytest.raises(TypeError, match="softmax_passes"):
        D.kernels("eager", "fwd", **SHAPE, softmax_passes="no")


def test_schedule_refuses_tiles_and_caches_of_the_wrong_kind():
    from flashref.gpu.kernel3 import Tiles3
    from flashref.gpu.kernel3_bwd import TilesB, TilesQ

    for build in (schedule.flashref3_fwd, schedule.flashref3_dkdv, schedule.flashref3_dq):
        with pytest.raises(TypeError, match="tiles"):
            build(4, 1024, 1024, 128, tiles="x")
    for kind, field in ((Tiles3, "block_m"), (Tiles3, "warps"), (Tiles3, "stages"), (TilesB, "block_n"),
                        (TilesQ, "stages")):
        for bad, exc in ((0, ValueError), (-128, ValueError), (1.5, TypeError), (True, TypeError)):
            with pytest.raises(exc, match=f"{kind.__name__}.{field}: expected a positive integer"):
                kind(**{field: bad})
    with pytest.raises(TypeError, match="cache"):
        schedule.simulate(schedule.flashref_fwd(1, 256, 256, 64), "cache")


def test_other_heads_prefix_cache_keys_every_field_it_reads():
    """The staggered walk's cached schedule is keyed by every field it reads: a kernel one tile longer (its ragged
    last tile elsewhere) gets its own, whatever was asked before."""
    k1 = schedule.fa2_fwd(4, 4000, 4000, 64, True)
    k2 = dataclasses.replace(k1, n_tiles=k1.n_tiles + 1)
    D._PREFIX_CACHE.clear()
    fresh = D.staggered_scan_bytes(k2)
    D._PREFIX_CACHE.clear()
    D.staggered_scan_bytes(k1)
    assert D.staggered_scan_bytes(k2) == fresh


@pytest.mark.parametrize("spec,match", [
    ("128=128,128,0,3", "Tiles3.warps: expected a positive integer"),
    ("128=0,128,8,3", "Tiles3.block_m: expected a positive integer"),
    ("128=128,128,8,3,pp,persit", r"unknown flag\(s\) \['persit'\]"),
    ("128=128,128,8,3,pp,persist,qpre", "kernel 3 would not run .*shared memory"),
    ("96=128,128,8,3", "kernel 3 would not run .*d=96"),
])
def test_tiles3_overrides_refuse_what_kernel3_would_not_run(spec, match):
    """--tiles3 tiles kernel 3 refuses would be predicted (and measured) as kernel 2 runs them, under their name."""
    from flashref.gpu.l2profile import tiles3_overrides

    with pytest.raises(ValueError, match=f"--tiles3: .*{match}"):
        tiles3_overrides([spec])
    assert set(tiles3_overrides(["64=192,128,12,3,pp,persist", "128c=128,128,8,3,pp,dyn,persist"])) == {
        (64, False), (128, True)}


@pytest.mark.parametrize("mutate,match", [
    (lambda text, run: "{\n bad", "is not JSON"),
    (lambda text, run: {k: v for k, v in run.items() if k != "rows"}, r"not a profile-l2 run \(KeyError: 'rows'\)"),
    (lambda text, run: dict(run, rows=[dict(r, B=1.5) for r in run["rows"]]), "B: expected a positive integer"),
    (lambda text, run: dict(run, rows=[dict(r, fwd=dict(r["fwd"], total_bytes=0)) if isinstance(r.get("fwd"), dict)
                                       else r for r in run["rows"]]), "a measured total of 0.0 bytes"),
    # a shape the model refuses: named here, not as a traceback from its prediction
    (lambda text, run: dict(run, rows=[dict(r, d=300) for r in run["rows"]]), "takes head dimensions up to 256"),
    # causal must be JSON's true or false: bool("yes") read as True
    (lambda text, run: dict(run, rows=[dict(r, causal="yes") for r in run["rows"]]), "causal: expected True or"),
    # an L2 total that is not a positive number ("abc" gave "--could not convert string to float")
    (lambda text, run: dict(run, rows=[dict(r, fwd=dict(r["fwd"], l2_bytes=-5.0)) if isinstance(r.get("fwd"), dict)
                                       else r for r in run["rows"]]), "a measured L2 total of -5.0 bytes"),
    (lambda text, run: dict(run, rows=[dict(r, fwd=dict(r["fwd"], l2_bytes="abc")) if isinstance(r.get("fwd"), dict)
                                       else r for r in run["rows"]]), "ValueError: could not convert"),
])
def test_l2_score_names_a_recorded_file_it_cannot_read(tmp_path, mutate, match):
    import json
    from pathlib import Path

    from flashref.iomodel import l2score

    src = Path(l2score.__file__).resolve().parents[2] / "figures" / "gpu" / "h100-l2-check58.json"
    out = mutate(src.read_text(), json.loads(src.read_text()))
    (tmp_path / "h100-l2-x.json").write_text(out if isinstance(out, str) else json.dumps(out))
    with pytest.raises(ValueError, match=f"folder: h100-l2-x.json .*{match}"):
        l2score.recorded_rows(tmp_path)


@pytest.mark.parametrize("gpu, exc", [(None, TypeError), (3, TypeError), ("A100", ValueError)])
def test_resolved_params_names_a_gpu_it_does_not_know(gpu, exc):
    """resolved_params, public beside dram, checks gpu as dram does (it raised AttributeError on None and a bare
    KeyError on 'a100')."""
    with pytest.raises(exc, match="^gpu: expected"):
        D.resolved_params("sdpa_flash", d=64, gpu=gpu)
    with pytest.raises(exc, match="^gpu: expected"):
        iomodel.dram("sdpa_flash", "fwd", B=1, H=1, Nq=128, Nk=128, d=64, gpu=gpu)
    assert D.resolved_params("sdpa_flash", d=64, gpu="H200") == D.resolved_params("sdpa_flash", d=64, gpu="h200")


def test_caveats_and_resolved_params_check_their_arguments_as_dram_does():
    """Both are public and read a call's arguments: bad ones are refused, naming them, as dram refuses them (called
    directly, caveats answered () for an unknown impl or a negative length, and resolved_params took d = 300)."""
    kw = dict(B=1, H=2, Nq=45056, Nk=45056, d=160, gpu="h100")
    assert D.caveats("sdpa_flash", **kw) and D.caveats("sdpa_flash", **kw) == iomodel.dram("sdpa_flash", "fwd",
                                                                                             **kw).caveats
    assert D.caveats("sdpa_flash", **{**kw, "B": 0}) == ()
    for bad, exc, match in ((dict(impl="bogus"), ValueError, "impl"), (dict(Nk=-1), ValueError, "^Nk"),
                            (dict(d=300), ValueError, "^d: impl='sdpa_flash' takes head dimensions up to 256"),
                            (dict(causal="no"), TypeError, "^causal"), (dict(gpu="v100"), ValueError, "gpu"),
                            (dict(B=-3), ValueError, "^B")):
        args = {"impl": "sdpa_flash", **kw, **bad}
        with pytest.raises(exc, match=match):
            D.caveats(args.pop("impl"), **args)
    with pytest.raises(ValueError, match="^d: impl='sdpa_flash' takes head dimensions up to 256"):
        D.resolved_params("sdpa_flash", d=300)
    assert D.resolved_params("eager", d=300)["C_eff"] == D.PARAMS["C_eff"]  # eager takes any head dim
