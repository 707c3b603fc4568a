"""A new user's CLI: ``python -m flashref site`` after a plain ``pip install -e .`` (no Jupyter Book) says
in one line what to install, instead of Sphinx's traceback, and still shows its --help."""

import importlib.util
import inspect

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
