"""The repository stands on its own: every path the README, docs/ and the notebooks name exists in it;
every measured number a notebook quotes is backed by a recorded file in figures/; every animation also
leaves a static storyboard; and notebooks use public names only. (That the figures command leaves a clean clone
clean is tests/test_figures.py's, which runs the command once for all its tests.)"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (REPO / "notebooks").glob("**/*.ipynb") if ".ipynb_checkpoints" not in p.parts)
TEXTS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), *[p for p in [REPO / "COURSE.md"] if p.exists()]]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`([\w./*-]+/[\w.*-]+\.(?:md|json|csv|png|py|ipynb|yml|toml))`")
QUOTED_PATH = re.compile(r"[\"']((?:\.\./|\./)?[\w.-]+/[\w./-]*\.(?:md|json|csv|png|ipynb))[\"']")
OUTSIDE = re.compile(r"(?<![\w.])(?:\.\./shared/|shared/reference/|reference/papers\.md|gpu-anchors\.md|DESIGN\.md"
                     r"|/work/|/home/|/tmp/|site-packages)")


def _sources(path: Path) -> list[tuple[str, str]]:
    """(where, text) for a markdown file, or for each cell of a notebook (its outputs included)."""
    if path.suffix != ".ipynb":
        return [(path.name, path.read_text())]
    nb = nbformat.read(path, as_version=4)
    out = []
    for i, c in enumerate(nb.cells):
        out.append((f"{path.name} cell {i}", c.source))
        for o in c.get("outputs", []):
            text = o.get("text", "") + "".join(v for k, v in o.get("data", {}).items() if k.startswith("text/"))
            out.append((f"{path.name} cell {i} output", text))
    return out


def _resolves(target: str, folder: Path) -> bool:
    target = target.split("#")[0]
    if not target:
        return True
    for base in (folder, REPO):
        p = (base / target).resolve()
        if REPO in p.parents or p == REPO:
            if "*" in target and list(base.glob(target)):
                return True
            if p.exists():
                return True
    return False


@pytest.mark.parametrize("path", TEXTS + NOTEBOOKS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_dangling_path(path):
    bad = []
    for where, text in _sources(path):
        bad += [f"{where}: points outside the repository: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
        if where.endswith("output"):
            continue
        for m in LINK.finditer(text):
            t = m.group(1)
            if not re.match(r"[a-z]+:", t) and not t.startswith("#") and not _resolves(t, path.parent):
                bad.append(f"{where}: link to a missing file {t}")
        for m in CODE_PATH.finditer(text):
            if not _resolves(m.group(1), path.parent):
                bad.append(f"{where}: names a missing file `{m.group(1)}`")
        if path.suffix == ".ipynb":
            for m in QUOTED_PATH.finditer(text):
                if not _resolves(m.group(1), path.parent):
                    bad.append(f"{where}: opens a missing file {m.group(1)!r}")
    assert not bad, "\n".join(bad)


# ----------------------------------------------------------------------------- measured numbers
MEASURED = re.compile(r"measur|nsight|\bncu\b|\bH100\b|\bH200\b", re.I)
CITED = re.compile(r"\bpaper\b|FlashAttention-[123],? §|datasheet|whitepaper|arXiv", re.I)  # a number with its source
NUMBER = re.compile(r"(?<![\w.×])(\d[\d,]*(?:\.\d+)?)\s?(GB|MB|MiB|GiB|TB/s|TFLOP/s|ms)\b")
CITATIONS = REPO / "figures" / "backward_figure2_table.csv"  # the paper's published numbers, with their source


def _numbers(obj, scale_b=None):
    if isinstance(obj, dict):
        b = obj.get("B") if isinstance(obj.get("B"), int) else scale_b
        for v in obj.values():
            yield from _numbers(v, b)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v, scale_b)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):
        yield obj
        if scale_b:
            yield obj * 64 / scale_b  # "scaled to batch 64", the Figure 2 shape


def _recorded(files) -> list[float]:
    values = []
    for f in files:
        if f.suffix == ".json":
            values += list(_numbers(json.loads(f.read_text())))
        else:
            with open(f) as fh:
                for row in csv.DictReader(fh):
                    for v in row.values():
                        try:
                            values.append(float(v))
                        except (TypeError, ValueError):
                            pass
    return [v * s for v in values for s in (1, 1e-9, 1e-12, 2**-20, 1e3)]


def _datasheets() -> list[float]:
    """Vendor figures (capacities, bandwidths, peaks), each with its source in flashref.hardware: not measurements."""
    from flashref import hardware

    values = [v for g in hardware.GPUS.values() for v in vars(g).values()
              if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return [v * s for v in values for s in (1, 1e-9, 1e-12, 2**-20, 1e-6)]


def _backed(text: str, values) -> bool:
    digits = len(text.split(".")[1]) if "." in text else 0
    q = float(text.replace(",", ""))
    return any(abs(v - q) <= 0.5 * 10**-digits + 1e-9 for v in values)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_measurements_have_a_recorded_source(path):
    """A number with a unit, in a sentence about a measurement, must be one the notebook loads from figures/."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    loaded = {f for f in (REPO / "figures").rglob("*") if f.suffix in (".json", ".csv") and f.name in code}
    values = _recorded(loaded | {CITATIONS}) + _datasheets()
    bad = []
    for i, c in enumerate(nb.cells):
        pieces = re.split(r"(?<=[.;])\s+|\n\n", c.source) if c.cell_type == "markdown" else c.source.splitlines()
        for piece in pieces:
            if not MEASURED.search(piece) or CITED.search(piece):
                continue
            for m in NUMBER.finditer(piece):
                if c.cell_type == "code" and not piece.lstrip().startswith("#"):
                    bad.append(f"cell {i}: a measured number typed into code: {m.group(0)!r} in {piece.strip()!r}")
                elif not _backed(m.group(1), values):
                    names = sorted(f.name for f in loaded)
                    bad.append(f"cell {i}: {m.group(0)!r} has no recorded source among {names}: {piece.strip()[:99]!r}")
    assert not bad, "\n".join(bad)


def test_the_measurement_check_catches_a_typed_number():
    assert not _backed("47.3", _recorded([CITATIONS]) + _datasheets())  # a number recorded nowhere
    assert _backed("46.8", _recorded([REPO / "figures" / "gpu" / "h100-80gb-hbm3-dram-sdpa.json"]))
    assert _backed("39.0", _recorded([REPO / "figures" / "gpu" / "h100-80gb-hbm3-dram.json"]))
    assert NUMBER.search("measured 39.0 GB") and MEASURED.search("measured 39.0 GB")


# ----------------------------------------------------------------------------- animations, imports
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_animation_has_a_storyboard(path):
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or "FuncAnimation" not in c.source:
            continue
        m = re.search(r"storyboard\(.*?[\"']([\w.-]+)[\"']", c.source)
        assert m, f"{path.name} cell {i}: an animation without a storyboard(...) PNG"
        png = REPO / "figures" / "storyboards" / f"{m.group(1)}.png"
        assert png.exists() and png.stat().st_size > 10_000, png
        assert any("image/png" in o.get("data", {}) for o in c.get("outputs", [])), \
            f"{path.name} cell {i}: the storyboard is not shown in the committed outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_use_public_names(path):
    nb = nbformat.read(path, as_version=4)
    private = re.compile(r"from flashref[\w.]* import [^\n]*\b_\w|\bflashref(?:\.\w+)*\._[a-z]\w*|\b(?:softmax|memory|"
                         r"blocks|flash1|flash2|standard|iomodel|hardware|plots)\._[a-z]\w*")
    bad = [f"cell {i}: {m.group(0)}" for i, c in enumerate(nb.cells) for m in private.finditer(c.source)]
    assert not bad, bad
