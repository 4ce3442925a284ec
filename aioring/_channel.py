"""L4: the channel under a stream: the transport of one socket or pipe.

A channel is three objects, each of one concern:

* ``_Channel``, the transport: owns the fd (and the socket or file object it
  came with), answers asyncio's transport methods, and closes: close() lets
  buffered writes go out, cancels a receive in flight, and closes the fd
  once the kernel holds no operation on it.
* ``_Receiver``, the receive target: fills the reader's buffer, at once when
  the fd holds data already (a read that does not wait), otherwise by one
  ring op started again for every receive, whose CQE comes straight here
  (the ring's sink) without a future or a coroutine; and receives into the
  caller's buffer for readinto.  Until data first arrives it waits with a
  poll and holds no buffer of its own, so an idle connection costs little.
* ``_SendQueue``: write() never blocks; the writes of one loop iteration
  leave together, joined or vectored into one send, tried without waiting
  first, else one ring op whose sink starts the next send.  At most one send
  is in flight, so sends never reorder.

A receive that completed while its task was cancelled is kept in the
reader's buffer.  Nothing is ever reported to the loop's exception handler
for a reset or closed peer: an error that ends the connection is raised by
the reader, drain() and wait_closed(), as after asyncio's connection_lost.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import itertools
import os
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ._binding import (MSG_NOSIGNAL, MSG_WAITALL, OP_READ, OP_RECV, OP_SEND, OP_WRITE, VectorSend, prep_poll,
                       prep_rw, uninitialized)
from ._ops import MAX_RW
from ._ringbase import _DONE as _OP_DONE
from ._ringbase import _WAITING as _OP_WAITING
from ._loops import get_ring
from ._redelivery import deliver_owed, owed, redeliver_later
from ._ringbase import Op, RingBase, os_error, ready
from ._core import JOIN_MAX, POOL_MIN, RECV_CHUNK
from ._core import Receiver as _ReceiveTarget
from ._core import Sender as _SendTarget

if TYPE_CHECKING:
    from ._streams import StreamReader

_HIGH_WATER = 64 * 1024  # asyncio's transports' defaults
_CHUNK = RECV_CHUNK  # what asyncio's socket transport receives at a time
# Mutable buffers this large are copied into memory the channel reuses.
_POOL_MIN = POOL_MIN
# Pending writes up to this much in all are joined into one send.
_JOIN_MAX = JOIN_MAX
_IOV_MAX = 1024
_PREP_RW = prep_rw
_PREP_POLL = prep_poll
_RECV = OP_RECV
_READ = OP_READ
_SEND = OP_SEND
_WRITE = OP_WRITE
_SEND_FLAGS = MSG_NOSIGNAL | MSG_WAITALL
_WAITALL = MSG_WAITALL
_DIRECT_SEND_FLAGS = socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT
_DONTWAIT = socket.MSG_DONTWAIT
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 8)
_NO_DIRECT = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})
_POLLIN = 1
_POLLOUT = 4
_ECANCELED = errno.ECANCELED
_RING_ONLY = 1 << 62  # _pull_skip of a receiver whose direct reads do not work

_local = threading.local()


def _scratch() -> memoryview:
    """This thread's buffer for reads that do not wait.  Their bytes are
    copied out before anything else runs, so one buffer serves every channel
    of the thread's loop.  Not zeroed: untouched pages cost no memory."""
    view: memoryview | None = getattr(_local, "scratch", None)
    if view is None:
        view = _local.scratch = uninitialized(_CHUNK)
    return view


class _Channel:
    """The transport of one socket or pipe: owns its fd, its state and its close."""

    __slots__ = ("_closed", "_closed_fut", "_closing", "_extra", "_fd", "_is_socket", "_loop",
                 "_lost", "_on_closed", "_owner", "_readable", "_ring", "_rx", "_tx", "_writable")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, owner: Any, *, is_socket: bool,
                 readable: bool, writable: bool, extra: dict[str, Any]) -> None:
        self._loop = loop
        self._ring = get_ring(loop)
        self._fd = fd
        self._owner = owner  # the socket or file object, closed with the channel
        self._is_socket = is_socket
        self._readable = readable
        self._writable = writable
        self._extra = extra
        self._closing = False
        self._closed = False
        self._closed_fut: asyncio.Future[None] | None = None  # made when asked for
        self._on_closed: Callable[[_Channel], None] | None = None  # called as the fd is closed
        self._lost: OSError | None = None  # the error that ended the connection (see _fail)
        self._rx = _Receiver(self)
        self._tx = _SendQueue(self)

    # ------------------------------------------------------------ transport
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def can_write_eof(self) -> bool:
        return self._writable

    def is_reading(self) -> bool:
        return self._readable and not self._rx._paused and not self._closing

    def pause_reading(self) -> None:
        if not (self._closing or not self._readable):
            self._rx.pause()

    def resume_reading(self) -> None:
        if not self._closing:
            self._rx.resume()

    def get_write_buffer_size(self) -> int:
        return self._tx._pending_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._tx._low, self._tx._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._tx.set_limits(high, low)

    # The send queue's, for the writer and the TLS layer above the channel.
    def write(self, data: Any) -> None:
        self._tx.write(data)

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        self._tx.writelines(list_of_data)

    def write_eof(self) -> None:
        if self._closing or self._tx._eof_wanted:
            return
        if not self._writable:
            raise RuntimeError("this stream cannot write EOF")
        self._tx.write_eof()

    async def drain(self) -> None:
        await self._tx.drain()

    def _send(self) -> None:
        self._tx.send()

    @property
    def _pending_size(self) -> int:
        return self._tx._pending_size

    @property
    def _high(self) -> int:
        return self._tx._high

    @property
    def _write_exc(self) -> OSError | None:
        return self._tx._write_exc

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Let buffered writes go out, cancel a receive in flight, then close the fd."""
        if self._closing:
            return
        if not (self._tx._aborted or self._closed):
            self._rx.take_arrived()
        self._closing = True
        self._rx.close()
        self._tx.close()
        self._settle()

    def _settle(self) -> None:
        """Closing: close the fd once the kernel holds no operation on it and the writes went out."""
        rx, tx = self._rx, self._tx
        if not (rx._armed or rx._read_op is not None or rx._into_out or tx._sending is not None
                or tx._pending):
            self._finish_close()

    def _fail(self, exc: OSError) -> None:
        """An error ended the connection: from now on the reader raises it,
        and so does wait_closed(), as after asyncio's connection_lost(exc)."""
        if self._lost is None:
            self._lost = exc
        reader = self._rx._reader
        if reader is not None and reader._exception is None:
            reader.set_exception(exc)
        self.abort()

    def abort(self) -> None:
        """Close at once: buffered writes are dropped, operations in flight cancelled."""
        self._tx.drop()
        self._closing = False  # close() runs in full
        self.close()

    def _finish_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._owner.close() if not isinstance(self._owner, int) else os.close(self._owner)
        except OSError:
            pass  # the fd is gone either way; nobody is left to tell
        reader = self._rx._reader
        if reader is not None and not reader._eof and reader._exception is None:
            reader.feed_eof()  # the connection is gone, as asyncio's connection_lost says
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed(self)
        self._tx.wake_drainers()
        if self._closed_fut is not None:
            self._resolve(self._closed_fut)

    def _resolve(self, closed: asyncio.Future[None]) -> None:
        if closed.done():
            return
        if self._lost is None:
            closed.set_result(None)
        else:
            # wait_closed() raises it, as asyncio's does; nobody has to ask.
            closed.set_exception(self._lost)
            closed.exception()

    @property
    def _closed_future(self) -> asyncio.Future[None]:
        """Resolved when the fd is closed (with the error that ended the connection, if one did)."""
        closed = self._closed_fut
        if closed is None:
            closed = self._closed_fut = self._loop.create_future()
            if self._closed:
                self._resolve(closed)
        return closed

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)

    def __del__(self) -> None:
        # A file object or socket closes itself when collected; a bare fd is ours.
        if not self._closed and isinstance(self._owner, int):
            try:
                os.close(self._owner)
            except OSError:
                pass


class _Side:
    """What the receive target and the send queue read of their channel on
    every operation, copied: the channel, its loop, ring, fd and owner.  (A
    mixin: each has these slots of its own, its base being the core's.)"""

    __slots__ = ()
    _channel: _Channel
    _loop: asyncio.AbstractEventLoop
    _ring: RingBase
    _fd: int
    _owner: Any
    _is_socket: bool

    def __init__(self, channel: _Channel) -> None:
        side: Any = self  # (the slots are the subclass's, or its C base's)
        side._channel = channel
        side._loop = channel._loop
        side._ring = channel._ring
        side._fd = channel._fd
        side._owner = channel._owner
        side._is_socket = channel._is_socket


class _Receiver(_Side, _ReceiveTarget):
    """The receive target of a channel: fills its reader's buffer, or the
    caller's buffer for readinto; pause_reading's state.

    The policy over the core's Receiver (src/channel.h), which takes the
    completions of the receive into the reader's buffer, appends their bytes
    and starts the receive again, all in C, and hands this class the rest
    (_received): EOF, errors, closing and pause.  Its _reader, _armed,
    _closing and _paused are the C side's fields."""

    __slots__ = ("_channel", "_held", "_loop", "_op", "_owner", "_paused_skip", "_read_op", "_resumed",
                 "_ring")

    _reader: StreamReader | None

    def __init__(self, channel: _Channel) -> None:
        super().__init__(channel)
        self._scratch = _scratch()
        # The receive into the reader's buffer: one op, started again when
        # the reader next waits (see arm; by the core itself in arrival()
        # where it can): a poll until data first arrives, then a receive
        # into the chunk of the core's Receiver.
        self._op: Op | None = None
        ring = self._ring
        opcode = _RECV if self._is_socket else _READ
        if ring.fd >= 0 and ring.supports(opcode):  # (the threads backend, an emulated opcode: Python arms)
            self._core = ring._core
            self._flush = ring._schedule_flush
        self._read_op: Op | None = None  # a receive into the caller's buffer in flight, if any
        # A read that finds its data already there takes it at once, without
        # waiting (MSG_DONTWAIT, RWF_NOWAIT): no ring op, no wake-up.  After a
        # try that found nothing, the next reads go to the ring, more of them
        # each time (up to 64) while tries keep finding nothing.
        self._pull_skip = 0
        self._pull_backoff = 1
        self._rwf_nowait = _RWF_NOWAIT
        # pause_reading(): nothing is received until resume_reading() (the
        # reader's reads wait), as with asyncio's transport.
        self._paused = False
        self._paused_skip = 0  # _pull_skip, kept while paused
        self._held: bytearray | None = None  # what a receive brought after pause_reading()
        self._resumed: asyncio.Future[None] | None = None  # a receive waiting for resume_reading()
        self._closing = False

    # ---------------------------------------------------------------- pause
    def pause(self) -> None:
        if self._paused:
            return
        self._paused = True
        self._paused_skip, self._pull_skip = self._pull_skip, 1 << 63  # (no direct reads either)
        if self._armed:
            # Nothing is received from now on, as asyncio's transport stops
            # reading: the receive out is cancelled (what it brought first is kept).
            assert self._op is not None
            self._ring.cancel(self._op)

    def resume(self) -> None:
        if not self._paused:
            return
        self._unpause()
        reader = self._reader
        if reader is not None and not self._armed:
            waiter = reader._waiter
            if waiter is not None and not waiter.done():  # (the reader waits for data)
                self.arm()

    def _unpause(self) -> None:
        """Paused no more; a receive that waits for it goes on."""
        self._paused = False
        self._pull_skip = self._paused_skip
        held = self._held
        if held is not None:
            self._held = None
            reader = self._reader
            assert reader is not None
            reader._buffer += held
            waiter = reader._waiter
            if waiter is not None and not waiter.done():
                reader._waiter = None  # (as asyncio's reader wakes it)
                waiter.set_result(None)
        resumed = self._resumed
        if resumed is not None and not resumed.done():
            resumed.set_result(None)

    # ------------------------------------------------ into the reader's buffer
    # pull_due() and pull(), the reads that do not wait, are the core's
    # (src/channel.h): a recv(2) or preadv2(2) into the thread's scratch
    # buffer, appended to the reader's buffer, with no Python frame.

    def _pull_failed(self, err: int) -> None:
        """pull()'s error that ends the connection: raised, as the waiter would have."""
        exc = os_error(-err)
        self._channel._fail(exc)
        raise exc

    def arm(self) -> None:
        """Start a receive into the reader's buffer; its CQE feeds the reader
        (data, EOF or the error) and wakes its waiter, maybe before this returns."""
        op = self._op
        if op is None or self._closing or self._paused:
            if self._closing:
                assert self._reader is not None
                self._reader.feed_eof()  # closed under the reader: end of stream
                return
            if self._paused:
                return  # resume_reading() arms it
            op = self._op = self._new_op()
        elif self._rearm(op):
            return  # (the core started its receive into the chunk again, as after a CQE)
        self._armed = True
        try:
            if op.prep is None:
                op.pin(self, True)  # the core's chunk, until its CQE (a poll holds no buffer)
            self._ring.restart(self._loop, op)
        except BaseException as exc:
            if op.state == _OP_WAITING:  # it never reached the kernel
                self._armed = False
            if isinstance(exc, OSError):
                self._channel._fail(exc)
            raise

    def _new_op(self) -> Op:
        """The op that arm() starts again for every receive: while nothing has
        arrived on a socket, a poll, holding no buffer (see _polled); from
        then on a receive into a chunk of the channel's own."""
        if not self.has_chunk and self._is_socket and self._pull_skip < _RING_ONLY:
            op = Op(None, _PREP_POLL, (self._fd, _POLLIN), None, None, 0)
            op.sink = self._polled
        else:
            if self._is_socket:
                args = (_RECV, self._fd, 0, RECV_CHUNK, 0, 0)
            else:
                args = (_READ, self._fd, 0, RECV_CHUNK, -1, 0)
            op = Op(None, None, args, None, None, _POLLIN)  # (the core prepares it)
            op.sink = self  # the core's own target kind: its CQE never calls Python but for _received
        op.unbounded = True
        return op

    def _polled(self, res: int) -> None:
        """The CQE of the poll (the ring's sink): data, EOF or an error is
        there.  Received at once into a chunk, which the next receives use."""
        if res >= 0:
            self._op = None  # (the next arm() makes the receive into the chunk)
            try:
                res = self._owner.recv_into(self, RECV_CHUNK, _DONTWAIT)  # (the core's chunk, made here)
            except BlockingIOError:
                if not self._closing:
                    self._armed = False
                    self.arm()  # nothing there after all: wait again
                    return
                res = -_ECANCELED  # (as a receive cancelled by close())
            except OSError as exc:
                res = -(exc.errno or errno.EIO)
            except (TypeError, ValueError, AttributeError):
                self._pull_skip = _RING_ONLY  # not a plain socket: the ring only
                self._armed = False
                self.arm()
                return
        self._received(res)

    def _received(self, res: int) -> None:
        """A completion of the receive into the reader's buffer that the core
        hands policy (see src/channel.h): EOF, an error, closing, paused."""
        self._armed = False
        reader = self._reader
        assert reader is not None
        if res > 0:
            if self._paused:
                # Came before pause_reading()'s cancel: held back until resume_reading().
                if self._held is None:
                    self._held = bytearray()
                self._held += memoryview(self)[:res]
            else:
                self._deliver(res)  # the core's: into the reader's buffer, its waiter woken
        elif res == 0 or (res == -_ECANCELED and self._closing):
            reader.feed_eof()  # (closed under the read: end of stream, as asyncio's reader sees it)
        elif res == -_ECANCELED:
            # Cancelled by pause_reading(): a read that waits since resume_reading() goes on.
            waiter = reader._waiter
            if not self._paused and waiter is not None and not waiter.done():
                self.arm()
        else:
            self._channel._fail(os_error(res))
        if self._closing:
            self._channel._settle()

    # ----------------------------------------------- into the caller's buffer
    async def receive_into(self, buffer: Any, start: int, exact: bool) -> int:
        """Receive into `buffer` (writable, C-contiguous bytes) from `start`
        on: once, or when `exact` until it is full.  Returns how many bytes
        its front holds (`start` and those received): `start` only at EOF
        or once closing; less than full when exact only when the receive
        stopped short (its task was cancelled after bytes arrived, which it
        then owes, or pause_reading()): the caller asks again.

        The core's Receiver takes it (src/channel.h): the buffer is pinned
        until the kernel let go of it, also when this coroutine is cancelled
        (which waits for that, as Ring.settle) or closed.  Elsewhere (the
        threads backend, paused, the SQ full) it is one receive at a time."""
        if owed:
            deliver_owed()
        if self._into_op is None and self._core is not None:
            self._into_op = self._new_into_op()
        waiter = self._loop.create_future()
        if not self._receive_into(buffer, start, exact, waiter):
            return start + await self.receive(buffer, start, len(buffer) - start, _WAITALL if exact else 0)
        try:
            await waiter
        except asyncio.CancelledError as exc:
            if self._into_out:
                self._cancel_into()
            while self._into_out:  # (the kernel holds the buffer: wait, as Ring.settle)
                waiter = self._into_waiter = self._loop.create_future()
                try:
                    await asyncio.shield(waiter)
                except asyncio.CancelledError:
                    continue
            got = self._into_got
            if self._closing:
                self._channel._settle()
            if got == start or (self._into_res < 0 and self._into_res != -_ECANCELED):
                raise
            redeliver_later(exc)  # bytes came: they are returned, the cancellation is owed
            return got
        except GeneratorExit:
            if self._into_out:
                # Closed with the receive out: the receiver holds the buffer
                # until the kernel let go of it, and the channel counts it.
                self._cancel_into()
                if self._into_out:
                    waiter.add_done_callback(self._abandoned_receive_done)
                    raise
            self._receive_done()
            raise
        got = self._into_got
        res = self._into_res
        if res < 0:
            if not (res == -_ECANCELED and self._closing):
                err = os_error(res)
                self._channel._fail(err)
                raise err
        if self._closing:
            self._channel._settle()
        return got

    def _cancel_into(self) -> None:
        op = self._into_op
        assert op is not None
        self._ring.cancel(op)

    def _new_into_op(self) -> Op:
        """The op of every receive into the caller's buffer (_receive_into);
        its args name the opcode, fd and offset, the core the rest."""
        if self._is_socket:
            args = (_RECV, self._fd, 0, 0, 0, 0)
            self._waitall = _WAITALL
        else:
            args = (_READ, self._fd, 0, 0, -1, 0)
        op = Op(None, None, args, None, None, _POLLIN)
        op.unbounded = True
        op.sink = self._into_done
        return op

    async def receive(self, buffer: Any, start: int, n: int, flags: int = 0) -> int:
        """One receive of at most n bytes into `buffer` (writable) from
        `start` on; 0 at EOF or once closing.

        The ring pins `buffer` until the CQE, also if this coroutine is
        closed.  A receive that fails (a reset peer) closes the channel, as
        asyncio's transport closes on a read error."""
        while self._paused and not self._closing:
            resumed = self._resumed = self._loop.create_future()
            await resumed
            reader = self._reader
            if reader is not None and reader._buffer:
                # What a receive brought after pause_reading() (see _received) comes first.
                buffered = reader._buffer
                k = min(n, len(buffered))
                buffer[start:start + k] = buffered[:k]
                del buffered[:k]
                return k
        if self._closing:
            return 0
        if self._is_socket:
            args = (_RECV, self._fd, start, min(n, MAX_RW), 0, flags)
        else:
            args = (_READ, self._fd, start, min(n, MAX_RW), -1, 0)
        ring = self._ring
        try:
            op = ring.start(self._loop, None, args, buffer, None, _POLLIN, unbounded=True, writable=True)
            if op.future is None:
                return ready(op)
        except OSError as exc:
            self._channel._fail(exc)
            raise
        self._read_op = op
        fut = op.future
        abandoned = False
        try:
            try:
                return await fut
            except asyncio.CancelledError as exc:
                return await ring.settle(op, exc)
        except GeneratorExit:
            if op.state != _OP_DONE:
                # Closed with the receive in flight: the ring keeps `keep`,
                # and the channel counts the receive until its CQE.
                abandoned = True
                hook = op.waiter if op.waiter is not None else fut
                ring.abandon(op)
                hook.add_done_callback(self._abandoned_receive_done)
            raise
        except OSError as exc:
            if exc.errno == _ECANCELED and self._closing:
                return 0  # closed under the read: end of stream, as asyncio's reader sees it
            self._channel._fail(exc)
            raise
        finally:
            if not abandoned:
                self._receive_done()

    def _abandoned_receive_done(self, fut: asyncio.Future[Any]) -> None:
        self._receive_done()

    def _receive_done(self) -> None:
        self._read_op = None
        if self._closing:
            self._channel._settle()

    # ---------------------------------------------------------------- close
    def take_arrived(self) -> None:
        """Closing: what already arrived stays readable, as it does with
        asyncio's transport, which read it as it came (up to where that
        transport pauses reading)."""
        reader = self._reader
        if (reader is None or self._paused or self._armed or self._read_op is not None or self._into_out
                or reader._eof
                or reader._exception is not None or self._pull_skip >= _RING_ONLY):
            return
        view = self._scratch
        budget = min(2 * reader._limit, 64 * _CHUNK)  # (bounded: a huge limit, a peer that keeps sending)
        while len(reader._buffer) <= budget:
            try:
                if self._is_socket:
                    n = self._owner.recv_into(view, _CHUNK, _DONTWAIT)
                else:
                    n = os.preadv(self._fd, [view], -1, _RWF_NOWAIT)
            except (OSError, TypeError, ValueError, AttributeError):
                return  # nothing more (or an error, which the closed stream no longer reports)
            if not n:
                return  # (EOF: the closed stream ends there anyway)
            reader._buffer += view[:n]

    def close(self) -> None:
        """Receive no more: a waiting read ends at EOF, a receive in flight is cancelled."""
        self._closing = True
        if self._paused:
            # Closed while paused: nothing more is received (as asyncio's
            # paused transport); a waiting read ends at EOF.
            self._unpause()  # (a receive that waits then sees the channel closing)
            reader = self._reader
            if reader is not None and not self._armed and reader._waiter is not None:
                reader.feed_eof()
        if self._read_op is not None:
            self._ring.cancel(self._read_op)
        if self._into_out:
            self._cancel_into()
        if self._armed:
            assert self._op is not None
            self._ring.cancel(self._op)


class _SendQueue(_Side, _SendTarget):
    """The send side of a channel: write() queues, the iteration's writes
    leave together in one send, at most one send is in flight; drain().

    The policy over the core's Sender (src/channel.h), which takes the hot
    path: write() of bytes, and the flush's direct send of the iteration's
    writes, joined.  Its fields (_pending, _pending_size, _sending,
    _write_exc, _eof_wanted, _closing, _soon, _direct, _pooled,
    _drain_waiters, _sent_total, _fd, _is_socket) are the C side's."""

    __slots__ = ("_aborted", "_channel", "_high", "_keep", "_loop", "_low", "_op", "_owner", "_ring",
                 "_spare")

    def __init__(self, channel: _Channel) -> None:
        super().__init__(channel)
        # _pending: a deque of what is to be sent, made at the first write.
        # _soon: a send is deferred to this iteration's flush, which calls
        # _send_now.  _direct: sends are tried at once without waiting
        # (MSG_DONTWAIT, RWF_NOWAIT): the kernel takes most of them there and
        # then, and a ring op costs more than the system call; off where the
        # kernel refuses it.  _pooled: copies of large mutable buffers, as
        # (stream offset of their end, memory).
        self._defer = self._ring.defer
        self._send_soon = self._send_now
        self._core = self._ring._core  # (its flush scheduled: write() defers in C)
        self._rwf_nowait = _RWF_NOWAIT
        self._op: Op | None = None  # the op of every ring send, started again each time
        self._keep: Any = None  # what the send in flight points to, besides op.args
        self._high = _HIGH_WATER
        self._low = _HIGH_WATER // 4
        self._spare: Any = None
        self._aborted = False

    def set_limits(self, high: int | None, low: int | None) -> None:
        # asyncio's rules: high defaults to 64 KiB (or 4 x low), low to high / 4.
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self.wake_drainers()

    # ---------------------------------------------------------------- write
    def _write(self, data: Any) -> None:
        """write() of what the core's Sender does not queue itself (see src/channel.h)."""
        if self._eof_wanted or self._write_exc is not None or self._closing:
            if type(data) is not bytes:
                self._frozen(data, copy=False)  # (the type's TypeError first, as asyncio's)
            self._refuse()
            return
        if type(data) is not bytes:
            data = self._frozen(data)
        if not data:
            return
        pending = self._pending
        if pending is None:
            pending = self._pending = collections.deque()
        pending.append(data)
        self._pending_size += len(data)
        if self._sending is None and not self._soon:
            # Writes of this loop iteration leave together, at its end or at
            # drain(), whichever comes first: one (vectored) send for them all.
            self._soon = True
            self._ring.defer(self._send_now)

    def _frozen(self, data: Any, copy: bool = True) -> Any:
        """What write() sends of a buffer that is not bytes: a copy, since the
        caller may change its buffer once write() returns."""
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError("data argument must be a bytes-like object, "
                            f"not {type(data).__name__!r}") from None
        if not copy:
            return None
        if view.nbytes < _POOL_MIN or not view.c_contiguous:
            return bytes(view)
        return self._copy(view if view.format == "B" and view.ndim == 1 else view.cast("B"))

    def _refuse(self) -> None:
        """write() after write_eof() or a failed send raises, as asyncio's;
        after close(), or of nothing, it does nothing."""
        if self._eof_wanted:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._write_exc is not None:
            exc = self._write_exc
            raise type(exc)(exc.errno, exc.strerror)
        # Dropped, as asyncio's transport drops them once its buffer is empty.

    def _copy(self, view: memoryview) -> Any:
        """A copy of a large buffer, in memory this channel reuses: a fresh
        allocation of many MiB costs more in page faults than the copy."""
        n = view.nbytes
        spare = self._spare
        if spare is not None and len(spare) >= n:
            self._spare = None
        else:
            spare = uninitialized(n)
        copy = spare[:n]
        copy[:] = view
        if self._pooled is None:
            self._pooled = collections.deque()
        self._pooled.append((self._sent_total + self._pending_size + n, spare))
        return copy

    def _recycle(self) -> None:
        """Take back the copies whose bytes all went out."""
        pooled = self._pooled
        while pooled and pooled[0][0] <= self._sent_total:
            buf = pooled.popleft()[1]
            if self._spare is None or len(buf) > len(self._spare):
                self._spare = buf

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        """(The channel checked that it may.)"""
        self._eof_wanted = True
        if self._sending is None and self._pending:
            self.send()
        if self._sending is None and not self._pending:
            self._shutdown()

    def _shutdown(self) -> None:
        if not self._is_socket:
            self._channel.close()  # a pipe's writer signals EOF by closing, as asyncio's does
            return
        try:
            self._owner.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self._write_exc = exc

    # ----------------------------------------------------------------- send
    def send(self, direct: bool = True) -> None:
        """Hand the pending data to the kernel; go on while sends complete at once.
        Each send is tried without waiting first, unless `direct` is False (the
        caller's own try just found the kernel full)."""
        while self._pending and self._sending is None and self._write_exc is None:
            pending = self._pending
            if len(pending) > 1 and self._pending_size <= _JOIN_MAX:
                # Small writes: one joined copy costs less than an iovec.
                joined = b"".join(pending)
                pending.clear()
                pending.append(joined)
            if direct and self._direct:
                res = self._send_directly()
                if res is not None:
                    self._sent(res)
                    if self._pending:
                        continue  # the rest: most likely the ring's, the kernel being full
                    self._after_send()
                    return
            op = self._op
            if op is None:
                op = self._op = Op(None, _PREP_RW, (), None, None, _POLLOUT)
                op.unbounded = True
                op.sink = self._send_finished
            self._prepare(op, pending)
            # Marked before it starts: its CQE may come inside the submit call.
            self._sending = op
            try:
                self._ring.restart(self._loop, op)
            except BaseException:
                if op.state == _OP_WAITING:  # it never reached the kernel
                    self._sending = None
                    self._keep = None
                raise

    def _prepare(self, op: Op, pending: collections.deque[Any]) -> None:
        """Point the send op at the pending data: one buffer, or an iovec of them."""
        if len(pending) == 1:
            # (The core prepares it; the op pins the data until its CQE.)
            n = min(op.pin(pending[0]), MAX_RW)
            op.prep = None
            if self._is_socket:
                op.args = (_SEND, self._fd, 0, n, 0, _SEND_FLAGS)
            else:
                op.args = (_WRITE, self._fd, 0, n, -1, 0)
            return
        request = VectorSend(self._fd, pending, min(len(pending), _IOV_MAX), self._is_socket, _SEND_FLAGS)
        op.prep, op.args = request.prep, request.args
        self._keep = request.keep

    def _send_directly(self) -> int | None:
        """One send without waiting: the bytes the kernel took, -errno, or
        None when it would have to wait (the ring's turn)."""
        pending = self._pending
        assert pending is not None
        try:
            if not self._is_socket:
                return os.pwritev(self._fd, list(itertools.islice(pending, _IOV_MAX)), -1, _RWF_NOWAIT)
            if len(pending) == 1:
                return int(self._owner.send(pending[0], _DIRECT_SEND_FLAGS))
            return int(self._owner.sendmsg(list(itertools.islice(pending, _IOV_MAX)), (),
                                           _DIRECT_SEND_FLAGS))
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno is not None and exc.errno not in _NO_DIRECT:
                return -exc.errno
            self._direct = False  # (a kernel without RWF_NOWAIT for pipes)
        except (TypeError, ValueError, AttributeError):
            self._direct = False  # not a plain socket or fd: the ring only
        return None

    def _send_finished(self, res: int) -> None:
        """The CQE of the send in flight (the ring's sink)."""
        self._sending.args = ()  # type: ignore[union-attr]  # (what it sent may be large)
        self._sending = None
        self._keep = None
        self._sent(res)
        self._after_send()

    def _sent(self, res: int) -> None:
        """Account for a send's result: drop what the kernel took, or fail the writer."""
        pending = self._pending
        assert pending is not None
        if res >= 0:
            if not self._aborted:  # (else the data was dropped already)
                self._sent_total += res
                if res == self._pending_size:
                    pending.clear()  # the common case: all of it went
                    self._pending_size = 0
                else:
                    self._pending_size -= res
                    while res:
                        first = pending[0]
                        if res >= len(first):
                            res -= len(first)
                            pending.popleft()
                        else:
                            pending[0] = memoryview(first)[res:]
                            res = 0
                if self._pooled:
                    self._recycle()
        else:
            pending.clear()
            self._pending_size = 0
            self._pooled = None
            if not (res == -_ECANCELED and (self._closing or self._aborted)):
                self._write_exc = exc = os_error(res)
                self._channel._fail(exc)  # as asyncio's transport: a failed send ends the connection

    def _after_send(self) -> None:
        if self._drain_waiters:
            self.wake_drainers()
        if not self._pending:
            if self._eof_wanted and self._write_exc is None and not self._closing:
                self._shutdown()
            if self._closing:
                self._channel._settle()
        elif not self._soon:
            self._soon = True
            self._ring.defer(self._send_now)

    # ---------------------------------------------------------------- drain
    def wake_drainers(self) -> None:
        waiters = self._drain_waiters
        if waiters and (self._pending_size <= self._low or self._write_exc is not None
                        or self._channel._closed):
            self._drain_waiters = None
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def drain(self) -> None:
        if self._write_exc is not None:
            exc = self._write_exc
            raise type(exc)(exc.errno, exc.strerror)
        channel = self._channel
        if channel._closed:
            raise ConnectionResetError("Connection lost")
        if channel._closing:
            await asyncio.sleep(0)  # as asyncio's drain: let the close progress
            if channel._closed:
                raise ConnectionResetError("Connection lost")
        if self._sending is None and self._pending:
            self._send_now()  # (the core's: the hot path, else send())
        if self._pending_size <= self._high:
            return
        fut = self._loop.create_future()
        if self._drain_waiters is None:
            self._drain_waiters = []
        self._drain_waiters.append(fut)
        await fut
        if self._write_exc is not None:
            exc = self._write_exc
            raise type(exc)(exc.errno, exc.strerror)
        if channel._lost is not None:
            raise channel._lost  # (closed without an error, as by abort(): it just returns, as asyncio's)

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Accept no more writes; those buffered go out."""
        self._closing = True
        if self._sending is None and self._pending:
            self.send()

    def drop(self) -> None:
        """abort(): buffered writes are dropped, a send in flight cancelled."""
        self._aborted = True
        if self._pending:
            self._pending.clear()
        self._pending_size = 0
        self._pooled = None
        if self._sending is not None:
            self._ring.cancel(self._sending)
