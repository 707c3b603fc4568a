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
                                          warp_specialize=False, lazy=False, tma=True)
    assert sweep.parse_config("default", "fwd") == (Config(), None)
    assert sweep.parse_config(":v1+notma", "fwd")[0] == Config(version=1, split=False, heads_first=False, tma=False)
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
