"""The Triton lab's student side: run the student's kernel under TRITON_INTERPRET=1 and count its IO.

Run by :mod:`flashref.grading.lab` as ``python _lab_student.py CASES.json STUDENT.py OUT.json`` with
``TRITON_INTERPRET=1``. Every ``tl.load`` and ``tl.store`` of the interpreter goes through two
builder methods; they are wrapped here to count the elements whose mask is true, attributed to the
tensor (Q, K, V, O, L) the pointer falls in. The outputs and the counts are written as JSON.

Before the student's file loads, the cases are read, the output file is opened (the only file this
process writes), the functions the report needs are bound, and the audit hook of ``_guard.py`` is
installed (no flashref file opened, no file written, no process started). After it loads,
``flash2_kernel`` must be a Triton kernel (what ``@triton.jit`` returns, exactly that type), and the
interpreter's classes and the counting wrappers must be unchanged, after the load and after every
case. A refusal is written to the output and ends the process at once.
"""

import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)


def main(cases_path, student_path, out_path):
    if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
        sys.path.pop(0)
    import numpy as np
    import torch
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    # taken before the student's file loads: a file that patches torch's factories or tolist reaches none of these
    dumps, tolist, as_tensor, full = json.dumps, torch.Tensor.tolist, torch.as_tensor, torch.full
    with open(cases_path) as f:
        cases = json.load(f)
    out = open(out_path, "w")

    def write(result):
        out.seek(0)
        out.truncate()
        out.write(dumps(result))
        out.flush()

    def refuse(message):
        try:
            write({"refused": str(message)})
        finally:
            os._exit(3)

    counts = {}
    regions = []
    guards = []  # (tensor, "before its start" or "past its end", lo, hi): the padding around each tensor
    outside = {}  # ("loaded", "past the end of Q") -> elements: the accesses that landed in the padding

    def tally(ptrs, mask, kind):
        p = np.asarray(ptrs).ravel()
        m = np.broadcast_to(np.asarray(mask), np.asarray(ptrs).shape).ravel().astype(bool)
        for name, lo, hi in regions:
            n = int(((p >= lo) & (p < hi) & m).sum())
            if n:
                counts.setdefault(name, [0, 0])[kind] += n
        for name, where, lo, hi in guards:
            n = int(((p >= lo) & (p < hi) & m).sum())
            if n:
                what = (("loaded", "stored")[kind], f"{where} {name}")
                outside[what] = outside.get(what, 0) + n

    def guarded(name, values, pad):
        """Tensor ``name``: float32 ``values`` with ``pad`` zeros before and after it, in one buffer. An unmasked load
        or store of a tile that runs off the tensor lands there (counted in ``outside`` by the pointer, whatever it
        reads: zeros, so nothing the student's code computes turns NaN), not in another tensor or the heap."""
        t = as_tensor(values, dtype=torch.float32)
        buf = full((t.numel() + 2 * pad,), 0.0)
        view = buf[pad:pad + t.numel()].view(t.shape)
        view.copy_(t)
        size = buf.element_size()
        guards.extend([(name, "before the start of", buf.data_ptr(), view.data_ptr()),
                       (name, "past the end of", view.data_ptr() + t.numel() * size,
                        buf.data_ptr() + buf.numel() * size)])
        return view

    builder = interpreter.InterpreterBuilder
    orig_load, orig_store = builder.create_masked_load, builder.create_masked_store

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        tally(ptrs.data, mask.data, 0)
        return orig_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        tally(ptrs.data, mask.data, 1)
        return orig_store(self, ptrs, value, mask, cache_policy)

    builder.create_masked_load, builder.create_masked_store = load, store
    kernel_types = tuple(t for t in (getattr(interpreter, "InterpretedFunction", None), JITFunction) if t)
    spec = importlib.util.spec_from_file_location(_guard_name(), os.path.join(_HERE, "_guard.py"))
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    watched = guard.snapshot(set(kernel_types) | {builder, getattr(interpreter, "GridExecutor", builder)})

    def check_intact(when):
        change = guard.patched(watched)
        if change:
            refuse(f"{change[0]}.{change[1]} was changed {when}: the interpreter and its load/store "
                   f"counters are the grader's, and patching them is refused")

    readable = [student_path, importlib.util.cache_from_source(student_path), os.path.abspath(__file__),
                os.path.join(_HERE, "_guard.py")]  # the student's file, and this script's own (tracebacks)
    guard.install(refuse, package_root=_PKG, readable=readable, writable_dir=None, blocked=("flashref",),
                  what="the lab's kernel code")

    result = {"cases": []}
    try:
        # any file name: without a loader named, a file not ending in .py has no spec (None) and fails with
        # an AttributeError that says nothing about the file
        spec = importlib.util.spec_from_file_location(
            "student_kernel", student_path, loader=importlib.machinery.SourceFileLoader("student_kernel", student_path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001
        write({"error": f"your file does not import: {type(e).__name__}: {e}"})
        return
    check_intact("while your file loaded")
    kernel = getattr(module, "flash2_kernel", None)
    if kernel is None:
        write({"error": "wrong signature: your file defines no flash2_kernel"})
        return
    if type(kernel) not in kernel_types:
        refuse(f"flash2_kernel is a {type(kernel).__name__}, not a Triton kernel: decorate a function with "
               f"@triton.jit (the lab counts what its tl.load and tl.store move)")
    for case in cases:
        counts.clear()
        guards.clear()
        outside.clear()
        BH, Nq, Nk, d = case["B"] * case["H"], case["Nq"], case["Nk"], case["d"]
        # a tile's rows past N land in the padding: a block of rows of the widest row (d), twice over
        pad = 2 * max(case["BLOCK_M"], case["BLOCK_N"]) * max(d, 1)
        q, k, v = (guarded(n, np.array(case[n]), pad) for n in ("Q", "K", "V"))
        o = guarded("O", np.full((BH, Nq, d), np.nan), pad)
        lse = guarded("L", np.full((BH, Nq), np.nan), pad)
        regions[:] = [(n, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                      for n, t in (("Q", q), ("K", k), ("V", v), ("O", o), ("L", lse))]
        grid = ((Nq + case["BLOCK_M"] - 1) // case["BLOCK_M"], BH)
        try:
            kernel[grid](q, k, v, o, lse, q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0),
                         o.stride(1), Nq, Nk, case["scale"], D=d, BLOCK_M=case["BLOCK_M"],
                         BLOCK_N=case["BLOCK_N"], CAUSAL=case["causal"])
        except BaseException as e:  # noqa: BLE001
            frames = [f for f in traceback.extract_tb(e.__traceback__)
                      if os.path.abspath(f.filename) == os.path.abspath(student_path)]
            tb = "".join(traceback.format_list(frames[-3:])).replace(
                os.path.dirname(os.path.abspath(student_path)) + os.sep, "")[-1200:]
            result["error"] = f"your kernel raised: {type(e).__name__}: {str(e)[:500]}\n{tb}"
            break
        check_intact("while your kernel ran")
        result["cases"].append({"O": tolist(o), "L": tolist(lse), "counts": {n: list(c) for n, c in counts.items()},
                                "outside": [[verb, place, n] for (verb, place), n in outside.items()]})
    write(result)
    out.close()


def _guard_name():
    return "_flashref_grading_guard"


if __name__ == "__main__":
    main(*sys.argv[1:4])
