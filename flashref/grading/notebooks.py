"""Build the exercise notebooks (a maintainer's tool): ``python -m flashref.grading.notebooks [NN ...]``.

Each notebook: what you will practise, the algorithm box, the spec (what ``mem`` and ``spec`` give
you), a predict-then-run question (:mod:`flashref.quiz`), the stub (written to a file by
``%%writefile``), hints, and a grading cell that prints the score table. The committed notebooks
hold the stubs, so the grading cell prints a zero-score table; nothing in them raises.
"""

from __future__ import annotations

import os
import sys

from . import budgets
from .exercises import EXERCISES
from .release import stub_source

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "notebooks", "exercises")

MEMORY_SPEC = """**What you get.** `mem`, the grader's counted memory, with only its verbs:
`mem.load(name, rows=None, cols=None, *, as_=None)` (HBM → SRAM, counted reads, held on chip until freed),
`mem.store(name, value, rows=None, cols=None)` (SRAM → HBM, counted writes; storing a whole value to a new
name creates that HBM tensor), `mem.init(name, shape, fill)` (an initialised HBM buffer: counted writes;
`shape` is one head's, `(rows,)` or `(rows, cols)`, without the head axes),
`mem.hold(name, value)` / `mem.reuse(old, new, value)` (what you keep on chip) and `mem.free(*names)`.
Each output the spec names is already allocated in HBM, uninitialised and free (except those it says to
create as new tensors): store tiles into it, and `mem.init` only what the algorithm initialises (counted).
The footprint is measured from what you hold: hold each tile and row vector the algorithm names (S_ij,
P̃_ij, m_i, ...) while you keep it, and overwrite in place as the paper's algorithms do: P̃_ij takes S_ij's
slot (`mem.reuse("S_ij", "P_tilde_ij", P)`), and a row vector no longer needed gives its slot to the next.
The reference solution does, so holding both where one would do costs the footprint points.
Tensors carry leading head axes: a tile of `Q` is `(heads, rows, d)`. You get no arrays: load what you need.
`spec` holds the shapes and options (`Nq, Nk, d, lead_shape, scale, causal, dropout_p, Br, Bc,
sram_size`...) and two helpers, `spec.tile_mask(rows, cols)` (the attend-mask of a tile: True where the
query may attend the key, covering `causal` and `spec.mask`; None when nothing in the tile is masked) and
`spec.dropout_Z(rows, cols)` (the tile's dropout Z, regenerated from the seed: 1/(1−p) where kept, 0 where
dropped, so P̃ ∘ Z is already rescaled).

**Graded on** correctness against a float64 oracle (random data; ragged shapes, Nq ≠ Nk, causal, a fully
masked row and dropout where the exercise has them), your counted IO per tensor against the reference
solution's ({io}), and your peak on-chip footprint against the reference's. On-chip capacity is
`spec.sram_size` = 1.5× the reference's peak: keep more and the grader refuses the run. Return nothing:
the grader reads your output from HBM."""

IO_RULE = {
    "equal": "exactly equal,\ntensor by tensor: the exercise is the algorithm's schedule, with `spec.Br`, `spec.Bc` "
             "where they\nare given, so computing untiled in Python where blocks are given, which moves less, loses "
             "the IO points",
    "at_most": "no more than it,\ntensor by tensor",
}

TEXT = {
    1: ("Algorithm 0 of the FlashAttention paper, one HBM pass per line:",
        "1. Load **Q**, **K** by blocks from HBM, compute **S** = **QK**ᵀ, write **S** to HBM.\n"
        "2. Read **S** from HBM, compute **P** = softmax(**S**), write **P** to HBM.\n"
        "3. Load **P** and **V** by blocks from HBM, compute **O** = **PV**, write **O** to HBM.\n"
        "4. Return **O**.",
        "The paper's Algorithm 0 has no 1/√d; flashref's scales **S** by τ = `spec.scale` in line 1, as "
        "PyTorch's attention does. Outputs: store `O`; store `S` and `P` as new HBM tensors (those names); all "
        "three are checked against the oracle. "
        "Graded on the IO of each "
        "line: exactly what Algorithm 0 moves, no more and no less: each line reads each of its inputs once "
        "and writes its output once (`spec.Br`, `spec.Bc` are None here: load in any blocks that read nothing "
        "twice, the whole tensor included). Store `S` and `P` whole, one `mem.store` each: a tile can only be "
        "stored into a tensor HBM already holds, and `mem.init`'s fill would count as writes.",
        ["Free what you loaded before the next line: each line starts from HBM.",
         "`S.max(axis=-1, keepdims=True)` keeps the softmax safe."]),
    2: ("Two parts of a row, each summarised by its state (m, ℓ, O) with O normalised by its own ℓ, "
        "merge exactly (§3.1):",
        "m = max(m⁽¹⁾, m⁽²⁾),  ℓ = e^{m⁽¹⁾−m} ℓ⁽¹⁾ + e^{m⁽²⁾−m} ℓ⁽²⁾,  "
        "O = (e^{m⁽¹⁾−m} ℓ⁽¹⁾ O⁽¹⁾ + e^{m⁽²⁾−m} ℓ⁽²⁾ O⁽²⁾) / ℓ",
        "HBM holds `m1, l1, O1, m2, l2, O2` (`spec.n` rows, `spec.d` columns); store `m, l, O`. Work in "
        "row blocks of `spec.Br`. An empty part has (m, ℓ) = (−inf, 0); both empty gives zeros, never NaN.",
        ["Subtract 0 instead of −inf when m = −inf: e^{−inf} = 0.", "Divide by 1 where ℓ = 0.",
         "The footprint budget is tight: put m, ℓ, O into the slots of inputs you no longer need "
         "(`mem.reuse('O1', 'O', O)`) rather than holding three more buffers."]),
    3: ("Algorithm 2 of FlashAttention (Algorithm 1 with MASK and dropout), K_j, V_j in the outer loop:",
        "3: O = 0, ℓ = 0, m = −inf in HBM. 6: for j: 7: load K_j, V_j. 8: for i: 9: load Q_i, O_i, ℓ_i, m_i. "
        "10: S_ij = τQ_iK_jᵀ. 11: S_ij^masked = MASK(S_ij). 12: m̃_ij = rowmax, P̃_ij = exp(S_ij^masked − m̃_ij), "
        "ℓ̃_ij = rowsum. 13: m_new = max(m_i, m̃_ij), ℓ_new = e^{m_i−m_new}ℓ_i + e^{m̃_ij−m_new}ℓ̃_ij. "
        "14: P̃_ij^dropped = dropout(P̃_ij). "
        "15: O_i ← diag(ℓ_new)⁻¹(diag(ℓ_i)e^{m_i−m_new}O_i + e^{m̃_ij−m_new}P̃_ij^dropped V_j), write to HBM. "
        "16: write ℓ_i ← ℓ_new, m_i ← m_new.",
        "Outputs `O, l, m` (initialise them with `mem.init`, line 3). Blocks `spec.Br`, `spec.Bc`; the last "
        "ones are ragged. ℓ sums P̃ *before* dropout.",
        ["`spec.tile_mask(rows, cols)` covers causal and the mask.",
         "A masked row of a tile has m̃ = −inf: subtract 0 there."]),
    4: ("Algorithm 4, the backward, from O, ℓ, m (no stored P):",
        "5: dQ, dK, dV = 0 in HBM. 6: for j: 7: load K_j, V_j; 8: d̃K_j = d̃V_j = 0 on chip. 9: for i: "
        "10: load Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i. 11-13: S_ij, MASK, P_ij = diag(ℓ_i)⁻¹exp(S_ij − m_i). "
        "14-15: Z_ij, P_ij^dropped. 16: d̃V_j += (P_ij^dropped)ᵀdO_i. 17-18: dP_ij = dO_iV_jᵀ ∘ Z_ij. "
        "19: D_i = rowsum(dO_i ∘ O_i). 20: dS_ij = P_ij ∘ (dP_ij − D_i). 21: dQ_i += τdS_ijK_j, write. "
        "22: d̃K_j += τdS_ijᵀQ_i. 24: write dK_j, dV_j.",
        "HBM holds `Q, K, V, O, dO, l, m`; outputs `dQ, dK, dV` (initialise with `mem.init`, line 5).",
        ["D_i comes from O_i and dO_i, both loaded at line 10.", "A fully masked row: ℓ = 0, m = −inf → P = 0."]),
    5: ("FlashAttention-2's forward, Q_i in the outer loop, skipping blocks above the causal diagonal:",
        "3: for i: 4: load Q_i. 5: O_i = 0, ℓ_i = 0, m_i = −inf on chip. 6: for j, skipping the blocks the "
        "causal mask hides wholly (§3.1.1): 7: load K_j, V_j. 8: S_ij (MASK). 9: m_new = max(m_i, "
        "rowmax S_ij), P̃_ij = exp(S_ij − m_new), ℓ_i = e^{m_i−m_new}ℓ_i + rowsum P̃_ij. 10: O_i = "
        "diag(e^{m_i−m_new})O_i + P̃_ijV_j. 12: O_i /= ℓ_i. 13: L_i = m_i + log ℓ_i. 14-15: write O_i, L_i.",
        "Outputs `O` and `L` (−inf for a fully masked row). Nothing is initialised in HBM. Causal is top-left: "
        "query row r sees keys ≤ r, also when Nq ≠ Nk. Skip a block only where the causal mask alone hides it "
        "wholly, never because `spec.mask` does: the budget is the causal skip's, and a mask drawn at random "
        "may hide a whole tile in one grading and not the next. With "
        "`spec.dropout_p` > 0, line 10 uses P̃_ij ∘ Z_ij (`spec.dropout_Z`) while line 9's ℓ_i sums P̃_ij "
        "before dropout, as in exercise 3.",
        # the hint points at the skip test (which indices to compare, what to reread); it does not state it
        ["Which blocks can you skip? Reread §3.1.1 in notebook 06 (section 3 and its tile picture): which query "
         "of the row block sees the most keys, and which key of the column block comes first? `rows` and `cols` "
         "are half-open ranges.", "O_i stays unnormalised until line 12."]),
    6: ("Algorithm 5 (block-sparse) loads K_j, V_j at line 6 *before* looking at the block mask, so an "
        "empty column still costs 2·Bc·d reads. Write one that does not:",
        "for j: if column j of M has a nonzero block: load K_j, V_j; for i with M_ij ≠ 0: Algorithm 5's "
        "tile step (l.9-16: exercise 3's, Algorithm 2's lines).",
        "`spec.block_mask` is the boolean (Tr, Tc) block mask; outputs `O, l, m` initialised as in "
        "Algorithm 1 (a row block with no nonzero block keeps O = 0, ℓ = 0, m = −inf). The budget is the "
        "reference's, which moves less than Algorithm 5.",
        ["`M[:, j].any()`.", "Exercise 3's tile step is the inner body."]),
    7: ("Choose (Br, Bc), multiples of 8 within the lengths, to minimise FlashAttention-2's forward HBM "
        "traffic under an on-chip capacity M (elements per head):",
        "footprint(Br, Bc) = 2·Br·d + 2·Bc·d + Br·Bc + 3·Br ≤ M",
        "`choose_blocks(Nq, Nk, d, M, causal)` returns `(Br, Bc)`. Scored by rank: your choice's counted IO "
        "among every feasible choice (full IO points for the least).",
        ["Count the reads of K and V: how often is each loaded?",
         "Without the causal mask, does Bc appear in the count at all? (With it, the diagonal's ragged tiles do.)"]),
    8: ("Split-KV decoding (Flash-Decoding): cut the keys into S chunks, one work item each, then merge:",
        "split s (keys [s·Nk//S, (s+1)·Nk//S)): for each query block: load Q_i, stream K_j, V_j with the "
        "online softmax, write the normalised partial O⁽ˢ⁾ and m⁽ˢ⁾, ℓ⁽ˢ⁾ to rows s·Nq + r (r each query row "
        "of the block) of `O_partial`, "
        "`m_partial`, `l_partial` (graded, as `O, m, l` are). Merge: for each query block, load the S partials "
        "and combine them by log-sum-exp (exercise 2), write `O, m, l`.",
        "`spec.num_splits` = S. `O_partial` (S·Nq × d), `m_partial` and `l_partial` (S·Nq) are allocated "
        "for you, uninitialised and free (do not `mem.init` them): each row is written once by the split "
        "pass. With S = 1 write `O, m, l` directly (nothing to merge). The tile step masks with "
        "`spec.tile_mask` but skips no tile (causal is top-left: row r sees keys ≤ r, so a split may hold no "
        "key of a row: its partial is m⁽ˢ⁾ = −inf, ℓ⁽ˢ⁾ = 0, O⁽ˢ⁾ = 0), and with `spec.dropout_p` > 0 multiplies "
        "P̃_ij ∘ Z_ij (`spec.dropout_Z`) by V_j while ℓ sums P̃_ij before dropout. The tile step is "
        "exercise 5's, FlashAttention-2's: m_new = max(m_i, rowmax S_ij) directly, three row vectors on chip "
        "(m_i, ℓ_i, m_new) and O_i unnormalised until the split's end; the footprint budget is that step's.",
        ["Partial s of query row r lives at row s·Nq + r.", "The merge is exercise 2, S times."]),
}

LAB = """**The kernel.** One program per (query block, head): `grid = (⌈Nq/BLOCK_M⌉, B·H)`. Tensors are
`(B·H, N, d)` float32, contiguous; `L` is `(B·H, Nq)`. Complete `flash2_kernel`: FlashAttention-2's forward
(Algorithm 1 of FA2), with `CAUSAL` skipping the key blocks the causal mask hides wholly from the program's
query rows, as exercise 5 does; causal is top-left (query row r sees keys ≤ r, also when Nq ≠ Nk). `L` is each
row's log-sum-exp, m + log ℓ (natural log). `V` has `K`'s strides.
Loads and stores of rows past `Nq`/`Nk` must be masked.

**Graded** on the CPU under `TRITON_INTERPRET=1` (small shapes: the interpreter is slow): correctness
against the float64 oracle at four shapes (ragged lengths, causal, two sequences with more keys than
queries, and causal with more queries than keys), where your own `tl.store` must write every element of
`O` and `L`; and the elements your `tl.load`/`tl.store` move (mask-true elements, counted per tensor in the
interpreter), no more than FlashAttention-2's counted IO for these block sizes, tensor by tensor.
On a GPU, time it with `triton.testing.do_bench`, launching it on CUDA tensors over the
grid above; `python -m flashref bench` times flashref's own kernels beside PyTorch's, the numbers to set it against."""


def _percent(ex) -> str:
    stub_file = f"ex{ex.number:02d}_stub.py"
    parts = [f"# %% [markdown]\n# # Exercise {ex.number}: {ex.title}\n#\n"]
    qid = {1: "ex1-writes", 2: "ex2-identity", 3: "ex3-q-reads", 4: "ex4-d-reads", 5: "ex5-causal-kv",
           6: "ex6-saved", 7: "ex7-bc", 8: "ex8-merge-io", 9: "lab-blocks"}[ex.number]
    if ex.kind == "triton":
        parts.append("# " + LAB.replace("\n", "\n# ") + "\n")
    else:
        intro, box, spec, hints = TEXT[ex.number]
        parts.append(f"# {intro}\n#\n# > " + box.replace("\n", "\n# > ") + "\n#\n# **Spec.** " +
                     spec.replace("\n", "\n# ") + "\n#\n")
        if ex.kind == "memory":
            parts.append("# " + MEMORY_SPEC.format(io=IO_RULE[ex.io_rule]).replace("\n", "\n# ") + "\n")
    parts.append("\n# %% [markdown]\n# **Predict first.** Answer before you write the code.\n\n# %%\n"
                 f"from flashref import quiz\n\nquiz.ask({qid!r})\nanswer = None  # your answer\n"
                 f"quiz.check({qid!r}, answer)\n")
    parts.append(f"\n# %% [markdown]\n# **Your code.** Fill in the function below (the cell writes it to "
                 f"`{stub_file}`, which the grading cell grades).\n\n# %%\n%%writefile {stub_file}\n"
                 + stub_source(ex))
    if ex.kind != "triton":
        parts.append("\n# %% [markdown]\n# **Hints.**\n" + "".join(f"# - {h}\n" for h in TEXT[ex.number][3]))
    shows = ("The table lists each case's choice (Br, Bc), its counted IO and its rank."
             if ex.kind == "choice" else "The table shows your counted IO per tensor beside the budget.")
    parts.append(f"\n# %% [markdown]\n# **Grade it.** {shows} "
                 f"Or, from a shell: `python -m flashref grade {ex.number:02d} {stub_file}`.\n#\n"
                 f"# **Hand it in.** Upload `{stub_file}` (the file this notebook writes) to Gradescope as it is: "
                 f"the autograder grades `{stub_file}` or `{ex.solution}` (the name of the stub in the course "
                 f"copy's `exercises/` folder; with both, `{ex.solution}`).\n\n# %%\n"
                 f"from flashref import grading\n\nreport = grading.grade('{ex.number:02d}', {stub_file!r})\n"
                 f"print(report)\n")
    return "".join(parts)


def build(numbers=None, execute=True) -> list[str]:
    import nbformat

    from .._nbrun import execute as run
    from .._nbrun import percent_to_notebook

    os.makedirs(OUT, exist_ok=True)
    written = []
    for ex in EXERCISES.values():
        if numbers and ex.number not in numbers:
            continue
        path = os.path.join(OUT, f"{ex.number:02d}-{ex.name.split('-', 1)[1]}.ipynb")
        nb = percent_to_notebook(_percent(ex))
        if execute:
            run(nb, OUT)
        nbformat.write(nb, path)
        written.append(path)
    return written


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m flashref.grading.notebooks", description=__doc__.splitlines()[0])
    known = sorted(ex.number for ex in EXERCISES.values())
    # checked below, not by choices=: Python 3.11's argparse held an empty nargs="*" list against the choices
    ap.add_argument("numbers", nargs="*", type=int, metavar="NN", help=f"exercise numbers to rebuild, of {known} "
                    "(default: all)")
    args = ap.parse_args(argv)
    bad = [n for n in args.numbers if n not in known]
    if bad:
        ap.error(f"argument NN: no exercise {bad[0]}; choose from {known}")
    if not budgets.have_solutions():  # the notebooks' solution cells are read from there
        ap.error("rebuilding the exercise notebooks needs the solution copy (flashref/grading/solutions); "
                 "the student copy has its notebooks built")
    for p in build(args.numbers or None):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
