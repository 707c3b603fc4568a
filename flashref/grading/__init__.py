"""Grading the course's exercises on correctness, counted IO and on-chip footprint.

    report = flashref.grading.grade("03", "my_flash1.py")
    report.correct, report.io_ok, report.footprint_ok, report.points, report.max_points
    print(report)                      # the score table: your IO against the budget, per tensor

or ``python -m flashref grade 03 my_flash1.py [--json out.json]`` (exit status 0 only at full marks).

How a file is graded (``harness``): the student's function runs in its own process and meets a
*memory* whose verbs are requests to the grader, which alone holds the data and the counter. It is
given no arrays: to see Q it must ``mem.load`` it (counted), to produce O it must ``mem.store`` it
(counted; the grader reads the output only from HBM). The run is checked against a float64
oracle (``oracle``), its IO per tensor against the reference solution's (``budgets``), and its peak
on-chip footprint against the reference's, under an SRAM of 1.5× that peak (more is refused).
Points: correctness, then IO and footprint (these two only for a correct run).

Every module the grader needs is imported here, before any student code runs, and the grader's
files are hashed before each run and checked after it (``integrity``): a run that changed them is
not scored. What this guards against, and what it does not, is in COURSE.md's part for instructors.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import os

import numpy as np

from .._numbers import _seed  # not ..problem: the bundle ships no algorithm options

# Everything the grading process uses, imported now: a file changed on disk by student code later
# is never imported by this process.
from . import budgets as _budgets
from . import harness, integrity, lab, oracle, report  # noqa: F401
from .exercises import EXERCISES, Exercise, get
from .report import Report

__all__ = ["grade", "Report", "EXERCISES", "get", "check_path", "check_seed", "check_timeout", "default_timeout",
           "MAX_TIMEOUT"]

RTOL, ATOL = 1e-7, 1e-9


#: The longest run a grade allows, in seconds (a day): past some 10^9 s the socket's timeout overflows the platform's
#: time_t, and no exercise needs more than minutes.
MAX_TIMEOUT = 86400.0


def check_timeout(timeout, name: str = "timeout") -> float:
    """Seconds a file may run: a positive real number, at most :data:`MAX_TIMEOUT` (the one rule of :func:`grade` and
    the CLI)."""
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"{name}: expected a positive number of seconds up to {MAX_TIMEOUT:g}, got {timeout!r}")
    if not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"{name}: expected a positive number of seconds up to {MAX_TIMEOUT:g} (a day), got "
                         f"{timeout!r}")
    return float(timeout)


def default_timeout(ex: Exercise) -> float:
    """The seconds a file of ``ex`` may run when no timeout is given: 30, and 120 for the Triton lab, whose kernel is
    built and run in Triton's interpreter."""
    return lab.DEFAULT_TIMEOUT if ex.kind == "triton" else harness.DEFAULT_TIMEOUT


def check_seed(seed, name: str = "seed") -> int | None:
    """The random data's seed: None (fresh) or an integer >= 0 (numpy's ``default_rng`` takes no other)."""
    if seed is None:
        return None
    seed = _seed(seed, name)  # an integer, by the rule every entry point's seed follows (flashref.problem)
    if seed < 0:
        raise ValueError(f"{name}: expected a non-negative integer or None, got {seed!r}")
    return int(seed)


def check_path(path, name: str = "path") -> str:
    """The student's file: a ``str`` or ``os.PathLike`` path. Only its type is checked here: a missing or broken
    file is graded (a report saying so), not raised."""
    fs = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(fs, str):  # None, a number, bytes (the job sent to the student's process is text)
        raise TypeError(f"{name}: expected a file path (str or os.PathLike), got {path!r}")
    return fs


def grade(exercise, path, *, seed=None, timeout: float | None = None, instructor: bool = False) -> Report:
    """Grade the file ``path`` on ``exercise`` (name or number). Never raises for a bad student file;
    a bad ``path`` (not a str or os.PathLike), ``seed`` (not None or an integer >= 0) or ``timeout`` (not None or
    a positive number of seconds up to a day) raises a TypeError or ValueError naming it, before anything runs.
    ``timeout=None`` is the exercise's own (:func:`default_timeout`: 30 s, 120 s for the Triton lab).

    The report is the student's feedback. ``instructor=True`` adds what that feedback withholds because it is
    the answer (exercise 7: each case's least IO and the choices that reach it) in ``Report.instructor_notes``;
    only the solution copy grants it (the student copy raises a RuntimeError)."""
    path, seed = check_path(path), check_seed(seed)
    timeout = None if timeout is None else check_timeout(timeout)
    if instructor and not _budgets.have_solutions():
        raise RuntimeError("instructor: the instructor's view needs the solution copy (flashref/grading/solutions); "
                           "this is the student copy")
    return _grade(get(exercise), path, seed=seed, timeout=timeout, instructor=instructor)


def _grade(ex: Exercise, path, *, seed=None, timeout: float | None = None, baseline=None,
           instructor: bool = False) -> Report:
    """:func:`grade`, checking the grader's files against ``baseline`` (default: hashed now, before the run)."""
    # The lab's environment, checked before any student code runs: without Triton every kernel would fail in the
    # child, and the student would be blamed for the grader's machine (the autograder reports this to the staff)
    for need in ("torch", "triton") if ex.kind == "triton" else ():
        if importlib.util.find_spec(need) is None:
            raise ModuleNotFoundError(f"{ex.name} runs in Triton's interpreter, which needs {need} installed where "
                                      "the grader runs: pip install triton torch (Linux), or pip install -e "
                                      "\".[dev]\" in the checkout")
    budget = _budgets.budgets(ex.name)  # computed (or read) before the student's code starts
    if baseline is None:
        baseline = integrity.snapshot()
    if timeout is None:
        timeout = default_timeout(ex)
    if ex.kind == "triton":
        rep = lab.grade(ex, path, timeout=timeout, seed=seed)
    else:
        rng = np.random.default_rng(seed)
        setups = [ex.setup(case, rng) for case in ex.cases]
        sram = [b.get("sram_size") for b in budget]
        res = harness.run(ex, path, setups, sram, timeout=timeout)
        rep = Report(exercise=ex.name, title=ex.title, max_points=ex.max_points, output=res.output[-2000:],
                     parts={"correctness": (0, ex.points[0]), "io": (0, ex.points[1]),
                            "footprint": (0, ex.points[2])})
        if res.refused or res.error:
            rep.refused = res.refused is not None
            rep.message = res.refused or res.error
        elif ex.kind == "choice":
            rep = _score_choice(ex, rep, res, budget, instructor=instructor)
        else:
            rep = _score_memory(ex, rep, res, budget)
    changed = integrity.changes(baseline)
    if changed:
        return refuse_tampered(ex, rep, changed)
    return rep


def refuse_tampered(ex: Exercise, rep: Report, changed: list[str]) -> Report:
    """Zero ``rep``: the grader's files changed while the student's code ran."""
    rep.correct = rep.io_ok = rep.footprint_ok = False
    rep.points, rep.refused = 0.0, True
    rep.parts = {k: (0, mx) for k, (_, mx) in rep.parts.items()}
    rep.message = integrity.message(changed)
    return rep


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=ATOL))


def _score_memory(ex: Exercise, rep: Report, res, budget) -> Report:
    totals: dict[str, list[int]] = {}
    all_correct = all_io = all_fp = True
    notes = []
    peak = bpeak = 0
    for k, (c, b) in enumerate(zip(res.cases, budget)):
        wrong = [n for n in c.setup.expected if not _close(c.outputs[n], c.setup.expected[n])]
        if wrong:
            n = wrong[0]
            got, want = c.outputs[n], c.setup.expected[n]
            why = (f"shape {got.shape}, expected {want.shape}" if got.shape != want.shape else
                   oracle.difference(got, want, RTOL, ATOL))
            notes.append(f"case {k + 1} ({_shape(ex, k)}): {', '.join(wrong)} wrong ({n}: {why})")
        bt = b["by_tensor"]
        st = {name: [t.reads, t.writes] for name, t in c.io.by_tensor.items()}
        io_ok = _io_ok(ex.io_rule, st, bt)
        fp_ok = c.io.peak_sram <= b["peak_sram"]
        if not io_ok:
            notes.append(f"case {k + 1} ({_shape(ex, k)}): IO {sum(map(sum, st.values())):,} elements against a "
                         f"budget of {sum(map(sum, bt.values())):,}" +
                         (f" ({ex.io_note}: per tensor, no more and no less)" if ex.io_rule == "equal" else ""))
        if not fp_ok:
            held = ", ".join(f"{name}={n}" for name, n in c.peak_held.items())
            notes.append(f"case {k + 1}: peak on-chip footprint {c.io.peak_sram:,} > budget {b['peak_sram']:,} "
                         f"(held then: {held}; a tile or row vector no longer needed can give its slot to the next, "
                         "mem.reuse(old, new, value), as P̃_ij takes S_ij's)")
        for name in list(bt) + [n for n in st if n not in bt]:
            acc = totals.setdefault(name, [0, 0, 0, 0])
            s_rw, b_rw = st.get(name, [0, 0]), bt.get(name, [0, 0])
            acc[0] += s_rw[0]; acc[1] += s_rw[1]; acc[2] += b_rw[0]; acc[3] += b_rw[1]  # noqa: E702
        peak, bpeak = max(peak, c.io.peak_sram), max(bpeak, b["peak_sram"])
        rep.cases.append({"case": _shape(ex, k), "correct": not wrong, "io_ok": io_ok, "footprint_ok": fp_ok,
                          "io": sum(map(sum, st.values())), "budget_io": sum(map(sum, bt.values())),
                          "peak_sram": int(c.io.peak_sram), "budget_peak_sram": b["peak_sram"]})
        all_correct &= not wrong
        all_io &= io_ok
        all_fp &= fp_ok
    for name, (r, w, br, bw) in totals.items():
        over = r > br or w > bw
        ok = (r == br and w == bw) if ex.io_rule == "equal" else not over
        rep.table.append({"tensor": name, "reads": r, "writes": w, "budget_reads": br, "budget_writes": bw,
                          "ok": ok, "over": over})
    r, w, br, bw = (sum(v[i] for v in totals.values()) for i in range(4))
    # OVER only where the totals pass the budget, as the tensors' rows say it; a run that moves too little (or the
    # wrong tensors) DIFFERS
    rep.table.append({"tensor": "all", "reads": r, "writes": w, "budget_reads": br, "budget_writes": bw,
                      "ok": all_io, "over": not all_io and (r > br or w > bw)})
    rep.peak_sram, rep.budget_peak_sram = int(peak), int(bpeak)
    return _points(ex, rep, all_correct, all_io, all_fp, notes)


def _io_ok(rule, st, bt) -> bool:
    if rule == "equal":
        return st == bt
    tot = lambda t, i: sum(v[i] for v in t.values())  # noqa: E731
    if tot(st, 0) > tot(bt, 0) or tot(st, 1) > tot(bt, 1):
        return False
    return all(st.get(n, [0, 0])[0] <= r and st.get(n, [0, 0])[1] <= w for n, (r, w) in bt.items())


def _points(ex, rep, correct, io_ok, fp_ok, notes) -> Report:
    rep.correct = correct
    rep.io_ok, rep.footprint_ok = correct and io_ok, correct and fp_ok
    c, i, f = ex.points
    rep.parts = {"correctness": (c if correct else 0, c), "io": (i if rep.io_ok else 0, i),
                 "footprint": (f if rep.footprint_ok else 0, f)}
    rep.points = float(sum(v[0] for v in rep.parts.values()))
    if not correct:
        notes.insert(0, "not correct, so no points for IO or footprint either")
    rep.message = "\n".join(notes) if notes else "full marks"
    return rep


SHOWN_CHARS = 80  # the most of a returned value's repr the report shows


def _short(v) -> tuple[str, bool]:
    """``repr(v)`` cut to SHOWN_CHARS characters (with "..."), or a word where it cannot be written at all; and
    whether that is the whole repr."""
    try:
        r = repr(v)
    except RecursionError:
        return "<a value nested too deep to show>", False
    except Exception as e:  # noqa: BLE001 - a student's object whose __repr__ raises
        return f"<a {type(v).__name__} whose repr raised {type(e).__name__}>", False
    return (r, True) if len(r) <= SHOWN_CHARS else (r[:SHOWN_CHARS - 3] + "...", False)


def _score_choice(ex: Exercise, rep: Report, res, budget, *, instructor: bool = False) -> Report:
    """Exercise 7: each case's choice ranked by counted IO among every feasible choice.

    The student's feedback (table, cases, message) gives the choice's IO and its rank among the distinct IOs, never
    the least IO or a choice that reaches it: those are what the exercise asks for. ``instructor`` adds them to
    ``rep.instructor_notes``."""
    feasible = correct = True
    fractions, notes = [], []
    for k, (c, b) in enumerate(zip(res.cases, budget)):
        table = {(Br, Bc): io for Br, Bc, io in b["choices"]}
        v = c.value
        pick = tuple(v) if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v) \
            else None
        best = min(table.values())
        distinct = len(set(table.values()))
        label = f"case {k + 1}: {_shape(ex, k)}, M={c.setup.spec['M']}"
        if instructor:
            winners = ", ".join(f"({Br}, {Bc})" for (Br, Bc), io in table.items() if io == best)
            rep.instructor_notes.append(f"case {k + 1}: the least IO is {best:,} elements, by {winners}")
        if pick not in table:
            feasible = correct = False
            what = "is not a pair of ints" if pick is None else "is not a feasible (Br, Bc)"
            shown, whole = _short(v)
            notes.append(f"case {k + 1}: {shown} {what} (Br and Bc: ints, multiples of 8, within the lengths, "
                         f"footprint within M={c.setup.spec['M']})")
            fractions.append(0.0)
            # the value as returned where it is short, else its repr cut short: a million-element list or one nested
            # hundreds deep would fill the report (and its JSON) or exhaust the recursion writing it
            kept = v if whole else shown
            rep.cases.append({"case": c.setup.spec, "choice": kept, "feasible": False})
            rep.table.append({"case": label, "choice": kept, "io": None, "rank": None, "distinct_ios": distinct,
                              "ok": False})
            continue
        io = table[pick]
        # the share of the way from the worst IO to the best: the choices this one beats, over those the best beats
        # (the best choice 1, the worst 0; counting ties as beaten gave the worst choice credit for its own ties)
        beaten, beatable = (sum(1 for x in table.values() if x > y) for y in (io, best))
        frac = beaten / beatable if beatable else 1.0
        rank = 1 + sum(1 for x in set(table.values()) if x < io)
        fractions.append(frac)
        rep.cases.append({"case": c.setup.spec, "choice": list(pick), "io": io, "rank": rank,
                          "distinct_ios": distinct, "choices": len(table)})
        # the table's row: total IO and its rank (no budget: reads and writes are not split, and a choice worse than
        # the best is not "over" anything; no best IO either, which is the answer)
        rep.table.append({"case": label, "choice": list(pick), "io": io, "rank": rank, "distinct_ios": distinct,
                          "ok": rank == 1})
        if rank > 1:
            notes.append(f"case {k + 1}: ({pick[0]}, {pick[1]}) moves {io:,} elements, rank {rank} of {distinct} "
                         "distinct IOs")
    if any(r.get("rank", 1) > 1 for r in rep.cases):
        notes.append("where the rank is not 1, some feasible choice moves less: how often is each of K and V loaded?")
    rep.correct = correct
    rep.io_ok = correct and all(r.get("rank") == 1 for r in rep.cases)
    rep.footprint_ok = feasible
    c_pts, i_pts, f_pts = ex.points
    io_pts = round(i_pts * sum(fractions) / len(fractions), 2) if correct else 0
    rep.parts = {"correctness": (c_pts if correct else 0, c_pts), "io": (io_pts, i_pts),
                 "footprint": (f_pts if feasible else 0, f_pts)}
    rep.points = float(sum(v[0] for v in rep.parts.values()))
    rep.message = "\n".join(notes) if notes else "full marks"
    return rep


def _shape(ex, k) -> str:
    c = ex.cases[k]
    keys = [x for x in ("Nq", "Nk", "n", "d", "heads", "Br", "Bc", "num_splits") if x in c]
    flags = [x for x in ("causal",) if c.get(x)] + (["masked row"] if c.get("masked_row") is not None else []) \
        + ([f"dropout {c['dropout_p']}"] if c.get("dropout_p") else [])
    return ", ".join([f"{x}={c[x]}" for x in keys] + flags)
