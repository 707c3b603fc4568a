"""Grading the Triton lab: the kernel runs on the CPU under ``TRITON_INTERPRET=1`` in a subprocess.

The interpreter's loads and stores are counted per tensor (mask-true elements only, see
``_lab_student.py``); the budget is the reference kernel's count, which the tests check equals
``iomodel.predict("flash2", "forward", ...)`` for the kernel's block sizes. Note the trust model
differs from the numpy exercises: a Triton kernel is handed its tensors (that is what a kernel is),
so the lab grades what the kernel moves, not whether it could have moved more.
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
        try:
            p = subprocess.run([sys.executable, RUNNER, cpath, os.path.abspath(path), opath], cwd=tmp, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"time limit: your kernel ran past {timeout:g} s"}, ""
        text = p.stdout.decode("utf-8", "replace")[-2000:]
        if not os.path.exists(opath):
            return {"error": f"your code ended the process before finishing:\n{text[-1500:]}"}, text
        with open(opath) as f:
            return json.load(f), text


def measure_budgets(ex, solution_path):
    res, text = _run(ex, solution_path, _inputs(ex, 0), timeout=300)
    if res.get("error"):
        raise RuntimeError(f"the reference kernel failed: {res['error']}\n{text}")
    return [{"by_tensor": c["counts"], "peak_sram": 0, "sram_size": None} for c in res["cases"]]


def grade(ex, path, *, timeout=120.0, seed=None) -> Report:
    from .budgets import budgets

    budget = budgets(ex.name)
    cases = _inputs(ex, seed)
    rep = Report(exercise=ex.name, title=ex.title, max_points=ex.max_points,
                 parts={"correctness": (0, ex.points[0]), "io": (0, ex.points[1]), "footprint": (0, ex.points[2])})
    if not os.path.isfile(path):
        rep.message = f"no file {path}"
        return rep
    res, rep.output = _run(ex, path, cases, timeout)
    if res.get("error"):
        rep.message = res["error"]
        return rep
    correct = io_ok = True
    notes, totals = [], {}
    for k, (case, got, b) in enumerate(zip(cases, res["cases"], budget)):
        attend = oracle.attend_mask(case["Nq"], case["Nk"], case["causal"])
        want = oracle.forward(*(np.array(case[n], dtype=np.float64) for n in ("Q", "K", "V")), scale=case["scale"],
                              attend=attend)
        O, L = np.array(got["O"]), np.array(got["L"])
        ok = np.allclose(O, want["O"], rtol=1e-4, atol=1e-4) and np.allclose(L, want["L"], rtol=1e-4, atol=1e-4)
        if not ok:
            notes.append(f"case {k + 1}: O or L wrong (max error {float(np.nanmax(np.abs(O - want['O']))):.3g}; "
                         f"NaN means never stored)")
        st, bt = got["counts"], b["by_tensor"]
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
