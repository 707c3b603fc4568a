"""Every notebook executes top to bottom without errors, and is committed executed."""

from pathlib import Path

import nbformat
import pytest

from flashref._nbrun import execute

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("**/*.ipynb"))  # exercises too


IDS = [f"exercises/{p.stem}" if p.parent.name == "exercises" else p.stem for p in NOTEBOOKS]


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    # committed executed, in order, with no error outputs
    counts = [c.get("execution_count") for c in code]
    assert None not in counts and counts == sorted(counts), f"{path.name} is not committed executed in order"
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))
    # and it still runs today (nbclient raises CellExecutionError on the first failing cell)
    execute(nb, path.parent)


def test_execute_shuts_its_kernel_down(tmp_path):
    # nbclient shuts down only a kernel it started; ours lived on until the test worker exited, one per notebook
    psutil = pytest.importorskip("psutil")  # (ipykernel's own dependency)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    execute(nb, tmp_path)
    assert nb.cells[0].outputs[0]["text"] == "42\n"
    assert {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()} <= before
