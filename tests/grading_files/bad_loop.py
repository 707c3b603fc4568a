def merge_states(mem, spec):
    while True:
        pass
