"""The sandbox pool: programs run in separate worker processes with operating-system limits.

The AST allow-list of :mod:`epb.programs` is the first, cheap filter; this module is the second
line. A :class:`Sandbox` keeps a few workers (:mod:`epb.worker`), each a fresh interpreter
(``python -c``: nothing of this process is inherited and its main module is not re-imported,
unlike multiprocessing's spawn and forkserver), started once and reused. :meth:`Sandbox.evaluate`
sends one batch (the programs plus only the features they read, as numpy arrays) to each worker
and reads the answers back in program order, so

* a program's output is plain bytes of a known shape and dtype, checked again here (finite,
  clamped) and never unpickled,
* a worker silent for longer than its allowance (``2 x time_limit + grace``) is killed and
  replaced; a worker that dies (``SIGXCPU`` from its CPU limit, anything) likewise,
* the program it was running gets a :class:`~epb.programs.ProgramError` with the reason: the
  answers come in bundles (a few per batch, so the parent wakes up rarely), so when more than
  one program of the share was unanswered each is run again alone to find which one it was.

Example:
    >>> import torch
    >>> from epb.programs import compile_program
    >>> box = Sandbox(workers=1)
    >>> feats = {"d_cur": torch.rand(3, 5)}
    >>> (out,) = box.evaluate([compile_program("def score(s):\\n    return -s.d_cur")], feats)
    >>> bool(torch.equal(out, -feats["d_cur"]))
    True
    >>> box.close()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait

import torch
from torch import Tensor

from . import worker as _worker
from .programs import SCORE_CLAMP, Program, ProgramError

DEFAULT_WORKERS = 2
DEFAULT_MEMORY_MB = 1024
START_TIMEOUT = 120.0  # a worker imports torch: seconds, more on a loaded machine


class _Worker:
    """One worker: a fresh interpreter (``python -c`` running :func:`epb.worker.cli`, so no
    state of this process and no re-import of its main module) joined by a socket pair."""

    def __init__(self, memory_mb: int):
        mine, theirs = socket.socketpair()
        code = "from epb.worker import cli; cli()"
        cmd = [sys.executable, "-c", code, str(theirs.fileno()), str(memory_mb)]
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                close_fds=True,
            )
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.info: dict = {}

    def wait_ready(self, timeout: float) -> None:
        if not self.conn.poll(timeout):
            self.kill()
            raise RuntimeError(f"epb sandbox worker did not start within {timeout:g}s")
        try:
            head = json.loads(self.conn.recv_bytes(_worker.HEADER_MAX))
        except (EOFError, OSError, ValueError):
            self.kill()
            raise RuntimeError(
                f"epb sandbox worker failed to start (exit code {self.proc.poll()})"
            ) from None
        if not head.get("ready"):
            self.kill()
            raise RuntimeError("epb sandbox worker sent no ready message")
        self.info = head

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.conn.close()
        return self.proc.returncode


def _death_reason(code: int | None, killed_for_time: float | None) -> str:
    if killed_for_time is not None:
        return f"wall-clock time limit of {killed_for_time:g}s exceeded (worker killed)"
    if code == -signal.SIGXCPU:
        return "CPU time limit exceeded (worker killed by SIGXCPU)"
    if code == -signal.SIGKILL:
        return "worker killed by SIGKILL (memory exhausted?)"
    if code is not None and code < 0:
        return f"worker killed by signal {signal.Signals(-code).name}"
    return f"worker died (exit code {code})"


class Sandbox:
    """A pool of locked-down worker processes evaluating programs in batches.

    Args:
        workers: processes in the pool (a batch is split between them).
        memory_mb: address space each worker may add to what it holds after start-up.
        grace: seconds added to ``2 x time_limit`` before the parent kills a silent worker
            (transfer, start-up of a replacement, a loaded machine).
    """

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        memory_mb: int = DEFAULT_MEMORY_MB,
        grace: float = 2.0,
    ):
        if not (isinstance(workers, int) and workers >= 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if not (isinstance(memory_mb, int) and memory_mb >= 64):
            raise ValueError(f"memory_mb must be an int >= 64, got {memory_mb!r}")
        if not grace > 0:
            raise ValueError(f"grace must be positive, got {grace!r}")
        self.n_workers, self.memory_mb, self.grace = workers, memory_mb, grace
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        #: counters: batches, programs, rejected (any ProgramError), restarts
        self.stats = {"batches": 0, "programs": 0, "rejected": 0, "restarts": 0}
        #: per wall-clock kill: (seconds the worker had been silent, its allowance)
        self.kills: list[tuple[float, float]] = []

    # -- pool management ---------------------------------------------------------------------
    def start(self) -> Sandbox:
        """Start the workers now (otherwise the first :meth:`evaluate` does)."""
        with self._lock:
            self._ensure_started()
        return self

    def _ensure_started(self) -> None:
        if self._pid != os.getpid():  # a forked copy must not share the parent's pipes
            self._workers, self._pid = [], os.getpid()
        missing = self.n_workers - len(self._workers)
        if missing > 0:
            fresh = [_Worker(self.memory_mb) for _ in range(missing)]
            for w in fresh:
                w.wait_ready(START_TIMEOUT)
            self._workers.extend(fresh)

    def _replace(self, w: _Worker) -> _Worker:
        new = _Worker(self.memory_mb)
        new.wait_ready(START_TIMEOUT)
        self._workers[self._workers.index(w)] = new
        self.stats["restarts"] += 1
        return new

    @property
    def alive(self) -> bool:
        """Every worker process is running."""
        return len(self._workers) == self.n_workers and all(
            w.proc.poll() is None for w in self._workers
        )

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def worker_info(self) -> list[dict]:
        """What each worker reported when it started (its descriptor table)."""
        return [w.info for w in self._workers]

    def close(self) -> None:
        """Stop the workers (a later :meth:`evaluate` starts new ones)."""
        with self._lock:
            for w in self._workers:
                if self._pid == os.getpid():
                    w.kill()
            self._workers = []

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(
        self, programs: Sequence[Program], feats: dict[str, Tensor]
    ) -> list[Tensor | ProgramError]:
        """Scores of each program on the states of ``feats`` (``feats["d_cur"]``-shaped), or
        the :class:`ProgramError` it ended with; order as given."""
        programs = list(programs)
        if not programs:
            return []
        ref = feats["d_cur"]
        dtype = str(ref.dtype).removeprefix("torch.")
        if dtype not in _worker.DTYPES:
            raise ValueError(f"features must be float32 or float64, got {ref.dtype}")
        arrays = {}
        for p in programs:
            for f in p.features:
                if f not in arrays:
                    if f not in feats:
                        raise ValueError(f"program {p.name!r} reads {f!r}, missing from feats")
                    arrays[f] = feats[f].detach().to("cpu", ref.dtype).numpy()
        with self._lock:
            self._ensure_started()
            results: list = [None] * len(programs)
            suspects = self._round(
                programs, list(range(len(programs))), arrays, ref, dtype, results
            )
            if len(suspects) == 1:  # everything else of its share was answered: it is the one
                ((i, why),) = suspects.items()
                results[i] = ProgramError(why)
            else:  # a worker died with several unanswered: run each alone to find the culprit
                for i in suspects:
                    alone = self._round(programs, [i], arrays, ref, dtype, results)
                    if alone:
                        results[i] = ProgramError(alone[i])
            self.stats["batches"] += 1
            self.stats["programs"] += len(programs)
            self.stats["rejected"] += sum(isinstance(r, ProgramError) for r in results)
        return results

    def _round(self, programs, todo, arrays, ref, dtype, results) -> dict[int, str]:
        """Send ``todo`` split over the workers, fill ``results``; returns the programs left
        unanswered by a worker that died or was killed, with the reason."""
        n_w = min(len(self._workers), len(todo))
        shares = [todo[j::n_w] for j in range(n_w)]
        pending: dict[_Worker, deque] = {}
        deadline: dict[_Worker, float] = {}
        heard: dict[_Worker, float] = {}  # when each worker was last sent to or heard from
        suspects: dict[int, str] = {}
        for w, share in zip(self._workers[:n_w], shares, strict=True):
            req = {
                "index": share,
                "programs": [(programs[i].source, programs[i].time_limit) for i in share],
                "feats": {f: arrays[f] for f in {f for i in share for f in programs[i].features}},
                "shape": tuple(ref.shape),
                "dtype": dtype,
            }
            payload = pickle.dumps(("eval", req), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                w.conn.send_bytes(payload)
            except OSError:  # it died between batches (nothing of this one's doing): replace it
                w.kill()
                w = self._replace(w)
                w.conn.send_bytes(payload)
            pending[w] = deque(share)
            heard[w] = time.monotonic()
            deadline[w] = heard[w] + self._allowance(programs, share)
        while pending:
            now = time.monotonic()
            ready = wait([w.conn for w in pending], timeout=max(0.0, min(deadline.values()) - now))
            by_conn = {w.conn: w for w in pending}
            for conn in ready:
                w = by_conn[conn]
                reason = self._receive(w, pending[w], ref, results)
                if reason is not None:  # died or misbehaved: what it had not answered is suspect
                    suspects.update(dict.fromkeys(pending.pop(w), reason))
                    deadline.pop(w)
                elif pending[w]:
                    heard[w] = time.monotonic()
                    deadline[w] = heard[w] + self._allowance(programs, pending[w])
                else:
                    pending.pop(w)
                    deadline.pop(w)
            now = time.monotonic()
            for w in [w for w in pending if deadline[w] <= now and w.conn not in ready]:
                allowed = self._allowance(programs, pending[w])
                w.kill()
                self.kills.append((now - heard[w], allowed))
                suspects.update(dict.fromkeys(pending.pop(w), _death_reason(None, allowed)))
                deadline.pop(w)
                self._replace(w)
        return suspects

    def _allowance(self, programs, waiting) -> float:
        """Seconds a worker may stay silent: the answers come in bundles of ``FLUSH_S`` of work,
        so the next one is due within the slowest waiting program's limit (x 2) + that."""
        return 2 * max(programs[i].time_limit for i in waiting) + _worker.FLUSH_S + self.grace

    def _receive(self, w: _Worker, waiting: deque, ref, results) -> str | None:
        """Read one bundle of ``w`` into ``results`` (popping ``waiting``); the reason when the
        worker had to go (it is then killed and replaced), else None."""
        nbytes = ref.numel() * ref.element_size()
        try:
            head = json.loads(w.conn.recv_bytes(_worker.HEADER_MAX))
            answers = head["answers"]
            if not (isinstance(answers, list) and 0 < len(answers) <= len(waiting)):
                raise ValueError("bad bundle")
            if [a["i"] for a in answers] != list(waiting)[: len(answers)]:
                raise ValueError("out-of-order answers")
            n_ok = sum(a["ok"] is True for a in answers)
            if not w.conn.poll(self.grace):  # a header promising scores that never come
                raise ValueError("scores announced but not sent")
            data = w.conn.recv_bytes(max(1, n_ok * nbytes))
            if len(data) != n_ok * nbytes:
                raise ValueError(f"{len(data)} bytes of scores, expected {n_ok * nbytes}")
        except (EOFError, OSError, ValueError, TypeError, KeyError):
            code = w.kill()
            self._replace(w)
            return _death_reason(code, None)
        k = 0
        for a in answers:
            i = waiting.popleft()
            if a["ok"] is not True:
                results[i] = ProgramError(str(a.get("reason", "rejected"))[: _worker.REASON_MAX])
                continue
            out = torch.frombuffer(bytearray(data[k : k + nbytes]), dtype=ref.dtype)
            out = out.reshape(ref.shape)
            k += nbytes
            if not (torch.isfinite(out).all() and out.abs().max() <= SCORE_CLAMP):
                results[i] = ProgramError("worker returned non-finite or unclamped scores")
            else:
                results[i] = out.to(ref.device)  # where the caller's features live
        return None


_DEFAULT: dict[str, Sandbox] = {}


def default_sandbox() -> Sandbox:
    """The process-wide pool :func:`epb.programs.evaluate` uses (started on first use, closed
    at exit)."""
    box = _DEFAULT.get("box")
    if box is None:
        box = _DEFAULT["box"] = Sandbox()
        atexit.register(box.close)
    return box


__all__ = ["Sandbox", "default_sandbox"]
