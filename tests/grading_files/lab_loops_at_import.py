"""A Triton lab submission that never finishes loading: only the time limit stops it."""

while True:
    pass
