import sys

print("junk " * 10000)
sys.stdout.write("\x00\xff garbage")


def merge_states(mem, spec):
    print("more junk")
    mem.store("m", mem.load("m1"))  # wrong, and prints
