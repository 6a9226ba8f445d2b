"""The child side of the sandbox (:mod:`epb.sandbox`): lock the process down, then serve batches.

A worker is started once (a fresh interpreter, see :mod:`epb.sandbox`) and reused. Before it
serves anything it

1. warms up torch and every safe function (later lazy loads would need file descriptors),
2. points stdin/stdout/stderr at ``/dev/null`` (a program that somehow prints cannot flood the
   parent's terminal or write to its log files),
3. fills every free descriptor number below its highest one with ``/dev/null`` and sets
   ``RLIMIT_NOFILE`` to that count, so no file, socket or pipe can be opened any more; what is
   left is the pipe to the parent and multiprocessing's own pipes,
4. caps its address space (``RLIMIT_AS``: what it has mapped now plus ``memory_mb``) and forbids
   core dumps and file writes (``RLIMIT_CORE``, ``RLIMIT_FSIZE``). ``RLIMIT_NPROC`` is not set:
   it counts every process and thread of the user, so it would depend on what else the user
   runs (and root ignores it); starting a process needs a name no program can reach,

and then, per program of a batch, sets the soft ``RLIMIT_CPU`` to the CPU seconds used so far
plus the program's limit (exceeding it kills the worker with ``SIGXCPU``).

Wire format. Parent to worker: one pickled ``("eval", request)`` (the parent is the trusted
side). Worker to parent: bundles of answers in program order, each a JSON header
``{"answers": [{"i": k, "ok": true}, {"i": k2, "ok": false, "reason": ...}, ...]}`` and one
message with the scores of the successes as raw bytes of the request's shape and dtype, one
after the other. The parent never unpickles anything a worker sends.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import resource
import signal
import sys
import time

import numpy as np
import torch

from .programs import SAFE_FUNCTIONS, ProgramError, compile_source, run_compiled

HEADER_MAX = 1 << 16  # the largest answer header the parent reads
REASON_MAX = 500
FLUSH_S = 0.05  # seconds of work per bundle of answers
DTYPES = {"float32": torch.float32, "float64": torch.float64}
_CACHE_SIZE = 512


class _CopyView:
    """Each feature read is a fresh, writable copy of the request's (read-only) array: what one
    program does to its values cannot reach the next program of the batch."""

    __slots__ = ("_a",)

    def __init__(self, arrays: dict[str, np.ndarray]):
        object.__setattr__(self, "_a", arrays)

    def __getattr__(self, name):
        try:
            return torch.from_numpy(np.array(self._a[name]))
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("features are read-only")


def _fd_targets() -> dict[int, str]:
    out = {}
    for f in os.listdir("/proc/self/fd"):
        try:
            out[int(f)] = os.readlink(f"/proc/self/fd/{f}")
        except OSError:  # the descriptor listdir itself used
            continue
    return out


def _vm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _warm_up() -> None:
    torch.set_num_threads(1)
    x = torch.rand(3, 4)
    for name, f in SAFE_FUNCTIONS.items():
        if name == "range":
            list(f(2))
        elif name in ("minimum", "maximum"):
            f(x, x)
        elif name == "clip":
            f(x, 0.1, 0.9)
        elif name == "where":
            f(x > 0.5, x, x)
        else:
            f(x)
    for dt in DTYPES.values():
        torch.broadcast_to(torch.zeros((), dtype=dt), (2, 3)).contiguous().numpy().tobytes()
    json.dumps(json.loads('{"a": [1.5]}'))


def lock_down(conn_fd: int, memory_mb: int) -> dict:
    """Steps 1-4 of the module docstring; returns what the parent may check (descriptors)."""
    _warm_up()
    vm = _vm_bytes() + memory_mb * 2**20  # read now: /proc cannot be opened after the limit
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    fds = _fd_targets()
    top = max(max(fds), conn_fd)
    for fd in range(top + 1):
        if fd not in fds:
            os.dup2(null, fd)
    limit = top + 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_AS, (vm, vm))
    # /proc cannot be opened any more: the table is the one read above plus the filled holes
    table = {fd: fds.get(fd, os.devnull) for fd in range(limit)}
    return {"fds": {str(k): v for k, v in table.items()}}


def _cpu_limit(seconds: float) -> None:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    used = ru.ru_utime + ru.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(used) + math.ceil(seconds) + 1  # the limit counts whole seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _send(conn, header: dict, data: bytes | None = None) -> None:
    conn.send_bytes(json.dumps(header).encode())
    if data is not None:
        conn.send_bytes(data)


class _Outbox:
    """Answers are sent in bundles: one bundle per ``FLUSH_S`` of work (and at the end of the
    batch), so the parent wakes up a few times per batch, not once per program. A bundle is a
    JSON header ``{"answers": [...]}`` and the concatenated scores of its successes."""

    def __init__(self, conn):
        self.conn, self.answers, self.chunks, self.size = conn, [], [], 0
        self.since = time.monotonic()

    def add(self, answer: dict, data: bytes | None = None) -> None:
        self.answers.append(answer)
        self.size += len(answer.get("reason", "")) + 32
        if data is not None:
            self.chunks.append(data)
        if time.monotonic() - self.since >= FLUSH_S or self.size > HEADER_MAX // 2:
            self.flush()

    def flush(self) -> None:
        if self.answers:
            _send(self.conn, {"answers": self.answers}, b"".join(self.chunks))
        self.answers, self.chunks, self.size = [], [], 0
        self.since = time.monotonic()


def _run_one(cache: dict, source: str, arrays, ref, time_limit: float) -> bytes:
    fn = cache.get(source)
    if fn is None:
        fn, _ = compile_source(source)
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[source] = fn
    out = run_compiled(fn, _CopyView(arrays), ref, time_limit)
    return out.contiguous().numpy().tobytes()


def serve(conn) -> None:
    """Answer ``("eval", request)`` messages until EOF or ``("exit",)``."""
    cache: dict[str, object] = {}
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        if msg[0] != "eval":
            return
        req = msg[1]
        arrays = req["feats"]
        for a in arrays.values():
            a.flags.writeable = False
        ref = torch.empty(req["shape"], dtype=DTYPES[req["dtype"]], device="meta")
        box = _Outbox(conn)
        for i, (source, time_limit) in zip(req["index"], req["programs"], strict=True):
            _cpu_limit(time_limit)
            try:
                data = _run_one(cache, source, arrays, ref, time_limit)
            except ProgramError as e:
                box.add({"i": i, "ok": False, "reason": str(e)[:REASON_MAX]})
                continue
            except BaseException as e:
                kind = "memory limit exceeded" if isinstance(e, MemoryError) else "runtime error"
                box.add({"i": i, "ok": False, "reason": f"{kind}: {type(e).__name__}"})
                continue
            box.add({"i": i, "ok": True}, data)
        box.flush()


def cli() -> None:
    """Process entry point: ``python -c "from epb.worker import cli; cli()" FD MEMORY_MB``
    (``FD``: this end of the socket pair the pool made)."""
    from multiprocessing.connection import Connection

    fd, memory_mb = int(sys.argv[1]), int(sys.argv[2])
    conn = Connection(fd)
    try:
        info = lock_down(conn.fileno(), memory_mb)
        _send(conn, {"ready": True, "pid": os.getpid(), **info})
        serve(conn)
    except BaseException:
        os._exit(3)
    os._exit(0)  # skip interpreter teardown: nothing of the worker's state needs flushing
