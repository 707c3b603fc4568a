"""Grading the Triton lab: the kernel runs on the CPU under ``TRITON_INTERPRET=1`` in a subprocess.

The interpreter's loads and stores are counted per tensor (mask-true elements only, see
``_lab_student.py``); the budget is the reference kernel's count, which the tests check equals
``iomodel.predict("flash2", "forward", ...)`` for the kernel's block sizes. Note the trust model
differs from the numpy exercises: a Triton kernel is handed its tensors (that is what a kernel is),
so the lab grades what the kernel moves, not whether it could have moved more; and the kernel runs
in the process that counts its loads and stores. So the runner requires a real Triton kernel
(``@triton.jit``; anything else with a ``[grid]`` is refused), checks that the interpreter and its
counters were not patched, and the grader requires O and L to be written by the kernel's
``tl.store`` (as many elements as the budget: every element once); the same audit hook as the
numpy exercises' (``_guard.py``) closes the package's files, file writes and process starts. It is
still not a sandbox: a determined kernel author can forge what the runner reports.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from . import oracle
from .harness import end_process, tail
from .report import Report

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lab_student.py")


def _inputs(ex, seed):
    rng = np.random.default_rng(seed)
    out = []
    for c in ex.cases:
        BH = c["B"] * c["H"]
        Q, K, V = (rng.standard_normal((BH, n, c["d"])).astype(np.float32) for n in (c["Nq"], c["Nk"], c["Nk"]))
        out.append(dict(c, Q=Q.tolist(), K=K.tolist(), V=V.tolist(), scale=1.0 / math.sqrt(c["d"])))
    return out


def _run(ex, path, cases, timeout):
    with tempfile.TemporaryDirectory(prefix="flashref-lab-") as tmp:
        cpath, opath = os.path.join(tmp, "cases.json"), os.path.join(tmp, "out.json")
        with open(cpath, "w") as f:
            json.dump(cases, f)
        env = dict(os.environ, TRITON_INTERPRET="1")
        with open(os.path.join(tmp, "stdout.txt"), "w+b") as log:
            # -B: no bytecode written; its own session, so that ending it ends everything it started
            proc = subprocess.Popen([sys.executable, "-B", RUNNER, cpath, os.path.abspath(path), opath], cwd=tmp,
                                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            timed_out = not end_process(proc, grace=timeout)  # waits, then ends its whole process group
            text = tail(log, 2000)
        if timed_out:
            return {"error": f"time limit: your kernel ran past {timeout:g} s"}, text
        try:
            with open(opath) as f:
                res = json.load(f)
        except (OSError, ValueError):
            return {"error": f"your code ended the process before finishing:\n{text[-1500:]}"}, text
        if not isinstance(res, dict) or not isinstance(res.get("cases", []), list):
            return {"error": "the kernel's runner wrote no results"}, text
        return res, text


def measure_budgets(ex, solution_path):
    res, text = _run(ex, solution_path, _inputs(ex, 0), timeout=300)
    if res.get("error") or res.get("refused"):
        raise RuntimeError(f"the reference kernel failed: {res.get('error') or res.get('refused')}\n{text}")
    return [{"by_tensor": c["counts"], "peak_sram": 0, "sram_size": None} for c in res["cases"]]


#: The lab's tolerance, relative and absolute, on O and L against the float64 oracle: the kernel runs in float32
TOL = 1e-4


def _wrong(name, got, want) -> str:
    """What is wrong with output ``name``: its shape, else :func:`oracle.difference`."""
    if got.shape != want.shape:
        return f"{name} has shape {got.shape}, expected {want.shape}"
    return f"{name} wrong: {oracle.difference(got, want, TOL, TOL)}"


#: Seconds the lab's kernel may run when no timeout is given: Triton's interpreter builds and runs it on the CPU.
DEFAULT_TIMEOUT = 120.0


def grade(ex, path, *, timeout=DEFAULT_TIMEOUT, seed=None) -> Report:
    from .budgets import budgets

    budget = budgets(ex.name)
    cases = _inputs(ex, seed)
    rep = Report(exercise=ex.name, title=ex.title, max_points=ex.max_points,
                 parts={"correctness": (0, ex.points[0]), "io": (0, ex.points[1]), "footprint": (0, ex.points[2])})
    if not os.path.isfile(path):
        rep.message = f"no file {path}"
        return rep
    res, rep.output = _run(ex, path, cases, timeout)
    if res.get("refused"):
        rep.refused, rep.message = True, str(res["refused"])[:2000]
        return rep
    if res.get("error"):
        rep.message = str(res["error"])[:3000]
        return rep
    if len(res.get("cases", [])) != len(cases):
        rep.message = f"the kernel's runner reported {len(res.get('cases', []))} case(s) of {len(cases)}"
        return rep
    correct = io_ok = True
    notes, totals = [], {}
    for k, (case, got, b) in enumerate(zip(cases, res["cases"], budget)):
        attend = oracle.attend_mask(case["Nq"], case["Nk"], case["causal"])
        want = oracle.forward(*(np.array(case[n], dtype=np.float64) for n in ("Q", "K", "V")), scale=case["scale"],
                              attend=attend)
        try:
            O, L = np.array(got["O"], dtype=np.float64), np.array(got["L"], dtype=np.float64)
            st = {str(n): [int(rw[0]), int(rw[1])] for n, rw in dict(got["counts"]).items()}
            # loads and stores that ran off a tensor (into the padding the runner puts around each): verb, where, n
            off = sorted((str(verb), str(place), int(n)) for verb, place, n in got.get("outside", []))
        except (KeyError, TypeError, ValueError, IndexError):
            rep.message = f"case {k + 1}: the kernel's runner reported no outputs or counts"
            return rep
        bt = b["by_tensor"]
        ok = O.shape == want["O"].shape and L.shape == want["L"].shape and \
            np.allclose(O, want["O"], rtol=TOL, atol=TOL) and np.allclose(L, want["L"], rtol=TOL, atol=TOL)
        if not ok:  # which output, and how: a student fixes O and L apart
            notes.append(f"case {k + 1}: " + "; ".join(_wrong(n, g, want[n]) for n, g in (("O", O), ("L", L))
                                                       if g.shape != want[n].shape
                                                       or not np.allclose(g, want[n], rtol=TOL, atol=TOL)))
        if off:
            ok = False
            said = "; ".join(f"{verb} {n:,} element(s) {place}" for verb, place, n in off)
            notes.append(f"case {k + 1}: your kernel {said}: a tile that runs past Nq or Nk must be masked "
                         "(tl.load(..., mask=..., other=0.0), tl.store(..., mask=...)); on a GPU those reads are "
                         "another head's rows or another tensor, and the stores overwrite them")
        # O and L must come from the kernel's tl.store: every element written once, as in the budget
        short = [f"{n} {st.get(n, [0, 0])[1]:,} < {bt[n][1]:,}" for n in ("O", "L")
                 if n in bt and st.get(n, [0, 0])[1] < bt[n][1]]
        if short:
            ok = False
            notes.append(f"case {k + 1}: O and L must be written by your kernel's tl.store, every element (counted "
                         f"writes {', '.join(short)}); outputs filled any other way are not graded")
        case_io_ok = all(st.get(n, [0, 0])[i] <= bt[n][i] for n in bt for i in (0, 1)) and set(st) <= set(bt)
        if not case_io_ok:
            notes.append(f"case {k + 1}: moved {sum(map(sum, st.values())):,} elements, budget "
                         f"{sum(map(sum, bt.values())):,}")
        for name in set(bt) | set(st):
            acc = totals.setdefault(name, [0, 0, 0, 0])
            s, bb = st.get(name, [0, 0]), bt.get(name, [0, 0])
            acc[0] += s[0]; acc[1] += s[1]; acc[2] += bb[0]; acc[3] += bb[1]  # noqa: E702
        rep.cases.append({"case": {k2: case[k2] for k2 in ("B", "H", "Nq", "Nk", "d", "causal", "BLOCK_M", "BLOCK_N")},
                          "correct": bool(ok), "io_ok": case_io_ok})
        correct &= bool(ok)
        io_ok &= case_io_ok
    for name in ("Q", "K", "V", "O", "L"):
        if name in totals:
            r, w, br, bw = totals[name]
            rep.table.append({"tensor": name, "reads": r, "writes": w, "budget_reads": br, "budget_writes": bw,
                              "ok": r <= br and w <= bw, "over": r > br or w > bw})
    rep.correct, rep.io_ok, rep.footprint_ok = correct, correct and io_ok, True
    c, i, f = ex.points
    rep.parts = {"correctness": (c if correct else 0, c), "io": (i if rep.io_ok else 0, i), "footprint": (0, f)}
    rep.points = float(sum(v[0] for v in rep.parts.values()))
    if not correct:
        notes.insert(0, "not correct, so no points for IO either")
    rep.message = "\n".join(notes) if notes else "full marks"
    return rep
