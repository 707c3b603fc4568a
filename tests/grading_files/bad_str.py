class Unprintable(Exception):
    """An exception whose message itself raises: the grader must still report it, in the student's words only."""

    def __str__(self):
        return str(1 / 0)


def merge_states(mem, spec):
    raise Unprintable()
