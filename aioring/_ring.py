"""L1: the io_uring of one event loop (``_loops`` makes one per running loop).

What a reader of this module needs (docs/design.md has the whole picture:
the invariants and the kernel behaviour they rely on):

* **Wakeups.**  The ring's registered eventfd goes to ``loop.add_reader``
  (the same on asyncio's loops and uvloop).  It is level-triggered, so the
  callback reads it before harvesting, in the same C call.

* **Submission.**  An operation only fills an SQE.  The first of a loop
  iteration is submitted at once, with eventfd notification off, and what
  completed inside the submit call is harvested there and returned without a
  future.  Later operations of the iteration wait for one flush scheduled
  with ``call_soon``; the task whose result was ready may submit at once up
  to EAGER_RUN more times first (measured: about 1.5x the throughput at one
  task and at 64).

* **Backpressure.**  No more operations are handed to the kernel than the CQ
  holds (IORING_FEAT_NODROP is required but never leaned on; only cancelled
  operations' ASYNC_CANCELs may briefly exceed it); the rest wait in a FIFO.

* **Ownership.**  The in-flight table holds, under a key never reused, every
  object the kernel may touch, until the operation's CQE arrives.

* **What the kernel has not seen is taken back.**  A cancelled op still
  waiting (backpressure, a full SQ, a retry after a poll), or whose SQE is
  still unsubmitted in the SQ, is withdrawn: its SQE becomes a NOP with the
  same tag (aior_withdraw) and its caller sees CancelledError at once.  The
  flush withdraws, before it submits, every op whose caller was cancelled
  since its SQE was prepared.  Once a task's cancel() was called, its op
  starts only if the kernel had it already.

* **Cancellation never frees.**  An op the kernel has gets an ASYNC_CANCEL,
  and its caller waits, shielded, for the original CQE, so the buffer may be
  reused at once; a result that arrived anyway is returned (no byte read or
  written is lost) and the cancellation redelivered at the task's next await
  unless the task took it back.

* **Closing drains** (cancel all, wait until the table is empty).

* **Fork.**  In a child (``_loops`` abandons the parent's rings at fork) a
  ring drops its copies of the mappings and fds without touching the
  parent's ring.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sys
import threading
import weakref
from collections import deque
from typing import Any
from collections.abc import Callable

from ._core import Core, Op
from ._liburing import ffi, lib
from ._redelivery import deliver_owed, owed, redeliver_later

__all__ = ["DEFAULT_ENTRIES", "Op", "Ring", "os_error", "ready", "setup_error"]

DEFAULT_ENTRIES = 256
# How many more operations the task whose first operation of an iteration
# completed at once may submit at once before it has to yield: bounded, so
# other tasks still run at least once every EAGER_RUN + 1 operations.
EAGER_RUN = 7
if sys.version_info >= (3, 12):
    _task_of = asyncio.current_task  # in C
else:  # asyncio.current_task is Python here, and asks for the running loop again
    _task_of = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
# Ring flags, most wanted first; EINVAL (a kernel without one) tries the next.
# SUBMIT_ALL (5.18): an SQE that fails early does not stop the rest of the
# batch.  COOP_TASKRUN (5.19): completions of work the kernel handed to its
# worker threads reach the loop's thread without an interrupt; with
# TASKRUN_FLAG the ring says when they wait to be run (the core's needs_enter).
# Measured: no change on page-cache reads, +30% on 32 concurrent STATX.
# SINGLE_ISSUER and DEFER_TASKRUN showed nothing more.
_SETUP_FLAGS = [lib.IORING_SETUP_SUBMIT_ALL | lib.IORING_SETUP_COOP_TASKRUN | lib.IORING_SETUP_TASKRUN_FLAG,
                lib.IORING_SETUP_SUBMIT_ALL, 0]

# Op.state (Op, the in-flight entry, is the core's: see src/core.h)
_WAITING = 0  # held back by backpressure, no SQE yet
_SUBMITTED = 1  # in the SQ or in the kernel: in the in-flight table
_DONE = 2  # its CQE arrived (or it was dropped before ever being submitted)

# The tag (user_data) of an op whose caller awaits its future has this bit
# set, so that the flush finds such ops among the unsubmitted SQEs in C
# (see _withdraw_cancelled) and skips the others (a stream's sends and receives).
_AWAITED = 1 << 62

_EAGAIN = -errno.EAGAIN
# Closing a ring waits this long for the kernel's next completion at most.
CLOSE_WAIT = 3.0
_ECANCELED = -errno.ECANCELED
_EBUSY = -errno.EBUSY
_RETRY_SUBMIT = frozenset((-errno.EAGAIN, -errno.EBUSY, -errno.EINTR))

# Opcodes every ring needs; the probe must find them.
_REQUIRED_OPS = {
    "READ": lib.IORING_OP_READ,
    "WRITE": lib.IORING_OP_WRITE,
    "FSYNC": lib.IORING_OP_FSYNC,
    "POLL_ADD": lib.IORING_OP_POLL_ADD,
    "ASYNC_CANCEL": lib.IORING_OP_ASYNC_CANCEL,
}


def os_error(res: int, filename: Any = None, filename2: Any = None) -> OSError:
    """The exception for a negative CQE result: OSError picks the PEP 3151 subclass."""
    code = -res
    if filename2 is not None:
        return OSError(code, os.strerror(code), filename, None, filename2)
    if filename is not None:
        return OSError(code, os.strerror(code), filename)
    return OSError(code, os.strerror(code))


def ready(op: Op) -> Any:
    """The result of an op that completed inside its submit call (no future)."""
    res = op.res
    if res < 0:
        _release(op)
        raise os_error(res)
    try:
        return res if op.finish is None else op.finish(op, res)
    finally:
        _release(op)


def _release(op: Op) -> None:
    """The kernel is done with op's memory: release it now, not when the last
    reference goes (a traceback can hold the caller's frame for a long time),
    so that a bytearray can be resized again the moment the call returns."""
    op.unpin()
    keep = op.keep
    if keep is not None:
        op.keep = None
        op.args = ()
        if type(keep) is not tuple:
            ffi.release(keep)  # a tuple (several objects) is let go by dropping it


def _abort_waiters(op: Op) -> None:
    """Tell whoever waits on a finished `op` (its sink, its caller, a cancelled
    caller's waiter) that it ended without a result."""
    if op.sink is not None:
        try:
            op.sink(op.res)
        except RuntimeError:  # its loop is already closed
            pass
        return
    for fut in (op.waiter, op.future):
        if fut is not None and not fut.done():
            try:
                if fut is op.waiter:
                    fut.set_result(None)
                else:
                    fut.cancel()
            except RuntimeError:  # its loop is already closed
                pass


def _swallow(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: nothing is logged for it


def _no_prep(*args: Any) -> int:
    raise AssertionError("the in-flight entry of an ASYNC_CANCEL is never prepared again")


# The in-flight entry of every ASYNC_CANCEL: its CQE only has to be consumed.
_CANCEL = Op(None, _no_prep, (), None, None, 0)


def _not_handed_on(op: Op) -> bool:
    """Whether the CQE of `op`, taken from the table, has not reached whoever
    waits for it (so that handling it again is right)."""
    if op.state == _SUBMITTED:
        return True
    if op.state != _DONE or op.sink is not None:
        return False  # requeued; or a sink's call, which must not come twice
    if op.waiter is not None:
        return not op.waiter.done()
    return op.future is not None and not op.future.done()


class Ring:
    """One io_uring bound to one event loop (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 1:
            raise ValueError("entries must be at least 1")
        self._closed = True
        self._ring = ffi.new("struct io_uring *")
        out = ffi.new("unsigned[3]")
        for flags in _SETUP_FLAGS:
            ret = lib.aior_setup(self._ring, entries, 0, flags, out, out + 1, out + 2)
            if ret != -errno.EINVAL:
                break  # EINVAL: a flag this kernel lacks; try the next set
        if ret < 0:
            raise os_error(ret)
        self.setup_flags = flags
        if not out[0] & lib.IORING_FEAT_NODROP:
            lib.io_uring_queue_exit(self._ring)
            # Cancellations may briefly exceed the CQ; only NODROP (5.5) keeps them.
            raise OSError(errno.ENOSYS, "io_uring without IORING_FEAT_NODROP (kernel before 5.5)")
        self.features = out[0]
        self.sq_entries = out[1]
        self.cq_entries = out[2]
        efd = -1
        try:  # (anything, a KeyboardInterrupt too, leaves no fd behind)
            efd = self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            ret = lib.io_uring_register_eventfd(self._ring, self._efd)
            if ret < 0:
                raise os_error(ret)
            supported = ffi.new("unsigned char[256]")
            ret = lib.aior_probe(self._ring, supported, 256)
            if ret < 0:
                raise os_error(ret)
            self._supported = frozenset(i for i in range(ret) if supported[i])
            missing = [name for name, op in _REQUIRED_OPS.items() if op not in self._supported]
            if missing:
                raise OSError(errno.ENOSYS, "io_uring lacks required opcodes: " + ", ".join(missing))
            # Opcodes this kernel lacks are made as plain system calls instead,
            # one request at a time (see _emulate); the rest of the ring is used.
            from ._threads import EMULATED
            self._lacking = EMULATED - self._supported
            self._init_table(loop, self.cq_entries, self._ring)
            self._emulated: dict[int, int] = {}  # key -> worker request, of requests made by _emulate
            loop.add_reader(efd, self._on_wakeup)
        except BaseException:
            self._closed = True
            if "_core" in self.__dict__:
                self._core.detach()
            lib.io_uring_queue_exit(self._ring)
            if efd >= 0:
                with contextlib.suppress(Exception):
                    loop.remove_reader(efd)
                os.close(efd)
            raise

    def _init_table(self, loop: asyncio.AbstractEventLoop, cap: int, ring: Any = None) -> None:
        """The in-flight table and the core that owns it, and the queues.
        `ring`: the binding's struct io_uring (None: no ring)."""
        self._closed = False
        # (process, thread) that made it.  (Ring keeps at most 29 attributes:
        # more and CPython 3.11+ stops sharing instance dict keys, which slows
        # every attribute access on the hot path by several per cent.)
        self._owner = (os.getpid(), threading.get_ident())
        self._loop_ref = weakref.ref(loop)
        self._ops: dict[int, Op] = {}
        address = 0 if ring is None else int(ffi.cast("uintptr_t", ring))
        self._core = Core(ring, address, self._ops, _CANCEL, ffi.release, os_error,
                          self._on_retry, self._on_strand, asyncio.InvalidStateError)
        self._waiting: deque[Op] = deque()
        self._limit = cap
        self._deferred: list[Callable[[], None]] = []
        self._flush_handle: asyncio.Handle | None = None
        self._eager_task: asyncio.Task[Any] | None = None
        self._eager_left = 0
        self._solo = True
        self._stranded: list[tuple[int, int]] = []  # CQEs an exception left unhandled
        self._tags = ffi.new("uint64_t[]", cap)  # (the unsubmitted SQEs' tags, see _withdraw_cancelled)
        self.stats = {"backpressured": 0, "cancels": 0, "resubmitted": 0, "withdrawn": 0}

    # ------------------------------------------------------------------ info
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fd(self) -> int:
        return lib.aior_ring_fd(self._ring)

    def supports(self, opcode: int) -> bool:
        """Whether the kernel's probe lists `opcode`."""
        return opcode in self._supported

    def statistics(self) -> dict[str, int]:
        core = self._core
        return dict(self.stats, submit_calls=core.submit_calls, wakeups=core.wakeups,
                    completions=core.completions, in_flight=len(self._ops), waiting=len(self._waiting),
                    sq_entries=self.sq_entries, cq_entries=self.cq_entries)

    # ------------------------------------------------------------ submitting
    def start(self, loop: asyncio.AbstractEventLoop, prep: Callable[..., int] | None, args: tuple[Any, ...],
              keep: Any, finish: Callable[[Op, int], Any] | None, poll_mask: int = 0,
              unbounded: bool = False, writable: bool = False) -> Op:
        """Queue one operation.

        When the operation completed inside the submit call that queued it,
        the returned op has no future (`op.future is None`): `ready(op)` gives
        its result at once.  Otherwise its future resolves with
        finish(op, res), or raises the OSError of a negative result.

        `prep` is the binding's prep function of the request, or None for a
        read or write the core prepares itself (see src/core.h): then `keep`
        is the object whose buffer the kernel reads (or, `writable`, writes),
        pinned here, and args are (opcode, fd, start, length, offset,
        rw_flags[, sqe_flags]) with start and length in that buffer.  A
        buffer the kernel cannot take raises the stdlib's TypeError or
        BufferError before anything is queued.

        `unbounded` marks an operation that may wait for a peer for as long as
        the peer likes (a stream's receive, an accept): it never waits behind
        backpressure and does not count against it, or a thousand idle
        connections would hold every slot and starve everything else.  Should
        their completions ever outnumber the CQ, the kernel keeps the excess
        (IORING_FEAT_NODROP) until the next harvest.

        The ring owns `keep` from this call on, also when it raises: an
        export (not a tuple) is released once nothing touches it.
        """
        if self._closed or owed:
            # Nothing is submitted: what the call would have touched is let
            # go now (an export left to the garbage collector can crash
            # CPython before 3.13: a memoryview's tp_clear under an export).
            try:
                if self._closed:
                    raise RuntimeError("this io_uring is closed")
                deliver_owed()
            except BaseException:
                if keep is not None and prep is not None and type(keep) is not tuple:
                    ffi.release(keep)
                raise
        if prep is None:
            op = Op(None, None, args, None, finish, poll_mask)
            op.pin(keep, writable)
        else:
            op = Op(None, prep, args, keep, finish, poll_mask)
        if unbounded:
            op.unbounded = True
        return self._launch(loop, op)

    def restart(self, loop: asyncio.AbstractEventLoop, op: Op) -> None:
        """Start an unbounded op with a sink (see Op), new or whose CQE is in.

        A stream makes one such op for its receives and one for its sends,
        and starts each again with new arguments (op.args) for every
        operation.  The sink may be called before this returns (the operation
        completed inside the submit call).  Never raises the task's owed
        cancellation: a sink's op starts in synchronous calls (write(), close()).

        Such an op has no `keep`: its sink, a bound method, holds the stream,
        which holds what the kernel may touch (op.args holds the rest)."""
        if self._closed:
            raise RuntimeError("this io_uring is closed")
        op.cancelled = False
        if self._lacking and self._emulate(loop, op):
            return
        if not self._core.start(op):
            op.state = _WAITING  # the kernel takes no SQE now
            self._waiting.appendleft(op)
            self._schedule_flush(loop)
            return
        if self._flush_handle is None:
            # As in _launch: the first operation of the iteration goes at once.
            self._flush_handle = loop.call_soon(self._flush)
            self._eager_task = _task_of(loop)
            self._eager_left = EAGER_RUN if self._solo else 0
            self._submit_eagerly(loop, op)
        elif self._eager_left and _task_of(loop) is self._eager_task:
            self._eager_left -= 1
            self._submit_eagerly(loop, op)

    def _launch(self, loop: asyncio.AbstractEventLoop, op: Op) -> Op:
        core = self._core
        if not op.unbounded and (self._waiting or len(self._ops) - core.unbounded >= self._limit):
            op.future = loop.create_future()
            self._waiting.append(op)
            self.stats["backpressured"] += 1
            self._schedule_flush(loop)
            return op
        if self._lacking and self._emulate(loop, op):
            op.future = loop.create_future()
            return op
        if not core.start(op, _AWAITED):
            # The kernel takes no SQE now: wait.
            op.future = loop.create_future()
            self._waiting.appendleft(op)
            self._schedule_flush(loop)
            return op
        if self._flush_handle is None:
            # First operation of this loop iteration: submit it now (hybrid).
            self._flush_handle = loop.call_soon(self._flush)
            self._eager_task = _task_of(loop)
            self._eager_left = EAGER_RUN if self._solo else 0
            self._submit_eagerly(loop, op)
            if op.state == _DONE:
                return op
        elif self._eager_left and _task_of(loop) is self._eager_task:
            # The task whose operation completed at once goes on without
            # yielding: let it submit at once a few more times.
            self._eager_left -= 1
            self._submit_eagerly(loop, op)
            if op.state == _DONE:
                return op
        op.future = loop.create_future()
        return op

    def _submit_eagerly(self, loop: asyncio.AbstractEventLoop, op: Op) -> None:
        try:
            self._submit()
        except BaseException:
            if op.state != _DONE and op.sink is None:
                # Its caller sees the exception; a CQE that still comes finds a
                # done future and is dropped, and the op keeps its buffer till then.
                op.future = loop.create_future()
                op.future.cancel()
            raise

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if self._flush_handle is None and not self._closed:
            if loop is None:
                loop = self._loop_ref()
                if loop is None or loop.is_closed():
                    return
            self._flush_handle = loop.call_soon(self._flush)

    def _new_key(self) -> int:
        """A key for a request made without an SQE (the core's keys: never reused)."""
        core = self._core
        key: int = core.next_key
        core.next_key = key + 1
        return key

    def _prep(self, op: Op) -> bool:
        """Prepare the SQE of a waiting op (first try, or again after a poll).

        False when the kernel takes no SQE now; the op stays waiting."""
        if self._lacking and not op.polling:
            loop = self._loop_ref()
            if loop is not None and self._emulate(loop, op):
                return True
        return bool(self._core.start(op, 0 if op.future is None else _AWAITED))

    def _emulate(self, loop: asyncio.AbstractEventLoop, op: Op) -> bool:
        """Make `op` as a plain system call in a worker thread if the kernel
        lacks its opcode; False if it has it.  The result comes back through
        the in-flight table like a CQE (so cancelling waits for it)."""
        from ._threads import opcode_of, run_in_worker
        if opcode_of(op) not in self._lacking:
            return False

        def done(res: int) -> None:  # in the worker
            loop.call_soon_threadsafe(self._emulated_done, key, res)

        key = self._new_key()
        op.key = key
        op.state = _SUBMITTED
        self._ops[key] = op
        if op.unbounded:
            self._core.unbounded += 1
        self._emulated[key] = run_in_worker(op, done)
        return True

    def _emulated_done(self, key: int, res: int) -> None:
        self._emulated.pop(key, None)
        if self._closed:
            return
        self._core.complete_batch([(key, res)])
        if self._waiting:
            self._schedule_flush()

    def defer(self, callback: Callable[[], None]) -> None:
        """Call `callback` at this iteration's flush, just before it submits,
        so that the operations it starts leave in the same batch (a stream's
        writes of the iteration).  Cheaper than a call_soon each."""
        self._deferred.append(callback)
        self._schedule_flush()

    def _flush(self) -> None:
        try:
            self._eager_task = None
            self._eager_left = 0
            if self._closed:
                self._flush_handle = None
                return
            deferred = self._deferred
            if deferred:
                # The sends they make may complete a receive on this ring (a
                # peer in the same loop): muted, its CQE is harvested by this
                # flush's submit instead of waking the loop again.
                self._core.mute()
                # Still flagged as flushing: what they start is queued, not eager.
                callbacks = iter(deferred)
                try:
                    self._deferred = []
                    for callback in callbacks:
                        callback()
                except BaseException:
                    if self._deferred is not deferred:
                        self._deferred[:0] = callbacks  # the others still run, at the next flush
                    raise
            self._flush_handle = None
            if self._stranded:
                self._complete_stranded()
            self._release_waiting()
            self._submit_queued()
        except BaseException as exc:
            # A KeyboardInterrupt (raised at any line by the default SIGINT
            # handler): the flush must come again, or nothing queued would
            # ever reach the kernel.  (An error goes to the loop's handler,
            # and the next operation schedules the flush.)
            self._flush_handle = None
            if not isinstance(exc, Exception) or self._core.cq_due:
                self._schedule_flush()  # (muted: only a submit turns the eventfd on again)
            raise

    def _submit_queued(self) -> None:
        """The flush's submit: what the iteration queued goes to the kernel."""
        pending = self._core.sq_pending
        # Many operations in one flush: many tasks share the loop, and batching
        # serves them best.  One: a lone task, which eager runs serve best.
        self._solo = pending <= 1
        if pending:
            if self._core.sq_tagged:  # (awaited ops among the unsubmitted SQEs)
                self._withdraw_cancelled(pending)
            self._submit()
            if self._core.sq_pending:
                self._schedule_flush()  # the kernel stopped short of the batch
        elif self._core.cq_due:
            # Muted, or completions wait (a peer's receive on this ring that
            # this iteration's direct sends completed): an empty submit turns
            # the eventfd on again and harvests them, without a wakeup.
            self._submit()

    def _withdraw_cancelled(self, pending: int) -> None:
        """Before the flush submits: an op whose caller was cancelled since its
        SQE was prepared (the task has not run yet to say so) never starts."""
        ops = self._ops
        tags = self._tags
        n = lib.aior_unsubmitted(self._ring, _AWAITED, tags, min(pending, len(tags)))
        for key in ffi.unpack(tags, n):
            op = ops.get(key)
            if op is not None:
                fut = op.future
                if fut is not None and fut.done():  # (before its CQE: cancelled)
                    self.withdraw(op)

    def _submit(self) -> None:
        ret = self._core.submit()  # (which harvests and dispatches what completed)
        if ret < 0:
            if ret not in _RETRY_SUBMIT:
                raise os_error(ret)
            # The kernel could not take the SQEs now; they stay queued.
            self._flush_handle = None
            self._schedule_flush()
        if self._waiting:
            # The completions freed room (and a poll may have requeued an op):
            # the waiting ops go out with the next flush.
            self._schedule_flush()

    def _on_wakeup(self) -> None:
        if self._closed:
            return
        self._core.reap(self._efd)
        if self._waiting:
            self._schedule_flush()

    def _release_waiting(self) -> None:
        waiting = self._waiting
        ops = self._ops
        limit = self._limit
        core = self._core
        while waiting and (len(ops) - core.unbounded < limit or waiting[0].unbounded):
            op = waiting.popleft()
            if op.state != _WAITING:
                continue  # dropped, or withdrawn
            fut = op.future
            if fut is not None and fut.done():
                self.withdraw(op)  # its caller was cancelled meanwhile: it never starts
                continue
            if not self._prep(op):
                waiting.appendleft(op)  # the SQ stays full: try again next iteration
                self._schedule_flush()
                break

    # ------------------------------------------------------------ completing
    # The core harvests CQEs and hands each to its op's target (src/core.h);
    # these are the policy it asks for.
    def _on_retry(self, op: Op, res: int) -> int | None:
        """The core's question for a negative result or a poll's: None when
        `op` was requeued (to poll, or to try again), else the result to
        finish it with."""
        if op.polling or (res == _EAGAIN and op.poll_mask):
            if self._retry(op, res):
                return None
            return -errno.ECANCELED if res >= 0 else res
        if res == _ECANCELED and not op.cancelled and op.waiter is None:
            # Nobody cancelled it: the kernel could not start a worker for
            # it (io-wq fails to while a signal is pending).  Again.
            self._waiting.appendleft(op)  # the harvest's caller schedules the flush
            op.state = _WAITING
            self.stats["resubmitted"] += 1
            return None
        return res

    def _on_strand(self, key: int, res: int, op: Op | None, rest: list[tuple[int, int]]) -> None:
        """An exception escaped while the core handed the CQE (key, res) to
        `op` (a KeyboardInterrupt, which the default SIGINT handler raises at
        any line, or a sink's error): keep the CQEs it did not hand on yet,
        `rest` and the interrupted one if its op did not get it, for the
        next flush.  Their ops are never stranded."""
        if op is not None and op is not _CANCEL and op.key == key and _not_handed_on(op):
            op.state = _SUBMITTED
            self._ops[key] = op  # taken, not handed on yet
            rest.insert(0, (key, res))
        # (the interrupted CQE may or may not have counted its op)
        self._core.unbounded = sum(1 for o in self._ops.values() if o is not _CANCEL and o.unbounded)
        if rest:
            self._stranded.extend(rest)
            self._schedule_flush()

    def _complete_stranded(self) -> None:
        stranded, self._stranded = self._stranded, []
        self._core.complete_batch(stranded)

    def _drop_stranded(self) -> None:
        """Closing: the stranded CQEs' ops end (their CQEs will not come again)."""
        for key, res in self._stranded:
            op = self._ops.pop(key, None)
            if op is not None and op is not _CANCEL:
                self._drop(op, res)
        self._stranded = []

    def _retry(self, op: Op, res: int) -> bool:
        """-EAGAIN from a non-blocking fd: poll it, then try again.  True when requeued."""
        if op.waiter is not None:
            op.polling = False
            return False  # the caller was cancelled: do not try again
        if op.polling:
            op.polling = False
            if res < 0:
                return False
        else:
            op.polling = True
        op.state = _WAITING
        self._waiting.appendleft(op)  # the harvest's caller schedules the flush that retries it
        return True

    # ----------------------------------------------------------- cancelling
    async def settle(self, op: Op, exc: asyncio.CancelledError) -> Any:
        """The caller awaiting `op` was cancelled: wait until the kernel let go of it.

        Raises `exc` when the operation did not happen (cancelled in time, or
        never submitted).  When it completed anyway its result is returned, so
        that nothing the kernel already did is lost, and the cancellation is
        delivered again at the task's next await (see _redelivery).
        """
        if self.withdraw(op):
            raise exc  # the kernel never saw it
        if op.state == _SUBMITTED:
            op.waiter = asyncio.get_running_loop().create_future()
            op.cancelled = True
            self._cancel(op.key)
            while not op.waiter.done():
                try:
                    await asyncio.shield(op.waiter)
                except asyncio.CancelledError:
                    continue  # cancelled again: still wait for the kernel
        # _DONE: the CQE arrived.
        res = op.res
        fut = op.future
        assert fut is not None  # only an awaited op is settled
        if res < 0:
            _release(op)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: the cancellation is what the caller sees
            raise exc
        if fut.done() and not fut.cancelled():
            result = fut.result()  # the CQE won the race with the cancellation
        else:
            try:
                result = res if op.finish is None else op.finish(op, res)
            finally:
                _release(op)
        redeliver_later(exc)
        return result

    def abandon(self, op: Op) -> None:
        """The coroutine awaiting `op` was closed (GeneratorExit) while the
        kernel still holds it: cancel it, keep what it holds (op.keep) until
        its CQE, and swallow its outcome, which nobody will read."""
        fut = op.future
        if fut is not None and not fut.done():
            fut.add_done_callback(_swallow)
        self.cancel(op)

    def cancel(self, op: Op) -> None:
        """Ask the kernel to stop `op`, whose future nobody awaits (streams).

        Its CQE still comes: the future then fails with ECANCELED, or gets the
        result when the operation completed first.  An op the kernel has not
        seen yet (see withdraw) fails with ECANCELED at once."""
        if self.withdraw(op):
            if op.sink is not None:
                op.sink(-errno.ECANCELED)
            elif op.future is not None and not op.future.done():
                op.future.set_exception(os_error(-errno.ECANCELED))
        elif op.state == _SUBMITTED:
            op.cancelled = True
            self._cancel(op.key)

    def withdraw(self, op: Op) -> bool:
        """Take `op` back if the kernel has not seen it: still waiting, or
        prepared in the SQ and not submitted yet (its SQE becomes a NOP with
        the same tag, whose CQE the table consumes as a cancel's).  True when
        withdrawn: `op` is then done with ECANCELED, nothing it holds was
        touched, and its memory is released.  False when the kernel has it
        (or it is done): only an ASYNC_CANCEL can stop it then."""
        state = op.state
        if state == _SUBMITTED:
            if not self._unsubmit(op.key):
                return False
            self._ops[op.key] = _CANCEL
            self._core.unbounded -= op.unbounded  # (a bool)
        elif state != _WAITING:
            return False
        # (A waiting op is dropped lazily from the queue.)
        self.stats["withdrawn"] += 1
        op.state = _DONE
        op.res = -errno.ECANCELED
        _release(op)
        return True

    def _unsubmit(self, key: int) -> bool:
        """Turn the unsubmitted SQE of `key`, if it is still in the SQ, into a NOP."""
        return not self._closed and key not in self._emulated and lib.aior_withdraw(self._ring, key) == 1

    def _cancel(self, target: int) -> None:
        if self._closed:
            return  # closing cancelled everything already
        request = self._emulated.get(target)
        if request is not None:
            from ._threads import stop_in_worker
            loop = self._loop_ref()
            if loop is not None:
                stop_in_worker(loop, request, lambda: not self._closed and target in self._emulated)
            return
        if not self._prep_cancel(target):
            # The kernel takes no SQE now: ask again next iteration.
            loop = self._loop_ref()
            if loop is not None and not loop.is_closed():
                loop.call_soon(self._cancel, target)
            return
        self._schedule_flush()

    def _prep_cancel(self, target: int) -> bool:
        if not self._core.cancel(target):
            return False
        self.stats["cancels"] += 1
        return True

    # -------------------------------------------------------------- closing
    def close(self) -> None:
        """Cancel everything in flight, wait until the kernel let go of it all, unmap.

        Blocks until every buffer the kernel holds is released; callers still
        awaiting see CancelledError.
        """
        if self._closed:
            return
        if os.getpid() != self._owner[0]:
            self._abandon()
            return
        loop = self._loop_ref()
        if loop is not None and loop.is_running() and threading.get_ident() != self._owner[1]:
            raise RuntimeError("a running loop's io_uring can only be closed from the loop's thread")
        self._closed = True
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._efd)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._drop_stranded()
        while self._waiting:
            op = self._waiting.popleft()
            if op.state == _WAITING:
                self._drop(op, -errno.ECANCELED)
        if self._emulated:
            # Worker threads make these: no CQE will come.  Interrupt their
            # calls and wait until they returned, as for the kernel's below.
            from ._threads import _workers
            emulated = [self._ops.pop(key) for key in self._emulated]
            try:
                _workers().finish(self._emulated.values())
            except BaseException:
                _kept_forever.extend(emulated)
                raise
            finally:
                self._emulated.clear()
            for op in emulated:
                self._drop(op, -errno.ECANCELED)
        drained = True
        for key, op in list(self._ops.items()):
            while drained and op is not _CANCEL and not self._prep_cancel(key):
                drained = self._drain_once()  # room in the SQ comes with completions
        while drained and self._ops:
            drained = self._drain_once()
        if self._ops:
            # The kernel would not say it let go: never free what it may still write.
            _kept_forever.extend(self._ops.values())
        self._core.detach()
        lib.io_uring_queue_exit(self._ring)
        os.close(self._efd)

    def __del__(self) -> None:
        # A loop dropped without close() goes with its ring: drained first as
        # close() drains, so nothing is unmapped while the kernel holds it.
        if not getattr(self, "_closed", True):
            self.close()

    def _drain_once(self) -> bool:
        """Block for at least one completion and drop what arrived; False on
        error, or when none came for CLOSE_WAIT seconds (a CQE that will
        never come: the close then keeps what is left, see close)."""
        ret = lib.aior_wait(self._ring, int(CLOSE_WAIT * 1000))
        if ret < 0:
            return False
        for key, res in self._core.harvest():
            entry = self._ops.pop(key, None)
            if entry is not None and entry is not _CANCEL:
                self._drop(entry, res)
        return True

    def _drop(self, op: Op, res: int) -> None:
        """Finish `op` while its ring closes: its caller can no longer get a result."""
        op.state = _DONE
        op.res = res if res < 0 else -errno.ECANCELED
        _release(op)
        _abort_waiters(op)

    def _abandon(self) -> None:
        """In a forked child: drop this process's copies of a parent's ring."""
        if self._closed:
            return
        self._closed = True
        # The kernel ring is shared with the parent: never submit, never cancel.
        # Unmapping and closing our copies leaves the parent's ring intact.
        self._core.detach()
        lib.io_uring_queue_exit(self._ring)
        os.close(self._efd)
        ops = [op for op in self._ops.values() if op is not _CANCEL]
        self._ops.clear()
        ops.extend(self._waiting)
        self._waiting.clear()
        for op in ops:
            self._drop(op, -errno.ECANCELED)


# Ops of a ring whose drain failed: their memory is never freed.
_kept_forever: list[Op] = []


def setup_error() -> OSError | None:
    """Set up and tear down a tiny ring: None when io_uring works here as a
    Ring needs it, else why not (what the registry asks when it picks
    the backend)."""
    ring = ffi.new("struct io_uring *")
    out = ffi.new("unsigned[3]")
    ret = lib.aior_setup(ring, 2, 0, 0, out, out + 1, out + 2)
    if ret < 0:
        return os_error(ret)
    try:
        if not out[0] & lib.IORING_FEAT_NODROP:
            return OSError(errno.ENOSYS, "io_uring without IORING_FEAT_NODROP (kernel before 5.5)")
        supported = ffi.new("unsigned char[256]")
        n = lib.aior_probe(ring, supported, 256)
        if n < 0:
            return os_error(n)
        missing = [name for name, op in _REQUIRED_OPS.items() if op >= n or not supported[op]]
        if missing:
            return OSError(errno.ENOSYS, "io_uring lacks required opcodes: " + ", ".join(missing))
        return None
    finally:
        lib.io_uring_queue_exit(ring)
