"""Hostile input to the command line and to the modules around it (train, gpt, quiz, hardware, plots, flops):
a clear error that names the argument (exit code 2 on the command line), never a traceback, a NaN or a run
that only fails once it has started."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

from flashref import __main__ as cli
from flashref import flash1, flash2, gpt, hardware, plots, quiz, standard, train
from flashref.flops import FlopCounter

matplotlib.use("Agg")


# --------------------------------------------------------------------------- python -m flashref train

@pytest.fixture
def no_run(monkeypatch):
    """train.run replaced: a bad argument must be refused before anything runs; a good one's overrides kept."""
    seen = {}

    def fake_run(suite_name, out, device_name=None, overrides=None, argv=None):
        seen.update(suite=suite_name, out=out, overrides=overrides)
        return dict(throughput=[], parity=None)

    monkeypatch.setattr(train, "run", fake_run)
    return seen


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    return err


def test_train_out_must_be_a_writable_file(tmp_path, no_run, capsys):
    base = ["--suite", "test", "--device", "cpu", "--no-plots"]
    assert "--out: " in _refused(base + ["--out", str(tmp_path)], capsys)  # a folder: was IsADirectoryError
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # named: the file in the way (mkdir's own words were "File exists")
    assert f"--out: cannot write {blocker / 'run.json'}: {blocker} is not a folder" in _refused(
        base + ["--out", str(blocker / "run.json")], capsys)
    assert not no_run  # refused before the run
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path.parent / f"{tmp_path.name}.json.tmp").exists()
    good = tmp_path / "new" / "run.json"
    assert train.main(base + ["--out", str(good)]) == 0 and no_run["out"] == good
    assert not list(good.parent.iterdir())  # the check leaves nothing behind


def test_train_plot_refuses_what_is_not_a_recorded_run(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert "--plot: " in _refused(["--plot", str(bad)], capsys)  # was a JSONDecodeError traceback
    bad.write_text("{}")
    assert "not a run recorded by this command" in _refused(["--plot", str(bad)], capsys)  # was a KeyError
    # the schema tag without the rest of a run (cut short, or written by hand): a KeyError's traceback, exit 1
    for partial in ('{"schema": "flashref.train/1"}',
                    '{"schema": "flashref.train/1", "throughput": [{"status": "ok"}]}'):
        bad.write_text(partial)
        assert "not a complete recorded run" in _refused(["--plot", str(bad)], capsys)
    assert not list(tmp_path.glob("*.png"))


def test_train_lengths_fit_the_copy_task_and_run_in_order(tmp_path, no_run, capsys):
    base = ["--suite", "test", "--device", "cpu", "--no-plots", "--out", str(tmp_path / "r.json")]
    # the test suite's copy task repeats 4 tokens: N = 4 used to run and record an error in every row
    assert "--N: this suite's copy task repeats 4 tokens" in _refused(base + ["--N", "4"], capsys)
    assert not no_run
    # an OOM at N skips every later N: later must mean longer
    assert train.main(base + ["--N", "64,32,64"]) == 0 and no_run["overrides"]["Ns"] == (32, 64)


def test_train_backends_list(tmp_path, no_run, capsys):
    base = ["--suite", "test", "--device", "cpu", "--no-plots", "--out", str(tmp_path / "r.json")]
    assert train.main(base + ["--backends", "eager, numpy"]) == 0
    assert no_run["overrides"]["backends"] == ("eager", "numpy")
    assert "unknown backend(s) ''" in _refused(base + ["--backends", "eager,,numpy"], capsys)


def test_train_helpers_refuse_nonsense():
    with pytest.raises(ValueError, match="s: expected a speedup > 0"):
        train.amdahl(0.3, 0)  # was ZeroDivisionError
    for a in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="a: expected the share"):
            train.amdahl(a, 2.0)
    assert train.amdahl(0.3, 1.5) == pytest.approx(1 / (0.7 + 0.2))
    with pytest.raises(ValueError, match="N: expected a positive integer"):
        train.flops_per_token(gpt.GPTConfig(), 10, -1)  # was a negative FLOP count
    with pytest.raises(ValueError, match="window"):
        train.parity_verdict({"a": [1.0], "b": [1.0]}, None, "a", "b", window=0)  # was ZeroDivisionError
    with pytest.raises(ValueError, match="curves"):
        train.parity_verdict({"a": [], "b": []}, None, "a", "b")


def test_throughput_plot_of_a_run_where_nothing_ran_has_no_warning():
    result = dict(metadata=dict(device="CPU", dtype="float32"),
                  config=dict(model=dict(n_layer=1, n_embd=32, n_head=2), tokens_per_step=128),
                  throughput=[dict(N=32, backend="eager", status="skipped", note="time budget")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: "No artists with labels found to put in legend"
        fig = train.plot_throughput(result)
    matplotlib.pyplot.close(fig)


# --------------------------------------------------------------------------- python -m flashref

def test_main_usage(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("figures", "site", "bench", "profile", "profile-l2", "train", "grade", "student-release",
                "autograder", "--timeout", "--seed", "COMMAND --help"):
        assert cmd in out
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--help"])
    assert e.value.code == 0 and "--budget-s" in capsys.readouterr().out


def test_every_help_line_is_a_whole_sentence(capsys):
    """Each command's description is its docstring's first paragraph, never a sentence cut at a line break."""
    for cmd in ("figures", "site", "bench", "profile", "profile-l2", "l2-score", "train"):
        with pytest.raises(SystemExit) as e:
            cli.main([cmd, "--help"])
        out = capsys.readouterr().out
        description = " ".join(out.split("\n\n")[1].split())
        assert e.value.code == 0 and description.endswith("."), (cmd, description)


def test_bad_arguments_make_nothing(tmp_path, capsys):
    """A mistyped figure name is refused before --out is made; an empty --json is refused, not ignored."""
    out = tmp_path / "figs"
    with pytest.raises(SystemExit) as e:
        cli.main(["figures", "--only", "no_such_figure", "--out", str(out)])
    assert e.value.code == 2 and "unknown figures" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as e:
        cli.main(["grade", "01", __file__, "--json", ""])
    assert e.value.code == 2 and "argument --json: expected a file name" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["figures", "--only", "roofline", "--out", ""], "argument --out: expected a folder"),
    (["profile-l2", "--predict", "--groups", "check74", "--out", ""], "argument --out: expected a folder"),
    (["profile-l2", "--predict", "--groups", "check74", "--name", "a/b"], "argument --name: expected a file name"),
    (["bench", "--rounds", "0"], "argument --rounds: expected a positive integer"),
    (["bench", "--rep", "2", "--rounds", "3"], "argument --rounds: 3 rounds would leave less than 1 ms"),
    (["bench", "--d", "0"], "argument --d: expected comma-separated positive integers"),
    (["bench", "--d", ""], "argument --d: expected comma-separated positive integers"),
    (["bench", "--d", "4096"], "argument --d: [4096] exceed the hidden size"),
    (["bench", "--N", "99999999"], "argument --N: [99999999] do not divide"),
    (["bench", "--modes", "xyz"], "argument --modes: expected some of fwd, fwd_bwd"),
    (["bench", "--out", ""], "argument --out: expected a folder"),
    # a prefix of --ceilings reached bench's own parser, which took it and ran the plain bench (its results written
    # where the recorded ones are)
    (["bench", "--ceil"], "unrecognized arguments: --ceil"),
    # profile split its lists without a check: a KeyError on a GPU, or an empty result written over the recorded one
    (["profile", "--shapes", "zzz"], "argument --shapes: expected some of fig2, long"),
    (["profile", "--impls", "zzz"], "argument --impls: expected some of plain, math"),
    (["profile", "--out", ""], "argument --out: expected a folder"),
    (["profile", "--name", "a/b"], "argument --name: expected a file name"),
    # train --plot redraws a recorded run beside its JSON; --out, --no-plots, --suite were taken and ignored
    (["train", "--plot", "figures/e2e-cpu-tiny.json", "--out", "x.json", "--no-plots"],
     "argument --plot: redraws a recorded run's figures beside it; --out, --no-plots do not apply"),
    # profile-l2's --gpu picks the model's L2 preset for --predict; a measurement took it and dropped it
    (["profile-l2", "--gpu", "h200", "--groups", "check83"], "--gpu: only with --predict"),
])
def test_tools_refuse_a_bad_value_before_any_work(argv, says, tmp_path, capsys, monkeypatch):
    """An empty --out wrote into the working folder without a word; bench ran its whole sweep before dividing by
    --rounds 0 (and wrote empty results for --rounds -2, rows of batch 0 for an N past its tokens). Each is refused
    by argparse, naming the flag, before any work (run from an empty folder: nothing may appear in it)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- gpt

@pytest.mark.parametrize("field,value,exc", [("n_head", 0, ValueError), ("n_embd", -4, ValueError),
                                             ("vocab_size", 0, ValueError), ("n_layer", 2.5, TypeError),
                                             ("block_size", 0, ValueError)])
def test_gpt_config_names_a_bad_field(field, value, exc):
    kw = dict(n_layer=1, n_head=2, n_embd=8, block_size=8, vocab_size=16)
    with pytest.raises(exc, match=field):  # was ZeroDivisionError, a torch RuntimeError, or an empty model
        gpt.GPTConfig(**{**kw, field: value})
    with pytest.raises(ValueError, match="multiple of n_head"):
        gpt.GPTConfig(**{**kw, "n_embd": 9})


def test_gpt_forward_checks_its_tokens():
    model = gpt.GPT(gpt.GPTConfig(n_layer=1, n_head=2, n_embd=8, block_size=8, vocab_size=16), attention="eager")
    with pytest.raises(ValueError, match=r"idx: token ids must be in 0\.\.15"):
        model(torch.tensor([[3, 16]]))  # was IndexError: index out of range in self
    with pytest.raises(ValueError, match="idx: token ids"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(TypeError, match="idx"):
        model(torch.zeros(5, dtype=torch.long))  # was "not enough values to unpack"
    with pytest.raises(ValueError, match="targets"):
        model(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="targets"):  # the mean over no tokens was a silent NaN
        model(torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, 0, dtype=torch.long))
    assert model(torch.zeros(0, 4, dtype=torch.long)).shape == (0, 4, 16)


def test_copy_batch_and_floor_name_their_arguments():
    g = torch.Generator().manual_seed(0)
    for args, name in (((2, 8, 0, g, 2), "vocab"), ((-1, 8, 4, g, 2), "B"), ((2, 8, 4, g, 2.5), "period"),
                       ((2, 8.0, 4, g, 2), "N"), ((2, 8, 4, None, 2), "generator")):
        with pytest.raises((TypeError, ValueError), match=name):
            gpt.copy_batch(*args)
    for args, name in (((0, 4, 2), "N"), ((8, 0, 2), "vocab"), ((8, 4, 0), "period"), ((8, 4, 9), "period")):
        with pytest.raises((TypeError, ValueError), match=name):  # was ZeroDivisionError, or a negative floor
            gpt.loss_floor(*args)


# --------------------------------------------------------------------------- quiz, hardware, plots, flops

def test_quiz_never_raises_and_reads_torch_bools(capsys):
    assert quiz.check(["ex1-writes"], 1) is None  # was TypeError: unhashable type
    assert quiz.check("ex2-identity", "yes") is True
    assert quiz.check("ex2-identity", torch.tensor(True)) is True  # torch's (a == b).all(): was "not right"
    assert quiz.check("ex2-identity", torch.tensor(False)) is False
    with pytest.raises(ValueError, match="qid: no question 'nope'"):
        quiz.digest("nope", 1)  # was KeyError


def test_hardware_names_a_non_number():
    with pytest.raises(TypeError, match="flops: expected a number"):
        hardware.arithmetic_intensity("a", 1)
    with pytest.raises(TypeError, match="bytes_moved"):
        hardware.arithmetic_intensity(1, None)
    with pytest.raises(TypeError, match="matmul_flops"):
        hardware.time_estimate(None, 0, 1, "H100")
    with pytest.raises(TypeError, match="intensity"):
        hardware.attainable_flops("abc", "H100")
    assert hardware.arithmetic_intensity(np.float64(6.0), np.int64(3)) == 2.0


def test_plots_refuse_no_rows_and_no_frames(tmp_path):
    with pytest.raises(ValueError, match="rows"):
        plots.write_csv(tmp_path / "x.csv", [])  # was IndexError
    fig, _ = plots.figure("t")
    with pytest.raises(ValueError, match="rows"):
        plots.save(fig, [], tmp_path / "y")
    assert not list(tmp_path.iterdir())  # not a PNG without its CSV
    with pytest.raises(ValueError, match="frames"):
        plots.storyboard(fig, lambda k: None, [], "z", folder=tmp_path)
    with pytest.raises(ValueError, match="ncols"):
        plots.storyboard(fig, lambda k: None, [0], "z", ncols=0, folder=tmp_path)  # was ZeroDivisionError
    matplotlib.pyplot.close(fig)


def test_flop_counter_refuses_a_negative_count():
    fc = FlopCounter()
    with pytest.raises(ValueError, match="ops"):
        fc.elementwise(np.ones(3), ops=-1)  # was a negative FLOP count
    assert fc.report().total == 0


def test_flops_by_hand_at_random_shapes():
    """Matmul FLOPs: 4·Nq·Nk·d per head forward (QKᵀ and PV), 8 backward for standard attention (dV, dP, dQ,
    dK), 10 for FlashAttention (S recomputed); standard forward's non-matmul: scale, max, subtract, exp, sum,
    divide, 6 per score."""
    rng = np.random.default_rng(7)
    for _ in range(3):
        H, Nq, Nk, d, Br, Bc = (int(x) for x in rng.integers(1, 4, 1).tolist() + rng.integers(2, 12, 5).tolist())
        Q, dO = rng.standard_normal((2, H, Nq, d))
        K, V = rng.standard_normal((2, H, Nk, d))
        per = H * Nq * Nk * d
        s = standard.forward(Q, K, V)
        assert (s.flops.matmul, s.flops.nonmatmul) == (4 * per, 6 * H * Nq * Nk)
        assert standard.backward(Q, K, V, dO, s.P).flops.matmul == 8 * per
        f1 = flash1.forward(Q, K, V, block_sizes=(Br, Bc))
        f2 = flash2.forward(Q, K, V, block_sizes=(Br, Bc))
        assert f1.flops.matmul == f2.flops.matmul == 4 * per
        assert flash1.backward(Q, K, V, f1.O, dO, f1.l, f1.m, block_sizes=(Br, Bc)).flops.matmul == 10 * per
        assert flash2.backward(Q, K, V, f2.O, dO, f2.L, block_sizes=(Br, Bc)).flops.matmul == 10 * per


# --------------------------------------------------------------------------- maintainers' and example scripts

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_scripts_refuse_before_any_work_with_a_clear_message(tmp_path, capsys, monkeypatch):
    """A new user's pass ran every script on a CPU: tracebacks where a line was due (a GPU-only sweep's CUDA
    generator error, a config it could not parse, a missing argument, an output under a file found only after the
    work, a mistyped submission folder graded as "not submitted")."""
    import importlib.util
    import subprocess
    import sys

    from flashref import _nbrun, site
    from flashref.gpu import sweep
    from flashref.grading import gradescope

    def example(name):
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def refused(call, says):
        with pytest.raises(SystemExit) as e:
            call()
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err and "Traceback" not in err, err

    refused(lambda: sweep.main(["--configs", "1,2,3"]), "--configs: tiles must be")
    if not torch.cuda.is_available():
        assert sweep.main(["--configs", "default"]) == 1 and "needs a CUDA GPU" in capsys.readouterr().err
        refused(lambda: example("knee_speed").main(["--out", str(tmp_path / "k.json")]), "CUDA GPU")
        refused(lambda: example("fp16_backward_range").main(["--out", str(tmp_path / "f.json")]), "CUDA GPU")
        refused(lambda: example("gqa_decode").main(["--out", str(tmp_path / "g.json")]), "CUDA GPU")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    refused(lambda: example("dram_speed").main(["--out", str(a_file / "x.json")]), "is a file")
    assert _nbrun.main(["build", "x.py"]) == 2 and _nbrun.main(["run", str(tmp_path / "no.ipynb")]) == 2
    with pytest.raises(ValueError, match="a file, not a folder"):
        site.check_out(a_file / "site")
    assert gradescope.main([str(tmp_path / "nowhere"), str(tmp_path / "r.json")]) == 2
    assert gradescope.main([str(tmp_path), str(a_file / "r.json")]) == 2
    assert "SUB: no folder" in capsys.readouterr().err
    bench = subprocess.run([sys.executable, str(EXAMPLES / "ring_benchmark.py"), "--smoke", "--sections", "main"],
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 2 and "--sections: ['main'] are not among" in bench.stderr
    assert not list(tmp_path.glob("*.json"))


def test_ring_benchmark_plot_titles_the_backend_and_dtype_its_run_recorded():
    """The plot's title said NCCL and bf16 whatever the run: a CPU smoke run (gloo, float32) was titled as the GPUs'.
    It now reads both from the run's env, and the recorded two-H200 run still says NCCL, bf16."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("ring_benchmark", EXAMPLES / "ring_benchmark.py")
    ring = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ring)
    res = json.loads((Path(__file__).resolve().parents[1] / "figures" / "gpu" / "ring-2xh200.json").read_text())
    assert "(NCCL)" in ring.plot(res)._suptitle.get_text() and "bf16" in ring.plot(res)._suptitle.get_text()
    res["env"].update(backend="gloo", dtype="torch.float32")
    title = ring.plot(res)._suptitle.get_text()
    matplotlib.pyplot.close("all")
    assert "(GLOO)" in title and "float32" in title and "NCCL" not in title and "bf16" not in title
