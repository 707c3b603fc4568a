"""The course site, read as a reader would: built with ``python -m flashref site`` and opened in headless
Chromium (Debian's ``chromium`` package, driven by Playwright, which downloads no browser of its own).

Every page loads with no console error and no request leaving the machine; every image loads; the
math is typeset by the locally served MathJax; every internal link (and its #anchor) resolves. A
screenshot of one notebook page is written to ``build/site-test/`` and its path printed at the end
of the run, to be looked at.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = REPO / "build" / "site-test" / "03-flashattention-forward.png"
SCREENSHOT_PAGE = "notebooks/03-flashattention-forward.html"


def _missing() -> str | None:
    if CHROMIUM is None:
        return "no chromium on PATH (apt-get install chromium; .ci/run installs it)"
    try:
        import jupyter_book  # noqa: F401
        import playwright.sync_api  # noqa: F401
    except ImportError as e:
        return f"the site extra is not installed ({e.name}): pip install -e '.[site]'"
    from flashref.site import find_mathjax

    try:
        find_mathjax()
    except FileNotFoundError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


@functools.cache
def _ids(path: Path) -> set:
    p = _Ids()
    p.feed(path.read_text(errors="replace"))
    return p.ids


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "html"
    proc = subprocess.run([sys.executable, "-m", "flashref", "site", str(out)], capture_output=True, text=True,
                          timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Sphinx's warnings are passed on to stderr: a link to a page the site lacks renders as plain text, not a link
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not warnings, "\n".join(warnings[:20])
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield out, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                               args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


def _pages(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html") if "_static" not in p.parts)


def test_site_has_every_page(site):
    out, _ = site
    pages = set(_pages(out))
    for nb in (REPO / "notebooks").glob("**/*.ipynb"):
        assert nb.relative_to(REPO).with_suffix(".html").as_posix() in pages, nb
    for md in ["README.html", "docs/reference.html", "docs/counting-rules.html"]:
        assert md in pages
    if (REPO / "COURSE.md").exists():
        assert "COURSE.html" in pages
    # the quiz answers are folded (hide-input): the page holds them, behind a toggle
    page = (out / "notebooks" / "00-gpu-memory-and-roofline.html").read_text()
    assert "tag_hide-input" in page and "BEGIN SOLUTION" in page
    # a $$...$$ inside a paragraph or list item (notebook 04's derivation) is display math, as Jupyter shows it; it
    # was read as two $ around inline math, and the prose between typeset as math
    page = (out / "notebooks" / "04-flashattention-backward.html").read_text()
    assert page.count('<div class="math') >= 2 and '$<span class="math' not in page


def test_every_page_in_a_browser(site, browser, record_property):
    out, base = site
    problems, math_pages, checked_links = [], 0, 0
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    outside = []

    def guard(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:  # the site must work with no network: nothing may be fetched from elsewhere
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    for rel in _pages(out):
        page = context.new_page()
        errors = []
        page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        url = urljoin(base, rel)
        html = (out / rel).read_text(errors="replace")
        # "load": every resource the page names (MathJax's typesetting and the images are awaited below); a page that
        # sends the browser on (index.html, to the README) is followed until the network is idle
        resp = page.goto(url, wait_until="networkidle" if 'http-equiv="refresh"' in html else "load")
        if resp is None or resp.status != 200:
            problems.append(f"{rel}: HTTP {resp and resp.status}")
        if 'class="math' in html:  # MathJax: every math element typeset
            math_pages += 1
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30000)
            page.evaluate("() => MathJax.startup.promise")
            n_math = page.locator(".math").count()
            n_out = page.locator("mjx-container").count()
            if n_out < n_math:
                problems.append(f"{rel}: {n_out} MathJax outputs for {n_math} math elements")
            if page.locator("mjx-merror").count():
                problems.append(f"{rel}: MathJax errors {page.locator('mjx-merror').all_inner_texts()[:3]}")
        page.evaluate("() => Promise.all([...document.images].map(i => i.complete ? 0 : "
                      "new Promise(r => { i.onload = i.onerror = r; })))")
        broken = page.evaluate("() => [...document.images].filter(i => !(i.naturalWidth > 0)).map(i => i.src)")
        problems += [f"{rel}: image does not load: {src}" for src in broken]
        for href in page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)"):
            parts = urlsplit(href)
            if parts.scheme not in ("http", "https") or parts.netloc != urlsplit(base).netloc:
                continue
            checked_links += 1
            target = out / unquote(parts.path.lstrip("/"))
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{rel}: link to a missing file {parts.path}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
                problems.append(f"{rel}: link to a missing anchor {parts.path}#{parts.fragment}")
        problems += [f"{rel}: console error: {e}" for e in errors]
        if rel == SCREENSHOT_PAGE:
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=False)  # the top: title, navigation, math
            # and the tile schedule's storyboard, the static twin of the animation above it
            board = page.locator(".cell_output img").nth(1)
            board.scroll_into_view_if_needed()
            page.screenshot(path=str(SCREENSHOT.with_name(SCREENSHOT.stem + "-storyboard.png")), full_page=False)
        page.close()
    context.close()
    problems += [f"request left the machine: {u}" for u in sorted(set(outside))]
    assert math_pages >= 3, f"math found on only {math_pages} pages"
    assert checked_links > 50
    assert not problems, "\n".join(problems[:40])
    assert SCREENSHOT.stat().st_size > 20_000
    record_property("screenshot", f"{SCREENSHOT} (and {SCREENSHOT.stem}-storyboard.png beside it)")
    print(f"screenshot of {SCREENSHOT_PAGE}: {SCREENSHOT}")


def test_a_mathjax_folder_named_but_missing_is_an_error_not_a_fall_back(tmp_path, monkeypatch):
    """FLASHREF_MATHJAX set to a folder without MathJax fell back to the repository's .mathjax without a word."""
    from flashref import site

    monkeypatch.setenv("FLASHREF_MATHJAX", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="FLASHREF_MATHJAX="):
        site.find_mathjax()


def test_no_page_scrolls_sideways_on_a_phone(site, browser):
    """At a phone's 390 pixels no page is wider than the screen: a long inline code (a file path, a dotted name) wraps
    (the site's stylesheet, site.CSS), and code blocks and tables scroll inside their own box. Before the stylesheet
    README, notebooks 00, 04 and 07 and the GPU notes were 5-125 pixels wider than the screen."""
    out, base = site
    context = browser.new_context(viewport={"width": 390, "height": 844})
    wide = []
    for rel in _pages(out):
        if rel == "index.html":  # sends the browser on to the README, checked on its own
            continue
        page = context.new_page()
        page.goto(urljoin(base, rel), wait_until="load")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > 390:
            wide.append(f"{rel}: {width} px")
        page.close()
    context.close()
    assert not wide, wide
