"""The student's side of the grader: a separate process that holds no input data.

Run by :mod:`flashref.grading.harness` as a script (``python _student.py FD``), never imported by
the grader itself. The grader's process owns the counted :class:`~flashref.memory.Memory`; this
process gets a :class:`StudentMemory` whose verbs (load, store, hold, reuse, free, init) are
requests over a socket. So a load is the only way to see input data, a store the only way to write
the output, and the count lives where the student's code cannot patch it.

What the student's code meets here, besides the verbs:

* ``flashref``'s package ``__init__`` is not run, and a meta-path hook refuses the modules that hold
  the answers (the algorithms, ``iomodel``, the grader and its solutions): an import is a refusal;
* any other attribute of ``mem`` (``mem._hbm``, ``mem._count``, ``mem.result``...) is a refusal;
* the classes of :mod:`flashref.memory` are checked unchanged after the call (patching the counter
  is a refusal, although it could not change the grader's count anyway);
* returning an array instead of storing it is a refusal: the grader reads only HBM;
* before the student's file loads, an audit hook (``_guard.py``) refuses opening the files of the
  blocked modules (solutions, algorithm modules, grader, budgets), writing any file, starting or
  signalling processes, every real import of a blocked module (so removing the meta-path blocker
  reopens nothing) and ``ctypes``; and after the file loads, at every request and before each case
  is reported done, the blocker must still be first on ``sys.meta_path`` and no blocked module loaded.

Every refusal is reported to the grader before the student's code sees the exception, so catching
it does not hide it. Messages go over the socket as a JSON header plus raw float64 bytes: the grader
never unpickles anything this process sends. None of this is a sandbox (see ``_guard.py``): the
count and the data are safe because they live in the grader's process, and the grader checks its
own files after the run.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import json
import os
import pickle
import socket
import struct
import sys
import traceback
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)  # .../flashref

#: Modules a student's file may not import: they hold the answers (or the grader).
BLOCKED = ("flashref.flash1", "flashref.flash1_bwd", "flashref.flash2", "flashref.standard", "flashref.decoding",
           "flashref.blocksparse", "flashref.iomodel", "flashref.functional", "flashref.gpu", "flashref.figures",
           "flashref.grading", "flashref.lowp", "flashref.variants", "flashref.ring", "flashref.distributed",
           "flashref.train", "flashref.gpt", "flashref.parallelism")

VERBS = ("load", "store", "hold", "reuse", "free", "init")


class Refused(Exception):  # noqa: N818 - the student reads this name in their traceback
    """Raised into the student's code when it tries to get around the counted memory."""


# socket's own sendall, taken before the student's file loads: a file that replaces socket.socket.sendall (to drop the
# refusals it reports) does not reach the grader's channel
_SENDALL = socket.socket.sendall
#: every refusal of this run, in order: a file that catches a Refused and goes on still ends refused
_REFUSALS: list = []


def _send(sock, header, payload=b""):
    h = json.dumps(header).encode()
    _SENDALL(sock, struct.pack("!II", len(h), len(payload)) + h + payload)


def _refused_before(sock) -> bool:
    """Report the first refusal the student's code caught and carried on past (True), before any result."""
    if _REFUSALS:
        try:
            _send(sock, {"op": "refused", "message": _REFUSALS[0]})
        except OSError:  # the grader took the first report (refuse() sent it) and has hung up: nothing to add
            pass
    return bool(_REFUSALS)


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("the grader closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(sock):
    nh, npay = struct.unpack("!II", _recv_exact(sock, 8))
    return json.loads(_recv_exact(sock, nh)), _recv_exact(sock, npay)


class _Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, refuse):
        self.refuse = refuse

    def find_spec(self, name, path=None, target=None):
        for b in BLOCKED:
            if name == b or name.startswith(b + "."):
                self.refuse(f"import {name} refused: the exercise is to write this yourself, and the modules "
                            f"that hold the answers ({', '.join(m.split('.')[-1] for m in BLOCKED)}) are "
                            f"closed to exercise code")
        return None


def _stub_package():
    """Make ``import flashref.masks`` load only masks.py: the package __init__ (which imports every
    algorithm) is replaced by an empty package on the same path."""
    pkg = types.ModuleType("flashref")
    pkg.__path__ = [_PKG]
    pkg.__file__ = os.path.join(_PKG, "__init__.py")
    sys.modules["flashref"] = pkg


def _blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)


def _load_guard():
    spec = importlib.util.spec_from_file_location("_flashref_grading_guard", os.path.join(_HERE, "_guard.py"))
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    return guard


def main(fd):
    if sys.path and os.path.abspath(sys.path[0] or '.') == _HERE:
        sys.path.pop(0)  # the grader's folder is not the student's import path
    import numpy as np

    _stub_package()
    import flashref.memory as fm
    from flashref import dropout, masks

    guard = _load_guard()
    sock = socket.socket(fileno=fd)
    blocker = None

    def refuse(message):
        _REFUSALS.append(message)
        _send(sock, {"op": "refused", "message": message})
        raise Refused(message)

    def check_intact():
        """The import blocker is still first on sys.meta_path, and no module that holds answers is loaded."""
        if not sys.meta_path or sys.meta_path[0] is not blocker:
            refuse("sys.meta_path was changed: the import blocker that closes the modules holding the answers "
                   "must stay first, and exercise code may not remove or bypass it")
        loaded = sorted(n for n in list(sys.modules) if _blocked(n))
        if loaded:
            refuse(f"{loaded[0]} was loaded: the modules that hold the answers are closed to exercise code")

    def request(header, payload=b""):
        check_intact()
        _send(sock, header, payload)
        reply, data = _recv(sock)
        if reply.get("error"):
            kind = {"SRAMOverflowError": fm.SRAMOverflowError, "KeyError": KeyError,
                    "TypeError": TypeError}.get(reply["error"], ValueError)
            raise kind(reply["message"])
        return reply, data

    def shape_of(value):
        a = np.asarray(value)
        if a.dtype == object:
            raise TypeError("expected a numeric array")
        return list(a.shape)

    class StudentMemory:
        """The counted memory as exercise code sees it: only the verbs (see the exercise's spec)."""

        __slots__ = ()

        def load(self, name, rows=None, cols=None, *, as_=None, line=""):
            """HBM → SRAM: returns the tile (counted as reads, held on chip as ``as_`` until freed)."""
            reply, data = request({"op": "load", "name": str(name), "rows": _pair(rows, "rows", name),
                                   "cols": _pair(cols, "cols", name),
                                   "as": None if as_ is None else str(as_), "line": str(line)})
            return np.frombuffer(data, dtype=np.float64).reshape(reply["shape"]).copy()

        def store(self, name, value, rows=None, cols=None, *, line=""):
            """SRAM → HBM: writes ``value`` into a tile of ``name`` (counted as writes)."""
            a = np.asarray(value, dtype=np.float64)
            a = np.ascontiguousarray(a) if a.ndim else a  # (ascontiguousarray makes a scalar's shape (1,), not ())
            request({"op": "store", "name": str(name), "rows": _pair(rows, "rows", name),
                     "cols": _pair(cols, "cols", name),
                     "shape": list(a.shape), "line": str(line)}, a.tobytes())

        def init(self, name, shape, fill, line=""):
            """Initialise an HBM buffer to ``fill`` (counted as writes, rule 3)."""
            # checked as the notebooks' Memory.init checks them: int() and float() would take 2.5 and True
            request({"op": "init", "name": str(name), "shape": list(fm._shape(shape, str(name))),
                     "fill": float(fm._fill(fill, str(name))),
                     "line": str(line)})

        def hold(self, name, value):
            """Keep ``value`` on chip under ``name`` (counted in the footprint); returns ``value``."""
            request({"op": "hold", "name": str(name), "shape": shape_of(value)})
            return value

        def reuse(self, old, new, value):
            """``value`` takes the on-chip slot of ``old``; returns ``value``."""
            request({"op": "reuse", "old": str(old), "new": str(new), "shape": shape_of(value)})
            return value

        def free(self, *names):
            """Release on-chip slots."""
            request({"op": "free", "names": [str(n) for n in names]})

        def __getattr__(self, name):
            if name.startswith("_"):
                refuse(f"mem.{name} refused: the memory's internals are the grader's; exercise code moves "
                       f"data only through the verbs {', '.join(VERBS)}")
            refuse(f"mem.{name} refused: not a verb of the exercise memory (the verbs are {', '.join(VERBS)}; "
                   f"the grader reads your output from HBM after your function returns)")

        def __setattr__(self, name, value):
            refuse(f"setting mem.{name} refused: the exercise memory cannot be changed")

        def __repr__(self):
            return f"<exercise memory: verbs {', '.join(VERBS)}>"

    def _pair(r, axis, name):
        """A (start, stop) checked here, in the student's call, as the notebooks' Memory checks it (two integers,
        numpy's too, 0 <= start <= stop: memory._range), not truncated by int(). No length to clip to here: the
        grader clips a ragged tile."""
        if r is None:
            return None
        return list(fm._range(r, sys.maxsize, axis, str(name)))

    # The classes whose methods count: remembered now, compared after the student's call.
    watched = guard.snapshot((fm.Memory, fm.IOReport, fm.TensorIO, StudentMemory))

    start, _ = _recv(sock)
    job = pickle.loads(bytes.fromhex(start["job"]))  # from the grader: trusted
    student = os.path.abspath(job["path"])
    # Files of blocked modules this process may still read: its own scripts (tracebacks), the file graded.
    own = [os.path.abspath(__file__), os.path.join(_HERE, "_guard.py"), student,
           importlib.util.cache_from_source(student)]
    guard.install(refuse, package_root=_PKG, readable=own, writable_dir=os.getcwd(), blocked=BLOCKED)
    blocker = _Blocker(refuse)
    sys.meta_path.insert(0, blocker)
    sys.path.insert(0, os.path.dirname(student))

    # Student output goes to this process's stdout (a file the grader reads), never to the socket.
    try:
        # any file name: without a loader named, a file not ending in .py has no spec (None) and fails with
        # an AttributeError that says nothing about the file
        loader = importlib.machinery.SourceFileLoader("student_solution", job["path"])
        spec = importlib.util.spec_from_file_location("student_solution", job["path"], loader=loader)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Refused:
        return
    except BaseException as e:  # noqa: BLE001 - any failure to import is reported, not raised
        _send(sock, {"op": "error", "stage": "import", "message": _said(e),
                     "traceback": _student_tb(job["path"])})
        return
    try:
        check_intact()
    except Refused:
        return
    fn = getattr(module, job["function"], None)
    if fn is None or not callable(fn):
        _send(sock, {"op": "error", "stage": "signature",
                     "message": f"your file defines no function {job['function']}{job['signature']}"})
        return
    want = job["params"]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None  # a builtin or another callable without a signature: let the call decide
    if sig is not None:
        try:
            sig.bind(*want)  # called with exactly the exercise's positional arguments
        except TypeError as e:
            _send(sock, {"op": "error", "stage": "signature",
                         "message": f"{job['function']}{sig} cannot be called as {job['function']}"
                                    f"{job['signature']} ({e})"})
            return

    mem = StudentMemory()
    while True:
        header, _ = _recv(sock)
        if header["op"] == "exit":
            return
        case = pickle.loads(bytes.fromhex(header["case"]))
        args = [mem, _Spec(case, masks, dropout, np)] if job["kind"] == "memory" else case["args"]
        try:
            returned = fn(*args)
        except Refused:
            return
        except fm.SRAMOverflowError as e:
            _send(sock, {"op": "refused", "message": f"{_said(e)}. Keep on chip only what the spec "
                                                      f"allows: free tiles you no longer need"})
            return
        except BaseException as e:  # noqa: BLE001
            _send(sock, {"op": "error", "stage": "run", "message": _said(e),
                         "traceback": _student_tb(job["path"])})
            return
        change = guard.patched(watched)
        if change:
            _send(sock, {"op": "refused", "message": f"{change[0]}.{change[1]} was changed: the counter "
                                                      f"is the grader's, and patching it is refused"})
            return
        try:
            check_intact()
        except Refused:
            return
        if _refused_before(sock):
            return
        if job["kind"] == "memory":
            if returned is not None:
                what = type(returned).__name__
                _send(sock, {"op": "refused", "message": f"{job['function']} returned a {what}: the grader reads "
                                                         f"the output only from HBM, so store it with mem.store "
                                                         f"and return nothing"})
                return
            _send(sock, {"op": "done"})
        else:
            try:
                value = json.loads(json.dumps(returned, default=lambda o: o.tolist() if hasattr(o, "tolist")
                                              else str(o)))
            except BaseException:  # noqa: BLE001 - a returned object's own tolist/__str__ is the student's code
                try:
                    value = repr(returned)
                except BaseException:  # noqa: BLE001
                    value = f"a {type(returned).__name__} that could not be printed"
            _send(sock, {"op": "done", "value": value})


class _Spec:
    """What the exercise tells the student's function: shapes, options, and two helpers."""

    def __init__(self, case, masks, dropout, np):
        self.__dict__.update(case["spec"])
        self._masks, self._dropout, self._np = masks, dropout, np

    def tile_mask(self, rows, cols):
        """The attend-mask of tile ``rows x cols`` (causal and/or mask; True = attend), or None if all attend."""
        return self._masks.tile_mask(self.mask, self.causal, rows, cols)

    def dropout_Z(self, rows, cols):
        """Z of tile ``rows x cols``: 1/(1-p) where kept, 0 where dropped (from the seed, never stored)."""
        return self._dropout.scale_mask(self.seed, self.dropout_p, self.lead_shape, rows, cols)

    def __repr__(self):
        shown = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in ("mask", "block_mask")}
        return f"spec({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def _said(e: BaseException) -> str:
    """``Type: message`` of an exception the student's code raised. Its ``__str__`` is the student's code too: one
    that raises would otherwise end this process with the grader's own traceback."""
    try:
        message = str(e)
    except BaseException as inner:  # noqa: BLE001 - whatever it raises, the report names it
        message = f"(its message could not be printed: its __str__ raised {type(inner).__name__})"
    return f"{type(e).__name__}: {message}"


def _student_tb(path):
    """The traceback's frames in the student's file only (the grader's frames say nothing to them)."""
    etype, e, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) == os.path.abspath(path)]
    out = io.StringIO()
    out.write("".join(traceback.format_list(frames[-3:])).replace(os.path.dirname(os.path.abspath(path)) + os.sep, ""))
    out.write(_said(e))
    return out.getvalue()[-1500:]


if __name__ == "__main__":
    try:
        main(int(sys.argv[1]))
    except (BrokenPipeError, ConnectionResetError):
        # the grader closed the socket first (its time limit passed): no one reads a report now, and a traceback
        # of this harness would show among the lines the student's code printed
        sys.exit(1)
