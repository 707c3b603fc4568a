"""plots.save: a stem with a dot keeps its whole name, and rows the CSV cannot hold are refused before any file."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from flashref import plots  # noqa: E402


def _fig():
    fig, ax = plots.figure("t")
    ax.plot([0, 1], [0, 1])
    return fig


def test_a_stem_with_a_dot_keeps_its_name(tmp_path):
    for p in (0.1, 0.2):  # with_suffix took ".1" for a suffix: both went to drop_p0.*, the second over the first
        plots.save(_fig(), [dict(p=p)], tmp_path / f"drop_p{p}")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["drop_p0.1.csv", "drop_p0.1.png",
                                                         "drop_p0.2.csv", "drop_p0.2.png"]
    assert plots.read_csv(tmp_path / "drop_p0.2.csv") == [{"p": "0.2"}]
    plots.save(_fig(), [dict(p=1)], tmp_path / "plain")
    assert (tmp_path / "plain.png").is_file() and (tmp_path / "plain.csv").is_file()


@pytest.mark.parametrize("rows", [
    [{"a": 1}, {"b": 2}],  # was mixed.png, then csv's "fields not in fieldnames" and a half-written mixed.csv
    [{"a": 1, "b": 2}, {"a": 3}],  # a missing key was written as an empty cell, silently
    [{"a": 1}, 5],
])
def test_rows_with_other_keys_are_refused_before_any_file(tmp_path, rows):
    with pytest.raises(ValueError, match=r"rows\[1\]: every row must have the first row's keys"):
        plots.save(_fig(), rows, tmp_path / "mixed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"rows\[1\]"):
        plots.write_csv(tmp_path / "x.csv", rows)
    assert list(tmp_path.iterdir()) == []


def test_the_same_keys_in_another_order_are_one_table(tmp_path):
    plots.write_csv(tmp_path / "x.csv", [{"a": 1, "b": 2}, {"b": 4, "a": 3}])
    assert plots.read_csv(tmp_path / "x.csv") == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]


def test_titles_and_legends_made_after_figure_take_the_house_style():
    """figure()'s rc context closed before callers added titles and legends, which then took matplotlib's defaults:
    12-pt subplot titles over a 9.5-pt suptitle, framed 10-pt legends (one covered a curve of the e2e figure)."""
    import matplotlib.pyplot as plt

    from flashref.plots import figure
    fig, axes = figure("t", ncols=2)
    try:
        for ax in axes[0]:
            ax.plot([0, 1], label="a")
            assert ax.set_title("x").get_fontsize() == 9.0
            legend = ax.legend()
            assert not legend.get_frame_on() and legend.get_texts()[0].get_fontsize() == 8.0
        assert axes[0][1].legend(frameon=True).get_frame_on()  # a caller's own choice still wins
    finally:
        plt.close(fig)


def test_storyboards_go_to_the_working_folder_outside_a_checkout(tmp_path):
    """Outside a checkout (an installed package) storyboards went to a figures/ folder beside the package, in
    site-packages; they go to ./figures/storyboards, as the figures command's default does."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    site = tmp_path / "site"
    shutil.copytree(Path(plots.__file__).parent, site / "flashref", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, "-c", "from flashref import plots; print(plots.STORYBOARD_DIR)"], cwd=work,
                         env={"PYTHONPATH": str(site), "PATH": ""}, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == Path("figures/storyboards")
    assert plots.STORYBOARD_DIR == Path(plots.__file__).resolve().parents[1] / "figures" / "storyboards"  # here
