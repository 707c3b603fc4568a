"""Load the reference solution from its file under another module name (the import blocker checks names only)."""

import importlib.util
import os

import flashref

path = os.path.join(flashref.__path__[0], "grading", "solutions", "ex3_flash1_forward.py")
spec_ = importlib.util.spec_from_file_location("not_a_solution", path)
module = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(module)
flash1_forward = module.flash1_forward
