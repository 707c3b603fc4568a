"""A new user's CLI: ``python -m flashref site`` after a plain ``pip install -e .`` (no Jupyter Book) says
in one line what to install, instead of Sphinx's traceback, and still shows its --help."""

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from flashref import __main__ as cli


@pytest.fixture
def no_myst_nb(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "myst_nb" else real(name, *a))


def test_site_without_jupyter_book_names_what_to_install(no_myst_nb, tmp_path, capsys):
    out = tmp_path / "site"
    assert cli.main(["site", str(out)]) == 1
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and "Traceback" not in err and cap.out == ""
    assert err.startswith("python -m flashref site: needs Jupyter Book 1 (missing myst_nb)")
    assert '".[site]"' in err
    assert not out.exists()  # nothing built, nothing created


def test_site_help_works_without_jupyter_book(no_myst_nb, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["site", "--help"])
    assert e.value.code == 0
    assert "usage: python -m flashref site" in capsys.readouterr().out


def test_site_modules_are_what_the_build_loads():
    from flashref import site

    src = inspect.getsource(site.write_book_files)  # the generated conf.py: its extensions and theme
    for m in site.SITE_MODULES[1:]:  # (sphinx itself runs them)
        assert f'"{m}"' in src, m


def test_exercise_notebooks_builder_takes_help_and_names_a_bad_number(capsys, monkeypatch):
    """``python -m flashref.grading.notebooks --help`` (the command COURSE.md gives) crashed on int('--help')."""
    from flashref.grading import notebooks

    with pytest.raises(SystemExit) as e:
        notebooks.main(["--help"])
    assert e.value.code == 0 and "exercise numbers to rebuild" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        notebooks.main(["99"])
    assert e.value.code == 2 and "no exercise 99" in capsys.readouterr().err
    built = []
    monkeypatch.setattr(notebooks, "build", lambda numbers: built.append(numbers) or [])
    assert notebooks.main([]) == 0 and notebooks.main(["3", "5"]) == 0  # none: every exercise (3.11 refused [])
    assert built == [None, [3, 5]]


def test_the_triton_lab_without_triton_says_what_to_install(monkeypatch, tmp_path, capsys):
    """Grading the lab where Triton is not installed: one line naming it, not a traceback from the lab's grader."""
    from flashref import grading
    from flashref.grading import cli as grading_cli
    from flashref.grading.exercises import EXERCISES

    lab = next(ex for ex in EXERCISES.values() if ex.kind == "triton")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    f = tmp_path / "lab.py"
    f.write_text("")
    with pytest.raises(ModuleNotFoundError, match=r"needs triton installed where the grader runs: pip install"):
        grading.grade(lab.name, f)
    assert grading_cli.grade_main([lab.name, str(f)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("python -m flashref grade: ") and "Traceback" not in err
    # and the autograder's results tell the staff, where they used to score the student 0 for it
    from flashref.grading import gradescope

    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / lab.solution).write_text("")
    out = gradescope.results(str(sub))
    said = next(t for t in out["tests"] if t["name"] == f"{lab.name} correctness")["output"]
    assert "please tell the staff" in said and "needs triton installed" in said


def test_figures_only_without_names_is_an_error(tmp_path, capsys):
    """``figures --only`` with no names made every figure, into figures/ by default."""
    from flashref import figures

    with pytest.raises(SystemExit) as e:
        figures.main(["--only", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--only: name at least one figure" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_output_piped_into_a_reader_that_stops_is_no_traceback():
    # `python -m flashref --help | head -1`: the reader goes away before the usage is written; the command ends
    # quietly (exit 1, Python's recipe) instead of printing a BrokenPipeError traceback
    proc = subprocess.Popen([sys.executable, "-m", "flashref", "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    proc.stdout.close()  # before the child has imported anything, let alone printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err
