"""The student copy and the Gradescope bundle.

``python -m flashref student-release OUT_DIR`` writes the course without its answers:

* ``COURSE.md`` down to its ``## For instructors`` heading (:func:`student_course`): the course plan and how
  grading works, not the instructors' notes (how the quiz hashes fall, what the grader does not catch);
* the notebooks with every ``# BEGIN SOLUTION`` … ``# END SOLUTION`` region removed (a region that
  assigns answers becomes ``name = None  # your answer``; code becomes ``raise NotImplementedError``);
* the exercises as stubs (``exercises/exNN_*.py``), the solution regions replaced by
  ``FILL ME IN (~N lines)``;
* the package without the solutions folder, and with the modules that *are* the answers
  (:data:`EXCLUDED`: the algorithms and the closed forms) compiled away: their bytecode only
  (``flash1.pyc`` beside where ``flash1.py`` was, which Python imports without a source), so the
  notebooks still run and plot. No solution's *source* is in the copy, but bytecode is not a secret:
  it keeps every name, docstring and constant, and disassembles into the algorithm. Bytecode is tied
  to the Python version that built the release: build it with the course's Python. Exercise code
  cannot open them while graded (the grader refuses); the grader works from the budgets measured
  now, at release (``budgets.json``: the per-tensor budgets every score table shows anyway, but not
  exercise 7's table of choices, which is its answer and which the grader computes when it grades),
  and its own float64 oracle.

``python -m flashref autograder OUT.zip`` writes a Gradescope bundle, for the instructor to upload
(students never see it): the grader alone (:data:`BUNDLE`: no algorithm module, not even as
bytecode, no ``iomodel``, no solution), every budget including exercise 7's table, ``setup.sh``,
``run_autograder`` and the results writer (:mod:`flashref.grading.gradescope`).
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import shutil
import stat
import sys
import zipfile

from . import budgets as _budgets
from .exercises import EXERCISES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Package paths left out of the student copy: they hold the answers (or import what does).
EXCLUDED = ("flash1.py", "flash1_bwd.py", "flash2.py", "blocksparse.py", "decoding.py", "standard.py", "iomodel",
            "functional.py", "gpu", "figures", os.path.join("grading", "solutions"), "__pycache__",
            # later modules that run (or copy) an algorithm's loop: FP8's FlashAttention-2 forward, the
            # variants' tile lines, ring attention, split-KV's scheduling, and what imports them
            "lowp.py", "variants.py", "ring.py", "distributed.py", "train.py", "gpt.py", "parallelism.py")

STUDENT_INIT = '''"""flashref, student copy: the counted memory, masks, dropout, softmax helpers, the grader, and the
algorithm modules as bytecode only (they are what the exercises ask you to write).

``import flashref`` loads only the sources; the compiled modules load on first use, so the grader
runs on any Python, and the notebooks on the Python that built this copy.
"""

import importlib

from . import blocks, dropout, flops, hardware, masks, memory, patterns, problem, quiz, softmax
from .memory import IOReport, Memory, SRAMOverflowError
from .problem import Problem

__version__ = "0.1.0-student"


def __getattr__(name):
    # flashref.flash1 and the other compiled-away modules, imported when first named
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
'''

#: What the Gradescope bundle's package holds: the grader and the three modules its child processes import.
BUNDLE = ("__main__.py", "_numbers.py", "memory.py", "masks.py", "dropout.py", "grading")

AUTOGRADER_INIT = '''"""flashref, Gradescope copy: the grader alone (counted memory, masks, dropout, flashref.grading).

No algorithm module, no closed form and no reference solution is in this copy; the budgets are in
flashref/grading/budgets.json, measured when the bundle was built.
"""

__version__ = "0.1.0-autograder"
'''

_REGION = re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*# END SOLUTION[^\n]*\n?", re.S | re.M)


def strip_solutions(text: str, lines: int | None = None) -> str:
    """Replace every solution region of ``text`` by a stub that says what to fill in."""

    def stub(m):
        indent, body = m.group(1), m.group(2)
        code = [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        names = [re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", ln) for ln in code]
        if code and all(names) and len(code) <= 3:
            return "".join(f"{indent}{n.group(1)} = None  # your answer\n" for n in names)
        n = lines if lines is not None else len(code)
        return (f"{indent}# FILL ME IN (~{n} lines)\n"
                f"{indent}raise NotImplementedError(\"FILL ME IN (~{n} lines)\")\n")

    return _REGION.sub(stub, text)


def stub_source(ex) -> str:
    """The exercise's stub: its reference solution with the solution region removed."""
    with open(_budgets.solution_path(ex)) as f:
        text = f.read()
    text = text.replace("Reference solution, ", "Your solution to ")
    return strip_solutions(text, ex.lines)


def stub_name(ex) -> str:
    return ex.solution  # exNN_name.py: the file the student hands in


#: the mark of a notebook cell that answers a predict-then-run question (tests/test_quiz_notebooks.py checks it)
_REVEAL = re.compile(r"^# answers [\w-]+", re.M)
#: the name notebook 07's cells test before they print kernel source lines (tests/test_grading.py checks the copy)
_KERNEL_SOURCES = "HAVE_SOURCES"


def _strip_notebook(src: str, dst: str) -> None:
    with open(src) as f:
        nb = json.load(f)
    for cell in nb.get("cells", []):
        text = "".join(cell.get("source", []))
        if "# BEGIN SOLUTION" in text:
            cell["source"] = strip_solutions(text)
            cell["outputs"], cell["execution_count"] = [], None
        elif _REVEAL.search(text):
            # a cell that prints a question's answer (marked "# answers nbNN-qK") keeps its code, not its output:
            # the copy asks before it tells, so the student sees the answer only by running the cell
            cell["outputs"], cell["execution_count"] = [], None
        elif _KERNEL_SOURCES in text:
            # a cell that prints lines of the Triton kernels' sources where it has them (notebook 07): the copy ships
            # flashref/gpu as bytecode (its kernels are the Triton lab's answer), so not their lines in an output
            # either; run in the copy, the cell says where the sources are
            cell["outputs"], cell["execution_count"] = [], None
    with open(dst, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _tracked(src_pkg: str):
    """The package's files git tracks, relative to it; None where the tree is not a git checkout (or git is
    missing), and then every source file ships."""
    import subprocess

    try:
        listed = subprocess.run(["git", "-C", src_pkg, "ls-files", "-z", "--full-name", "."], capture_output=True,
                                check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    top = "flashref/"  # --full-name: paths from the checkout's top, where the package is
    return {os.path.normpath(p[len(top):]) for p in listed.split("\0") if p.startswith(top)} or None


def _copy_package(dst_pkg: str) -> None:
    src_pkg = os.path.join(REPO, "flashref")

    def ignore(folder, names):
        rel = os.path.relpath(folder, src_pkg)
        out = []
        for n in names:
            path = os.path.normpath(os.path.join(rel, n))
            if path in EXCLUDED or n in EXCLUDED or n.endswith(".pyc") or n == "budgets.json":
                out.append(n)
            # what ships is the package's modules: sources only (an editor's backup, a stray bundle or notes in the
            # tree stay behind; a bundle holds exercise 7's answer table), and none that git does not track where
            # the tree is a checkout (a scratch copy of a solution module is not part of the package)
            elif os.path.isfile(os.path.join(folder, n)) and (
                    not n.endswith(".py") or (tracked is not None and path not in tracked)):
                out.append(n)
        return out

    tracked = _tracked(src_pkg)

    shutil.copytree(src_pkg, dst_pkg, ignore=ignore)
    _compile_excluded(src_pkg, dst_pkg)
    with open(os.path.join(dst_pkg, "__init__.py"), "w") as f:
        f.write(STUDENT_INIT)
    with open(os.path.join(dst_pkg, "grading", "budgets.json"), "w") as f:
        json.dump(_budgets.all_budgets(answers=False), f)  # no answer table: exercise 7's is computed


def _copy_grader(dst_pkg: str) -> None:
    """The bundle's package: :data:`BUNDLE` only, and every budget (exercise 7's table included)."""
    src_pkg = os.path.join(REPO, "flashref")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "budgets.json", "solutions")
    os.makedirs(dst_pkg)
    for name in BUNDLE:
        src = os.path.join(src_pkg, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst_pkg, name), ignore=skip)
        else:
            shutil.copy(src, dst_pkg)
    with open(os.path.join(dst_pkg, "__init__.py"), "w") as f:
        f.write(AUTOGRADER_INIT)
    with open(os.path.join(dst_pkg, "grading", "budgets.json"), "w") as f:
        json.dump(_budgets.all_budgets(answers=True), f)


def _compile_excluded(src_pkg: str, dst_pkg: str) -> None:
    """Ship the excluded modules as bytecode only (``name.pyc`` where ``name.py`` was), except the solutions."""
    for folder, dirs, files in os.walk(src_pkg):
        rel = os.path.relpath(folder, src_pkg)
        dirs[:] = [d for d in dirs if d != "__pycache__" and os.path.normpath(os.path.join(rel, d)) != SOLUTIONS]
        inside = any(part in EXCLUDED for part in _parts(rel))  # a file of an excluded package
        for fn in files:
            path = os.path.normpath(os.path.join(rel, fn))
            if fn.endswith(".py") and (inside or path in EXCLUDED or fn in EXCLUDED):
                target = os.path.join(dst_pkg, rel, fn[:-3] + ".pyc")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                py_compile.compile(os.path.join(folder, fn), cfile=target, dfile=fn, doraise=True)


def _parts(rel: str) -> list[str]:
    return [] if rel == "." else os.path.normpath(rel).split(os.sep)


SOLUTIONS = os.path.join("grading", "solutions")


#: What the copy takes from the repository besides the package, the notebooks and the exercises: the pages its
#: README and COURSE.md link to, and the licence (MIT asks for its notice in every copy). Its README and COURSE.md
#: are its own (:func:`student_readme`, :func:`student_course`).
TOP_FILES = ("LICENSE", "environment.yml", os.path.join("docs", "reference.md"),
             os.path.join("docs", "counting-rules.md"))

#: The heading of COURSE.md's instructors' part: the student copy's COURSE.md is what comes before it.
INSTRUCTORS = "## For instructors"
#: Folders the copy is made from: OUT_DIR inside one of them would be copied into itself.
SOURCES = ("flashref", "figures", "notebooks", "docs")

#: Appended to the copy's pyproject.toml: a plain ``pip install .`` ships the compiled modules (bytecode beside
#: where their sources were; ``iomodel`` and ``gpu`` as folders without an ``__init__.py`` source) and the budgets.
PACKAGE_DATA = """
# The student copy: its algorithm modules are bytecode only, and the grader reads its budgets from a file.
[tool.setuptools.package-data]
"*" = ["*.pyc", "*.json"]
"""


def built_python() -> str:
    """The Python the copy is built with, "3.11": bytecode loads on the minor version that wrote it only."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _pin_python(project: str) -> str:
    """pyproject.toml with ``requires-python`` pinned to :func:`built_python`: the repository's ">=3.10" would let
    pip install the copy on a Python whose first notebook import then fails on the compiled modules ("bad magic
    number")."""
    pin = f'requires-python = "=={built_python()}.*"'
    pinned, n = re.subn(r'^requires-python\s*=.*$', pin, project, count=1, flags=re.M)
    if n != 1:
        raise RuntimeError("pyproject.toml: no requires-python line to pin")
    return pinned


def student_release(out_dir: str) -> str:
    """Write the student copy into ``out_dir`` (created; must not exist or be empty). If writing fails, what was
    written is removed again."""
    if not _budgets.have_solutions():
        raise RuntimeError("student-release needs the solution copy (flashref/grading/solutions)")
    check_release_dir(out_dir)
    existed = os.path.isdir(out_dir)
    try:
        _write_release(out_dir)
    except BaseException:
        if existed:  # it was empty: empty it again
            for name in os.listdir(out_dir):
                path = os.path.join(out_dir, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return out_dir


def _write_release(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    _copy_package(os.path.join(out_dir, "flashref"))
    for name in TOP_FILES:
        if os.path.exists(os.path.join(REPO, name)):
            os.makedirs(os.path.dirname(os.path.join(out_dir, name)), exist_ok=True)
            shutil.copy(os.path.join(REPO, name), os.path.join(out_dir, name))
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        project = _pin_python(f.read())
    with open(os.path.join(out_dir, "pyproject.toml"), "w") as f:
        f.write(project + PACKAGE_DATA)
    if os.path.isdir(os.path.join(REPO, "figures")):
        shutil.copytree(os.path.join(REPO, "figures"), os.path.join(out_dir, "figures"))
    nb_src = os.path.join(REPO, "notebooks")
    for folder, _, files in os.walk(nb_src):
        rel = os.path.relpath(folder, nb_src)
        os.makedirs(os.path.join(out_dir, "notebooks", rel), exist_ok=True)
        for fn in files:
            if fn.endswith(".ipynb"):
                _strip_notebook(os.path.join(folder, fn), os.path.join(out_dir, "notebooks", rel, fn))
    os.makedirs(os.path.join(out_dir, "exercises"))
    for ex in EXERCISES.values():
        with open(os.path.join(out_dir, "exercises", stub_name(ex)), "w") as f:
            f.write(stub_source(ex))
    # the copy's own README: the repository's names its tests, CI and tools, none of which the copy has
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(student_readme())
    if os.path.exists(os.path.join(REPO, "COURSE.md")):
        with open(os.path.join(REPO, "COURSE.md")) as f:
            course = student_course(f.read())
        with open(os.path.join(out_dir, "COURSE.md"), "w") as f:
            f.write(course)


def student_course(text: str) -> str:
    """COURSE.md as the student copy has it: the part above its :data:`INSTRUCTORS` heading (the plan, the
    objectives, how grading works). What follows that heading is the instructors': how the quiz hashes give way,
    what the grader does not catch, how the copy and the bundle are built. Raises if the heading is missing, so a
    renamed heading cannot ship the whole page."""
    lines = text.splitlines(keepends=True)
    at = [k for k, line in enumerate(lines) if line.rstrip() == INSTRUCTORS]
    if len(at) != 1:
        raise ValueError(f"COURSE.md: expected one {INSTRUCTORS!r} heading (the student copy ends above it), "
                         f"found {len(at)}")
    return "".join(lines[:at[0]]).rstrip() + "\n"


def student_readme() -> str:
    """The student copy's README.md: what the copy holds, how to install it, read it and grade an exercise."""
    notebooks = sorted(fn for fn in os.listdir(os.path.join(REPO, "notebooks")) if fn.endswith(".ipynb"))
    stubs = "\n".join(f"| {ex.number} | {ex.title} | `exercises/{stub_name(ex)}` |" for ex in EXERCISES.values())
    return f"""# flashref: the course copy

FlashAttention step by step, on a simulated GPU memory that counts every element it moves. This is the
students' copy of flashref: the notebooks, the exercises as stubs to fill in, and the package that runs
them. It holds no solutions (the algorithm modules the notebooks import ship as bytecode); your
instructor made it with `python -m flashref student-release`.

## Install (a CPU is enough)

This copy needs Python {built_python()}: its algorithm modules are compiled, and Python loads compiled modules
only on the version that wrote them.

```bash
python{built_python()} -m venv .venv && . .venv/bin/activate
pip install -q torch --index-url https://download.pytorch.org/whl/cpu
pip install -q -e . jupyter      # add triton for the Triton lab: pip install triton (Linux)
```

## Read

`jupyter lab notebooks/`, in order: {", ".join(f"`notebooks/{n}`" for n in notebooks)}. Each asks before it
tells: answer its questions (`quiz.check`) before you run the cell that prints the answer.

## Do

| exercise | what you write | your file |
|---|---|---|
{stubs}

Fill in the part marked `FILL ME IN` and grade it (again as often as you like):

```bash
python -m flashref grade 03 exercises/ex3_flash1_forward.py
```

The score has three parts: correctness against a float64 oracle, the HBM traffic your code counts
against the reference solution's, and your peak on-chip footprint. The notebooks in
`notebooks/exercises/` set out each exercise with its spec and hints, write your answer to a file and
grade it in place. `COURSE.md` has the course plan and how grading works; `docs/reference.md` the
papers' algorithm boxes and theorems, with their line numbers, and `docs/counting-rules.md` the rules by which IO
is counted.
"""


SETUP_SH = """#!/usr/bin/env bash
# Gradescope: install what the grader needs (the Triton lab runs on the CPU interpreter).
set -e
apt-get install -y python3 python3-pip >/dev/null 2>&1 || true
pip3 install -q numpy torch --index-url https://download.pytorch.org/whl/cpu
pip3 install -q triton || echo "setup.sh: Triton did not install; the Triton lab will report it to the staff" >&2
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope: grade every exercise file in the submission, write results/results.json.
cd /autograder/source
mkdir -p /autograder/results
PYTHONPATH=/autograder/source python3 -m flashref.grading.gradescope /autograder/submission \\
    /autograder/results/results.json
"""


def within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or inside it, links resolved (a path need not exist yet)."""
    folder = os.path.realpath(folder)
    return os.path.commonpath([os.path.realpath(path), folder]) == folder


def check_release_dir(out_dir: str) -> None:
    """Raise (``NotADirectoryError``, ``FileExistsError``, ``PermissionError``) unless ``out_dir`` can take a copy."""
    if not out_dir.strip():  # "" would be the working directory: no folder named, not an OS error
        raise ValueError("expected a folder to write into, got an empty name")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise NotADirectoryError(f"{out_dir} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty")
    for src in SOURCES:
        if within(out_dir, os.path.join(REPO, src)):
            raise ValueError(f"{out_dir} is inside {src}/, which the copy is made from (it would copy itself into "
                             "itself): choose a folder outside it")
    existing = os.path.abspath(out_dir)  # the deepest folder of the path that exists: it must be writable
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"{out_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"{out_dir}: {existing} is not writable")


def check_bundle_path(out_zip: str) -> None:
    """Raise unless ``out_zip`` names a .zip file that can be written in an existing directory."""
    if os.path.isdir(out_zip):
        raise IsADirectoryError(f"{out_zip} is a directory: name the .zip file to write")
    folder = os.path.dirname(os.path.abspath(out_zip))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{out_zip}: no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{out_zip}: {folder} is not writable")
    # An existing file is replaced only if it is a bundle this command wrote: a mistyped path must not
    # overwrite a file of the user's (or the system's) with a zip.
    if os.path.exists(out_zip) and not _is_bundle(out_zip):
        raise FileExistsError(f"{out_zip} exists and is not a Gradescope bundle; remove it or name another file")
    if not out_zip.lower().endswith(".zip") or os.path.basename(out_zip).lower() == ".zip":
        raise ValueError(f"{out_zip}: expected a .zip file name (the bundle is a zip, as Gradescope takes it)")


def _is_bundle(path: str) -> bool:
    """Whether ``path`` is a zip holding the bundle's two entry points (what :func:`autograder` writes)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return {"setup.sh", "run_autograder"} <= set(z.namelist())


def autograder(out_zip: str) -> str:
    """Write the Gradescope bundle ``out_zip``."""
    import tempfile

    check_bundle_path(out_zip)
    if within(out_zip, os.path.join(REPO, "flashref")):
        raise ValueError(f"{out_zip}: inside the flashref package, from which the student copy is made: the bundle "
                         f"holds exercise 7's answer table, so write it elsewhere")
    with tempfile.TemporaryDirectory(prefix="flashref-autograder-") as tmp:
        _copy_grader(os.path.join(tmp, "flashref"))
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(tmp, name), 0o755)
        with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as z:
            for folder, _, files in os.walk(tmp):
                for fn in sorted(files):
                    full = os.path.join(folder, fn)
                    info = zipfile.ZipInfo(os.path.relpath(full, tmp))
                    info.external_attr = (stat.S_IMODE(os.stat(full).st_mode) | stat.S_IFREG) << 16
                    with open(full, "rb") as f:
                        z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
    return out_zip
