"""L1: the worker threads both backends make system calls in.

A small pool of daemon threads (a request blocked forever, a read of an idle
pipe say, never holds up the interpreter's exit), started as requests need
them.  Each request is the plain system call twin of an io_uring prep
function (``TWINS``); cffi releases the GIL during the call.  Workers block
all signals, so that signals reach the main thread; system calls interrupted
anyway are retried in C.  Stopping a request a worker makes interrupts its
call with a real-time signal to that thread only (``STOP_SIGNAL``), as the
kernel's cancellation does; the call may have completed first.

``ThreadRing`` (``_threads``) makes every blocking request here; ``Ring``
(``_ring``) makes here just the requests whose opcode the kernel lacks
(``EMULATED``), so opcodes fall back one by one, never the whole ring.
"""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ._core import Op
from ._liburing import ffi, lib

__all__ = ["EMULATED", "STOP_SIGNAL", "TWINS", "opcode_of", "run_in_worker", "stop_in_worker", "twin_call",
           "workers"]

_PREP_POLL = lib.aior_prep_poll
_ECANCELED = -errno.ECANCELED

# Each prep function, its system call twin, and its opcode (None: in args[0]).
TWINS: dict[Any, tuple[Any, int | None]] = {
    None: (None, None),  # a read or write the core prepares itself (see twin_call)
    lib.aior_prep_rw: (lib.aior_sync_rw, None),
    lib.aior_prep_rw_sqe: (lib.aior_sync_rw_sqe, None),
    lib.aior_prep_msg: (lib.aior_sync_msg, None),
    lib.aior_prep_openat: (lib.aior_sync_openat, lib.IORING_OP_OPENAT),
    lib.aior_prep_close: (lib.aior_sync_close, lib.IORING_OP_CLOSE),
    lib.aior_prep_statx: (lib.aior_sync_statx, lib.IORING_OP_STATX),
    lib.aior_prep_unlinkat: (lib.aior_sync_unlinkat, lib.IORING_OP_UNLINKAT),
    lib.aior_prep_renameat: (lib.aior_sync_renameat, lib.IORING_OP_RENAMEAT),
    lib.aior_prep_mkdirat: (lib.aior_sync_mkdirat, lib.IORING_OP_MKDIRAT),
    lib.aior_prep_linkat: (lib.aior_sync_linkat, lib.IORING_OP_LINKAT),
    lib.aior_prep_symlinkat: (lib.aior_sync_symlinkat, lib.IORING_OP_SYMLINKAT),
    lib.aior_prep_fallocate: (lib.aior_sync_fallocate, lib.IORING_OP_FALLOCATE),
    lib.aior_prep_accept: (lib.aior_sync_accept, lib.IORING_OP_ACCEPT),
    lib.aior_prep_connect: (lib.aior_sync_connect, lib.IORING_OP_CONNECT),
    lib.aior_prep_splice: (lib.aior_sync_splice, lib.IORING_OP_SPLICE),
    lib.aior_prep_shutdown: (lib.aior_sync_shutdown, lib.IORING_OP_SHUTDOWN),
}
# Opcodes made as system calls when the kernel lacks them.
EMULATED = frozenset({
    lib.IORING_OP_READ, lib.IORING_OP_WRITE, lib.IORING_OP_READV, lib.IORING_OP_WRITEV,
    lib.IORING_OP_RECV, lib.IORING_OP_SEND, lib.IORING_OP_SENDMSG, lib.IORING_OP_RECVMSG,
    lib.IORING_OP_FSYNC, lib.AIOR_OP_FTRUNCATE,
    *(opcode for _, opcode in TWINS.values() if opcode is not None),
})


def opcode_of(op: Op) -> int:
    """The io_uring opcode of `op`'s request."""
    prep = op.prep
    if prep is _PREP_POLL:
        return int(lib.IORING_OP_POLL_ADD)
    opcode = TWINS[prep][1]
    return op.args[0] if opcode is None else opcode


# ------------------------------------------------------------ worker pool
# The signal that stops a worker's blocked call (see _build_cffi.py).
STOP_SIGNAL = signal.SIGRTMAX - 3
# A stop signal can come just before the call blocks: it is sent again
# this often until the request is done.
_STOP_AGAIN = 0.01


class _Pool:
    """Daemon worker threads, started as requests need them, up to `size`."""

    def __init__(self, size: int) -> None:
        ret = lib.aior_stop_signal_setup(STOP_SIGNAL)
        if ret < 0:
            raise OSError(-ret, os.strerror(-ret))
        self._size = size
        self._queue: queue.SimpleQueue[tuple[int, Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)  # notified as each request ends
        self._threads = 0
        self._idle = 0
        self._next = 0
        self._queued: set[int] = set()  # requests no worker took yet
        self._running: dict[int, int] = {}  # request -> the thread making it
        self._dropped: set[int] = set()  # queued requests stopped before they started

    def submit(self, fn: Callable[..., None], *args: Any) -> int:
        """Queue fn(*args, request) for a worker; returns the request's id."""
        with self._lock:
            self._next = self._next % 0x7FFFFFFF + 1
            request = self._next
            self._queued.add(request)
            if self._idle:
                self._idle -= 1  # this request takes an idle worker
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"aioring-{self._threads}", daemon=True).start()
        self._queue.put((request, fn, args))
        return request

    def stop(self, request: int) -> bool:
        """Interrupt `request`'s call (or drop it if not started); False once it is done."""
        with self._lock:
            thread = self._running.get(request)
            if thread is not None:
                lib.aior_stop_request(thread, STOP_SIGNAL, request)
                return True
            if request in self._queued:
                self._dropped.add(request)
            return False

    def finish(self, requests: Iterable[int]) -> None:
        """Stop `requests` and wait until no worker makes any of them (a ring
        closes).  The stop signal is sent again and again: one that comes just
        before a call blocks is not seen by it."""
        left = set(requests)
        with self._finished:
            while True:
                left = {r for r in left if r in self._running or r in self._queued}
                if not left:
                    return
                for request in left:
                    thread = self._running.get(request)
                    if thread is not None:
                        lib.aior_stop_request(thread, STOP_SIGNAL, request)
                    else:
                        self._dropped.add(request)
                self._finished.wait(_STOP_AGAIN)

    def _work(self) -> None:
        # Signals go to the main thread; only the stop signal reaches a worker.
        signal.pthread_sigmask(signal.SIG_SETMASK, signal.valid_signals() - {STOP_SIGNAL})
        me = threading.get_ident()
        while True:
            request, fn, args = self._queue.get()
            with self._lock:
                self._queued.discard(request)
                dropped = request in self._dropped
                if dropped:
                    self._dropped.discard(request)
                else:
                    self._running[request] = me
            fn(*args, request, dropped)
            del fn, args  # what the call touched goes now, not at the next request
            with self._lock:
                self._running.pop(request, None)
                self._idle += 1
                self._finished.notify_all()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def workers() -> _Pool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _Pool(min(32, (os.cpu_count() or 1) + 4))
    return _pool


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool = None  # the parent's workers do not exist here
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _call(twin: Any, args: tuple[Any, ...], keep: Any, done: Callable[[int], None],
          request: int, dropped: bool) -> None:
    """In a worker: make the call, report its result.  `keep` (what the call
    touches) is held until the call returned, whatever happened to the op."""
    if dropped:
        res = _ECANCELED
    else:
        lib.aior_begin(request)
        try:
            res = twin(*args)
        except BaseException:  # pragma: no cover - the C twins do not raise
            res = -errno.EIO
        lib.aior_end()
    if type(keep) is _Own:
        ffi.release(keep.export)  # before the caller hears: its memoryview can be released at once
    done(res)


def run_in_worker(op: Op, done: Callable[[int], None]) -> int:
    """Make `op`'s request in a worker thread; done(result) is called there.
    Returns the request's id, for stop_in_worker."""
    return workers().submit(_call, *twin_call(op), done)


_CHARS = ffi.typeof("char[]")


class _Own:
    """twin_call's own export of an op's pinned buffer, released by the
    worker as soon as its call returned."""

    __slots__ = ("export",)

    def __init__(self, export: Any) -> None:
        self.export = export


def twin_call(op: Op) -> tuple[Any, tuple[Any, ...], Any]:
    """(twin, its arguments, what the call touches) of `op`'s request.  A
    read or write the core prepares itself (op.prep None, see src/core.h)
    names its memory by op's pin and a start in it: the call gets an export
    of the pinned object of its own, which it holds until it returned."""
    if op.prep is not None:
        return TWINS[op.prep][0], op.args, op.keep
    args = op.args
    pinned = op.pinned
    export = ffi.NULL if pinned is None else ffi.from_buffer(_CHARS, pinned)
    twin = lib.aior_sync_rw if len(args) == 6 else lib.aior_sync_rw_sqe
    return twin, (args[0], args[1], export + args[2], *args[3:]), None if pinned is None else _Own(export)


def stop_in_worker(loop: asyncio.AbstractEventLoop, request: int, pending: Callable[[], bool]) -> None:
    """Interrupt `request` (as the kernel cancels a blocked request), again
    and again while pending() says its result has not come back."""
    if pending() and workers().stop(request):
        loop.call_later(_STOP_AGAIN, stop_in_worker, loop, request, pending)


