def merge_states(mem):
    pass
