"""The README's code runs as printed, and its test command is the one CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if "pytest" in line and not line.startswith("#"))
    assert command.strip() in readme


def _text() -> str:
    """The README with every run of whitespace made one space, so that a phrase may cross a line break."""
    return " ".join((ROOT / "README.md").read_text().split())


def test_every_command_the_readme_shows_exists():
    """`python -m flashref CMD --flag` names a command and flags its --help lists; `python -m flashref.x.y` a module."""
    import contextlib
    import importlib.util
    import io

    from flashref.__main__ import main

    text = (ROOT / "README.md").read_text()
    shown: dict[str, set[str]] = {}
    for cmd, rest in re.findall(r"python -m flashref +([a-z][\w-]*)([^`\n#]*)", text):
        shown.setdefault(cmd, set()).update(re.findall(r"(?<![\w-])--[a-z][\w-]*", rest))
    assert {"figures", "site", "grade", "student-release", "autograder"} <= set(shown), shown
    bad = []
    for cmd, flags in sorted(shown.items()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = main([cmd, "--help"])
            except SystemExit as e:
                code = e.code
        if code not in (0, None):
            bad.append(f"python -m flashref {cmd}: not a command (exit {code})")
        bad += [f"python -m flashref {cmd} {f}: not in its --help" for f in sorted(flags) if f not in out.getvalue()]
    for module in set(re.findall(r"python -m (flashref(?:\.\w+)+)", text)):
        if importlib.util.find_spec(module) is None:
            bad.append(f"python -m {module}: no such module")
    assert not bad, "\n".join(bad)


def test_the_readme_numbers_of_the_simulator_figures_are_the_committed_csvs():
    """The block-size sweep, the Figure 2 table and FP8's error table, as the README quotes them, from figures/."""
    import csv

    def rows(name):
        with open(ROOT / "figures" / name) as f:
            return list(csv.DictReader(f))

    text = _text()
    sweep = rows("flash1_io_vs_block_size.csv")
    first, last = sweep[0], sweep[-1]
    quoted = [f"{float(first['flash1_gb']):.1f} GB at Bc = {first['Bc']}",
              f"{float(last['flash1_gb']):.1f} GB at Bc = {last['Bc']}",
              f"flat {float(first['standard_gb']):.1f} GB"]
    fig2 = rows("backward_figure2_table.csv")
    std = next(r for r in fig2 if r["setting"] == "no mask" and r["algorithm"] == "standard")
    std_mask = next(r for r in fig2 if r["setting"] == "key-padding mask" and r["algorithm"] == "standard")
    v1 = next(r for r in fig2 if r["setting"] == "no mask" and "16x256" in r["implementation"])
    quoted += [f"{float(std['gflops_matmul']):.0f} (standard) and {float(v1['gflops_matmul']):.0f} (FlashAttention)",
               f"{float(std['hbm_gb']):.1f} GB for standard attention ({float(std_mask['hbm_gb']):.1f} GB",
               f"{float(v1['hbm_gb']):.1f} GB for FlashAttention with the v1 kernel's 16×256 tiles"]
    fp8 = {r["method"]: float(r["rmse"]) for r in rows("lowp_error_table.csv") if r["inputs"] == "outliers"}
    quoted += [f"RMSE {fp8['FP8 both']:.1e}".replace("e-0", "e-"),
               f"baseline {fp8['FP8 standard']:.1e}".replace("e-0", "e-"),
               f"{fp8['FP8 standard'] / fp8['FP8 both']:.1f}×",
               f"give only {fp8['FP8 per-tensor'] / fp8['FP8 both']:.1f}×"]
    missing = [q for q in quoted if q not in text]
    assert not missing, f"the README does not say what figures/ holds: {missing}"
