"""Guard rails for the process that runs exercise code: an audit hook, installed before the student's file loads.

Loaded by path (never as ``flashref.grading._guard``) by the two child scripts, ``_student.py`` and
``_lab_student.py``. Once :func:`install` has run, the process refuses, each by calling
``refuse(message)`` (which reports to the grader and raises or exits):

* opening a file of a blocked module of the ``flashref`` package (the solutions, the algorithm
  modules, the grader and its budgets; for the lab, every file of the package), except the student's
  own file and the child's own scripts; the package's helper modules (masks, softmax...) stay open;
* opening any file for writing, or renaming, removing, chmod-ing one, outside the child's own
  temporary folder; an ``os.open`` of a relative path (it may be relative to a directory descriptor);
* reading another process's ``/proc/PID/...`` (the grader's memory holds the expected outputs);
* importing a blocked module (checked on every real import, so removing the meta-path blocker
  does not reopen them);
* importing the extension modules that open files without an audit event (``readline``'s history files,
  ``_dbm`` and ``_gdbm``);
* starting or signalling processes (``os.system``, ``os.fork``, ``subprocess``, ``os.exec*``,
  ``os.posix_spawn``, ``os.kill``...), and every ``ctypes`` foreign-function lookup or raw-memory
  constructor (the usual way around an audit hook).

This is a guard against mistakes and casual cheating, not a sandbox: CPython's audit hooks are
documented as no defence against code that is determined to get around them (``ctypes.memmove`` on
an object's address, an extension module, ...). The grader's real protections are elsewhere: the
count and the data live in the grader's process, and the grader hashes its own files around every
run (:mod:`flashref.grading.integrity`). For high stakes run the grader as a separate user over a
read-only tree (COURSE.md, for instructors: "What the grader guards against").
"""

import _thread
import os
import sys

SPAWN = frozenset({"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
                   "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn", "os.startfile", "_winapi.CreateProcess",
                   "webbrowser.open"})
MUTATE = frozenset({"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                    "os.symlink", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.lchmod", "os.lchown",
                    "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree", "shutil.chown",
                    "os.mkfifo", "os.mknod", "os.setxattr", "os.removexattr", "sqlite3.connect"})
#: Extension modules that start processes with no audit event of their own: importing them is refused.
RAW_SPAWN = ("_posixsubprocess", "_winapi")
#: Extension modules that open files with no "open" audit event (readline's history files, the dbm databases):
#: importing them is refused too.
RAW_FILES = ("readline", "_dbm", "_gdbm")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def snapshot(classes) -> dict:
    """The attributes of ``classes`` now (the counters' and the kernels' classes), for :func:`patched`."""
    return {cls: dict(vars(cls)) for cls in classes}


def patched(snap: dict):
    """``(class name, attribute)`` of the first attribute of a :func:`snapshot`'s classes replaced, added or
    removed since it was taken, else None."""
    for cls, before in snap.items():
        now = dict(vars(cls))
        changed = sorted(k for k in set(before) | set(now) if before.get(k) is not now.get(k))
        if changed:
            return cls.__name__, changed[0]
    return None


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def install(refuse, *, package_root, readable=(), writable_dir=None, blocked=(), what="exercise code"):
    """Install the hook. ``readable``: files inside ``package_root`` that may still be opened for
    reading (the child's own modules, the student's file); ``writable_dir``: the only folder that
    may be written; ``blocked``: module names (and their submodules) whose import is refused."""
    root = os.path.realpath(package_root)
    allowed = {os.path.realpath(p) for p in readable if p}
    pkg = os.path.basename(root)
    closed = [tuple(b.split(".")[1:]) for b in blocked if b.split(".")[0] == pkg]

    def closed_file(p):
        """Whether ``p`` (inside the package) is a file of a blocked module: flash1.py, its .pyc, iomodel/..."""
        parts = [x for x in os.path.relpath(p, root).split(os.sep) if x != "__pycache__"]
        parts[-1] = parts[-1].split(".")[0]  # flash1.py, flash1.pyc, flash1.cpython-311.pyc -> flash1
        return any(tuple(parts[:len(c)]) == c for c in closed)

    wdir = os.path.realpath(writable_dir) if writable_dir else None
    me = str(os.getpid())
    # the threads inside the hook now: a check's own opens and imports are not checked again. Kept per thread, so
    # that one thread held in a slow check does not let another's events through unchecked
    busy = set()
    # Replace the process-starting and file-opening extension modules, when not loaded yet, by stand-ins that refuse.
    for name in RAW_SPAWN + RAW_FILES:
        if name not in sys.modules:
            stub = type(sys)(name)
            stub.__getattr__ = lambda attr, _n=name: _refuse_raw(refuse, _n, attr, what)
            sys.modules[name] = stub

    def real(path):
        path = os.fsdecode(path)
        return os.path.realpath(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))

    def writable(p):
        return wdir is not None and _inside(p, wdir)

    def check_open(path, mode, flags):
        if path is None or isinstance(path, int):
            return  # an already open descriptor: its open was checked
        if mode is None and not os.path.isabs(os.fsdecode(path)):
            refuse(f"os.open({os.fsdecode(path)!r}) refused: {what} may open only absolute paths with os.open")
        p = real(path)
        write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & _WRITE_FLAGS and mode is None)
        if write and not writable(p):
            refuse(f"writing {p} refused: {what} writes no files (the grader reads your results from its own "
                   f"memory), and the grader's files are not yours to change")
        if _inside(p, root) and p not in allowed and closed_file(p):
            refuse(f"opening {p} refused: the files that hold the answers (the reference solutions, the "
                   f"algorithm modules, the grader and its budgets) are closed to {what}")
        if p.startswith("/proc/"):
            pid = p.split("/")[2]
            if pid.isdigit() and pid != me:
                refuse(f"opening {p} refused: another process's /proc files are closed to {what}")

    def hook(event, args):
        me_now = _thread.get_ident()
        if me_now in busy:
            return
        busy.add(me_now)
        try:
            if event == "open":
                check_open(*args[:3])
            elif event == "import":
                name = str(args[0])
                for b in blocked:
                    if name == b or name.startswith(b + "."):
                        refuse(f"import {name} refused: the exercise is to write this yourself, and the modules "
                               f"that hold the answers are closed to {what}")
                if name.split(".")[0] in RAW_SPAWN:
                    refuse(f"import {name} refused: {what} starts no processes")
                if name.split(".")[0] in RAW_FILES:
                    refuse(f"import {name} refused: it opens files unseen by the grader's guard, and {what} opens "
                           f"none of its own")
            elif event in SPAWN:
                refuse(f"{event} refused: {what} starts no processes and signals none")
            elif event.startswith("ctypes."):
                refuse(f"{event} refused: {what} may not call foreign functions or read raw memory")
            elif event in MUTATE:
                paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
                if not all(writable(real(a)) for a in paths):
                    refuse(f"{event}{tuple(os.fsdecode(a) for a in paths)} refused: {what} changes no files")
        finally:
            busy.discard(me_now)

    sys.dont_write_bytecode = True  # the import system writes no .pyc for the student's file
    sys.addaudithook(hook)
    return hook


def _refuse_raw(refuse, name, attr, what):
    """A stand-in's attribute: a function that refuses when called (importing ``subprocess`` still works)."""
    if attr.startswith("__"):
        raise AttributeError(attr)

    def refused(*args, **kwargs):
        why = "starts no processes" if name in RAW_SPAWN else "opens no files unseen by the grader's guard"
        refuse(f"{name}.{attr} refused: {what} {why}")

    return refused
