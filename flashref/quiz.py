"""Predict-then-run questions, checked against salted hashes (the answers are not in this file).

A notebook asks before the cell that reveals the number::

    quiz.ask("ex1-writes")            # prints the question
    answer = None                     # your answer here
    quiz.check("ex1-writes", answer)  # right / not yet / wrong, never an exception

The answers live only in the solution copy (``flashref/grading/solutions/answers.py``, which the
student release leaves out); the tests check that every answer there matches its hash.
Numbers are compared exactly after normalising (``12``, ``12.0`` and ``"12"`` are the same answer);
text answers ignore case and surrounding spaces; ``True``/``False`` are ``yes``/``no``.

Tolerance: a question may carry a fourth field, a number of significant digits. Its answer is then
rounded to that many significant digits before hashing (``f"{x:.{n}g}"``), and the question says so
("to 3 significant digits", "to the nearest whole number" for a ratio near 2 is ``n = 1``): ``200.64``,
``200.6`` and ``201`` are the same answer to 3 significant digits. Without it numbers must match exactly.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["QUESTIONS", "ask", "check", "digest", "digits"]

#: id -> (question, salt, sha256 of salt + normalised answer[, significant digits])
QUESTIONS = {
    # exercise 1 and 3's cases are neither their lessons' examples (notebooks 01 and 03 print those answers) nor
    # their graded cases (the copy's budgets.json counts those), and neither answer is one of its question's numbers
    "ex1-writes": ("Algorithm 0 with Nq = 6 queries, Nk = 3 keys, d = 2 and one head: how many elements does it write "
                   "to HBM (S, P and O together)?", "6251",
                   "6c92d3cdf88bf23c04d2ddcd2b50100b71c49865dfbe5c665cbfa475bbf1cac2"),
    "ex2-identity": ("Merging a state with the empty state (m, ℓ) = (-inf, 0): is the result the first state "
                     "unchanged? (yes/no)", "a77e",
                  "ec109af277173ca6ef050f4fe95be046fb43aa1c9e1dfe924d11f8c7bafe167d"),
    "ex3-q-reads": ("Algorithm 1 with Nq = 8 queries, Nk = 18 keys, d = 2, Br = 4, Bc = 3 and one head: how many "
                    "times is each row of Q read from HBM?", "32e7",
                  "a37fe4ec0accf43d906a719efe5b2bc48a1ac736cf7006506178c6efa6041022"),
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
    # notebooks 00-07: predict-then-run questions asked before the cell that prints the answer
    "nb00-q1": ("The A100-SXM4-40GB does 312 TFLOP/s of fp16 matmul and moves 1.555 TB/s of HBM. Its matmul ridge"
                " point, in FLOP/byte, to 3 significant digits?",
                "0c11", "073544bfa6916864ffb5d1b61d3850125e61f1dfa79ff24982698b6e3e245859", 3),
    "nb00-q2": ("A matmul of a 48 × 40 matrix by a 40 × 3 matrix: how many FLOPs, counting each multiply and each"
                " add (the convention of `FlopCounter`)?",
                "69e5", "b4e9f7b8511277926a5ab6c6540d10f2cbe58388fffb55d06d6f7fd5cd4e0736"),
    "nb00-q3": ("C = AB with M = K = 8192 and N = 128, in fp16, on the A100: is it memory-bound or compute-bound?"
                " (answer `memory` or `compute`)",
                "be92", "82209cc390bd8adb1f013e0209ca8d5035b03429763df579ea05b0704cbaa00e"),
    "nb00-q4": ("Softmax in fp16 does 5 FLOPs per element (max, subtract, exp, sum, divide) and reads and writes "
                "each element of the N × N matrix once. Its arithmetic intensity in FLOP/byte at N = 1024?",
                "a484", "0bf85200c26662f8c8a9a992ed7cc067035f1c07c42004f8895e0e175fd8804d"),
    "nb01-q1": ("Algorithm 0 on this example (N = 4, d = 2): how many elements does it move between HBM and the "
                "chip in all (the reads and writes of its three lines together)?",
                "5943", "6c7b48ecf8826c1007c3264e4a8aa5a331c1a4e263f59c697b60764258546248"),
    "nb01-q2": ("With a causal mask and dropout run as eager PyTorch runs them (each its own pass over the N × N "
                "matrix), how many elements does the forward move on the same example (N = 4, d = 2)?",
                "808b", "5e26a99d603fa66b01db2bba5c2864d037a42399522ace02b263494ea375007e"),
    "nb01-q3": ("Forward + backward of standard attention, one head, d = 64: by what factor does the counted "
                "traffic grow when N doubles from 512 to 1024? (to 3 significant digits)",
                "f58c", "692076b6dbc53cd9d2b7e9d11dcdc4758ce24da90bfe22ef9483f159dc48904c", 3),
    "nb02-q1": ("For x = [1, 3, 2, 0] split into [1, 3] and [2, 0]: the merged state has m = 3. Its ℓ, to 3 "
                "significant digits?",
                "7079", "8e161ccd2dfc92563f81e1c00542a18a46f07145cc4585c2ccc1d8923b40c019", 3),
    "nb02-q2": ("The online pass over [0.5, 2, 1, 3.5, -1, 3, 4, 0]: after the first element, how many times does"
                " the running max grow (each time shrinking the old sum by e^(m − m_new) < 1)?",
                "0b9f", "9ddec732df04271de21795b48eb662be91e0621261219ccbad45068627b5fc99"),
    "nb02-q3": ("Merge the states of [4] and [1, 1] by hand. The merged m is 4; its ℓ, to 3 significant digits?",
                "6030", "08356906a67eec534fa01928fea29d57150feb5cfc1a966aa06a6d86ec300acb", 3),
    "nb03-q1": ("In this example (N = 6, d = 2, Br = 2, Bc = 3), how many times is each row of Q read from HBM?",
                "9f0b", "1a23fa737e4e75eb0021d7f7e0f453ce3612058625792b432f72537ae0ab0f9b"),
    "nb03-q2": ("At the paper's Figure 2 setting (N = 1024, d = 64, 16 heads × batch 64, fp16), with Bc = 16: "
                "does FlashAttention's forward move less HBM traffic than standard attention? (yes/no)",
                "10d0", "9644fdf9bd13e98e66f8554ceeb5b8b851eaedcdbd08a55d6fe3b9d892820884"),
    "nb03-q3": ("N = 4096, d = 64: the SRAM size M doubles from 8,192 to 16,384 elements. By what factor does "
                "FlashAttention's forward IO fall? (to the nearest whole number)",
                "1001", "1453a63b31a25040684807b19c999157620086b5730b28a04982ea6227f8bb7e", 1),
    "nb04-q1": ("In this example (Nq = 6, Nk = 5, d = 2, Br = 2, Bc = 3), how many elements does line 10 (load "
                "Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i) read in all?",
                "2c86", "d935417fe6f73016875b3fc74ec0cfe7aa2a9c71ea140943ad2830e3ec4e0528"),
    "nb04-q2": ("Forward + backward: how many times the matmul FLOPs of standard attention does FlashAttention "
                "do? (to 3 significant digits)",
                "b771", "302e76f31d8ad2ee7aa62d85dd912a0ad00ccf22fb13463f1a0408449a6b182a", 3),
    "nb04-q3": ("Backward, N = 8192, d = 64: M doubles from 50,000 to 100,000 elements. Does FlashAttention's "
                "backward IO fall by *more* than half? (yes/no)",
                "01c2", "db7bf1b6dfb5d48eb84544c78e7ebac694a5d3476a5acf5f176459875b58924e"),
    "nb04-q4": ("And standard attention's backward at the same shape: does its IO change when M doubles? (yes/no)",
                "3e42", "6462876c4712d1b616eca4af154b0ec62b7b995583bc2e1dd428767a351919f1"),
    "nb05-q1": ("Algorithm 5 on this problem (N = 12, d = 2, Br = 4, Bc = 3, the block mask above with 4 nonzero "
                "blocks): how many elements does it move in all (reads + writes)?",
                "7a8d", "69ea9f6311d0d221840357a1bc7db3f056d58681f6100089df108c5144c515a0"),
    "nb05-q2": ("The butterfly on a 16 × 16 block grid: block (i, j) is nonzero when i and j differ in at most "
                "one bit. How many nonzero blocks does each block row have?",
                "dbca", "d0ad3f79281c855e38e25af0983f131d7f776a57da2b9121380899ccca68e7f2"),
    "nb05-q3": ("N = 256, d = 16, Br = Bc = 16: how many elements does one more nonzero block add to the "
                "forward's traffic?",
                "aad9", "ac650882bc10eeae3e1e6177e7da6b5db3e0d921300f4a4d503a5003fe1ba66d"),
    "nb06-q1": ("FlashAttention-2's forward with Nq = 10, Nk = 7, d = 3, Br = 4, Bc = 3: how many elements of K "
                "does it read?",
                "a8f3", "9737804f5c1046f82d88313e3d879217c1554c9f8d6637d4e273fd1ccba29966"),
    "nb06-q2": ("Causal, N = 1024 with 64 × 64 blocks: what fraction of the tiles does FlashAttention-2 visit? "
                "(to 3 significant digits)",
                "8813", "a7785f2f864b2a26df453fd9df428e496a7fd8156bc54c5b17be70d90e1a732b", 3),
    "nb06-q3": ("batch × heads = 16, N = 4096, Br = 128, on an A100 (108 SMs, one thread block per SM): how many "
                "waves does FlashAttention-2's forward take?",
                "534e", "95b1d004cc9a7e9bf5a332ec456581f960aa433f59f82aa31eb3028cb2ded4ec"),
    "nb06-q4": ("109 work items on 108 SMs: the efficiency items / (waves · SMs), to 3 significant digits?",
                "cba0", "c2d0d3615109e7282571ea2f00f8b79f6f99f8bf0cd503efbf5405fc23057ab4", 3),
    "nb07-q1": ("One forward + backward at B = 1, H = 16, N = 8192, d = 64 in fp16: the compulsory traffic "
                "(forward: read Q, K, V, write O; backward: read Q, K, V, O, dO, write dQ, dK, dV), in GB (10⁹ "
                "bytes), to 3 significant digits?",
                "1c71", "05aaca672f49684073795753fd3c7a2e40bb4f4ba7c26684d22aee24b67ff751", 3),
    "nb07-q2": ("At that shape, does flashref's Triton kernel move more DRAM bytes than `iomodel`'s two-level "
                "prediction of its HBM traffic? (yes/no)",
                "e7a0", "2ce37dd8b743d7221c885d0f7c09df300117e63a2a9b2c65e73b78524f25bb70"),
    "nb07-q3": ("A kernel that pads d = 80 to 128 on chip (a power of two for the tensor cores): what fraction of"
                " its matmul work is spent on zeros? (a number between 0 and 1, exact)",
                "ba02", "54ec159f1378b06eac47f20f7b26c462e827d19df08edc6c61cd604d9409ca6e"),
    "nb07-q4": ("An H100 SXM5 does 989 TFLOP/s of fp16 matmul and 3.9 TFLOP/s of exp2. How many matmul flops does it "
                "do in the time of one exp2? (to 3 significant digits)",
                "6553", "f1c544223b2c03d0e6a26af1df42a3b11153639300937318f6fb4d966f613b65", 3),
    # notebooks 08-12
    "nb08-q1": ("At the paper's Figure 2 shape (N = 1024, d = 64, 16 heads, batch 8 here), forward + backward on the "
                "H100: does eager PyTorch attention move more DRAM bytes than the two-level count (Theorem 2's "
                'machine, where every load and store goes to HBM)? (yes/no)',
                "4d97", "9cdb68cd0c7b56e7778247929f9b1d68c8c0a6c1db4eda62997b0459479e46e1"),
    "nb08-q2": ('One head, N = 4096, d = 64, fp16, 32 row blocks, an L2 that holds a quarter of K and V, and 8 CTAs '
                'resident in lockstep (4 waves): how many MiB does the forward read from DRAM (Q, K and V together)?',
                "70f9", "48123e0d68aa300193e229dff7527247aa263085395a981034cf00c027af9f0f"),
    "nb08-q3": ("A lockstep pass counts twice against C_eff = 45 MiB (printed above). At what N do one head's K and V"
                ' (d = 128, fp16) fill C_eff / 2, the knee?',
                "e238", "b02a17d25511fc173a1d52193d8f9885ec81634b34f8c5a8e98b6160a3985ce7"),
    "nb08-q4": ("One head, N = 262144, d = 128: kernel 3's forward runs one CTA per 128 query rows, 132 of them at "
                "once (one per SM). How many waves does its grid make (CTAs / 132, a last partial wave counted as its"
                " fraction), to 3 significant digits?",
                "b83e", "ed6bc4ec28ef581b5a0c0a2a44ed8ca683f43fd482a21f5168e91334092842d4", 3),
    "nb08-q5": ("Two heads of N = 262144, d = 128: kernel 3's forward has 2048 row blocks a head, head 0's first in "
                "grid order, 132 CTAs a wave. A pass is one wave reading one head's K and V once; a wave that holds "
                "row blocks of both heads makes a pass over each. How many passes in all?",
                "3c6a", "a68463212979e33810867e5f439453f5777caa25d5688cf81e38824f6ced778e"),
    "nb08-q6": ("FlashAttention-2's d = 64 causal forward on two heads of N = 131072: 1024 row blocks a head, launched "
                "shortest first, head 0's first, 264 CTAs resident. On a one-speed machine row block i walks its "
                "i + 1 key tiles at one a step, and a freed slot takes the next row block at once. When head 0's "
                "last row block ends, how many of head 1's row blocks have started? (to 1 significant digit)",
                "b61e", "d6faced1824b34eb7b7720a6ebf57f206470082379cee45a5bf7e1fba24dbe4e", 1),
    "nb09-q1": ('8 query heads share one K/V head (g = 8), `block_sizes=(16, 16)` in both runs (packed, a row block '
                "holds 16 positions of each of the g heads: g·16 rows): by what factor does PackGQA "
                "(`gqa_packing=True`) cut the forward's reads of K?",
                "4e90", "6b601f34ecb6b6f3bb2167c45cf3c095163e0050c57f3661f7c4b47a075f5a80"),
    "nb09-q2": ('Causal with a window of w = 512 keys (`window=(511, 0)`), d = 64, blocks 128 × 128: by what factor '
                "does the forward's HBM traffic grow when N doubles from 16384 to 32768? (to 1 significant digit)",
                "c5d2", "c20010786ab24d866df1049367557e0a763552223e76421e6540f4d05c51be15", 1),
    "nb09-q3": ('Causal, 2 heads, N = 32, d = 8, blocks 8 × 8: the same ALiBi handed over as a materialised float '
                '`bias` instead of `alibi_slopes`. How many more elements does the forward read?',
                "1319", "a1969eab73062412c20451c5769a5d6239be696a366663a1ba3e156b53dfe114"),
    "nb10-q1": ('Causal, contiguous shards, P = 8 devices of n = N/P tokens (n large). A step lasts as long as its '
                "busiest rank; efficiency = total work / (P × the sum of the steps' times). What efficiency does the "
                'contiguous ring reach? (to 3 significant digits)',
                "88da", "5860def88f0217b423d638103a0f62d8ca0d64a66c46bb98a363f01d301b15c1", 3),
    "nb10-q2": ('Equal shards, one head, P = 4: the bytes a rank sends in the forward, as a multiple of N·d·b (b '
                'bytes per element)?',
                "5456", "41623c1642bff105c2e00446bd76001b79bbeaef514c4c7823e04015ab0a99d7"),
    "nb10-q3": ('The H200: 989 TFLOP/s of bf16 matmul (b = 2 bytes), 450 GB/s per direction on NVLink. Causal '
                "attention: from how many tokens per GPU n on does one forward step's compute hide its send? (to 3 "
                'significant digits)',
                "2791", "f80adbb8ec0574088b29a0773fafe0c82ff206237af9e07231e1e1eb9abe2ab3", 3),
    "nb11-q1": ('e4m3fn has 4 exponent bits (bias 7) and 3 mantissa bits, no infinities, and one NaN pattern per sign'
                ' (exponent and mantissa all ones). Its largest finite value?',
                "1e70", "b8ee2b101e2c09160656c67a7719e9c12620e568abeff85b4c79c92a4b6e27c1"),
    "nb11-q2": ("N = 1024, d = 64, 4 heads, Br = Bc = 128: the fp16 forward's bytes divided by the e4m3 per-tensor "
                "forward's bytes (Q, K, V at 1 byte, O and L still at 2; the scales are negligible), to 2 significant"
                ' digits?',
                "6e7f", "90a1c9e44eadfb2a906d692b86c8326aa761adffbcd99d4a90113d811729ec9e", 2),
    "nb11-q3": ('Forward key order, `p_scale` S = 2⁸: at what sink height Δ does the closed form Φ(Δ + δ_k − ln 2¹⁰ −'
                ' ln S) reach one half (half the non-sink entries vanish)? Take δ_k = 1.03; to 3 significant digits.',
                "e493", "acfa11d8a63d509674c133eae764f504d1646df04bd43c06f2c9754a47d47c8c", 3),
    "nb12-q1": ('GPT-2 small (12 layers, d_model = 768, 123.7M weights in matmuls) at N = 16384: what percentage of '
                "the model FLOPs per token is attention's term 12·n_layer·N·d_model? (to 2 significant digits)",
                "b28c", "90503eb256c4ada299f6634fbc02f1d28790bf3aec5efca969a133e5f7f529af", 2),
    "nb12-q2": ('Attention is a share a = 0.3 of the step and a kernel makes it s = 1.5 times faster: the whole-step '
                'speedup, to 3 significant digits?',
                "070d", "790bcdb55bfb79bfc40217aa1a71753a86ebdff68967714df883592ee49f65d3", 3),
    "nb12-q3": ('Still a = 0.3, however fast the kernel (s → ∞): the most the whole step can speed up, to 3 '
                'significant digits?',
                "a2bb", "6d9946dedc1d351fe0515cd15a116cfff06c371f63da9e4c8a3b53443166f5f6", 3),
}


def _norm(answer, sig: int | None = None) -> str:
    # a numpy bool's dtype prints "bool", a torch one's "torch.bool" (``(a == b).all()`` gives either)
    if isinstance(answer, bool) or str(getattr(answer, "dtype", "")) in ("bool", "torch.bool"):
        return "yes" if bool(answer) else "no"
    if hasattr(answer, "item") and not isinstance(answer, (str, int, float)):
        answer = answer.item()  # a one-element array or tensor, numpy's and torch's alike (several: an error)
    if isinstance(answer, (int, float)):
        x = float(answer)
        if sig is not None and x == x and abs(x) != float("inf"):
            x = float(f"{x:.{sig}g}")  # round to the question's significant digits
        if x != x or abs(x) == float("inf"):
            return repr(x)
        return str(int(x)) if x == int(x) else repr(x)
    s = str(answer).strip().lower()
    # a space (plain, thin or narrow no-break) between groups of three digits is a thousands separator, as a comma is
    if re.fullmatch(r"[+-]?\d{1,3}([ \u2009\u202f]\d{3})+(\.\d*)?", s):
        s = re.sub(r"[ \u2009\u202f]", ",", s)
    # "11,520" is 11520: commas between groups of three digits only ("1,1520" is no number)
    if "," in s and not re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?", s):
        return s
    try:
        return _norm(float(s.replace(",", "").replace("_", "")), sig)
    except ValueError:
        return {"true": "yes", "false": "no"}.get(s, s)


def _readings(answer) -> list:
    """The forms an answer written as text may mean: itself; "71%" as 71 (the question asks for a percentage) or as
    0.71 (it asks for a share); "3/8" as 0.375. Any other answer is read as it is."""
    if not isinstance(answer, str):
        return [answer]
    s = answer.strip()
    forms = [answer]
    if s.endswith("%"):
        forms.append(s[:-1].strip())
        try:
            forms.append(float(s[:-1].replace(",", "")) / 100)
        except ValueError:
            pass
    elif re.fullmatch(r"[+-]?\d+(\.\d*)?\s*/\s*\d+(\.\d*)?", s):  # a fraction of two plain numbers
        num, den = (float(x) for x in s.split("/"))
        if den:
            forms.append(num / den)
    return forms


def _question(qid: str) -> tuple:
    if not isinstance(qid, str) or qid not in QUESTIONS:
        raise ValueError(f"qid: no question {qid!r}; the ids are like {next(iter(QUESTIONS))!r} (quiz.QUESTIONS)")
    return QUESTIONS[qid]


def digits(qid: str) -> int | None:
    """The significant digits an answer to ``qid`` is rounded to (None: compared exactly)."""
    q = _question(qid)
    return q[3] if len(q) > 3 else None


def digest(qid: str, answer) -> str:
    """The salted hash of an answer (what :data:`QUESTIONS` stores)."""
    return hashlib.sha256((_question(qid)[1] + ":" + _norm(answer, digits(qid))).encode()).hexdigest()


def _known(qid) -> bool:
    if isinstance(qid, str) and qid in QUESTIONS:  # not a bare "in": a list would raise TypeError (unhashable)
        return True
    print(f"[{qid}] no such question: the ids are like {next(iter(QUESTIONS))!r} (quiz.QUESTIONS lists them)")
    return False


def ask(qid: str) -> None:
    """Print the question (answer it in the next cell, before running what reveals it)."""
    if _known(qid):
        print(f"[{qid}] {QUESTIONS[qid][0]}")


def check(qid: str, answer) -> bool | None:
    """True if right, False if wrong, None if not answered yet (``answer`` is None or ``...``) or if ``qid`` is no
    question. Never an exception: an answer that is not a number or a word (an array, a huge int) is not right."""
    if not _known(qid):
        return None
    if answer is None or answer is Ellipsis:
        print(f"[{qid}] not answered yet: write your prediction, then run this cell again")
        return None
    ok = False
    for form in _readings(answer):
        try:
            ok = ok or digest(qid, form) == QUESTIONS[qid][2]
        except Exception:  # noqa: BLE001 - several numbers in an array or tensor (torch raises RuntimeError), 10**400
            pass
    # one hint for every question: not every one has an algorithm box, and a right number in another form is refused
    hint = "not right yet: look again at the cells above, and at the form and rounding the question asks for"
    print(f"[{qid}] {'right' if ok else hint}")
    return ok
