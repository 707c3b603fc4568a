def merge_states(mem, spec):
    return mem.load("O1")  # returns instead of storing
