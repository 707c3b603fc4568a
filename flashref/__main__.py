"""``python -m flashref {figures,site,bench,profile,profile-l2,l2-score,train,grade,student-release,autograder}``."""

from __future__ import annotations

import os
import sys

USAGE = """usage: python -m flashref COMMAND [options]   (python -m flashref COMMAND --help: its options)

commands:
  figures   regenerate every figure (PNG + CSV) in figures/ on the CPU
  site      build the course website (README, COURSE.md, docs, every notebook, the GPU notes) into OUT_DIR,
            offline
  bench     time flashref's Triton kernel against PyTorch SDPA backends (needs CUDA)
  profile   measure DRAM traffic with Nsight Compute (needs CUDA and ncu)
  profile-l2  per-kernel DRAM and L2 bytes on a grid of shapes, for iomodel.dram (needs CUDA and ncu)
  l2-score  every recorded L2 measurement against iomodel.dram, by kernel; --rules: what each rule buys
  train     train GPT-2 on each attention backend: tokens/s, MFU, memory, attention share, loss parity
  grade EXERCISE FILE [--json OUT] [--timeout S] [--seed N] [--instructor]
            grade an exercise file on correctness, counted IO and on-chip footprint (--instructor: also
            what the feedback withholds as the answer; the solution copy only)
  student-release OUT_DIR
            write the course for students: notebooks and exercises as stubs, no solutions
  autograder OUT.zip
            write a Gradescope bundle (setup.sh, run_autograder, results.json writer)
"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "figures":
        from .figures import main as run
    elif cmd == "site":
        from .site import main as run
    elif cmd == "bench":
        from .gpu.bench import main as run
    elif cmd == "profile":
        from .gpu.profile import main as run
    elif cmd == "profile-l2":
        from .gpu.l2profile import main as run
    elif cmd == "l2-score":
        from .iomodel.l2score import main as run
    elif cmd == "train":
        from .train import main as run
    elif cmd == "grade":
        from .grading.cli import grade_main as run
    elif cmd == "student-release":
        from .grading.cli import release_main as run
    elif cmd == "autograder":
        from .grading.cli import autograder_main as run
    else:
        print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # the reader went away (`... --help | head`): Python's own recipe, so that the flush at exit does not raise
        # a second time; the rest of the output goes to /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
