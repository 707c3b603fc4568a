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
