"""The grade report: correctness, IO per tensor against the budget, footprint, points; a table and JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

#: How many of the last lines the student's code printed the report shows.
PRINTED_LINES = 20


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab written as its escape (``\\x1b``): what a student's
    code prints or raises is shown, never obeyed by the terminal (an escape sequence could overwrite the score)."""
    return "".join(c if c in "\n\t" or (c.isprintable() and c != "\x7f") else repr(c)[1:-1] for c in text)


def _finite(x):
    """``x`` with every float that is not finite replaced by its name (``str(float)``: "nan", "inf", "-inf")."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


@dataclass
class Report:
    """What :func:`flashref.grading.grade` returns.

    ``correct``, ``io_ok``, ``footprint_ok``; ``points`` out of ``max_points`` (split in ``parts``);
    ``table``: one row per tensor, the counted reads and writes summed over the cases beside the
    budget's; for a choice exercise (exercise 7, scored by rank, with no budget) one row per case instead:
    the choice, its counted IO (reads and writes together) and its rank among the distinct IOs (not the
    least IO, which is the answer); ``cases``: per case, its shape and what passed; ``message``: why points
    were lost (a refusal or a failure says so first); ``instructor_notes``: what the student's feedback
    withholds, empty unless graded with ``instructor=True`` (the solution copy only).
    """

    exercise: str
    title: str
    correct: bool = False
    io_ok: bool = False
    footprint_ok: bool = False
    points: float = 0.0
    max_points: int = 0
    parts: dict = field(default_factory=dict)  # {"correctness": (got, max), "io": ..., "footprint": ...}
    # rows: tensor, reads, writes, budget_reads, budget_writes, ok, over; for a choice exercise: case, choice, io,
    # rank, distinct_ios, ok (io None: the choice is not feasible)
    table: list = field(default_factory=list)
    peak_sram: int | None = None
    budget_peak_sram: int | None = None
    cases: list = field(default_factory=list)
    refused: bool = False
    message: str = ""
    output: str = ""
    instructor_notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    def to_dict(self) -> dict:
        d = asdict(self)
        d["parts"] = {k: {"score": v[0], "max": v[1]} for k, v in self.parts.items()}
        return d

    def to_json(self, path=None) -> str:
        """The report as standard JSON (a NaN or infinity a student's code returned, say as a block size, is written
        as the string "nan", "inf" or "-inf": JSON has no such number, and strict parsers refuse Python's NaN)."""
        text = json.dumps(_finite(self.to_dict()), indent=2, default=str, allow_nan=False)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def __str__(self) -> str:
        lines = [f"exercise {self.exercise}: {self.title}"]
        if self.table and "choice" in self.table[0]:
            # a choice exercise is scored by rank, not against a budget: no reads/writes split, no OVER
            # (the least IO is not shown: finding it is the exercise; the rank says how far the choice is from it)
            rows = [("case", "choice (Br, Bc)", "IO (elements)", "rank")]
            for r in self.table:
                if r["io"] is None:  # not a feasible (Br, Bc): no IO, no rank (the value as returned, kept short)
                    v = r["choice"]
                    shown = str(tuple(v)) if isinstance(v, (list, tuple)) else repr(v)
                    rows.append((r["case"], shown if len(shown) <= 20 else shown[:17] + "...", "not feasible", "-"))
                else:
                    rows.append((r["case"], str(tuple(r["choice"])), f"{r['io']:,}",
                                 f"{r['rank']} of {r['distinct_ios']}"))
            lines += _columns(rows, right=(2, 3))
        elif self.table:
            head = ("tensor", "reads", "writes", "budget reads", "budget writes", "")
            rows = [head] + [(r["tensor"], f"{r['reads']:,}", f"{r['writes']:,}", f"{r['budget_reads']:,}",
                              f"{r['budget_writes']:,}", "ok" if r["ok"] else "OVER" if r["over"] else "DIFFERS")
                             for r in self.table]
            lines += _columns(rows, right=(1, 2, 3, 4))
            lines += self._io_differences()
        if self.peak_sram is not None:
            lines.append(f"peak on-chip footprint: {self.peak_sram:,} elements per head "
                         f"(budget {self.budget_peak_sram:,})")
        for k, (got, mx) in self.parts.items():
            lines.append(f"  {k:<12} {got:g} / {mx}")
        lines.append(f"score: {self.points:g} / {self.max_points}")
        if self.message:
            lines.append(("REFUSED: " if self.refused else "") + printable(self.message))
        if self.output.strip():
            printed = self.output.strip().splitlines()[-PRINTED_LINES:]  # printable already (harness.tail)
            lines.append(f"your code printed (last {len(printed)} line(s)):")
            lines += ["  " + x for x in printed]
        if self.instructor_notes:
            lines.append("for the instructor (not in the student's feedback):")
            lines += ["  " + x for x in self.instructor_notes]
        return "\n".join(lines)

    def _io_differences(self) -> list:
        """For a correct run, each tensor whose counted IO is not the budget's, in words: which tensor, reads or
        writes, by how much (summed over the cases, as the table is)."""
        if not self.correct:
            return []
        out = []
        for r in self.table:
            if r["ok"] or r["tensor"] == "all" or r["tensor"].startswith("case "):
                continue
            parts = [f"{what} {got:,} against a budget of {want:,} ({got - want:+,})"
                     for what, got, want in (("reads", r["reads"], r["budget_reads"]),
                                             ("writes", r["writes"], r["budget_writes"])) if got != want]
            out.append(f"  {r['tensor']}: {'; '.join(parts)}")
        return (["IO that differs from the budget (all cases together):"] + out) if out else []

    __repr__ = __str__


def _columns(rows: list, right: tuple) -> list:
    """``rows`` (the first the header) as aligned text: the columns in ``right`` (numbers) right-aligned, a rule
    under the header."""
    w = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    fmt = lambda r: "  ".join(c.rjust(w[k]) if k in right else c.ljust(w[k]) for k, c in enumerate(r)).rstrip()  # noqa: E731
    return [fmt(rows[0]), "-" * len(fmt(rows[0]))] + [fmt(r) for r in rows[1:]]
