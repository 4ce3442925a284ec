"""L1: the fallback backend, for a kernel without io_uring.

Where io_uring_setup fails (ENOSYS on an old or stripped kernel, EPERM under
Docker's and Kubernetes' default seccomp profiles or with
``kernel.io_uring_disabled``, ENOMEM from RLIMIT_MEMLOCK on old kernels),
``ThreadRing`` stands in for ``Ring``: the same interface (``RingBase``), with
its in-flight table, backpressure, cancellation and completion code, and
each request made as the plain system call it describes.  Every layer above
stays the same, so every public API behaves the same on both backends.

* A request on an fd that cannot block (a non-blocking socket or pipe) is
  made at once in the loop's thread; its result is "ready at submit", as a
  cached read is on the ring.  EAGAIN from it goes through the ring's usual
  poll-and-retry, and a poll is ``loop.add_reader`` or ``loop.add_writer``.
* Anything else (files, paths, blocking fds) is made in a worker thread
  (``_workers``).
* Completions from workers come back through an eventfd on
  ``loop.add_reader``, in batches, like the ring's CQEs.
* Cancelling a request a worker makes interrupts its call and waits for its
  result, as the kernel's cancellation does; the call may have completed
  first.  Closing the ring interrupts every call its workers make and waits
  until each returned, as Ring.close waits for the kernel: memory is never
  freed under a system call.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import threading
from collections import deque

from ._binding import (OP_ASYNC_CANCEL, OP_POLL_ADD, OP_READ, OP_READV, OP_RECV, OP_RECVMSG, OP_SEND,
                       OP_SENDMSG, OP_WRITE, OP_WRITEV, PREP_OPCODE, SYNC_OPCODES, fd_may_block, prep_accept,
                       prep_connect, prep_poll, prep_shutdown, sync)
from ._core import Op
from ._ringbase import _DONE, _SUBMITTED, DEFAULT_ENTRIES, RingBase, _kept_forever
from ._workers import run_in_worker, stop_in_worker, workers

__all__ = ["ThreadRing"]

# Requests that complete at once on a non-blocking socket or pipe: made in
# the loop's thread there.  (fd position in args by prep function.)
_MAY_INLINE = {OP_READ, OP_WRITE, OP_READV, OP_WRITEV, OP_RECV, OP_SEND, OP_SENDMSG, OP_RECVMSG}
_FD_AT = {prep_accept: 0, prep_connect: 0, prep_shutdown: 0}
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


# ------------------------------------------------------------- the backend
class ThreadRing(RingBase):
    """The ring interface without io_uring (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 1:
            raise ValueError("entries must be at least 1")
        self._closed = True
        self.setup_flags = 0
        self.features = 0
        self.sq_entries = entries
        self.cq_entries = 2 * entries
        self._supported = SYNC_OPCODES | {OP_POLL_ADD, OP_ASYNC_CANCEL}
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

    def hurry(self) -> None:
        """(Each op goes to a worker as it starts: nothing waits for a flush.)"""

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
        elif prep is prep_poll:
            self._watch(key, args[0], args[1])
        else:
            if PREP_OPCODE[prep] is None:  # (the opcode in args[0], the fd in args[1])
                inline = args[0] in _MAY_INLINE
                fd = args[1]
            else:
                inline = prep in _FD_AT
                fd = args[0]
            if inline and not fd_may_block(fd):
                self._finish(key, sync(prep, args, op.pinned))
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
                self._in_workers[key] = run_in_worker(op, lambda res: self._from_worker(key, res))
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
    def _drain(self) -> None:
        """Closing: polls end at once, calls in workers are interrupted and
        waited for (see the module docstring)."""
        for watched in list(self._watched):
            self._unwatch(*watched)
        ops = list(self._ops.values())
        self._ops.clear()
        try:
            if self._in_workers:
                workers().finish(self._in_workers.values())
        except BaseException:
            _kept_forever.extend(ops)  # interrupted: never free what a worker may still touch
            raise
        finally:
            self._in_workers.clear()
            came = dict(self._done)  # (results no harvest took: a created file's fd, say)
            self._done.clear()
            with self._wake_lock:  # (a worker reporting a result writes to it under the lock)
                os.close(self._efd)
        for op in ops:
            self._drop(op, came.get(op.key, _ECANCELED))

    def _forsake(self) -> None:
        # The parent's workers do not exist here; the duplicates are this process's.
        self._watched.clear()
        self._polls.clear()
        for fd in self._dups:
            os.close(fd)
        self._dups.clear()
