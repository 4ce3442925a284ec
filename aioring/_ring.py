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
  task and at 64).  A read that waits for the device does not wait for the
  flush once DEVICE_BATCH SQEs are queued (hurry): the kernel gets them
  while the rest of the iteration's tasks run.

* **Backpressure.**  No more operations are handed to the kernel than the CQ
  holds (IORING_FEAT_NODROP is required but never leaned on; only cancelled
  operations' ASYNC_CANCELs may briefly exceed it); the rest wait in a FIFO.

* **Ownership.**  The in-flight table holds, under a key never reused, every
  object the kernel may touch, until the operation's CQE arrives.

* **What the kernel has not seen is taken back.**  A cancelled op still
  waiting (backpressure, a full SQ, a retry after a poll), or whose SQE is
  still unsubmitted in the SQ, is withdrawn: its SQE becomes a NOP with the
  same tag (IoUring.withdraw) and its caller sees CancelledError at once.  The
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

* **A polling ring** (``sq_thread_idle``, see ``_loops.device_ring``): a
  kernel thread reads the SQ as soon as the flush publishes the tail, and
  runs the completions' work.  Every rule above holds: the SQEs the flush
  has not published yet are still withdrawn (src/sqtail.h).  The loop's
  ring owns it (``polling``) and closes it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sys
import time

from ._binding import (FEAT_CQE_SKIP, FEAT_NODROP, IOSQE_CQE_SKIP_SUCCESS, IOSQE_IO_LINK, OP_ASYNC_CANCEL,
                       OP_FSYNC, OP_POLL_ADD, OP_READ, OP_RECV, OP_SEND, OP_WRITE, SETUP_COOP_TASKRUN,
                       SETUP_SQPOLL, SETUP_SUBMIT_ALL, SETUP_TASKRUN_FLAG, SYNC_OPCODES, IoUring, opcode_of)
from ._core import AWAITED, Op
from ._ringbase import (_CANCEL, _DONE, _SUBMITTED, _WAITING, DEFAULT_ENTRIES, RingBase, _kept_forever,
                        os_error)
from ._workers import run_in_worker, stop_in_worker, workers

__all__ = ["Ring", "setup_error"]

# How many more operations the task whose first operation of an iteration
# completed at once may submit at once before it has to yield: bounded, so
# other tasks still run at least once every EAGER_RUN + 1 operations.
EAGER_RUN = 7
# How many queued SQEs a read that waits for the device (a read of uncached
# pages, of an O_DIRECT fd) submits at once rather than at the iteration's
# flush (hurry).  A harvest of many such completions wakes as many tasks;
# each queues its next read, and with one submit per iteration the first
# ones' reads waited for every task of the batch to run, the device short of
# them meanwhile.  Measured with 64 tasks of O_DIRECT random 4 KiB reads,
# the versions alternating, three runs each: one submit per iteration
# 43,100-44,700 reads a second (12.5-13.2 us of CPU a read; fio 70,700-80,600
# at the same depth); a submit per 16 queued 56,800-63,700 (13.2-14.9 us);
# per 8 56,800-57,700 (14.9-15.7 us); per 4 53,400-66,700 (12.1-17.3 us);
# per 1 or 2, 34,300-53,700 at 17-29 us (each submit also harvests, and
# wakes tasks a few at a time).
DEVICE_BATCH = 16
# On a polling ring a submit only publishes the SQ's tail (a system call
# only to wake its thread once asleep): each such read is published as soon
# as it is queued, so that the thread starts it while the iteration's other
# tasks run.  Measured with 64 tasks of random 4 KiB reads of uncached
# pages, three rounds alternating (reads a second, asyncio's loop / uvloop):
# published one at a time 94,838-148,240 / 94,123-143,785; every 16 queued
# 63,830-114,200 / 94,453-132,736; every 4 66,340-152,956 / 93,909-121,318.
POLLING_DEVICE_BATCH = 1
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
_SETUP_FLAGS = [SETUP_SUBMIT_ALL | SETUP_COOP_TASKRUN | SETUP_TASKRUN_FLAG, SETUP_SUBMIT_ALL, 0]
# A ring whose SQ a kernel thread polls (the kernel refuses the task-work
# flags with it: its thread runs the completions' work).
_SQPOLL_FLAGS = [SETUP_SQPOLL | SETUP_SUBMIT_ALL, SETUP_SQPOLL]

# The tag (user_data) of an op whose caller awaits its future has this bit
# set, so that the flush finds such ops among the unsubmitted SQEs in C
# (see _withdraw_cancelled) and skips the others (a stream's sends and receives).
_AWAITED = AWAITED
# The opcodes of the requests the core prepares itself (Op.prep None).
_CORE_OPCODES = frozenset({OP_READ, OP_WRITE, OP_RECV, OP_SEND, OP_FSYNC})

# A quiet chain's steps: linked, and no CQE for a step that completed in full.
_QUIET_LINK = IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS

# Closing a ring waits this long at most for the kernel to let go of what it
# holds, asking again for the cancellation of what is left whenever no
# completion came for RECANCEL_WAIT seconds.
CLOSE_WAIT = 3.0
RECANCEL_WAIT = 0.05
_ETIME = -errno.ETIME
_EBUSY = -errno.EBUSY
_RETRY_SUBMIT = frozenset((-errno.EAGAIN, -errno.EBUSY, -errno.EINTR))

# Opcodes every ring needs; the probe must find them.
_REQUIRED_OPS = {"READ": OP_READ, "WRITE": OP_WRITE, "FSYNC": OP_FSYNC, "POLL_ADD": OP_POLL_ADD,
                 "ASYNC_CANCEL": OP_ASYNC_CANCEL}


def _set_up(entries: int, flag_sets: list[int], sq_thread_idle: int = 0) -> tuple[IoUring, frozenset[int]]:
    """An io_uring as a Ring needs it, and the opcodes its probe lists;
    OSError when the kernel refuses it or it lacks what a Ring needs."""
    mem = IoUring(entries, flag_sets, sq_thread_idle)
    try:
        if not mem.features & FEAT_NODROP:
            # Cancellations may briefly exceed the CQ; only NODROP (5.5) keeps them.
            raise OSError(errno.ENOSYS, "io_uring without IORING_FEAT_NODROP (kernel before 5.5)")
        supported = mem.probe()
        missing = [name for name, op in _REQUIRED_OPS.items() if op not in supported]
        if missing:
            raise OSError(errno.ENOSYS, "io_uring lacks required opcodes: " + ", ".join(missing))
    except BaseException:
        mem.exit()
        raise
    return mem, supported


class Ring(RingBase):
    """One io_uring bound to one event loop (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = DEFAULT_ENTRIES,
                 sq_thread_idle: int | None = None) -> None:
        """`sq_thread_idle`: a polling ring (IORING_SETUP_SQPOLL), whose
        kernel thread sleeps after that many milliseconds without work."""
        if entries < 1:
            raise ValueError("entries must be at least 1")
        self._closed = True
        if sq_thread_idle is None:
            mem, self._supported = _set_up(entries, _SETUP_FLAGS)
            self._device_batch = DEVICE_BATCH
        else:
            mem, self._supported = _set_up(entries, _SQPOLL_FLAGS, sq_thread_idle)
            self._device_batch = POLLING_DEVICE_BATCH
        efd = -1
        try:  # (anything, a KeyboardInterrupt too, leaves no fd behind)
            self._mem = mem
            self.setup_flags = mem.setup_flags
            self.features = mem.features
            self.sq_entries = mem.sq_entries
            self.cq_entries = mem.cq_entries
            efd = self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            mem.register_eventfd(efd)
            self._init_table(loop, self.cq_entries, mem)
            self._core.task_of = _task_of  # (whose start is the eager run's: see restart)
            self._set_lacking(SYNC_OPCODES - self._supported)
            self._emulated: dict[int, int] = {}  # key -> worker request, of requests made by _emulate
            loop.add_reader(efd, self._on_wakeup)
        except BaseException:
            self._closed = True
            if "_core" in self.__dict__:
                self._core.detach()
            mem.exit()
            if efd >= 0:
                with contextlib.suppress(Exception):
                    loop.remove_reader(efd)
                os.close(efd)
            raise

    @property
    def fd(self) -> int:
        return self._mem.fd

    def close(self) -> None:
        polling = self.polling
        if polling is not None and polling is not self:
            polling.close()  # (first: it may raise as this one would, from another thread)
        super().close()

    def _abandon(self) -> None:
        polling = self.polling
        if polling is not None and polling is not self:
            polling._abandon()
        super()._abandon()

    def _set_lacking(self, lacking: frozenset[int]) -> None:
        """Opcodes this kernel lacks are made as plain system calls instead,
        one request at a time (see _emulate); the rest of the ring is used.
        The core never launches a request whose opcode is emulated."""
        self._lacking = lacking
        self._core.limit = 0 if lacking & _CORE_OPCODES else self._limit
        self._core.preps = not lacking

    def bound_workers(self, most: int) -> int:
        try:
            return self._mem.max_workers(most)[0]
        except (OSError, ValueError):  # (a kernel without the setting; an unmapped ring)
            return 0

    # ------------------------------------------------------------ submitting
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
        core = self._core
        if not core.start(op):
            op.state = _WAITING  # the kernel takes no SQE now
            self._waiting.appendleft(op)
            self._schedule_flush(loop)
            return
        if core.flush_handle is None:
            # As in _launch: the first operation of the iteration goes at once.
            core.schedule_flush(loop)
            core.eager_task = _task_of(loop)
            core.eager_left = EAGER_RUN if core.solo else 0
            self._submit_eagerly(loop, op)
        elif core.eager_left and _task_of(loop) is core.eager_task:
            core.eager_left -= 1
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
        if core.flush_handle is None:
            # First operation of this loop iteration: submit it now (hybrid).
            core.schedule_flush(loop)
            core.eager_task = _task_of(loop)
            core.eager_left = EAGER_RUN if core.solo else 0
            self._submit_eagerly(loop, op)
            if op.state == _DONE:
                return op
        elif core.eager_left and _task_of(loop) is core.eager_task:
            # The task whose operation completed at once goes on without
            # yielding: let it submit at once a few more times.
            core.eager_left -= 1
            self._submit_eagerly(loop, op)
            if op.state == _DONE:
                return op
        op.future = loop.create_future()
        return op

    def _link(self, loop: asyncio.AbstractEventLoop, ops: list[Op], quiet: bool) -> bool:
        """The chain's SQEs, consecutive in the SQ and each but the last
        flagged IOSQE_IO_LINK (and, quiet, IOSQE_CQE_SKIP_SUCCESS), leave
        with this iteration's flush."""
        core = self._core
        n = len(ops)
        if self._waiting or len(self._ops) - core.unbounded + n > self._limit:
            return False
        if quiet and not self.features & FEAT_CQE_SKIP:
            return False
        if self._lacking and any(opcode_of(op.prep, op.args) in self._lacking for op in ops):
            return False  # (an emulated step would not wait for the one before)
        shared = loop.create_future() if quiet else None
        for op in ops:
            op.future = loop.create_future() if shared is None else shared
            # An ECANCELED is the chain ending before this step, not a
            # worker the kernel could not start: never tried again alone.
            op.cancelled = True
        try:
            if not core.start_chain(ops, _AWAITED, _QUIET_LINK if quiet else IOSQE_IO_LINK):
                return False  # (no room in the SQ for all of it)
        finally:
            self._schedule_flush(loop)  # (also for the steps queued before one refused)
        return True

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
        if opcode_of(op.prep, op.args) not in self._lacking:
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

    def _submit_queued(self) -> None:
        """The flush's submit: what the iteration queued goes to the kernel."""
        pending = self._core.sq_pending
        # Many operations in one flush: many tasks share the loop, and batching
        # serves them best.  One: a lone task, which eager runs serve best.
        self._core.solo = pending <= 1
        if pending:
            if self._core.sq_tagged:  # (awaited ops among the unsubmitted SQEs)
                self._withdraw_cancelled()
            self._submit()
            if self._core.sq_pending and self._core.flush_handle is None:
                self._schedule_flush()  # the kernel stopped short of the batch
        elif self._core.cq_due:
            # Muted, or completions wait (a peer's receive on this ring that
            # this iteration's direct sends completed): an empty submit turns
            # the eventfd on again and harvests them, without a wakeup.
            self._submit()

    def hurry(self) -> None:
        """A read that waits for the device was just queued: with this
        iteration's flush scheduled and DEVICE_BATCH or more SQEs queued
        (POLLING_DEVICE_BATCH on a polling ring), submit them now (see
        DEVICE_BATCH).  Raises what a submit raises."""
        core = self._core
        if core.sq_pending >= self._device_batch and core.flush_handle is not None:
            self._submit()

    def _withdraw_cancelled(self) -> None:
        """Before the flush submits: an op whose caller was cancelled since its
        SQE was prepared (the task has not run yet to say so) never starts."""
        for op in self._core.withdrawable(_AWAITED):  # (done before its CQE: cancelled)
            self.withdraw(op)

    def _submit(self) -> None:
        ret = self._core.submit()  # (which harvests and dispatches what completed)
        if ret < 0:
            if ret not in _RETRY_SUBMIT:
                raise os_error(ret)
            # The kernel could not take the SQEs now; they stay queued.
            self._core.flush_handle = None
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

    # ----------------------------------------------------------- cancelling
    def _unsubmit(self, key: int) -> bool:
        """Turn the unsubmitted SQE of `key`, if it is still in the SQ, into a NOP."""
        return not self._closed and key not in self._emulated and self._mem.withdraw(key)

    def _cancel(self, target: int) -> None:
        if self._closed:
            return  # closing cancelled everything already
        request = self._emulated.get(target)
        if request is not None:
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
    def _drain(self) -> None:
        """Closing: cancel what the kernel holds and wait until it let go of
        all of it (see close), then unmap."""
        if self._emulated:
            # Worker threads make these: no CQE will come.  Interrupt their
            # calls and wait until they returned, as for the kernel's below.
            emulated = [self._ops.pop(key) for key in self._emulated]
            try:
                workers().finish(self._emulated.values())
            except BaseException:
                _kept_forever.extend(emulated)
                raise
            finally:
                self._emulated.clear()
            for op in emulated:
                self._drop(op, -errno.ECANCELED)
        deadline = time.monotonic() + CLOSE_WAIT
        drained = self._cancel_held(deadline)
        while drained and self._ops:
            drained = self._drain_once(deadline)
            if drained is None:
                # Nothing came for a while: a step of a chain may have started
                # only after its cancellation looked for it (the step before
                # it was running, out of the cancel's reach).  Ask again.
                drained = self._cancel_held(deadline)
        if self._ops:
            # The kernel would not say it let go: never free what it may still write.
            _kept_forever.extend(self._ops.values())
        self._core.detach()
        self._mem.exit()
        os.close(self._efd)

    def _cancel_held(self, deadline: float) -> bool | None:
        """Closing: ask the kernel to cancel every op it holds (see _drain_once
        for the result)."""
        drained: bool | None = True
        for key, op in list(self._ops.items()):
            while op is not _CANCEL and key in self._ops and not self._prep_cancel(key):
                drained = self._drain_once(deadline)  # room in the SQ comes with completions
                if not drained:
                    return drained
        return drained

    def _drain_once(self, deadline: float) -> bool | None:
        """Block for at least one completion and drop what arrived: True if
        some came; None when none came for RECANCEL_WAIT seconds; False on
        error, or once `deadline` passed (a CQE that will never come: the
        close then keeps what is left, see close)."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ret = self._mem.wait(min(left, RECANCEL_WAIT))
        if ret == _ETIME:
            return None
        if ret < 0:
            return False
        for key, res in self._core.harvest():
            entry = self._ops.pop(key, None)
            if entry is not None and entry is not _CANCEL:
                self._drop(entry, res)
                self._drop_quiet_chain(entry)
        return True

    def _forsake(self) -> None:
        # The kernel ring is shared with the parent: unmapping our copies
        # leaves the parent's ring intact.
        self._core.detach()
        self._mem.exit()


def setup_error() -> OSError | None:
    """Set up and tear down a tiny ring: None when io_uring works here as a
    Ring needs it, else why not (what the registry asks when it picks
    the backend)."""
    try:
        mem, _ = _set_up(2, [0])
    except OSError as exc:
        return exc
    mem.exit()
    return None
