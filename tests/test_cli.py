"""The command line refuses what would destroy data or waste hours, naming the argument (exit code 2, no
traceback): ``site`` replaces only an earlier site, ``train`` runs a GPU suite only on a GPU, ``figures`` writes
only into a folder."""

from __future__ import annotations

import pytest
import torch

from flashref import site, train


@pytest.fixture
def precious(tmp_path):
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("months of work")
    return folder


def test_site_never_replaces_a_folder_it_did_not_build(precious, tmp_path, capsys):
    assert site.main([str(precious)]) == 2
    assert "not empty and holds no site built here" in capsys.readouterr().err
    assert (precious / "chapter1.tex").read_text() == "months of work"
    for bad, what in ((site.REPO, "the repository"), (site.REPO.parent, "a folder above the repository"),
                      (precious / "chapter1.tex", "is a file")):
        with pytest.raises(ValueError, match=what):
            site.check_out(bad)
    empty = tmp_path / "new"
    empty.mkdir()
    assert site.check_out(empty) == empty.resolve() and site.check_out(tmp_path / "absent")
    (precious / site.MARKER).write_text("")  # an earlier site: replaced
    assert site.check_out(precious) == precious.resolve()


def test_site_refuses_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="the working folder"):
        site.check_out(tmp_path)
    with pytest.raises(ValueError, match="a folder above the working folder"):
        site.check_out(tmp_path.parent)


@pytest.mark.parametrize("argv,match", [
    (["--N", "abc"], "--N: expected a comma list"),
    (["--N", "32,-3"], "--N: sequence lengths must be positive"),
    (["--backends", "eager,bogus"], "--backends: unknown backend"),
    (["--device", "tpu"], "--device: expected cuda or cpu"),
    (["--plot", "no/such/run.json"], "--plot: no recorded run"),
    (["--budget-s", "0"], "--budget-s"),
])
def test_train_names_a_bad_argument(argv, match, tmp_path, capsys):
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as e:
        # (--plot redraws a recorded run and takes no run options)
        train.main(argv if argv[0] == "--plot" else ["--suite", "test", "--out", str(out), *argv])
    assert e.value.code == 2 and match in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the h100 suite is the one to run")
def test_train_refuses_the_h100_suite_without_a_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        train.main([])  # the default suite is h100; its default output is figures/gpu/e2e-h100.json
    assert e.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "figures").exists()
    with pytest.raises(SystemExit):
        train.main(["--suite", "test", "--device", "cuda"])


def test_figures_out_that_is_a_file_is_refused_before_any_work(precious, capsys):
    from flashref import figures
    with pytest.raises(SystemExit) as e:
        figures.main(["--out", str(precious / "chapter1.tex")])
    assert e.value.code == 2 and "--out: cannot write figures into" in capsys.readouterr().err
    assert (precious / "chapter1.tex").read_text() == "months of work"
