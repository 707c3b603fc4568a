"""The end-to-end GPT-2 (flashref.gpt) and ``python -m flashref train`` on a CPU, tiny shapes.

A tiny GPT trains a few steps on the copy task with the numpy front and with the Triton kernel
(in Triton's interpreter without a GPU, as tests/test_gpu_triton.py runs it), and its loss falls;
the backends agree with eager attention; the train command writes its JSON (OOM recorded, longer
N then skipped); the MFU formula and the parity rule say what the docstrings say.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import triton_env

os.environ.setdefault("FLASHREF_AUTOTUNE", "0")

from flashref import train  # noqa: E402
from flashref.gpt import GPT, GPTConfig, attend, copy_batch, loss_floor  # noqa: E402

TINY = dict(n_layer=1, n_head=2, n_embd=32, vocab_size=64)  # head dim 16: the kernel's smallest
DEVICE = torch.device(triton_env.DEVICE)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add synchronisation
    yield
    torch.set_num_threads(n)


def _curve(backend, steps=6, device=None):
    device = device or torch.device("cpu")
    return train.train_curve(TINY, N=32, batch=2, steps=steps, backend=backend, device=device, seed=0, lr=1e-2,
                             warmup=0, amp=device.type == "cuda", data_vocab=16, period=4)


@pytest.mark.parametrize("backend", ["numpy", "eager"])
def test_loss_falls_cpu(backend):
    c = _curve(backend)
    assert c[0] == pytest.approx(math.log(64), abs=0.3)  # uniform logits at the start
    assert c[-1] < c[0] - 0.5


def test_any_integer_seed_is_a_seed_modulo_2_64():
    # the batches' seed + 1 overflowed torch's 64-bit generator at 2**64 - 1 ("Overflow when unpacking long long")
    kw = dict(N=8, batch=2, steps=2, backend="eager", device=torch.device("cpu"), lr=1e-2, warmup=0, amp=False,
              data_vocab=8, period=2)
    cfg = dict(n_layer=1, n_head=2, n_embd=8, vocab_size=16)
    assert train.train_curve(cfg, seed=2**64 + 5, **kw) == train.train_curve(cfg, seed=5, **kw)
    assert len(train.train_curve(cfg, seed=2**64 - 1, **kw)) == 2 and len(train.train_curve(cfg, seed=-2**70, **kw))


def test_loss_falls_triton_kernel():
    pytest.importorskip("triton")
    c = _curve("flashref", steps=4, device=DEVICE)
    assert c[-1] < c[0] - 0.3
    if DEVICE.type == "cpu":  # float32 in the interpreter: the same curve as eager attention
        assert c == pytest.approx(_curve("eager", steps=4), abs=1e-3)


def test_backends_agree_with_eager():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 24, 16, generator=g, dtype=torch.float64) for _ in range(3))
    ref = attend(q, k, v, "eager")
    for b in ("sdpa_math", "numpy"):
        assert torch.allclose(attend(q, k, v, b), ref, atol=1e-10)
    with pytest.raises(ValueError, match="attention"):
        attend(q, k, v, "nope")


def test_copy_batch_and_floor():
    x, y = copy_batch(3, 16, 10, torch.Generator().manual_seed(1), period=4)
    assert x.shape == y.shape == (3, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert torch.equal(x[:, 4:], x[:, :-4])  # period 4
    assert loss_floor(16, 10, 4) == pytest.approx(3 / 16 * math.log(10))
    with pytest.raises(ValueError, match="period"):
        copy_batch(1, 8, 10, torch.Generator(), period=5)
    # one token holds no two periods: N is named, not the period nobody passed ("period must be in 1..0, got 0")
    for call in (lambda: copy_batch(2, 1, 4, torch.Generator()), lambda: loss_floor(1, 4)):
        with pytest.raises(ValueError, match="N: the copy task needs a sequence of at least 2 tokens"):
            call()


def test_gpt2_small_size_and_flops():
    with torch.device("meta"):
        m = GPT(GPTConfig())  # GPT-2 small: 124M parameters at block size 1024
    assert m.num_params() == pytest.approx(124.5e6, rel=0.01)
    cfg, P = GPTConfig(), m.num_params(matmul_only=True)
    assert P == m.num_params() - 1024 * 768
    assert train.flops_per_token(cfg, P, 1024) == 6 * P + 12 * 12 * 1024 * 768
    assert train.flops_per_token(cfg, P, 1024, causal_halved=True) == 6 * P + 6 * 12 * 1024 * 768
    assert train.peak_flops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert train.peak_flops("NVIDIA H200") == pytest.approx(989.4e12)
    assert train.peak_flops("NVIDIA H100 PCIe") is None and train.peak_flops("NVIDIA H100 NVL") is None


def test_train_command_writes_json(tmp_path, monkeypatch):
    out = tmp_path / "e2e.json"
    assert train.main(["--suite", "test", "--out", str(out), "--device", "cpu"]) == 0
    r = json.loads(out.read_text())
    assert r["schema"] == train.SCHEMA and r["metadata"]["suite"] == "test"
    ok = [row for row in r["throughput"] if row["status"] == "ok"]
    assert {row["backend"] for row in ok} == {"eager", "numpy"}
    for row in ok:
        assert row["tokens_per_s"] > 0 and 0 < row["attn_share"] < 1 and row["batch"] * row["N"] == 128
    p = r["parity"]
    assert set(p["curves"]) == {"eager", "numpy"} and p["verdict"]["within"]["numpy"]
    assert p["curves"]["numpy"][-1] < p["curves"]["numpy"][0]
    assert out.with_suffix(".png").exists() and (tmp_path / "e2e-loss.png").exists()


def test_oom_is_recorded_and_longer_N_skipped(tmp_path, monkeypatch):
    def fake(suite, N, backend, device, seed=0):
        if backend == "eager" and N >= 32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12 GiB")
        return dict(N=N, backend=backend, status="ok", note="", tokens_per_s=1.0, mfu=None, attn_share=0.5,
                    peak_mem_gib=None)

    monkeypatch.setattr(train, "measure", fake)
    monkeypatch.setattr(train, "train_curve", lambda *a, **k: [3.0, 2.0])
    monkeypatch.setitem(train.SUITES["test"], "Ns", (16, 32, 64))
    r = train.run("test", tmp_path / "o.json", "cpu")
    st = {(row["N"], row["backend"]): (row["status"], row["note"]) for row in r["throughput"]}
    assert st[(16, "eager")][0] == "ok"
    assert st[(32, "eager")] == ("oom", "eager OOM at N=32")
    assert st[(64, "eager")] == ("skipped", "eager OOM at N=32")
    assert st[(64, "numpy")][0] == "ok"
    assert json.loads((tmp_path / "o.json").read_text())["throughput"] == r["throughput"]  # flushed


def test_parity_rule():
    ref = [3.0] * 60
    curves = {"a": ref, "b": [3.001] * 60, "c": [3.2] * 60}
    v = train.parity_verdict(curves, [3.3] * 60, ref="a", peer="b")
    assert v["noise"] == pytest.approx(0.001) and v["tol"] == pytest.approx(0.015)  # floor 5e-3 · 3.0
    assert v["within"] == {"b": True, "c": False}
    assert v["seed_spread_mean_loss"] == pytest.approx(0.3)


def test_out_naming_a_png_is_refused(tmp_path, capsys):
    out = tmp_path / "r.png"  # the JSON went there, then the throughput plot overwrote it
    with pytest.raises(SystemExit) as e:
        train.main(["--suite", "test", "--device", "cpu", "--out", str(out)])
    assert e.value.code == 2 and f"--out: {out} names a PNG" in capsys.readouterr().err
    assert not out.exists()


def test_a_parity_only_run_draws_no_throughput_plot(tmp_path):
    r = dict(metadata=dict(device="cpu", dtype="float32"), config=dict(train.SUITES["test"], Ns=[]), throughput=[],
             parity=dict(model=train.SUITES["test"]["parity"]["model"], N=32, batch=4, seed=0, loss_floor=0.5,
                         curves={"eager": [3.0, 2.0], "numpy": [3.0, 2.1]}, seed_curve=None,
                         verdict=train.parity_verdict({"eager": [3.0, 2.0], "numpy": [3.0, 2.1]}, None,
                                                      "eager", "numpy")))
    out = tmp_path / "p.json"
    train._save_plots(r, out)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p-loss.png"]  # was p.png too: empty panels
    r["throughput"] = [dict(N=32, backend="eager", status="skipped", note="time budget")]
    train._save_plots(r, out)
    assert not out.with_suffix(".png").exists()
    r["throughput"] = [dict(N=32, backend="eager", status="ok", note="", tokens_per_s=1.0, mfu=None,
                            attn_share=0.5, peak_mem_gib=None)]
    train._save_plots(r, out)
    assert out.with_suffix(".png").exists()


def test_default_out_is_in_the_checkout_and_cpu_suites_not_under_gpu(tmp_path, monkeypatch):
    figures = Path(train.__file__).resolve().parents[1] / "figures"
    assert train.default_out("h100") == figures / "gpu" / "e2e-h100.json"
    assert train.default_out("h100-parity") == figures / "gpu" / "e2e-h100-parity.json"
    # was figures/gpu/e2e-<suite>.json: a CPU run among the GPU runs (which test_recorded_runs_recompute reads),
    # and not the figures/e2e-cpu-tiny.json notebook 12 loads
    assert train.default_out("cpu-tiny") == figures / "e2e-cpu-tiny.json"
    assert train.default_out("test") == figures / "e2e-test.json"
    assert all((s in train.GPU_SUITES) == (train.default_out(s).parent.name == "gpu") for s in train.SUITES)
    with pytest.raises(ValueError, match="suite: expected one of"):
        train.default_out("h100x")
    seen = {}
    monkeypatch.chdir(tmp_path)  # was relative to the current directory: notebooks/figures/gpu/... from notebooks/
    monkeypatch.setattr(train, "_check_out", lambda p, out: seen.setdefault("checked", out))
    monkeypatch.setattr(train, "run", lambda suite, out, *a, **k: seen.update(out=out) or dict(throughput=[],
                                                                                               parity=None))
    assert train.main(["--suite", "cpu-tiny", "--device", "cpu", "--no-plots"]) == 0
    assert seen == dict(checked=figures / "e2e-cpu-tiny.json", out=figures / "e2e-cpu-tiny.json")
    assert not list(tmp_path.iterdir())


def test_whole_curve_diff_sees_the_learning_phase():
    ref = [5.0, 3.0, 1.0] + [0.1] * 60
    par = dict(curves={"a": ref, "b": [5.0, 3.2, 1.0] + [0.1] * 60}, verdict=dict(ref="a"),
               seed_curve=dict(backend="a", seed=1, losses=[5.0, 4.5, 2.0] + [0.1] * 60))
    par["verdict"] = dict(train.parity_verdict(par["curves"], par["seed_curve"]["losses"], "a", "b"))
    assert par["verdict"]["seed_spread_max"] == 0  # the window at the floor: the other seed looks identical
    w = train.whole_curve_diff(par)
    assert w == dict(ref="a", steps=63, backends={"b": pytest.approx(0.2)}, other_seed=pytest.approx(1.5))
    par["curves"]["b"] = [5.0, float("nan")] + [0.1] * 61
    assert train.whole_curve_diff(dict(par, seed_curve=None)) == dict(ref="a", steps=63, backends={"b": math.inf},
                                                                      other_seed=None)
    with pytest.raises(ValueError, match="parity: expected"):
        train.whole_curve_diff(None)


@pytest.mark.parametrize("name", ["e2e-h100-parity", "e2e-h200-parity"])
def test_recorded_parity_runs_separate_from_the_other_seed_over_the_whole_curve(name):
    path = Path(train.__file__).resolve().parents[1] / "figures" / "gpu" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not recorded")
    p = json.loads(path.read_text())["parity"]
    w = train.whole_curve_diff(p)
    # in the window every curve sits at the floor, the other seed as close as a backend; over the whole curve the
    # largest backend difference is well under the other seed's
    assert max(w["backends"].values()) * 2 < w["other_seed"]
    ref = p["curves"][w["ref"]]
    assert w["other_seed"] == pytest.approx(max(abs(x - y) for x, y in zip(p["seed_curve"]["losses"], ref)), abs=1e-5)
