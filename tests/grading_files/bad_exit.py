import os


def merge_states(mem, spec):
    os._exit(3)
