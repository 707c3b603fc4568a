"""The CPU-side helpers of flashref.gpu's benchmark tools (no GPU, no triton needed)."""

from __future__ import annotations

import pytest

from flashref.gpu import bench, sweep


def test_live_at_peak_replays_the_allocator_history():
    """The blocks live when the running total peaked, largest first; frees of blocks allocated
    before recording started are ignored."""
    events = [
        {"action": "alloc", "addr": 1, "size": 10},
        {"action": "alloc", "addr": 2, "size": 20},
        {"action": "free_completed", "addr": 1, "size": 10},
        {"action": "free_completed", "addr": 99, "size": 500},  # allocated before recording
        {"action": "alloc", "addr": 3, "size": 5},
        {"action": "alloc", "addr": 4, "size": 7},  # 20 + 5 + 7 = 32 > 30: the new peak
        {"action": "free_completed", "addr": 2, "size": 20},
    ]
    assert bench._live_at_peak(events) == [20, 7, 5]
    assert bench._live_at_peak([]) == []


def test_sweep_flags_build_a_config():
    """sweep's --configs entries become kernels.Config objects: no environment variables."""
    from flashref.gpu.kernels import Config, Tiles

    cfg, det = sweep.parse_config("256,64,8,3:split+heads", "fwd")
    assert det is None and cfg == Config(fwd=Tiles(256, 64, 8, 3), split=True, heads_first=True, persistent=False,
                                          warp_specialize=False, lazy=False, tma=True, dsplit=False)
    assert sweep.parse_config("default", "fwd") == (Config(), None)
    assert sweep.parse_config(":v1+notma", "fwd")[0] == Config(version=1, split=False, heads_first=False, tma=False,
                                                               dsplit=False)
    assert sweep.parse_config("128,64,8,3:dsplit", "fwd")[0].dsplit is True
    cfg, det = sweep.parse_config("64,128,8,3:det+stagger+ws", "fwd_bwd")
    assert det is True and cfg.dkdv == Tiles(64, 128, 8, 3) and cfg.stagger and cfg.warp_specialize
    assert cfg.fwd is None and cfg.split is None  # the forward keeps its defaults
    with pytest.raises(SystemExit, match="split"):
        sweep.parse_config("128,128,4,3:split", "fwd_bwd")  # a forward flag in a backward sweep


def test_kernels_read_no_environment_variables():
    """Only TRITON_INTERPRET (how Triton itself is told to interpret) is read by the kernels."""
    import re
    from pathlib import Path

    import flashref.gpu as g
    for name in ("__init__.py", "kernels.py", "kernel1.py"):
        src = (Path(g.__file__).parent / name).read_text()
        reads = re.findall(r"os\.environ(?:\.get)?\(?\[?\s*\"([A-Z_]+)\"", src)
        assert set(reads) <= {"TRITON_INTERPRET"}, (name, reads)


def test_memory_breakdown_reuses_the_largest_n_run(monkeypatch):
    """Each (N, backend) is measured once; at the largest N the fused backends' single run gives
    both the memory row and the allocation breakdown (math is never run past N = 16384)."""
    calls = []

    def fake_peak(backend, N, dtype=None, breakdown=False):
        calls.append((backend, N, breakdown))
        peak = N * (2 if backend == "flash" else 1) * 2 ** 20
        return (peak, [peak // 2, peak // 2]) if breakdown else peak

    monkeypatch.setattr(bench, "peak_memory", fake_peak)
    memory, breakdown = bench.measure_memory((1024, 32768), dtype=None)
    assert len(calls) == len(set((b, n) for b, n, _ in calls)) == 9  # 5 backends at 1024, 4 at 32768
    assert [c for c in calls if c[2]] == [(b, 32768, True) for b in bench.MEM_BACKENDS[:-1]]
    assert set(breakdown) == set(bench.MEM_BACKENDS[:-1])
    assert breakdown["flash"] == dict(N=32768, peak_extra_mib=65536, live_at_peak_mib=[32768, 32768])
    rows = {(m["backend"], m["N"]): m["peak_extra_mib"] for m in memory}
    assert rows[("flash", 32768)] == 65536 and rows[("math", 1024)] == 1024 and ("math", 32768) not in rows


def test_fa4_is_a_backend_the_cli_accepts_and_skips_when_flash_attn_is_missing(monkeypatch, capsys):
    """``--backends ...,fa4`` parses; without an importable ``flash_attn.cute`` fa4 is dropped with one
    printed line (no error) and the other backends stay, in order. fa4 is not in the default list."""
    import sys

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # a None entry makes the import raise ImportError
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    args = bench.parse_args(["--backends", "flashref,fa4,cudnn", "--dtype", "bfloat16"])
    assert args.backends == ("flashref", "fa4", "cudnn")
    assert "flash_attn" in bench.fa4_missing()
    assert bench.available_backends(args.backends) == ("flashref", "cudnn")
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith("skipping fa4")
    assert "fa4" not in bench.parse_args([]).backends
    with pytest.raises(SystemExit):
        bench.parse_args(["--backends", "flashref,fa5"])


def test_fa4_rows_get_ratios_and_a_table_column():
    """fa4 rows get ×SDPA-flash and ×cuDNN like flashref's; flashref rows also get ×FA4."""
    def row(backend, tflops):
        return dict(mode="fwd", d=128, N=4096, causal=False, backend=backend, tflops=tflops)
    rows = bench.add_ratios([row("flashref", 300.0), row("flash", 250.0), row("cudnn", 400.0), row("fa4", 500.0)])
    by = {r["backend"]: r for r in rows}
    assert by["fa4"]["ratio_vs_sdpa_cudnn"] == 1.25 and by["fa4"]["ratio_vs_sdpa_flash"] == 2.0
    assert "ratio_vs_fa4" not in by["fa4"]
    assert by["flashref"]["ratio_vs_fa4"] == 0.6 and by["flashref"]["ratio_vs_sdpa_cudnn"] == 0.75
    assert "ratio_vs_sdpa_cudnn" not in by["cudnn"]
    header, line = bench.table(dict(rows=rows)).splitlines()
    assert header.split()[-6:] == ["fa4", "xflash", "xcudnn", "xkern2", "xfa4", "fa4xcu"]
    assert line.split()[-6:] == ["500", "1.20", "0.75", "-", "0.60", "1.25"]


def test_ratios_pair_the_rounds():
    """With rounds, each ratio is taken within a round (a drift between rounds cancels), then the median."""
    def row(backend, rounds):
        ms = sorted(rounds)[len(rounds) // 2]
        return dict(mode="fwd", d=64, N=4096, causal=False, backend=backend, rounds_ms=rounds, ms=ms,
                    tflops=1.0 / ms)
    # the clock slows 20% a round; flashref is 10% faster than cuDNN in every round
    slow = [1.0, 1.2, 1.44, 1.728, 2.0736]
    rows = bench.add_ratios([row("flashref", [t / 1.1 for t in slow]), row("cudnn", slow)])
    assert rows[0]["ratio_vs_sdpa_cudnn"] == 1.1
    # per-round ratios 2, 0.5 and 1: their median, 1.0, and not the ratio of the medians, 2 / 3
    rows = bench.add_ratios([row("flashref", [1.0, 4.0, 3.0]), row("cudnn", [2.0, 2.0, 3.0])])
    assert rows[0]["ratio_vs_sdpa_cudnn"] == 1.0
    rows = bench.add_ratios([row("flashref", [3.0, 3.0]), row("cudnn", [4.0, 4.0, 4.0])])  # unequal rounds
    assert rows[0]["ratio_vs_sdpa_cudnn"] == round(4.0 / 3.0, 3)


def test_kernel2_ratio_from_flashref2_or_in_older_records_from_flashref():
    """flashref (gpu.attention's choice) and flashref3 over kernel 2 (flashref2); in a record made before
    gpu.attention dispatched to kernel 3, flashref was kernel 2, and flashref3 is read against it."""
    def row(backend, tflops):
        return dict(mode="fwd", d=64, N=4096, causal=True, backend=backend, tflops=tflops)
    by = {r["backend"]: r for r in bench.add_ratios([row("flashref", 330.0), row("flashref2", 300.0),
                                                     row("flashref3", 345.0)])}
    assert by["flashref"]["ratio_vs_kernel2"] == 1.1 and by["flashref3"]["ratio_vs_kernel2"] == 1.15
    assert "ratio_vs_kernel2" not in by["flashref2"]
    old = {r["backend"]: r for r in bench.add_ratios([row("flashref", 300.0), row("flashref3", 330.0)])}
    assert old["flashref3"]["ratio_vs_kernel2"] == 1.1 and "ratio_vs_kernel2" not in old["flashref"]
    line = bench.table(dict(rows=list(by.values()))).splitlines()[1].split()
    assert line[4:6] == ["330", "300"] and "1.10" in line


def test_fa4_markdown_reads_the_ratios_from_the_rows():
    def row(backend, tflops, N=4096):
        return dict(mode="fwd_bwd", d=64, N=N, causal=True, backend=backend, tflops=tflops)
    rows = bench.add_ratios([row("flashref", 300.0), row("flash", 200.0), row("cudnn", 400.0), row("fa4", 500.0),
                             row("fa4", 100.0, N=512)])
    lines = bench.fa4_markdown(dict(rows=rows)).splitlines()
    assert len(lines) == 3  # header, rule, and the one N = 4096 shape (N = 512 is not asked for)
    assert lines[2] == "| fwd_bwd | 64 | True | 4096 | 500 | 400 | 200 | 300 | 1.25 | 0.75 | 0.60 |"


def test_save_rows_writes_metadata_and_rows_or_nothing(tmp_path):
    """The kernel 3 sweeps' --out: {"metadata", "rows"} as JSON; no --out, no file."""
    import json

    out = tmp_path / "rows.json"
    bench.save_rows(str(out), {"device": "x"}, [{"ms": 1.5}])
    assert json.loads(out.read_text()) == {"metadata": {"device": "x"}, "rows": [{"ms": 1.5}]}
    bench.save_rows(None, {"device": "y"}, [])
    assert list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("entry", ["kernel3._sweep", "kernel3_bwd._bench", "roundsync_probe.main"])
def test_kernel3_sweeps_say_why_they_cannot_run(entry, tmp_path, capsys, monkeypatch):
    """Where kernel 3 cannot run (no Hopper GPU, or Triton's interpreter), each command-line sweep says why, exits
    with 1 and writes no --out."""
    pytest.importorskip("triton")
    import importlib

    module, fn = entry.split(".")
    kernel3 = importlib.import_module("flashref.gpu.kernel3")
    monkeypatch.setattr(kernel3, "unavailable", lambda device=None: "no CUDA GPU (test)")
    out = tmp_path / "rows.json"
    assert getattr(importlib.import_module(f"flashref.gpu.{module}"), fn)(["--out", str(out)]) == 1
    assert "kernel 3 cannot run here: no CUDA GPU (test)" in capsys.readouterr().out
    assert not out.exists()


def test_launch_in_pieces_costs_nothing_as_recorded():
    """figures/gpu/NOTES.md's claim for kernels._pieces (h200-grid-pieces.json): at every recorded shape, kernel 2
    and the default dispatch with the added first row ran within 4% of the tree before it (best of three rounds)."""
    import json
    from pathlib import Path

    run = json.loads((Path(__file__).resolve().parents[1] / "figures/gpu/h200-grid-pieces.json").read_text())
    assert "H200" in run["device"] and len(run["ms"]) == 24
    for key, t in run["ms"].items():
        assert len(t["new"]) == len(t["old"]) == 3
        assert abs(min(t["new"]) / min(t["old"]) - 1) <= 0.04, key


def test_occupancy_takes_help_without_building(monkeypatch, capsys):
    """``python -m flashref.gpu.occupancy --help`` prints its usage and exits 0; it used to start the builds (which
    need Triton 3.6.0) whatever the arguments. An unknown argument is refused by name."""
    from flashref.gpu import occupancy

    def must_not_build():
        raise AssertionError("--help started the builds")

    monkeypatch.setattr(occupancy, "builds", must_not_build)
    with pytest.raises(SystemExit) as e:
        occupancy.main(["--help"])
    assert e.value.code == 0 and "usage: python -m flashref.gpu.occupancy" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        occupancy.main(["--bogus"])
    assert e.value.code == 2 and "--bogus" in capsys.readouterr().err


def test_fp16_backward_range_record_is_what_the_docstring_says():
    """figures/gpu/h200-fp16-backward-range.json (examples/fp16_backward_range.py on an H200): every float64 gradient
    fits fp16, yet with 1000 flowing back flashref's kernels leave exactly as many dq and dk entries non-finite as
    SDPA's flash backend (FlashAttention-2's order: dS rounded before the scale), and cuDNN and the efficient backend
    none; with 300, no backend leaves any. gpu.attention's docstring and the README quote the counts."""
    import json
    from pathlib import Path

    from flashref import gpu

    rec = json.loads((Path(__file__).resolve().parents[1] / "figures" / "gpu" /
                      "h200-fp16-backward-range.json").read_text())
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert rec["device"].startswith("NVIDIA H200") and len(rec["rows"]) == 4
    for row in rec["rows"]:
        assert max(row["reference_max"].values()) < 65504
        bad = row["nonfinite"]
        assert all(c["dv"] == 0 for c in bad.values())
        assert bad["sdpa_cudnn"] == bad["sdpa_efficient"] == {"dq": 0, "dk": 0, "dv": 0}
        if row["grad"] == 300:
            assert all(c == {"dq": 0, "dk": 0, "dv": 0} for c in bad.values())
        else:
            assert bad["flashref"] == bad["flashref2"] == bad["sdpa_flash"] and bad["flashref"]["dq"] > 0
            assert f"{bad['flashref']['dq']}" in " ".join(gpu.attention.__doc__.split())
            assert f"{bad['flashref']['dq']}" in readme


def test_gqa_decode_record_is_the_closed_form_and_reads_each_cache_once():
    """figures/gpu/h200-gqa-decode.json (examples/gqa_decode.py on an H200): the bytes it recorded are today's closed
    form for both schedules; every output agrees with the expanded call's; SDPA's flash and cuDNN backends with
    enable_gqa moved the packed bytes within the H200's HBM bandwidth, where the unpacked bytes in their time would
    need more than 1.5 times it at every cache but the smallest (so they read each K/V head's cache about once, not
    once per query head); the expanded call, whose query heads each have their own copy, stays under it with the
    unpacked bytes; gpu.decode's packed kernels do as SDPA's do, in as little time. The README, NOTES.md and
    notebook 09 say so."""
    import importlib.util
    import json
    from pathlib import Path

    from flashref.hardware import H200

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("gqa_decode", repo / "examples" / "gqa_decode.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    closed_form_bytes = script.closed_form_bytes
    rec = json.loads((repo / "figures" / "gpu" / "h200-gqa-decode.json").read_text())
    assert rec["metadata"]["device"].startswith("NVIDIA H200") and len(rec["rows"]) == 6
    peak = H200.hbm_bandwidth  # bytes a second
    for row in rec["rows"]:
        b = row["bytes"]
        assert b == closed_form_bytes(row["B"], row["N"]) and b["unpacked"] > 3.9 * b["packed"]
        assert all(diff < 1e-3 for diff in row["max_abs_diff"].values())
        for name in ("sdpa_gqa/flash", "sdpa_gqa/cudnn"):
            seconds = row["ms"][name] / 1e3
            assert b["packed"] / seconds < peak
            if (row["B"], row["N"]) != (1, 8192):  # the smallest cache: too quick a call to tell
                assert b["unpacked"] / seconds > 1.5 * peak
        assert b["unpacked"] / (row["ms"]["expanded"] / 1e3) < peak
        # gpu.decode (splitkv.py) reads each cache once too, and its kernels take no longer than SDPA's flash
        # backend's but for noise (both replayed from a CUDA graph: the kernels alone)
        seconds = row["ms_graph"]["flashref_decode"] / 1e3
        assert b["packed"] / seconds < peak
        if (row["B"], row["N"]) != (1, 8192):
            assert b["unpacked"] / seconds > 1.5 * peak
        assert row["ms_graph"]["flashref_decode"] <= 1.1 * row["ms_graph"]["sdpa_gqa/flash"]
