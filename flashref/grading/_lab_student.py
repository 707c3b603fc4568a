"""The Triton lab's student side: run the student's kernel under TRITON_INTERPRET=1 and count its IO.

Run by :mod:`flashref.grading.lab` as ``python _lab_student.py CASES.json STUDENT.py OUT.json`` with
``TRITON_INTERPRET=1``. Every ``tl.load`` and ``tl.store`` of the interpreter goes through two
builder methods; they are wrapped here to count the elements whose mask is true, attributed to the
tensor (Q, K, V, O, L) the pointer falls in. The outputs and the counts are written as JSON.
"""

import importlib.util
import json
import os
import sys
import traceback


def main(cases_path, student_path, out_path):
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    import numpy as np
    import torch
    from triton.runtime import interpreter

    counts = {}
    regions = []

    def tally(ptrs, mask, kind):
        p = np.asarray(ptrs).ravel()
        m = np.broadcast_to(np.asarray(mask), np.asarray(ptrs).shape).ravel().astype(bool)
        for name, lo, hi in regions:
            n = int(((p >= lo) & (p < hi) & m).sum())
            if n:
                counts.setdefault(name, [0, 0])[kind] += n

    builder = interpreter.InterpreterBuilder
    orig_load, orig_store = builder.create_masked_load, builder.create_masked_store

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        tally(ptrs.data, mask.data, 0)
        return orig_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        tally(ptrs.data, mask.data, 1)
        return orig_store(self, ptrs, value, mask, cache_policy)

    builder.create_masked_load, builder.create_masked_store = load, store

    result = {"cases": []}
    try:
        spec = importlib.util.spec_from_file_location("student_kernel", student_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001
        result["error"] = f"your file does not import: {type(e).__name__}: {e}"
        json.dump(result, open(out_path, "w"))
        return
    kernel = getattr(module, "flash2_kernel", None)
    if kernel is None:
        result["error"] = "wrong signature: your file defines no flash2_kernel"
        json.dump(result, open(out_path, "w"))
        return
    for case in json.load(open(cases_path)):
        counts.clear()
        BH, Nq, Nk, d = case["B"] * case["H"], case["Nq"], case["Nk"], case["d"]
        q, k, v = (torch.tensor(np.array(case[n]), dtype=torch.float32) for n in ("Q", "K", "V"))
        o = torch.full((BH, Nq, d), float("nan"))
        lse = torch.full((BH, Nq), float("nan"))
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
        result["cases"].append({"O": o.tolist(), "L": lse.tolist(), "counts": dict(counts)})
    json.dump(result, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
