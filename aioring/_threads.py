"""L1: the fallback backend, for a kernel without io_uring or an opcode.

Where io_uring_setup fails (ENOSYS on an old or stripped kernel, EPERM under
Docker's and Kubernetes' default seccomp profiles or with
``kernel.io_uring_disabled``, ENOMEM from RLIMIT_MEMLOCK on old kernels),
``ThreadRing`` stands in for ``Ring``: the same interface, in-flight table,
backpressure, cancellation and completion code, with each request made as
the plain system call it describes.  Every layer above stays the same, so
every public API behaves the same on both backends.

* A request on an fd that cannot block (a non-blocking socket or pipe) is
  made at once in the loop's thread; its result is "ready at submit", as a
  cached read is on the ring.  EAGAIN from it goes through the ring's usual
  poll-and-retry, and a poll is ``loop.add_reader`` or ``loop.add_writer``.
* Anything else (files, paths, blocking fds) is made in a worker thread of
  a small pool of daemon threads (a request blocked forever, a read of an
  idle pipe say, never holds up the interpreter's exit).  cffi releases the
  GIL during the call.  Workers block all signals, so that signals reach the
  main thread; system calls interrupted anyway are retried in C.
* Completions from workers come back through an eventfd on
  ``loop.add_reader``, in batches, like the ring's CQEs.
* Cancelling a request a worker makes interrupts its call (a signal to the
  worker) and waits for its result, as the kernel's cancellation does; the
  call may have completed first.  Closing the ring interrupts every call its
  workers make and waits until each returned, as Ring.close waits for the
  kernel: memory is never freed under a system call.

A ring whose kernel lacks an opcode (the probe says so) makes just those
requests through ``run_in_worker`` (Ring._emulate) and everything else on the
ring: opcodes fall back one by one, never the whole ring.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import queue
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ._liburing import ffi, lib
from ._ring import _DONE, _SUBMITTED, DEFAULT_ENTRIES, Op, Ring, _kept_forever

__all__ = ["EMULATED", "ThreadRing", "opcode_of", "run_in_worker"]

_PREP_RW = lib.aior_prep_rw
_PREP_MSG = lib.aior_prep_msg
_PREP_POLL = lib.aior_prep_poll

# Each prep function, its system call twin, and its opcode (None: in args[0]).
_TWINS: dict[Any, tuple[Any, int | None]] = {
    None: (None, None),  # a read or write the core prepares itself (see _twin_call)
    _PREP_RW: (lib.aior_sync_rw, None),
    lib.aior_prep_rw_sqe: (lib.aior_sync_rw_sqe, None),
    _PREP_MSG: (lib.aior_sync_msg, None),
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
    *(opcode for _, opcode in _TWINS.values() if opcode is not None),
})
# Requests that complete at once on a non-blocking socket or pipe: made in
# the loop's thread there.  (fd position in args by prep function.)
_MAY_INLINE = {lib.IORING_OP_READ, lib.IORING_OP_WRITE, lib.IORING_OP_READV, lib.IORING_OP_WRITEV,
               lib.IORING_OP_RECV, lib.IORING_OP_SEND, lib.IORING_OP_SENDMSG, lib.IORING_OP_RECVMSG}
_FD_AT = {lib.aior_prep_accept: 0, lib.aior_prep_connect: 0, lib.aior_prep_shutdown: 0}
_POLLIN = 1
_POLLOUT = 4
_ECANCELED = -errno.ECANCELED


def _open_for(fd: int, mask: int) -> bool:
    """Whether `fd` is open for reading (mask POLLIN) or writing (POLLOUT):
    what the kernel checks first in a read or write, and fails with EBADF."""
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except (OSError, ValueError):  # closed, or -1
        return False
    return mode != (os.O_WRONLY if mask & _POLLIN else os.O_RDONLY)


def opcode_of(op: Op) -> int:
    """The io_uring opcode of `op`'s request."""
    prep = op.prep
    if prep is _PREP_POLL:
        return int(lib.IORING_OP_POLL_ADD)
    opcode = _TWINS[prep][1]
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


def _workers() -> _Pool:
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
    done(res)


def run_in_worker(op: Op, done: Callable[[int], None]) -> int:
    """Make `op`'s request in a worker thread; done(result) is called there.
    Returns the request's id, for stop_in_worker."""
    return _workers().submit(_call, *_twin_call(op), done)


_CHARS = ffi.typeof("char[]")


def _twin_call(op: Op) -> tuple[Any, tuple[Any, ...], Any]:
    """(twin, its arguments, what the call touches) of `op`'s request.  A
    read or write the core prepares itself (op.prep None, see src/core.h)
    names its memory by op's pin and a start in it: the call gets an export
    of the pinned object of its own, which it holds until it returned."""
    if op.prep is not None:
        return _TWINS[op.prep][0], op.args, op.keep
    args = op.args
    pinned = op.pinned
    export = ffi.NULL if pinned is None else ffi.from_buffer(_CHARS, pinned)
    twin = lib.aior_sync_rw if len(args) == 6 else lib.aior_sync_rw_sqe
    return twin, (args[0], args[1], export + args[2], *args[3:]), export


def stop_in_worker(loop: asyncio.AbstractEventLoop, request: int, pending: Callable[[], bool]) -> None:
    """Interrupt `request` (as the kernel cancels a blocked request), again
    and again while pending() says its result has not come back."""
    if pending() and _workers().stop(request):
        loop.call_later(_STOP_AGAIN, stop_in_worker, loop, request, pending)


# ------------------------------------------------------------- the backend
class ThreadRing(Ring):
    """Ring's interface without io_uring (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 1:
            raise ValueError("entries must be at least 1")
        self._closed = True
        self.setup_flags = 0
        self.features = 0
        self.sq_entries = entries
        self.cq_entries = 2 * entries
        self._supported = EMULATED | {lib.IORING_OP_POLL_ADD, lib.IORING_OP_ASYNC_CANCEL}
        self._lacking = frozenset()
        self._emulated = {}
        self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._init_table(loop, self.cq_entries)
        self._wake_lock = threading.Lock()  # a worker never writes to a closed eventfd
        self._done: deque[tuple[int, int]] = deque()  # (key, result) from workers
        self._in_workers: dict[int, int] = {}  # key -> the worker's request id
        self._polls: dict[int, tuple[int, int]] = {}  # key -> (fd, POLLIN or POLLOUT)
        self._watched: dict[tuple[int, int], list[int]] = {}  # (fd, direction) -> keys
        self._dups: set[int] = set()  # the duplicates of fds the loop watches (see _watch)
        loop.add_reader(self._efd, self._on_wakeup)

    @property
    def fd(self) -> int:
        return -1

    # ------------------------------------------------------------ submitting
    def _launch(self, loop: asyncio.AbstractEventLoop, op: Op) -> Op:
        if not op.unbounded and (self._waiting or len(self._ops) - self._core.unbounded >= self._limit):
            op.future = loop.create_future()
            self._waiting.append(op)
            self.stats["backpressured"] += 1
            self._schedule_flush(loop)
            return op
        self._prep(op)
        if op.state != _DONE:
            op.future = loop.create_future()
        return op

    def restart(self, loop: asyncio.AbstractEventLoop, op: Op) -> None:
        if self._closed:
            raise RuntimeError("this io_uring is closed")
        op.readied = False
        op.cancelled = False
        self._prep(op)

    def _prep(self, op: Op) -> bool:
        key = self._new_key()
        op.key = key
        op.state = _SUBMITTED
        self._ops[key] = op
        if op.unbounded:
            self._core.unbounded += 1
        self._core.submit_calls += 1
        prep = op.prep
        args = op.args
        if op.polling:
            self._watch(key, args[_FD_AT.get(prep, 1)], op.poll_mask)
        elif prep is _PREP_POLL:
            self._watch(key, args[0], args[1])
        else:
            twin, opcode = _TWINS[prep]
            if opcode is None:
                inline = args[0] in _MAY_INLINE
                fd = args[1]
            else:
                inline = prep in _FD_AT
                fd = args[0]
            if inline and not lib.aior_fd_may_block(fd):
                twin, args, _ = _twin_call(op)
                self._finish(key, twin(*args))
            elif inline and op.unbounded and op.poll_mask and not _open_for(fd, op.poll_mask):
                self._finish(key, -errno.EBADF)  # a read of a write-only fd would never be ready
            elif inline and op.unbounded and op.poll_mask and not op.readied:
                # It may wait for a peer on a blocking fd: wait for readiness
                # in the loop first, so that no worker blocks on it (a pool
                # full of idle pipe reads would starve everything else).
                op.readied = True
                op.polling = True
                self._watch(key, fd, op.poll_mask)
            else:
                op.readied = False
                self._in_workers[key] = _workers().submit(
                    _call, *_twin_call(op), lambda res: self._from_worker(key, res))
        return True

    def _submit_queued(self) -> None:
        pass  # every request left when it was made

    # ------------------------------------------------------------ completing
    def _finish(self, key: int, res: int) -> None:
        """A result made in the loop's thread: complete it as a CQE."""
        self._core.complete_batch([(key, res)])
        if self._waiting:
            self._schedule_flush()

    def _from_worker(self, key: int, res: int) -> None:
        # In a worker thread.
        self._done.append((key, res))
        with self._wake_lock:
            if not self._closed:
                os.eventfd_write(self._efd, 1)

    def _on_wakeup(self) -> None:
        if self._closed:
            return
        self._core.wakeups += 1
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        done = self._done
        while done:
            batch = []
            while done:
                key, res = done.popleft()
                self._in_workers.pop(key, None)
                batch.append((key, res))
            self._core.complete_batch(batch)
        if self._waiting:
            self._schedule_flush()

    # --------------------------------------------------------------- polls
    def _watch(self, key: int, fd: int, mask: int) -> None:
        """A poll: wait for the loop to see `fd` ready (POLLIN or POLLOUT).

        The loop watches a duplicate of `fd`, which holds the file as the
        kernel's poll does: a socket shut down and closed before the loop
        polls again would otherwise drop out of epoll, its readiness unseen."""
        direction = _POLLOUT if mask & _POLLOUT and not mask & _POLLIN else _POLLIN
        loop = self._loop_ref()
        assert loop is not None
        try:
            watched = os.dup(fd)
        except OSError as exc:
            if exc.errno == errno.EBADF:
                self._finish(key, -errno.EBADF)  # what the kernel's poll answers
                return
            watched = fd  # out of fds: watch the fd itself
        keys = self._watched.get((watched, direction))
        if keys is None:
            try:
                if direction == _POLLIN:
                    loop.add_reader(watched, self._ready, watched, direction)
                else:
                    loop.add_writer(watched, self._ready, watched, direction)
            except (OSError, ValueError):
                # Not pollable (a regular file): always ready, as poll(2) says.
                if watched != fd:
                    os.close(watched)
                self._finish(key, direction)
                return
            keys = self._watched[(watched, direction)] = []
            if watched != fd:
                self._dups.add(watched)
        keys.append(key)
        self._polls[key] = (watched, direction)

    def _unwatch(self, fd: int, direction: int) -> list[int]:
        keys = self._watched.pop((fd, direction), [])
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            if direction == _POLLIN:
                loop.remove_reader(fd)
            else:
                loop.remove_writer(fd)
        if fd in self._dups:
            self._dups.discard(fd)
            os.close(fd)
        for key in keys:
            self._polls.pop(key, None)
        return keys

    def _ready(self, fd: int, direction: int) -> None:
        keys = self._unwatch(fd, direction)
        self._core.complete_batch([(key, direction) for key in keys])
        if self._waiting:
            self._schedule_flush()

    # ----------------------------------------------------------- cancelling
    def _unsubmit(self, key: int) -> bool:
        return False  # every request left when it was made (see _prep)

    def _cancel(self, target: int) -> None:
        """A poll ends at once; a call in a worker is interrupted (its result
        still comes back: the call may have completed first)."""
        if self._closed:
            return
        request = self._in_workers.get(target)
        if request is not None:
            self.stats["cancels"] += 1
            loop = self._loop_ref()
            if loop is not None:
                stop_in_worker(loop, request, lambda: not self._closed and target in self._in_workers)
            return
        watched = self._polls.get(target)
        if watched is None:
            return
        keys = self._watched[watched]
        keys.remove(target)
        del self._polls[target]
        if not keys:
            self._unwatch(*watched)
        self.stats["cancels"] += 1
        self._finish(target, _ECANCELED)

    # -------------------------------------------------------------- closing
    def close(self) -> None:
        """Fail every caller; polls end at once, calls in workers are
        interrupted and waited for (see the module docstring)."""
        if self._closed:
            return
        if os.getpid() != self._owner[0]:
            self._abandon()
            return
        loop = self._loop_ref()
        if loop is not None and loop.is_running() and threading.get_ident() != self._owner[1]:
            raise RuntimeError("a running loop's io_uring can only be closed from the loop's thread")
        with self._wake_lock:
            self._closed = True
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._efd)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        for watched in list(self._watched):
            self._unwatch(*watched)
        self._drop_stranded()
        while self._waiting:
            op = self._waiting.popleft()
            if op.state != _DONE:
                self._drop(op, _ECANCELED)
        ops = list(self._ops.values())
        self._ops.clear()
        try:
            if self._in_workers:
                _workers().finish(self._in_workers.values())
        except BaseException:
            _kept_forever.extend(ops)  # interrupted: never free what a worker may still touch
            raise
        finally:
            self._in_workers.clear()
            self._done.clear()
            os.close(self._efd)
        for op in ops:
            self._drop(op, _ECANCELED)

    def _abandon(self) -> None:
        """In a forked child: the parent's workers do not exist here."""
        if self._closed:
            return
        self._closed = True
        os.close(self._efd)
        ops = list(self._ops.values())
        self._ops.clear()
        ops.extend(self._waiting)
        self._waiting.clear()
        self._watched.clear()
        self._polls.clear()
        for fd in self._dups:
            os.close(fd)  # this process's copies
        self._dups.clear()
        for op in ops:
            if op.state != _DONE:
                self._drop(op, _ECANCELED)
