"""Where this run's Triton kernels run: one home for the choice every GPU test file reads.

Without a CUDA GPU (CI) the kernels run in Triton's CPU interpreter, which ``TRITON_INTERPRET=1`` turns on only if
it is set before triton is first imported. ``conftest.py`` imports this module before pytest imports any test
module, so the variable is set for the whole run, a run of one file included; test modules import their names from
here.
"""

from __future__ import annotations

import os

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# the interpreter runs on CPU tensors; a GPU run needs CUDA and the interpreter off
DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"
# the dtypes the kernels are tested in: the interpreter's numpy has no bfloat16, and fp32 is cheap there
DTYPES = (torch.float32, torch.float16) if INTERPRET else (torch.float16, torch.bfloat16)
needs_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
