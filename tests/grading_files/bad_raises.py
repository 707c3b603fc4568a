def merge_states(mem, spec):
    return 1 / 0
