"""Hostile tests of the end-to-end part (flashref.gpt, flashref.train): bad arguments name themselves,
every attention backend gives eager's logits, loss and gradients, training is seeded, and what the
module reads from the recorded GPU runs (figures/gpu/e2e-*.json) is what their raw numbers give.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from triton_env import INTERPRET

os.environ.setdefault("FLASHREF_AUTOTUNE", "0")

from flashref import train  # noqa: E402
from flashref.gpt import BACKENDS, GPT, GPTConfig, attend, loss_floor  # noqa: E402

CPU = torch.device("cpu")
TINY = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=16)
RUNS = sorted(Path(__file__).resolve().parents[1].glob("figures/gpu/e2e-*.json"))


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model(attention="eager", **kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, "block_size": 8, **kw}), attention=attention)


def _curve(**kw):
    args = dict(model_cfg=TINY, N=16, batch=2, steps=3, backend="eager", device=CPU, seed=0, lr=1e-2, warmup=0,
                amp=False, data_vocab=8, period=4)
    return train.train_curve(**{**args, **kw})


# --------------------------------------------------------------------------- gpt: arguments

def test_config_stores_python_ints():
    cfg = GPTConfig(**{**TINY, "n_embd": np.int64(16), "block_size": np.int32(8)})
    assert type(cfg.n_embd) is int and type(cfg.block_size) is int and cfg.head_dim == 8
    json.dumps(cfg.as_dict())  # was: "Object of type int64 is not JSON serializable"


def test_gpt_names_a_bad_config_and_backend():
    with pytest.raises(TypeError, match="cfg: expected a GPTConfig"):
        GPT({**TINY, "block_size": 8}, attention="eager")  # was AttributeError: 'dict' has no 'vocab_size'
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="attention: expected one of"):
        attend(q, q, q, ["eager"])  # was TypeError: unhashable type: 'list'
    m = _model()
    with pytest.raises(ValueError, match="attention: expected one of"):
        m.set_attention("flash")
    with pytest.raises(TypeError, match="on: expected True or False"):
        m.set_profiling("yes")  # was accepted: a truthy string switched the profiler marks on
    m.set_profiling(np.True_)  # numpy's bool, as everywhere else (was refused)
    assert all(b.attn.profiling is True for b in m.blocks)
    m.set_profiling(False)


def test_cudnn_backend_on_a_cpu_says_so():
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="sdpa_cudnn.*needs a CUDA GPU"):  # was "No viable backend ... found"
        attend(q, q, q, "sdpa_cudnn")


def test_forward_checks_idx_and_targets():
    m = _model()
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(TypeError, match="idx: expected a"):
        m([[1, 2]])  # was AttributeError: 'list' object has no attribute 'ndim'
    with pytest.raises(TypeError, match="idx: expected a"):
        m(np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="sequence length 9 exceeds block_size 8"):
        m(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets: token ids must be in 0\.\.15"):
        m(x, torch.full((1, 4), 16))  # was IndexError: Target 16 is out of bounds
    with pytest.raises(ValueError, match="targets: token ids"):
        m(x, torch.full((1, 4), -100))  # was a silent NaN: -100 is cross_entropy's ignore_index
    with pytest.raises(ValueError, match="targets: token ids"):
        m(x, torch.tensor([[1, 2, 3, -100]]))  # was the mean over 3 of the 4 tokens, silently
    with pytest.raises(TypeError, match="targets: expected a"):
        m(x, torch.zeros(1, 4))  # was RuntimeError: expected target dtype to be Long
    y = torch.tensor([[1, 2, 3, 4]])
    assert m(x, y.int()).item() == m(x, y).item()  # int32 targets, as int32 idx, now work


# --------------------------------------------------------------------------- gpt: every backend, the same numbers

def _fwd_bwd(m, x, y):
    loss = m(x, y)
    loss.backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    with torch.no_grad():
        return m(x), loss.detach(), grads


def _cpu_backends(dtype):
    out = [b for b in BACKENDS if b not in ("eager", "sdpa_cudnn")]  # cuDNN: GPU only (tested above)
    if "flashref" in out and (dtype == torch.float64 or not INTERPRET):
        out.remove("flashref")  # Triton's interpreter runs float32/float16 only; on a GPU: another test
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("B,N", [(2, 8), (1, 1), (1, 2)])
def test_every_backend_gives_eagers_logits_loss_and_gradients(dtype, tol, B, N):
    if dtype == torch.float32:
        pytest.importorskip("triton")
    g = torch.Generator().manual_seed(B * 10 + N)
    x, y = (torch.randint(0, 16, (B, N), generator=g) for _ in range(2))
    m = _model(n_layer=2).to(dtype)
    L0, l0, g0 = _fwd_bwd(m, x, y)
    assert L0.shape == (B, N, 16) and torch.isfinite(L0).all()
    for b in _cpu_backends(dtype):
        m.set_attention(b)
        L, loss, grads = _fwd_bwd(m, x, y)
        assert torch.allclose(L, L0, rtol=0, atol=tol), b
        assert abs(loss.item() - l0.item()) <= tol, b
        assert all(torch.allclose(a, c, rtol=0, atol=tol) for a, c in zip(grads, g0)), b


# --------------------------------------------------------------------------- train: arguments

@pytest.mark.parametrize("kw,exc,match", [
    (dict(steps=0), ValueError, "steps"),  # was RuntimeError: stack expects a non-empty TensorList
    (dict(steps=True), TypeError, "steps"),  # was one step
    (dict(warmup=-5), ValueError, "warmup"),  # was a negative learning rate at every step: gradient ascent
    (dict(amp="no"), TypeError, "amp"),  # was torch's "argument 'enabled' must be bool"
    (dict(lr="0.1"), ValueError, "lr"),  # was "'<=' not supported between float and str"
    (dict(lr=float("nan")), ValueError, "lr"),
    (dict(seed=0.5), TypeError, "seed"),  # was RuntimeError: manual_seed expected a long
    (dict(data_vocab=17), ValueError, "data_vocab=17"),  # was a refusal of idx (a device assert on a GPU)
    (dict(model_cfg={**TINY, "dropout": 0.1}), TypeError, "dropout'; valid options are n_embd, n_head"),
    (dict(model_cfg={**TINY, "block_size": 8}), TypeError, "block_size"),
    (dict(model_cfg=None), TypeError, "model_cfg"),
    (dict(device=3), TypeError, "device"),
    (dict(backend="flash"), ValueError, "attention: expected one of"),
])
def test_train_curve_names_a_bad_argument(kw, exc, match):
    with pytest.raises(exc, match=match):
        _curve(**kw)


def test_measure_checks_the_data_vocabulary():
    suite = dict(train.SUITES["test"], data_vocab=65)  # the model has 64 token ids
    with pytest.raises(ValueError, match="data_vocab=65"):
        train.measure(suite, 32, "eager", CPU)


def test_run_names_a_bad_suite_or_override(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="suite_name: expected one of cpu-tiny, h100"):
        train.run("h100x", tmp_path / "r.json", "cpu")  # was KeyError
    with pytest.raises(TypeError, match="'budget'; valid options are Ns, backends, budget_s"):
        train.run("test", tmp_path / "r.json", "cpu", dict(budget=1.0))  # was ignored silently
    with pytest.raises(ValueError, match="backends"):
        train.run("test", tmp_path / "r.json", "cpu", dict(backends=("eager", "flash")))
    seen = []

    def fake(suite, N, backend, device, seed=0):
        seen.append(N)
        if N >= 32:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return dict(N=N, backend=backend, status="ok", note="", tokens_per_s=1.0, mfu=None, attn_share=0.5,
                    peak_mem_gib=None)

    monkeypatch.setattr(train, "measure", fake)
    monkeypatch.setattr(train, "train_curve", lambda *a, **k: [3.0, 2.0])
    r = train.run("test", tmp_path / "r.json", "cpu", dict(Ns=(64, 16, 32), backends=("eager",)))
    # OOM at N skips every later N, so the sizes run ascending (the API as the CLI): 16 ran, 64 was not tried
    assert seen == [16, 32]
    assert [(row["N"], row["status"]) for row in r["throughput"]] == [(16, "ok"), (32, "oom"), (64, "skipped")]


@pytest.mark.parametrize("over, exc, match", [
    (dict(budget_s=-1), ValueError, r"overrides\['budget_s'\]: expected a number of seconds > 0, got -1"),
    (dict(budget_s="10"), ValueError, r"overrides\['budget_s'\]"),  # was a TypeError after the JSON was made
    (dict(budget_s=float("nan")), ValueError, r"overrides\['budget_s'\]"),
    (dict(backends="eager"), TypeError, r"overrides\['backends'\]: expected a list or tuple"),  # was "got 'e'"
    (dict(Ns=[4]), ValueError, r"overrides\['Ns'\]: .* at least 8, got \[4\]"),  # was an error row per backend
    (dict(Ns=32), TypeError, r"overrides\['Ns'\]: expected a list or tuple"),
])
def test_run_refuses_what_the_cli_refuses(tmp_path, over, exc, match):
    out = tmp_path / "r.json"
    with pytest.raises(exc, match=match):
        train.run("test", out, "cpu", over)
    assert not out.exists()  # refused before the file is made


@pytest.mark.parametrize("kw, exc, match", [
    (dict(warmup=-1), ValueError, r"suite\['warmup'\]: expected a non-negative integer, got -1"),
    (dict(steps=0), ValueError, r"suite\['steps'\]: expected a positive integer, got 0"),  # was StatisticsError
    (dict(profile_steps=0), ValueError, r"suite\['profile_steps'\]"),  # was a ZeroDivisionError
    (dict(tokens_per_step=0), ValueError, r"suite\['tokens_per_step'\]"),  # was batch 1, silently
    (dict(tokens_per_step=-5), ValueError, r"suite\['tokens_per_step'\]"),
    (dict(tokens_per_step=128.0), TypeError, r"suite\['tokens_per_step'\]"),
    (dict(amp="no"), TypeError, r"suite\['amp'\]: expected True or False"),  # was torch's autocast TypeError
])
def test_measure_names_a_bad_size(kw, exc, match):
    with pytest.raises(exc, match=match):
        train.measure(dict(train.SUITES["test"], **kw), 32, "eager", CPU)


def test_measure_names_a_suite_that_is_not_one():
    with pytest.raises(TypeError, match="suite: expected a dict"):
        train.measure(None, 32, "eager", CPU)
    with pytest.raises(ValueError, match="suite: missing steps"):
        train.measure({k: v for k, v in train.SUITES["test"].items() if k != "steps"}, 32, "eager", CPU)


def test_training_is_seeded_and_learns():
    a, b, c = _curve(steps=8), _curve(steps=8), _curve(steps=8, seed=1)
    assert a == b  # same seed: the same weights, batches and losses
    assert a != c
    assert a[0] == pytest.approx(math.log(16), abs=0.3) and min(a[-3:]) < a[0] - 0.3
    assert _curve(steps=2, device="cpu") == a[:2]  # a device name works as well as a torch.device


# --------------------------------------------------------------------------- reading a result

def test_parity_verdict_refuses_a_diverged_curve():
    ok = [3.0] * 10
    nan_late = [3.0] * 8 + [float("nan"), 3.0]  # NaN after the first windowed step: max() skipped it
    v = train.parity_verdict({"a": ok, "b": ok, "c": nan_late}, None, "a", "b")
    assert v["within"] == {"b": True, "c": False} and v["max_abs_diff"]["c"] == math.inf
    v = train.parity_verdict({"a": ok, "b": ok[:-1] + [float("nan")], "c": [9.0] * 10}, None, "a", "b")
    assert v["within"] == {"b": False, "c": False} and "diverged" in v["rule"]  # no baseline: nobody within
    with pytest.raises(ValueError, match="seed_curve"):
        train.parity_verdict({"a": ok, "b": ok}, [3.0] * 4, "a", "b")  # was a max() of an empty sequence


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA RTX A1000 Laptop GPU", None),  # "a100" is a substring of "a1000": was the A100's 312 TFLOP/s
    ("NVIDIA RTX A1000 6GB", None),
    ("NVIDIA H200 NVL", None),  # about 835 TFLOP/s, no preset: was the SXM's 989.4
    ("NVIDIA H100 NVL", None),
    ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 80GB HBM3", 989.4e12),
    ("NVIDIA H200", 989.4e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100-SXM4-40GB", 312e12),
    ("NVIDIA A100 80GB PCIe", 312e12),
])
def test_peak_flops_matches_whole_names(name, peak):
    got = train.peak_flops(name)
    assert got is None if peak is None else got == pytest.approx(peak)


def test_amdahl_and_speedups_edges():
    assert train.amdahl(1.0, math.inf) == math.inf  # was ZeroDivisionError
    assert train.amdahl(0.5, math.inf) == pytest.approx(2.0)
    r = dict(throughput=[])
    with pytest.raises(ValueError, match="other: expected one of"):
        train.speedups(r, "flashref", "eagr")  # was [], silently
    with pytest.raises(ValueError, match="ours: expected one of"):
        train.speedups(r, "flash", "eager")


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_recorded_runs_recompute(path):
    """Every number the module derives from a recorded run, again from the raw numbers in the JSON."""
    r = json.loads(path.read_text())
    c, peak = r["config"], r["metadata"]["peak_flops"]
    assert peak == train.peak_flops(r["metadata"]["device"])
    ok = [row for row in r["throughput"] if row["status"] == "ok"]
    for row in ok:
        step = statistics.median(row["step_ms_all"])
        tps = row["batch"] * row["N"] / (step / 1e3)
        assert row["step_ms"] == pytest.approx(step, abs=1e-3) and row["tokens_per_s"] == pytest.approx(tps, rel=1e-5)
        attn = 12 * c["model"]["n_layer"] * row["N"] * c["model"]["n_embd"]
        assert row["flops_per_token"] == 6 * row["params_matmul"] + attn
        assert row["mfu"] == pytest.approx(row["flops_per_token"] * row["tokens_per_s"] / peak, abs=1e-4)
        assert row["mfu_causal"] == pytest.approx((row["flops_per_token"] - attn / 2) * row["tokens_per_s"] / peak,
                                                  abs=1e-4)
        assert row["attn_share"] == pytest.approx(row["attn_ms_per_step"] / row["device_ms_per_step"], abs=2e-4)
    by = {(row["N"], row["backend"]): row for row in ok}
    for other in ("eager", "sdpa_flash", "sdpa_cudnn"):
        got = train.speedups(r, "flashref", other) if any(b == other for _, b in by) else []
        Ns = sorted(N for (N, b) in by if b == other and (N, "flashref") in by)
        assert [s["N"] for s in got] == list(dict.fromkeys(Ns[:1] + Ns[-1:]))
        for s in got:
            o, t = by[s["N"], "flashref"], by[s["N"], other]
            assert s["measured"] == pytest.approx(o["tokens_per_s"] / t["tokens_per_s"], abs=6e-4)
            a, k = t["attn_share"], t["attn_ms_per_step"] / o["attn_ms_per_step"]
            assert s["a"] == pytest.approx(a, abs=6e-4) and s["s"] == pytest.approx(k, abs=6e-4)
            assert s["predicted"] == pytest.approx(1 / ((1 - a) + a / k), abs=6e-4)
    p = r["parity"]
    curves, ref, peer = p["curves"], c["parity"]["ref"], c["parity"]["peer"]
    assert p["loss_floor"] == pytest.approx(loss_floor(p["N"], p["data_vocab"], p["period"]), abs=1e-5)
    assert p["loss_start"] == pytest.approx(math.log(p["model"]["vocab_size"]), abs=1e-5)
    v, n = p["verdict"], min(len(x) for x in curves.values())
    w = slice(n - v["window"], n)
    noise = max(abs(x - y) for x, y in zip(curves[peer][w], curves[ref][w]))
    mean_ref = statistics.fmean(curves[ref][w])
    assert v["noise"] == pytest.approx(noise, abs=1e-5) and v["mean_ref"] == pytest.approx(mean_ref, abs=1e-5)
    assert v["tol"] == pytest.approx(max(2 * noise, 5e-3 * mean_ref), abs=1e-5)
    for b, x in curves.items():
        if b != ref:
            d = max(abs(s - t) for s, t in zip(x[w], curves[ref][w]))
            assert v["max_abs_diff"][b] == pytest.approx(d, abs=1e-5) and v["within"][b] == (d <= v["tol"])
    seed = p["seed_curve"]["losses"]
    assert v["seed_spread_max"] == pytest.approx(max(abs(s - t) for s, t in zip(seed[w], curves[ref][w])), abs=1e-5)
    assert train.parity_verdict(curves, seed, ref, peer) == v  # the module, today, on the recorded curves


def test_a_float32_run_gets_no_mfu_against_the_bf16_peak():
    # the CPU suites run in float32 (amp off); on a GPU their MFU had been taken against the bf16 tensor-core peak
    from flashref import train

    assert train.mfu_peak("NVIDIA H100 80GB HBM3", amp=True) == train.peak_flops("NVIDIA H100 80GB HBM3") > 0
    assert train.mfu_peak("NVIDIA H100 80GB HBM3", amp=False) is None
    assert not train.SUITES["test"]["amp"] and train.SUITES["h100"]["amp"]


def test_a_run_whose_every_throughput_configuration_failed_exits_1(tmp_path, capsys):
    """Every row an error (flashref's Triton backend on a CPU without the interpreter) wrote its JSON and exited 0,
    so a script could not tell the run measured nothing."""
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", env)
        code = train.main(["--suite", "test", "--device", "cpu", "--backends", "flashref", "--out", str(out),
                           "--no-plots"])
    rows = json.loads(out.read_text())["throughput"]
    assert rows and all(r["status"] == "error" for r in rows)
    assert code == 1 and "every throughput configuration failed" in capsys.readouterr().err


def test_a_cpu_run_gives_the_callers_thread_count_back(tmp_path):
    """run() set torch to one thread on a CPU and left it so: a notebook that called it stayed single-threaded."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train.run("test", tmp_path / "run.json", "cpu", {"backends": ("eager",)})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("flag", ["--N", "--backends"])
def test_an_empty_list_is_refused_not_read_as_none_given(flag, capsys):
    """--N '' and --backends '' ran the suite's own lists without a word."""
    with pytest.raises(SystemExit):
        train.main(["--suite", "test", "--device", "cpu", flag, "  "])
    assert f"{flag}: expected a comma list" in capsys.readouterr().err
