"""FlashAttention (Dao et al. 2022): Algorithm 1/2 forward and Algorithm 4 backward.

(forward: to be written here; backward lives in flash1_bwd.py and is re-exported below)
"""

from .flash1_bwd import backward  # noqa: E402,F401  Algorithm 4, in its own module
