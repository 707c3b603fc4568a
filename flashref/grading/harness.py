"""The grader's side: run a student's file in its own process against a counted memory held here.

:func:`run` starts ``_student.py`` in a subprocess with a time limit (in its own session: when the
run ends, its whole process group is killed, :func:`end_process`), serves its memory requests
from a :class:`~flashref.memory.Memory` that only this process holds (inputs in HBM, outputs NaN
until stored), and returns, per case, the counted IO, the measured peak on-chip footprint and the
outputs read back from HBM. A crash, a wrong signature, an import error, a time-out or junk on
stdout ends in a :class:`RunResult` with a message, never in an exception here; so does any
exception a request causes (a malformed or oversized shape, ...), reported as the student's error.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from ..memory import Memory, SRAMOverflowError
from .exercises import Exercise, Setup, nan_like_outputs
from .report import printable

STUDENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_student.py")
DEFAULT_TIMEOUT = 30.0
MAX_MESSAGE = 64 * 1024 * 1024
#: A buffer the student's code creates (``mem.init``, or a store to a new name) may hold at most this
#: many times the elements of the case's largest tensor, per head.
MAX_NEW_TENSOR = 8
#: No shape the student's code sends may have more elements than this (``hold`` counts shapes only).
MAX_ELEMENTS = 1 << 40


@dataclass
class CaseRun:
    """What one case left in the grader's memory."""

    setup: Setup
    io: object = None  # IOReport
    peak_held: dict = field(default_factory=dict)  # on chip at the footprint's peak: name -> elements per head
    outputs: dict = field(default_factory=dict)
    value: object = None  # for "choice" exercises


@dataclass
class RunResult:
    cases: list = field(default_factory=list)  # CaseRun, one per completed case
    refused: str | None = None  # a refusal (cheating): the run scores zero
    error: str | None = None  # a failure (crash, time-out, signature): the run scores zero
    output: str = ""  # the tail of what the student's code printed


def _send(sock, header, payload=b""):
    h = json.dumps(header).encode()
    sock.sendall(struct.pack("!II", len(h), len(payload)) + h + payload)


def tail(f, n: int) -> str:
    """The last ``n`` bytes of the open binary file ``f`` as text, read without the rest (a student's code may have
    printed gigabytes), terminal control characters shown as escapes (:func:`flashref.grading.report.printable`)."""
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - n))
    return printable(f.read().decode("utf-8", "replace"))


def _recv(sock, deadline):
    def exact(n):
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    nh, npay = struct.unpack("!II", exact(8))
    if nh > MAX_MESSAGE or npay > MAX_MESSAGE:
        raise ValueError("message too large")
    try:
        header = json.loads(exact(nh))
    except RecursionError:  # JSON nested deeper than the decoder recurses: the student's message, not the grader's
        raise ValueError("a request nested too deep") from None
    if not isinstance(header, dict):
        raise ValueError("a request must be a JSON object")
    return header, exact(npay)


def _shape(h, key="shape") -> tuple:
    """A shape sent by the student's code: a list of non-negative ints of bounded size."""
    raw = h.get(key)
    if not isinstance(raw, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        raise ValueError(f"expected a shape (a list of ints), got {raw!r}")
    if any(s < 0 for s in raw):
        raise ValueError(f"shape {tuple(raw)} has a negative length")
    if math.prod(raw) > MAX_ELEMENTS:
        raise ValueError(f"shape {tuple(raw)} has {math.prod(raw):,} elements, far more than any exercise needs")
    return tuple(raw)


def end_process(proc, grace: float = 2.0) -> bool:
    """Let ``proc`` (started with ``start_new_session=True``, not yet waited for) exit by itself for up to
    ``grace`` seconds, then kill its whole process group, so nothing it started outlives the run; then reap
    it. Returns whether it had exited by itself.

    The group is killed while the leader is still unreaped (``waitid(..., WNOWAIT)``), so its id cannot
    have been reused by an unrelated process."""
    deadline = time.monotonic() + grace
    exited = False
    if hasattr(os, "waitid"):
        while True:
            try:
                exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:
                exited = True
            if exited or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
    else:  # no waitid (macOS before Python 3.13): the group is killed right after the leader is reaped
        try:
            proc.wait(timeout=grace)
            exited = True
        except subprocess.TimeoutExpired:
            pass
    if hasattr(os, "killpg"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    else:
        proc.kill()
    proc.wait()
    return exited


class _ExerciseMemory(Memory):
    """The grader's counted memory; its errors name the verbs a student's code has (``_student.VERBS``: ``init``
    creates a tensor, there is no ``output``)."""

    CREATE_VERBS = ("init",)


class _Served:
    """One case's memory, and the rules the student's requests must follow."""

    def __init__(self, setup: Setup, sram_size):
        self.mem = _ExerciseMemory(sram_size, 2, setup.lead_shape)
        self.inputs = set(setup.inputs)
        for name, X in setup.inputs.items():
            self.mem.input(name, np.asarray(X, dtype=np.float64))
        for name, X in nan_like_outputs(setup).items():
            self.mem.input(name, X)  # NaN until the student stores into it: free, like mem.output
        # The largest buffer the student's code may create: MAX_NEW_TENSOR times the larger of the case's
        # largest tensor and (its longest axis)² (an N x N score matrix, as exercise 1 stores), per head.
        lead = len(setup.lead_shape)
        trailing = [a.shape[lead:] for a in self.mem._hbm.values()]
        longest = max([max(t, default=1) for t in trailing] + [1])
        self.max_new = MAX_NEW_TENSOR * max([math.prod(t) for t in trailing] + [longest * longest])

    def created(self, setup: Setup) -> dict:
        """The tensors the case grades that the student's code creates (``setup.created``), read back from HBM;
        one never stored is NaN of its expected shape (reported as never stored)."""
        out = {}
        for k in setup.created:
            try:
                out[k] = self.mem.result(k)
            except KeyError:
                out[k] = np.full(np.shape(setup.expected[k]), np.nan)
        return out

    def _check_new(self, verb, name, shape):
        n = math.prod(shape)
        if n > self.max_new:
            raise ValueError(f"{verb} {name}: shape {shape} holds {n:,} elements per head; the exercise needs no "
                             f"buffer that large (this case allows up to {self.max_new:,}: {MAX_NEW_TENSOR}x its "
                             f"largest tensor)")

    def handle(self, h, payload):
        """Reply header and payload for one request."""
        mem, op = self.mem, h.get("op")
        rows = None if h.get("rows") is None else tuple(h["rows"])
        cols = None if h.get("cols") is None else tuple(h["cols"])
        if op == "load":
            if h["name"] not in mem._hbm:
                raise KeyError(f"HBM has no tensor {h['name']!r}; it holds {', '.join(mem._hbm)}")
            tile = mem.load(h["name"], rows, cols, as_=h.get("as"), line=h.get("line", ""))
            tile = np.ascontiguousarray(tile, dtype=np.float64)
            return {"shape": list(tile.shape)}, tile.tobytes()
        if op == "store":
            name = h["name"]
            if name in self.inputs:
                raise ValueError(f"{name} is an input: store your results into the outputs "
                                 f"({', '.join(k for k in mem._hbm if k not in self.inputs)}) or a new tensor")
            shape = _shape(h)
            if math.prod(shape) * 8 != len(payload):
                raise ValueError("store: the value's bytes do not match its shape")
            value = np.frombuffer(payload, dtype=np.float64).reshape(shape)
            if name in mem._hbm:
                dst = mem._hbm[name]
                vec = mem._is_vector[name]
                n_r = dst.shape[-1] if vec else dst.shape[-2]
                r = (0, n_r) if rows is None else (max(0, min(rows[0], n_r)), max(0, min(rows[1], n_r)))
                want = self.mem.lead_shape + (r[1] - r[0],)
                if not vec:
                    n_c = dst.shape[-1]
                    c = (0, n_c) if cols is None else (max(0, min(cols[0], n_c)), max(0, min(cols[1], n_c)))
                    want += (c[1] - c[0],)
                try:  # a value that broadcasts to the tile (a scalar, a row) writes it whole, as Memory.store does
                    fits = np.broadcast_shapes(shape, want) == want
                except ValueError:
                    fits = False
                if not fits:
                    raise ValueError(f"store {name}: a value of shape {shape} does not fit the tile rows={r}"
                                     f"{'' if vec else f', cols={c}'} of shape {want}")
            elif shape[: len(mem.lead_shape)] != mem.lead_shape or len(shape) not in (len(mem.lead_shape) + 1,
                                                                                       len(mem.lead_shape) + 2):
                raise ValueError(f"store {name}: a new tensor needs shape {mem.lead_shape} + (rows, cols), "
                                 f"got {shape}")
            else:
                self._check_new("store", name, shape[len(mem.lead_shape):])
            mem.store(name, value, rows, cols, line=h.get("line", ""))
            return {}, b""
        if op == "init":
            if h["name"] in self.inputs:
                raise ValueError(f"{h['name']} is an input: it cannot be re-initialised")
            shape = _shape(h)
            if not 1 <= len(shape) <= 2:
                raise ValueError(f"init {h['name']}: expected a shape (rows,) or (rows, cols), got {shape}")
            self._check_new("init", h["name"], shape)
            mem.init(h["name"], shape, float(h["fill"]), line=h.get("line", ""))
            return {}, b""
        if op in ("hold", "reuse"):
            shape = _shape(h)
            stand_in = np.broadcast_to(np.float64(0), shape)  # only the shape counts on chip
            if op == "hold":
                mem.hold(h["name"], stand_in)
            else:
                mem.reuse(h["old"], h["new"], stand_in)
            return {}, b""
        if op == "free":
            mem.free(*[str(n) for n in h["names"]])
            return {}, b""
        raise ValueError(f"unknown request {op!r}")


def run(ex: Exercise, path, setups: list[Setup], sram_sizes: list, *, timeout: float = DEFAULT_TIMEOUT,
        env: dict | None = None) -> RunResult:
    """Run ``ex.function`` from the file ``path`` on every case, in one subprocess, within ``timeout`` seconds."""
    path = os.path.abspath(path)
    res = RunResult()
    if not os.path.isfile(path):
        res.error = f"no file {path}"
        return res
    # A link (a symlink a student's zip kept) to a file of the package would be graded as the student's own file,
    # which the guard leaves open: the reference solution, say. The package's files themselves stay gradable by name.
    package = os.path.dirname(os.path.dirname(os.path.realpath(STUDENT)))
    target = os.path.realpath(path)
    if target != path and (target == package or target.startswith(package + os.sep)):
        res.refused = f"{path} is a link to {target}, a file of the grader's package: submit your own file"
        return res
    parent, child = socket.socketpair()
    with tempfile.TemporaryDirectory(prefix="flashref-grade-") as tmp, \
            open(os.path.join(tmp, "stdout.txt"), "w+b") as out:
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.dirname(STUDENT)))] +
            ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
        # -B: the child writes no bytecode; its own session, so that ending it ends all it started.
        proc = subprocess.Popen([sys.executable, "-B", STUDENT, str(child.fileno())], pass_fds=(child.fileno(),),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=tmp,
                                env=child_env, start_new_session=True)
        child.close()
        deadline = time.monotonic() + timeout
        try:
            job = {"path": path, "function": ex.function, "signature": ex.signature, "params": ex.params,
                   "kind": ex.kind}
            _send(parent, {"job": pickle.dumps(job).hex()})
            for setup, M in zip(setups, sram_sizes):
                spec = dict(setup.spec, sram_size=M)
                case = {"spec": spec, "args": setup.args}
                _send(parent, {"op": "case", "case": pickle.dumps(case).hex()})
                served = _Served(setup, M) if ex.kind == "memory" else None
                run_case = CaseRun(setup)
                while True:
                    h, payload = _recv(parent, deadline)
                    op = h.get("op")
                    if op == "done":
                        if served is not None:
                            run_case.io = served.mem.report()
                            run_case.peak_held = dict(served.mem.peak_held)
                            run_case.outputs = {k: served.mem.result(k) for k in setup.outputs}
                            run_case.outputs.update(served.created(setup))
                        run_case.value = h.get("value")
                        res.cases.append(run_case)
                        break
                    if op == "refused":
                        res.refused = str(h.get("message"))[:2000]
                        return res
                    if op == "error":
                        msg = {"import": "your file does not import", "signature": "wrong signature",
                               "run": "your function raised"}.get(h.get("stage"), "error")
                        res.error = f"{msg}: {str(h.get('message'))[:1000]}"
                        if h.get("traceback"):
                            res.error += "\n" + str(h["traceback"])
                        return res
                    if served is None:
                        raise ValueError(f"unexpected request {op!r}")
                    try:
                        reply, data = served.handle(h, payload)
                    except SRAMOverflowError as e:
                        reply, data = {"error": "SRAMOverflowError", "message": str(e)}, b""
                    except KeyError as e:
                        reply, data = {"error": "KeyError", "message": str(e.args[0] if e.args else e)}, b""
                    except (ValueError, TypeError) as e:
                        reply, data = {"error": type(e).__name__, "message": str(e)}, b""
                    except Exception as e:  # noqa: BLE001 - whatever a request causes is the student's error
                        what = f"mem.{op}({h.get('name', h.get('names', ''))!r})" if isinstance(op, str) else "request"
                        reply, data = {"error": "ValueError",
                                       "message": f"{what} failed: {type(e).__name__}: {e}"[:2000]}, b""
                    _send(parent, reply, data)
            _send(parent, {"op": "exit"})
        except TimeoutError:
            res.error = (f"time limit: your code ran past {timeout:g} s (an infinite loop, or far more work "
                         f"than the exercise needs)")
        except (EOFError, ConnectionError, OSError):
            res.error = "your code ended the process (exit, crash, or killed) before finishing"
        except ValueError as e:
            res.error = f"the grader could not understand a request from your code ({e})"
        finally:
            parent.close()
            end_process(proc)
            text = tail(out, 4000)
            res.output = text
            if res.error and "ended the process" in res.error and text.strip():
                res.error += ":\n" + text[-1500:]
                res.output = ""  # its tail is in the error: the report would print it a second time
    return res
