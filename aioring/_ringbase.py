"""L1: what both backends' rings share, and the interface they implement.

``RingBase`` is the interface every layer above speaks to (``get_ring``
returns one): ``start``, ``restart``, ``defer``, ``settle``, ``cancel``,
``withdraw``, ``abandon``, ``close``, ``statistics``.  It holds the policy
both backends share, around the in-flight table the core owns (src/core.h):
backpressure, the flush of each loop iteration, polling and retrying after
EAGAIN, the cancellation protocol (docs/design.md, invariant 5), CQEs an
exception stranded, and closing's drop of what never completes.  How an
operation reaches the kernel (or a system call) and how the kernel lets go
of it on close are each backend's own: ``Ring`` (``_ring``, io_uring) and
``ThreadRing`` (``_threads``, the fallback) implement the abstract methods.
Neither imports the other.
"""

from __future__ import annotations

import abc
import asyncio
import errno
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ._binding import IoUring, os_error, release
from ._core import Core, NewFile, Op
from ._redelivery import deliver_owed, owed, redeliver_later

__all__ = ["DEFAULT_ENTRIES", "Op", "RingBase", "os_error", "ready"]

DEFAULT_ENTRIES = 256

# Op.state (Op, the in-flight entry, is the core's: see src/core.h)
_WAITING = 0  # held back by backpressure, no SQE yet
_SUBMITTED = 1  # in the SQ or in the kernel: in the in-flight table
_DONE = 2  # its CQE arrived (or it was dropped before ever being submitted)

_EAGAIN = -errno.EAGAIN
_ECANCELED = -errno.ECANCELED


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
            release(keep)  # a tuple (several objects) is let go by dropping it


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


def _ready_of(loop: asyncio.AbstractEventLoop) -> Any:
    """The ready queue of one of asyncio's own loops, where the core may
    append its flush's handle itself (src/flush.h): only where the loop's
    class schedules and runs callbacks as asyncio.BaseEventLoop does, and
    whose call_soon is not replaced on the loop itself.  None otherwise
    (uvloop, a loop that changes either): call_soon."""
    cls: Any = type(loop)
    base: Any = asyncio.BaseEventLoop
    if not isinstance(loop, base) or cls.call_soon is not base.call_soon \
            or cls._run_once is not base._run_once or "call_soon" in getattr(loop, "__dict__", ()):
        return None
    ready = getattr(loop, "_ready", None)
    return ready if type(ready) is deque else None


# Ops of a ring whose drain failed: their memory is never freed.
_kept_forever: list[Op] = []


class RingBase(abc.ABC):
    """One ring bound to one event loop: the policy both backends share
    (see the module docstring).  A subclass's __init__ sets `_efd` (the fd
    whose readiness wakes the loop for completions), `_supported`,
    `setup_flags`, `features`, `sq_entries` and `cq_entries`, then calls
    `_init_table`."""

    _efd: int
    _supported: frozenset[int]
    setup_flags: int
    features: int
    sq_entries: int
    cq_entries: int
    # The loop's polling ring, made and owned by this one (_loops.device_ring):
    # None until then; this ring itself where there is none.  (A class
    # attribute until set: see the count of attributes in _init_table.)
    polling: RingBase | None = None

    def _init_table(self, loop: asyncio.AbstractEventLoop, cap: int, ring: IoUring | None = None) -> None:
        """The in-flight table and the core that owns it, and the queues.
        `ring`: the binding's io_uring, which the core borrows (None: no ring)."""
        self._closed = False
        # (process, thread) that made it.  (A ring keeps at most 29 attributes:
        # more and CPython 3.11+ stops sharing instance dict keys, which slows
        # every attribute access on the hot path by several per cent.)
        self._owner = (os.getpid(), threading.get_ident())
        self._loop_ref = weakref.ref(loop)
        self._ops: dict[int, Op] = {}
        handle, address = (None, 0) if ring is None else (ring.handle, ring.address)
        self._core = Core(handle, address, self._ops, _CANCEL, release, os_error,
                          self._on_retry, self._on_strand, asyncio.InvalidStateError)
        self._waiting: deque[Op] = deque()
        self._core.waiting = self._waiting
        self._limit = cap
        # The core holds the flush's handle (None: no flush scheduled) and its
        # deferred callbacks (see defer), so that a stream's targets in C
        # see a flush already scheduled without calling here; and it runs the
        # flush in its common case (src/flush.h), with the eager run's task
        # (core.eager_task) and whether the last flush was solo (core.solo).
        self._stranded: list[tuple[int, int]] = []  # CQEs an exception left unhandled
        self._core.bind(self, self._loop_ref, _ready_of(loop), self._stranded)
        self.stats = {"backpressured": 0, "cancels": 0, "resubmitted": 0, "withdrawn": 0}

    # ------------------------------------------------------------------ info
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    @abc.abstractmethod
    def fd(self) -> int:
        """The ring's fd (-1 without one)."""

    def bound_workers(self, most: int) -> int:
        """Let at most `most` of the kernel's workers run this thread's
        bounded requests (path operations, regular files' I/O) at once, 0
        leaving it as it is; the most before.  0 where there are no such
        workers (the threads backend) or the kernel does not say."""
        return 0

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
              keep: Any, finish: Callable[[Op, int], Any] | NewFile | None, poll_mask: int = 0,
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
                    release(keep)
                raise
        if not unbounded:
            launched = self._core.launch(loop, prep, args, keep, finish, poll_mask, writable)
            if launched is not None:
                return launched
        if prep is None:
            op = Op(None, None, args, None, finish, poll_mask)
            op.pin(keep, writable)
        else:
            op = Op(None, prep, args, keep, finish, poll_mask)
        if unbounded:
            op.unbounded = True
        return self._launch(loop, op)

    def start_chain(self, loop: asyncio.AbstractEventLoop,
                    steps: list[tuple[Callable[..., int], tuple[Any, ...]]],
                    quiet: bool = False) -> list[Op] | None:
        """Start `steps`, each a prep function and its args as for start()
        (args holding no buffer), as one chain: each step begins only once
        the one before it completed in full (io_uring's IOSQE_IO_LINK: an
        error or a short transfer ends the chain, and the steps after it fail
        with ECANCELED).  Returns the ops, every one with a future, in order.

        `quiet`: only the step that ends the chain completes (the last one,
        or the first that fails or comes up short; IOSQE_CQE_SKIP_SUCCESS on
        the others), and the ops share one future, which gets that step's
        result; once it is done, end_quiet_chain(ops) says which step that
        was.  A chain of a thousand steps then costs the loop one completion.

        None when the chain cannot start now as one (the in-flight bound or
        the SQ has no room for all of it, this backend does not link
        requests, or a quiet one is asked of a kernel without
        IORING_FEAT_CQE_SKIP): nothing was started, and the caller starts
        the steps otherwise.  Raises RuntimeError when the ring is closed,
        and the task's owed cancellation (see _redelivery)."""
        if self._closed:
            raise RuntimeError("this io_uring is closed")
        if owed:
            deliver_owed()
        ops = [Op(None, prep, args, None, None, 0) for prep, args in steps]
        return ops if ops and self._link(loop, ops, quiet) else None

    def _link(self, loop: asyncio.AbstractEventLoop, ops: list[Op], quiet: bool) -> bool:
        """Start `ops` as one chain (see start_chain) if there is room for
        all of them now; False, touching nothing, if not."""
        return False

    def end_quiet_chain(self, ops: list[Op]) -> int:
        """The quiet chain `ops` (start_chain), once its future is done: the
        index of the step whose completion ended it (that op's res is its
        result).  The steps before it completed in full and the ones after
        it never started: no completion comes for them, and their entries
        leave the in-flight table now."""
        end = next(i for i, op in enumerate(ops) if op.state == _DONE)
        table = self._ops
        for op in ops:
            if op.state == _SUBMITTED:
                del table[op.key]
                op.state = _DONE
        return end

    @abc.abstractmethod
    def hurry(self) -> None:
        """A read that waits for the device was just queued: hand the kernel
        what waits for this iteration's flush now, where waiting would hold
        the device back."""

    @abc.abstractmethod
    def restart(self, loop: asyncio.AbstractEventLoop, op: Op) -> None:
        """Start an unbounded op with a sink (see Op): a stream's receive or
        send, new or whose CQE is in, with new arguments in op.args.  The sink
        may be called before this returns.  Raises RuntimeError when the ring
        is closed."""

    @abc.abstractmethod
    def _launch(self, loop: asyncio.AbstractEventLoop, op: Op) -> Op:
        """Start or queue a new `op` (see start)."""

    @abc.abstractmethod
    def _prep(self, op: Op) -> bool:
        """Hand a waiting op to the kernel (first try, or again after a poll).

        False when the kernel takes no SQE now; the op stays waiting."""

    @abc.abstractmethod
    def _submit_queued(self) -> None:
        """The flush's submit: what the iteration queued goes to the kernel."""

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """The flush of this loop iteration, unless it is scheduled already
        (loop None: the ring's loop, if it is still open)."""
        self._core.schedule_flush(loop)

    def _new_key(self) -> int:
        """A key for a request made without an SQE (the core's keys: never reused)."""
        core = self._core
        key: int = core.next_key
        core.next_key = key + 1
        return key

    def defer(self, callback: Callable[[], None]) -> None:
        """Call `callback` at this iteration's flush, just before it submits,
        so that the operations it starts leave in the same batch (a stream's
        writes of the iteration).  Cheaper than a call_soon each."""
        self._core.deferred.append(callback)
        self._schedule_flush()

    def _flush_tail(self) -> None:
        """The flush's part after its deferred callbacks where the core does
        not do it itself (src/flush.h: the core runs the flush)."""
        if self._closed:
            return
        if self._stranded:
            self._complete_stranded()
        if self._waiting:
            self._release_waiting()
        self._submit_queued()

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
            if fut is not None and fut.done() and self.withdraw(op):
                continue  # its caller was cancelled meanwhile: it never starts
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
        stranded = self._stranded[:]  # (the core reads this list: emptied, not replaced)
        self._stranded.clear()
        self._core.complete_batch(stranded)

    def _drop_stranded(self) -> None:
        """Closing: the stranded CQEs' ops end (their CQEs will not come again)."""
        for key, res in self._stranded:
            op = self._ops.pop(key, None)
            if op is not None and op is not _CANCEL:
                self._drop(op, res)
        self._stranded.clear()

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
        if op.state != _DONE:  # (submitted; or a continued op waiting to start its next step)
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
        (or it is done), or had an earlier step of it (op.continued, which
        only its target undoes): only an ASYNC_CANCEL can stop it then."""
        if op.continued:
            return False
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

    @abc.abstractmethod
    def _unsubmit(self, key: int) -> bool:
        """Take back the request of `key` if the kernel has not seen it yet."""

    @abc.abstractmethod
    def _cancel(self, target: int) -> None:
        """Ask the kernel to stop the request of `target` (its result still comes)."""

    # -------------------------------------------------------------- closing
    def close(self) -> None:
        """Cancel everything in flight, wait until the kernel let go of it all, unmap.

        Blocks until every buffer the kernel holds is released; callers still
        awaiting see CancelledError.  Raises RuntimeError from another thread
        than the one of its running loop.
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
        self._core.closed = True
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._efd)
        handle = self._core.flush_handle
        if handle is not None:
            handle.cancel()
            self._core.flush_handle = None
        self._drop_stranded()
        while self._waiting:
            op = self._waiting.popleft()
            if op.state == _WAITING:
                self._drop(op, -errno.ECANCELED)
        self._drain()

    @abc.abstractmethod
    def _drain(self) -> None:
        """Closing, once nothing waits: stop whatever the kernel (or a worker)
        holds, wait until it let go, drop it, and release the ring's own
        resources and `_efd`."""

    def __del__(self) -> None:
        # A loop dropped without close() goes with its ring: drained first as
        # close() drains, so nothing is unmapped while the kernel holds it.
        if not getattr(self, "_closed", True):
            self.close()

    def _drop(self, op: Op, res: int) -> None:
        """Finish `op` while its ring closes: its caller can no longer get a result."""
        op.state = _DONE
        op.res = res if res < 0 else -errno.ECANCELED
        _release(op)
        if type(op.finish) is NewFile:
            op.finish.drop(res)  # (what its steps made, with this CQE's)
        _abort_waiters(op)

    def _drop_quiet_chain(self, op: Op) -> None:
        """Closing, `op`'s completion came: if it is a step of a quiet chain
        (see start_chain), that chain ended, and its other steps, whose
        completions never come, are dropped with it.  (Only a quiet chain's
        steps share an asyncio future; other objects standing in as the
        future of several independent ops, an aioring.shutil Tally, are no
        chain.)"""
        fut = op.future
        if not isinstance(fut, asyncio.Future):
            return
        table = self._ops
        for other in [o for o in table.values() if o is not _CANCEL and o.future is fut]:
            del table[other.key]
            self._drop(other, -errno.ECANCELED)

    def _abandon(self) -> None:
        """In a forked child: drop this process's copies of a parent's ring."""
        if self._closed:
            return
        self._closed = True
        self._core.closed = True
        # The kernel ring and the workers are the parent's: never submit, never cancel.
        self._forsake()
        os.close(self._efd)
        ops = [op for op in self._ops.values() if op is not _CANCEL]
        self._ops.clear()
        ops.extend(self._waiting)
        self._waiting.clear()
        for op in ops:
            if op.state != _DONE:
                self._drop(op, -errno.ECANCELED)

    @abc.abstractmethod
    def _forsake(self) -> None:
        """In a forked child: let go of this process's copies of what the ring
        holds (mappings, fds) without touching the parent's."""
