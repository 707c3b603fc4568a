"""Build and execute the notebooks (a maintainer's tool; the tests execute them the same way).

    python -m flashref._nbrun build notebooks/src.py notebooks/03-flashattention-forward.ipynb
    python -m flashref._nbrun run notebooks/03-flashattention-forward.ipynb

``build`` turns a "percent" script (cells separated by ``# %%`` and ``# %% [markdown]`` lines,
markdown cells written as ``#``-comments) into a notebook and executes it in place; ``run``
re-executes a notebook in place. Both execute in the notebook's folder and print the time taken.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def percent_to_notebook(src: str):
    import nbformat

    cells, kind, buf = [], None, []

    def flush():
        text = "\n".join(buf).strip("\n")
        if kind is not None and text:
            if kind == "markdown":
                lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in text.splitlines()]
                cells.append(nbformat.v4.new_markdown_cell("\n".join(lines)))
            else:
                cells.append(nbformat.v4.new_code_cell(text))

    for line in src.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, buf = ("markdown" if "[markdown]" in line else "code"), []
        else:
            buf.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def execute(nb, folder: Path, timeout: int = 300):
    import tempfile

    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    # The kernel talks over IPC sockets in a folder of its own, not TCP ports: kernels started side by side (pytest
    # -n, or a notebook run beside the tests) then cannot race for one free port, which killed a kernel before it
    # replied ("Address already in use")
    with tempfile.TemporaryDirectory(prefix="flashref-kernel-") as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        try:
            NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(folder)}}).execute()
        finally:
            # nbclient shuts down only a kernel it started itself: this one, ours, would live on until the process
            # exits (one per notebook in a test worker that runs many)
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    return nb


def main(argv=None) -> int:
    import nbformat

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) == 3 and argv[0] == "build":
        src, dst = Path(argv[1]), Path(argv[2])
    elif len(argv) == 2 and argv[0] == "run":
        src = dst = Path(argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if not src.is_file():
        print(f"python -m flashref._nbrun: no file {src}", file=sys.stderr)
        return 2
    nb = percent_to_notebook(src.read_text()) if argv[0] == "build" else nbformat.read(dst, as_version=4)
    t = time.perf_counter()
    execute(nb, dst.resolve().parent)
    nbformat.write(nb, dst)
    print(f"{dst}: executed in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
