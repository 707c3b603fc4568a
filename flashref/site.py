"""``python -m flashref site OUT_DIR``: the course as a static website, built offline.

The site is built by Jupyter Book 1's machinery (Sphinx with MyST-NB, the external table of
contents and the book theme; configured here for Sphinx directly) from the files of the repository as they
are: the README as the home page, ``COURSE.md`` when there is one, the reference sheet and counting
rules in ``docs/``, every notebook under ``notebooks/`` (sub-folders such as ``exercises/``
included) with its committed outputs — nothing is re-executed — and the GPU notes (every
``figures/gpu/*.md``, ``NOTES.md`` first). New notebooks and notes are picked up by the globs, with no list
to update. Sphinx's warnings (a link to a page the site lacks, which renders as plain text) are passed on to stderr.

MathJax is served from the site itself, never from a CDN: the build copies the ``es5`` folder of
npm's ``mathjax`` package (version 3) into ``_static/mathjax``. It is looked for in
``$FLASHREF_MATHJAX``, then in ``.mathjax/node_modules/mathjax/es5`` of the checkout, where

    npm install --prefix .mathjax mathjax@3

puts it (``.ci/run`` does). Needs the ``site`` extra: ``pip install -e ".[site]"``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _cli

__all__ = ["REPO", "SITE_MODULES", "pages", "find_mathjax", "check_tools", "write_book_files", "build", "main"]

REPO = Path(__file__).resolve().parents[1]
MATHJAX_DEFAULT = REPO / ".mathjax" / "node_modules" / "mathjax" / "es5"


def pages(repo: Path = REPO) -> dict[str, list[str]]:
    """The site's pages by part, as paths relative to ``repo`` without suffix (the README is the root)."""
    parts: dict[str, list[str]] = {}
    if (repo / "COURSE.md").exists():
        parts["Course"] = ["COURSE"]
    notebooks = sorted((repo / "notebooks").glob("**/*.ipynb"))
    notebooks = [p for p in notebooks if ".ipynb_checkpoints" not in p.parts]
    for nb in notebooks:
        folder = nb.parent.relative_to(repo / "notebooks")
        caption = "Notebooks" if str(folder) == "." else f"Notebooks: {folder.as_posix()}"
        parts.setdefault(caption, []).append(nb.relative_to(repo).with_suffix("").as_posix())
    docs = sorted(p for p in (repo / "docs").glob("*.md")) if (repo / "docs").exists() else []
    reference = [d.relative_to(repo).with_suffix("").as_posix() for d in docs]
    # the GPU notes: NOTES.md first, then every other note beside it (NOTES-l2.md, which the README links)
    gpu = repo / "figures" / "gpu"
    notes = sorted(gpu.glob("*.md"), key=lambda p: (p.name != "NOTES.md", p.name)) if gpu.exists() else []
    reference += [n.relative_to(repo).with_suffix("").as_posix() for n in notes]
    if reference:
        parts["Reference"] = reference
    return parts


def find_mathjax() -> Path:
    """The folder that holds MathJax 3's ``tex-mml-chtml.js``: ``FLASHREF_MATHJAX`` where it is set (a folder
    without the file is an error, not a silent fall back to the default), else the repository's ``.mathjax``."""
    chosen = os.environ.get("FLASHREF_MATHJAX")
    if chosen:
        if not (Path(chosen) / "tex-mml-chtml.js").exists():
            raise FileNotFoundError(f"FLASHREF_MATHJAX={chosen}: no tex-mml-chtml.js there; set it to MathJax 3's "
                                    f"es5/ folder (the one that holds tex-mml-chtml.js), or unset it")
        return Path(chosen)
    if (Path(MATHJAX_DEFAULT) / "tex-mml-chtml.js").exists():
        return Path(MATHJAX_DEFAULT)
    raise FileNotFoundError(
        "MathJax 3 not found: run `npm install --prefix .mathjax mathjax@3` in the repository root, or set "
        "FLASHREF_MATHJAX to the folder that holds tex-mml-chtml.js (the package's es5/ folder)")


def _yaml_list(items, indent):
    return "".join(f"{' ' * indent}- \"{item}\"\n" for item in items)


# The site's own style, beside the theme's: inline code (file paths, commands, long identifiers; Sphinx keeps each
# word of it in a span that must not wrap) may break anywhere, so that on a phone's 390-pixel screen a long one wraps
# instead of widening the whole page (the theme already scrolls code blocks and tables inside their own box)
CSS = """code.literal, code.literal span.pre { overflow-wrap: anywhere; white-space: pre-wrap; }
"""


def write_book_files(folder: Path, static: Path, repo: Path = REPO) -> tuple[Path, Path]:
    """Write the Sphinx ``conf.py`` and the table of contents ``_toc.yml`` into ``folder``, and the site's
    stylesheet (:data:`CSS`) into ``static``; return the first two's paths.

    The configuration is Jupyter Book 1's (MyST-NB, the external table of contents, the book theme)
    written out for Sphinx directly, without the Thebe extension, which loads from a CDN.
    """
    toc = "format: jb-book\nroot: README\nparts:\n"
    for caption, files in pages(repo).items():
        toc += f"  - caption: \"{caption}\"\n    chapters:\n"
        toc += "".join(f"      - file: {f}\n" for f in files)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_toc.yml").write_text(toc)
    conf = f"""# generated by flashref.site
project = "flashref — FlashAttention, step by step"
author = "flashref contributors"
copyright = "flashref contributors, MIT licence"
extensions = ["myst_nb", "sphinx_external_toc", "sphinx_copybutton"]
external_toc_path = {str(folder / "_toc.yml")!r}
external_toc_exclude_missing = True
# ".*": every hidden folder (virtual environments, caches, a developer's scratch copies) stays out
exclude_patterns = ["_build", "build", "dist", ".*", "**/.*", "tests", "flashref", "*.egg-info"]
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
# a $$...$$ inside a paragraph or a list item is display math, as Jupyter renders it (notebook 04's derivation)
myst_dmath_double_inline = True
myst_heading_anchors = 3
html_theme = "sphinx_book_theme"
html_title = "flashref"
html_static_path = [{str(static)!r}]
html_css_files = ["flashref.css"]
mathjax_path = "mathjax/tex-mml-chtml.js"
html_show_sourcelink = False
html_context = {{"default_mode": "light"}}
html_theme_options = {{"home_page_in_toc": True, "use_download_button": False, "use_fullscreen_button": False}}
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]
"""
    (folder / "conf.py").write_text(conf)
    static.mkdir(parents=True, exist_ok=True)
    (static / "flashref.css").write_text(CSS)
    return folder / "conf.py", folder / "_toc.yml"


# matplotlib's JavaScript animations (``to_jshtml``) link Font Awesome 4 from a CDN for their buttons'
# icons; on the site the theme's own Font Awesome (served locally) draws them, so the link is dropped.
_CDN_LINK = re.compile(r'<link rel="stylesheet"\s+href="https://maxcdn\.bootstrapcdn\.com/font-awesome/[^"]*">')


def _offline(page: Path) -> None:
    text = page.read_text()
    new = _CDN_LINK.sub("", text)
    if new != text:
        page.write_text(new)


MARKER = ".flashref-site"  # written into every built site: only a folder holding it is ever replaced


def check_out(out: Path, repo: Path = REPO) -> Path:
    """``out`` resolved, if building there can only replace an earlier site: it must not exist, be an empty
    folder, or hold this builder's marker; and it must not be the repository, the working folder or a folder
    above either (``site .`` would otherwise delete the checkout)."""
    out = Path(out).resolve()
    for keep in (Path(repo).resolve(), Path.cwd().resolve()):
        if out == keep or out in keep.parents:
            raise ValueError(f"out: {out} is {'the' if out == keep else 'a folder above the'} "
                             f"{'repository' if keep == Path(repo).resolve() else 'working folder'}; "
                             "give a new folder, e.g. _site")
    blocker = _cli.file_in_the_way(out)
    if blocker is not None:  # found before the build, not by copytree's NotADirectoryError after it
        raise ValueError(f"out: {out} lies under {blocker}, a file, not a folder")
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"out: {out} is a file, not a folder")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise ValueError(f"out: {out} is not empty and holds no site built here ({MARKER} missing); "
                             "it is replaced only if it is one")
    return out


# What the Sphinx build loads (Jupyter Book 1 brings them all). Checked before anything is built: the build runs
# Sphinx in a subprocess, which without them fails with its own traceback
SITE_MODULES = ("sphinx", "myst_nb", "sphinx_external_toc", "sphinx_copybutton", "sphinx_book_theme")


def check_tools() -> None:
    """A ``ModuleNotFoundError`` naming what is missing of :data:`SITE_MODULES`, and what to install."""
    missing = [m for m in SITE_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"needs Jupyter Book 1 (missing {', '.join(missing)}): pip install -e \".[site]\" "
                                  "in the checkout, or pip install \"jupyter-book>=1,<2\"")


def build(out: Path, repo: Path = REPO, quiet: bool = True) -> Path:
    """Build the site into ``out`` (its ``index.html`` is the README); returns ``out``. ``out`` is replaced if it
    is an earlier site (:func:`check_out` refuses anything else)."""
    check_tools()
    out = check_out(out, repo)
    mathjax = find_mathjax()
    with tempfile.TemporaryDirectory(prefix="flashref-site-") as tmp:
        tmp = Path(tmp)
        static = tmp / "static"
        shutil.copytree(mathjax, static / "mathjax")
        conf, _ = write_book_files(tmp / "book", static, repo)
        html = tmp / "html"
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(conf.parent), "-d", str(tmp / "doctrees"),
               str(repo), str(html)] + (["-q"] if quiet else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"sphinx failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        # Sphinx's warnings (a link to a page the site lacks, a missing image) go to stderr: passed on, not dropped
        if proc.stderr.strip():
            print(proc.stderr.rstrip(), file=sys.stderr)
        (html / "index.html").write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><title>flashref</title>'
                                         '<meta http-equiv="refresh" content="0; url=README.html"></head>'
                                         '<body><a href="README.html">flashref</a></body></html>')
        for page in html.rglob("*.html"):
            _offline(page)
        (html / MARKER).write_text("built by python -m flashref site; this folder is replaced by the next build\n")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(html, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashref site", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="output folder: new, empty, or an earlier site (which is replaced)")
    args = ap.parse_args(argv)
    try:
        out = build(args.out)
    # a bad folder, MathJax or Jupyter Book missing: say so, no traceback
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        print(f"python -m flashref site: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    print(f"site written to {out} ({sum(1 for _ in out.rglob('*.html'))} HTML pages); open {out / 'index.html'}")
    return 0
