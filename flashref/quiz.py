"""Predict-then-run questions, checked against salted hashes (the answers are not in this file).

A notebook asks before the cell that reveals the number::

    quiz.ask("ex1-writes")            # prints the question
    answer = None                     # your answer here
    quiz.check("ex1-writes", answer)  # right / not yet / wrong, never an exception

The answers live only in the solution copy (``flashref/grading/solutions/answers.py``, which the
student release leaves out); the tests check that every answer there matches its hash.
Numbers are compared exactly after normalising (``12``, ``12.0`` and ``"12"`` are the same answer);
text answers ignore case and surrounding spaces.
"""

from __future__ import annotations

import hashlib

__all__ = ["QUESTIONS", "ask", "check", "digest"]

#: id -> (question, salt, sha256 of salt + normalised answer)
QUESTIONS = {
    "ex1-writes": ("Algorithm 0 with Nq = Nk = 4, d = 2 and one head: how many elements does it write to HBM "
                   "(S, P and O together)?", "f1c3",
                   "7440ac34e798a8061a22cbd229f96bd61a70547aedc08075c438e4528f3ed2a1"),
    "ex2-identity": ("Merging a state with the empty state (m, ℓ) = (-inf, 0): is the result the first state "
                     "unchanged? (yes/no)", "a77e",
                  "ec109af277173ca6ef050f4fe95be046fb43aa1c9e1dfe924d11f8c7bafe167d"),
    "ex3-q-reads": ("Algorithm 1 with Nq = Nk = 6, d = 2, Br = Bc = 3, one head: how many times is each row "
                    "of Q read from HBM?", "09bd",
                  "44aa590f95d167091995b18218a677260e75e093d2c042f2e5d3a055a9e38261"),
    "ex4-d-reads": ("Algorithm 4 computes D_i = rowsum(dO_i ∘ O_i) inside its inner loop. With Tc column "
                    "blocks, how many times is each row of O read (answer for Tc = 5)?", "5c21",
                  "cc695bd46f938e6c682588b5333b0266b69bc4c6dd13827a5a6967c1255dc7fa"),
    "ex5-causal-kv": ("FlashAttention-2, causal, Nq = Nk = 16, Br = Bc = 4: how many K_j tiles are loaded "
                      "in all (one head)?", "e0d2",
                  "88fbc5e7b9b528f320848bad03b34da0b64a100278ae24d0c9192fe3997fd447"),
    "ex6-saved": ("Exercise 6's first case (Bc = 4, d = 4, 2 heads, one empty column): how many elements "
                  "does skipping the empty column's K_j, V_j save?", "3b9a",
                  "204b682bcdb253dd60754f6158ca8ebbc85ef5eff94fcbf0f9f5de048582c819"),
    "ex7-bc": ("For a non-causal FlashAttention-2 forward, does Bc change the counted HBM traffic? "
               "(yes/no)", "71aa",
                  "03e0a0e02fb37c18d564a535e846213bd95ba8d7d0ced37dfb42bab240093591"),
    "ex8-merge-io": ("Split-KV decoding with S = 4 splits, Nq = 1, d = 64, one head: how many elements does "
                     "the merge pass read (the partial O, m, ℓ)?", "c4f0",
                  "8cf06d9b21c7d51ae68c7cfef8d440d7215b277e86058e8a2d1a7edc1e3521be"),
    "lab-blocks": ("The lab kernel with BLOCK_M = 16 on Nq = 37 rows: how many programs run per head?",
                   "9e13", "786e52d2346a24b7ca0ef4aa5df34d5f7ed3cecca2343f6a4d5ea5dbc4ec0936"),
}


def _norm(answer) -> str:
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    if isinstance(answer, (int, float)) or (hasattr(answer, "item") and not isinstance(answer, str)):
        x = float(answer)
        return str(int(x)) if x == int(x) else repr(x)
    s = str(answer).strip().lower()
    try:
        return _norm(float(s))
    except ValueError:
        return {"true": "yes", "false": "no"}.get(s, s)


def digest(qid: str, answer) -> str:
    """The salted hash of an answer (what :data:`QUESTIONS` stores)."""
    return hashlib.sha256((QUESTIONS[qid][1] + ":" + _norm(answer)).encode()).hexdigest()


def ask(qid: str) -> None:
    """Print the question (answer it in the next cell, before running what reveals it)."""
    print(f"[{qid}] {QUESTIONS[qid][0]}")


def check(qid: str, answer) -> bool | None:
    """True if right, False if wrong, None if not answered yet (``answer`` is None or ``...``)."""
    if answer is None or answer is Ellipsis:
        print(f"[{qid}] not answered yet: write your prediction, then run this cell again")
        return None
    ok = digest(qid, answer) == QUESTIONS[qid][2]
    print(f"[{qid}] {'right' if ok else 'not right yet: look again at the algorithm box'}")
    return ok
