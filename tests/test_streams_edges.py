"""Review tests for aioring's sockets and streams: behaviours the other test
files do not pin down, each stated against asyncio where asyncio has one."""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import gc
import os
import random
import socket
import struct

import pytest

import aioring
from aioring import _loops, _ringbase

IMPLS = ["aioring", "asyncio"]


def _tcp_pair(keep) -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = keep(socket.socket())
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    keep(server)
    return client, server


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def _streams(impl: str, sock: socket.socket):
    if impl == "aioring":
        return await aioring.open_connection(sock=sock)
    return await asyncio.open_connection(sock=sock)


async def _close(writer) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def _cancel_ring_ops(exclude: set[int] = frozenset()) -> None:
    """Ask the kernel to drop every operation still in flight on this loop's
    ring, and wait until it did (cleanup after a test left some behind); the
    outcome nobody awaits any more is retrieved here."""
    ring = _loops.get_ring(asyncio.get_running_loop())
    ops = []
    for key, op in list(ring._ops.items()):
        if op is not _ringbase._CANCEL and key not in exclude:
            ops.append(op)
            ring._cancel(key)
    for op in list(ring._waiting):  # (held back: the threads backend polls first)
        if op.state != _ringbase._DONE:
            ops.append(op)
            ring.cancel(op)
    for _ in range(1000):
        if all(op.state == _ringbase._DONE for op in ops):
            break
        await asyncio.sleep(0)
    for op in ops:
        fut = op.future
        if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled():
            fut.exception()


# ------------------------------------------------------------------ servers
@pytest.mark.parametrize("impl", IMPLS)
async def test_server_wait_closed_before_close_waits_for_close(impl):
    """asyncio's Server.wait_closed() called before close() waits until the
    server is closed (3.11 and 3.12.1+, both loops); it does not return at once."""
    mod = aioring if impl == "aioring" else asyncio
    server = await mod.start_server(lambda r, w: None, "127.0.0.1", 0)
    waiting = asyncio.ensure_future(server.wait_closed())
    for _ in range(10):
        await asyncio.sleep(0)
    returned_early = waiting.done()
    server.close()
    await asyncio.wait_for(waiting, 5)
    assert not returned_early, "wait_closed() returned before close() was called"


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_reset_seen_by_a_read_closes_the_transport(socks, impl, loop_errors):
    """When a read fails with ConnectionResetError, asyncio's transport is
    closed by then (is_closing(), the socket's fd released), on both loops."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    _reset(b)
    with pytest.raises(ConnectionResetError):
        await reader.read(100)
    for _ in range(3):
        await asyncio.sleep(0)
    closing, fd = writer.is_closing(), a.fileno()
    await _close(writer)
    assert closing, "the transport is not closing after the connection was reset"
    assert fd == -1, "the socket is still open after the connection was reset"
    assert loop_errors == []


@pytest.mark.parametrize("impl", IMPLS)
async def test_server_wait_closed_after_a_handler_swallowed_a_reset(impl, loop_errors):
    """A handler that catches the reset and returns without closing its writer:
    asyncio closed that connection itself, so wait_closed() returns."""
    mod = aioring if impl == "aioring" else asyncio
    handled = asyncio.get_running_loop().create_future()

    async def handler(reader, writer):
        try:
            await reader.read(100)
        except ConnectionResetError:
            pass
        handled.set_result(None)

    server = await mod.start_server(handler, "127.0.0.1", 0)
    client = socket.socket()
    client.connect(server.sockets[0].getsockname())
    _reset(client)
    await asyncio.wait_for(handled, 5)
    server.close()
    try:
        await asyncio.wait_for(server.wait_closed(), 2)
    except asyncio.TimeoutError:
        pytest.fail("wait_closed() never returned: the reset connection was never closed")
    assert loop_errors == []


async def _cancel_after_a_late_read(body, reader, peer) -> None:
    """Run `body`, whose first await is a large read from `reader`; once that
    read's CQE is in (its bytes arrived) but before the task ran again,
    cancel it: the read returns them and the task owes the cancellation."""
    task = asyncio.ensure_future(body)
    await asyncio.sleep(0)  # the task's receive is in flight
    rx = reader._rx
    read_op = rx._read_op  # (the core's receive into the caller's buffer has none)
    assert read_op is not None or rx._into_out
    peer.sendall(b"hello")
    # The CQE is harvested; the task has not run yet.
    while rx._into_out if read_op is None else not read_op.future.done():
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ------------------------------------------------------------- cancellation
async def test_close_after_a_late_read_result_does_not_raise(socks):
    """A receive straight into the caller's buffer whose task was cancelled
    after its bytes arrived returns them and owes the cancellation "at the
    task's next await".  writer.close() is no await: it must not raise
    CancelledError (asyncio's never raises)."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    outcome = []

    async def body():
        buf = bytearray(1 << 20)  # large: received in place, not read ahead
        got = await reader.readinto(buf)
        data = bytes(buf[:got])
        writer.write(b"got:" + data)
        try:
            writer.close()
        except asyncio.CancelledError:
            outcome.append("close() raised CancelledError")
            raise
        outcome.append("close() returned")
        await asyncio.sleep(0)  # the owed cancellation lands here

    await _cancel_after_a_late_read(body(), reader, b)
    await asyncio.wait_for(writer.wait_closed(), 5)
    b.settimeout(5)
    assert b.recv(100) == b"got:hello"
    assert outcome == ["close() returned"]


# ------------------------------------------------------- buffer ownership
@pytest.mark.parametrize("how", ["readinto_exactly", "readinto"])
async def test_a_failed_read_leaves_the_callers_buffer_resizable(socks, how):
    """_ring: "release it now, not when the last reference goes (a traceback can
    hold the caller's frame for a long time), so that a bytearray can be resized
    again the moment the call returns".  The stream reads keep a memoryview of
    the caller's buffer in their frame, which the exception's traceback holds."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    buf = bytearray(100_000)
    if how == "readinto_exactly":
        b.sendall(b"x" * 10)
        b.shutdown(socket.SHUT_WR)
        expected: type[BaseException] = asyncio.IncompleteReadError
    else:
        _reset(b)
        expected = ConnectionResetError
    try:
        if how == "readinto_exactly":
            await reader.readinto_exactly(buf)
        else:
            await reader.readinto(buf)
    except expected:
        try:
            buf.extend(b"y")
        except BufferError:
            pytest.fail("the bytearray is still exported after the read raised")
    else:
        pytest.fail("the read did not raise")
    finally:
        await _close(writer)


# The call a task makes after a late result, which raises the cancellation it
# owes before anything is submitted: (name, coroutine of (bytearray, pipe, socket)).
_SECOND_CALLS = {
    "StreamReader.readinto": lambda reader, ba, pipe, sock: reader.readinto(ba),
    "StreamReader.readinto_exactly": lambda reader, ba, pipe, sock: reader.readinto_exactly(ba),
    "aioring.readinto": lambda reader, ba, pipe, sock: aioring.readinto(pipe[0], ba),
    "aioring.write": lambda reader, ba, pipe, sock: aioring.write(pipe[1], ba),
    "aioring.sock_recv_into": lambda reader, ba, pipe, sock: aioring.sock_recv_into(sock, ba),
    "aioring.sock_recvfrom_into": lambda reader, ba, pipe, sock: aioring.sock_recvfrom_into(sock, ba),
    "aioring.sock_sendall": lambda reader, ba, pipe, sock: aioring.sock_sendall(sock, ba),
}


@pytest.mark.parametrize("second", list(_SECOND_CALLS))
async def test_a_call_refused_for_an_owed_cancellation_leaves_the_buffer_resizable(socks, pipe, second):
    """After a late result the task's next ring operation raises the owed
    CancelledError before submitting.  The caller's buffer must be let go
    then and there: resizable at once, and never left exported to the
    garbage collector (an export of a memoryview in a reference cycle crashes
    CPython before 3.13)."""
    a, b = _tcp_pair(socks)
    c, _d = _tcp_pair(socks)
    c.setblocking(False)
    reader, writer = await aioring.open_connection(sock=a)
    outcome = []

    async def body():
        got = await reader.readinto(bytearray(1 << 20))  # large: received in place
        assert got == 5
        ba = bytearray(1 << 20)
        try:
            await _SECOND_CALLS[second](reader, ba, pipe, c)
        except asyncio.CancelledError:
            outcome.append(_exported(ba))
            raise
        outcome.append("the owed cancellation was not raised")

    await _cancel_after_a_late_read(body(), reader, b)
    assert outcome == [False]
    await _close(writer)


def _exported(ba: bytearray) -> bool:
    """Whether `ba` is exported (cannot be resized).  The tests that ask make
    sure no data can arrive, so a resize that succeeds corrupts nothing."""
    try:
        ba.append(0)
    except BufferError:
        return True
    ba.pop()
    return False


# (On the threads backend a socket request that would block waits for
# readiness first, holding nothing: closing its coroutine then lets go.)
@pytest.mark.backends("io_uring")
@pytest.mark.parametrize("call", ["sock_recv_into", "sock_recvfrom_into", "readinto",
                                  "readinto_exactly"])
async def test_a_closed_coroutine_leaves_its_buffer_with_the_kernel(socks, call):
    """The in-flight table holds every object the kernel reads or writes (_ring's
    "Ownership").  A coroutine can be closed (coro.close(), GeneratorExit) while
    its operation is in flight: nothing the kernel may still write into may be
    released then.  sock_recv_into hands its export to the ring and passes;
    the others keep it in coroutine locals only."""
    a, _b = _tcp_pair(socks)
    a.setblocking(False)
    buf = bytearray(100_000)
    writer = None
    if call == "sock_recv_into":
        coro = aioring.sock_recv_into(a, buf)
    elif call == "sock_recvfrom_into":
        coro = aioring.sock_recvfrom_into(a, buf)
    else:
        reader, writer = await aioring.open_connection(sock=a)
        coro = getattr(reader, call)(buf)
    ring = _loops.get_ring(asyncio.get_running_loop())
    before = set(ring._ops)
    coro.send(None)  # runs to its first suspension: the receive is prepared
    await asyncio.sleep(0)  # the flush submitted it
    coro.close()
    gc.collect()
    try:
        assert len(ring._ops) + len(ring._waiting) > len(before)  # the kernel still holds the receive
        assert _exported(buf), "the caller's buffer was released while the kernel may write into it"
    finally:
        await _cancel_ring_ops(before)  # never let data arrive into released memory
        if writer is not None:
            await _close(writer)


# (On the threads backend a receive waits for readiness, which holds no fd.)
@pytest.mark.backends("io_uring")
async def test_close_keeps_the_fd_while_a_dropped_receive_is_in_flight(socks):
    """Closing a stream releases the fd "once the kernel holds no operation on
    it".  A receive whose coroutine was closed is still in the kernel."""
    a, _b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    ring = _loops.get_ring(asyncio.get_running_loop())
    before = set(ring._ops)
    coro = reader.read(100)
    coro.send(None)
    coro.close()
    try:
        in_flight = len(ring._ops) > len(before)
        writer.close()
        assert in_flight
        assert a.fileno() != -1, "the fd was closed while the kernel still holds a receive on it"
    finally:
        await _cancel_ring_ops(before)
        await _close(writer)


# (On the threads backend a socket request that would block waits for
# readiness first, holding nothing: closing its coroutine then lets go.)
@pytest.mark.backends("io_uring")
async def test_a_closed_sendall_keeps_its_data_with_the_kernel(socks):
    """sock_sendall releases its export in `finally`: closing the coroutine while
    its SEND waits for room lets the caller resize (free) what the kernel reads."""
    a, _b = _tcp_pair(socks)
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    while True:  # fill the send buffer: the ring's SEND has to wait
        try:
            a.send(b"\0" * 65536)
        except BlockingIOError:
            break
    data = bytearray(1 << 20)
    ring = _loops.get_ring(asyncio.get_running_loop())
    before = set(ring._ops)
    coro = aioring.sock_sendall(a, data)
    coro.send(None)
    coro.close()
    gc.collect()
    try:
        assert len(ring._ops) + len(ring._waiting) > len(before)
        assert _exported(data), "the data was released while the kernel may still send it"
    finally:
        await _cancel_ring_ops(before)


# ---------------------------------------------------- passing, but important
async def test_abort_with_a_send_in_flight_closes_once_the_kernel_let_go(socks, loop_errors):
    """abort() while a large send waits for a peer that does not read: the fd
    stays open until the send's CQE, wait_closed() then returns, the waiting
    drain returns (as asyncio's, woken by connection_lost(None)), nothing
    reaches the exception handler."""
    a, _b = _tcp_pair(socks)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    _reader, writer = await aioring.open_connection(sock=a)
    payload = bytearray(4 << 20)
    writer.write(payload)  # pooled copy
    writer.write(b"tail")
    drainer = asyncio.ensure_future(writer.drain())
    for _ in range(3):
        await asyncio.sleep(0)
    assert writer.transport._tx._sending is not None
    writer.transport.abort()
    assert writer.transport.get_write_buffer_size() == 0
    await asyncio.wait_for(writer.wait_closed(), 5)
    assert a.fileno() == -1
    assert await drainer is None
    with pytest.raises(ConnectionResetError, match="Connection lost"):
        await writer.drain()  # a drain after the connection was lost raises
    assert _loops.get_ring(asyncio.get_running_loop())._ops == {}
    assert loop_errors == []


async def test_writes_after_a_partial_send_keep_their_order(socks):
    """Writes made while a send is in flight (small, joined; large, pooled;
    mutated after write) arrive in order and as they were at write()."""
    a, b = _tcp_pair(socks)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    _reader, writer = await aioring.open_connection(sock=a)
    expected = []
    big = bytearray(300_000)
    for i in range(40):
        if i % 3 == 0:
            big[:] = bytes([i]) * len(big)
            writer.write(big)
            expected.append(bytes(big))
            big[:] = b"\xff" * len(big)
        else:
            chunk = bytearray(str(i).encode() * 100)
            writer.write(chunk)
            expected.append(bytes(chunk))
            chunk[:] = b"?" * len(chunk)
        if i % 7 == 0:
            await asyncio.sleep(0)
    writer.write_eof()
    loop = asyncio.get_running_loop()

    def receive_all() -> bytes:
        b.setblocking(True)
        parts = []
        while part := b.recv(1 << 16):
            parts.append(part)
        return b"".join(parts)

    got = await loop.run_in_executor(None, receive_all)
    await _close(writer)
    assert got == b"".join(expected)


# ------------------------------------------------ a connection lost to an error
@pytest.mark.parametrize("impl", IMPLS)
async def test_a_send_to_a_reset_peer_ends_the_reader_and_wait_closed_with_the_error(impl, socks):
    """The peer resets; the next sends fail: from then on the reader raises
    the error (not a clean EOF: what was lost must show), and so does
    wait_closed(), as after asyncio's connection_lost(exc)."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    _reset(b)
    with contextlib.suppress(ConnectionError):
        for _ in range(50):
            writer.write(b"x" * 1000)
            await writer.drain()
            await asyncio.sleep(0)
            if writer.is_closing():
                break
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(100), 5)
    assert isinstance(reader.exception(), ConnectionResetError)
    writer.close()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(writer.wait_closed(), 5)


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_reset_seen_by_a_read_ends_wait_closed_with_the_error(impl, socks):
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    _reset(b)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(100), 5)
    writer.close()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(writer.wait_closed(), 5)
    assert a.fileno() == -1


@pytest.mark.parametrize("impl", IMPLS)
async def test_bytes_that_arrived_before_close_stay_readable(impl, socks):
    """asyncio's transport reads what arrives as it comes, so a reply that
    arrived before close() is still read after it; then EOF."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    b.sendall(b"goodbye\n")
    for _ in range(20):  # (one loop step lets asyncio's transport take them)
        await asyncio.sleep(0)
    writer.close()
    await writer.wait_closed()
    assert await asyncio.wait_for(reader.read(100), 5) == b"goodbye\n"
    assert await asyncio.wait_for(reader.read(100), 5) == b""


async def test_bytes_in_a_pipe_at_close_stay_readable():
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    try:
        os.write(w, b"left in the pipe")
        reader.close()
        await reader.wait_closed()
        assert await reader.read() == b"left in the pipe"
        assert reader.at_eof()
    finally:
        os.close(w)


async def test_a_receive_of_nothing_returns_at_once(socks):
    """sock_recv(sock, 0) and sock_recv_into of an empty buffer return at once,
    as recv(0) and asyncio's loop do; they never wait for data."""
    a, _b = _tcp_pair(socks)
    a.setblocking(False)
    for _ in range(3):  # (also after a receive that found nothing went to the ring)
        assert await asyncio.wait_for(aioring.sock_recv(a, 0), 5) == a.recv(0) == b""
        assert await asyncio.wait_for(aioring.sock_recv_into(a, bytearray()), 5) == 0
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(aioring.sock_recv(a, 10), 0.01)


async def test_a_buffer_changed_while_its_read_waits_is_filled_as_an_assignment_fills_it(socks):
    """readinto_exactly(buf) fills buf as ``buf[:] = data`` would: a bytearray
    the caller grew while the read waited holds the bytes read and no more,
    and a memoryview released meanwhile raises the ValueError that writing to
    it raises."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    buf = bytearray(8)
    task = asyncio.ensure_future(reader.readinto_exactly(buf))
    await asyncio.sleep(0)
    assert not task.done()
    buf.extend(b"xx")
    b.sendall(b"12345678")
    assert await asyncio.wait_for(task, 5) == 8
    expected = bytearray(10)
    expected[:] = b"12345678"
    assert buf == expected
    view = memoryview(bytearray(8))
    task = asyncio.ensure_future(reader.readinto_exactly(view))
    await asyncio.sleep(0)
    assert not task.done()
    view.release()
    b.sendall(b"abcdefgh")
    with pytest.raises(ValueError) as raised:
        await asyncio.wait_for(task, 5)
    with pytest.raises(ValueError) as direct:
        view[:] = b"abcdefgh"
    assert str(raised.value) == str(direct.value)
    await _close(writer)


async def test_a_local_address_of_no_matching_family_is_named():
    """asyncio's own loop's words (uvloop's bind fails with EINVAL instead)."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(OSError, match=r"^no matching local address with family=.*AF_INET.* found$"):
            await aioring.open_connection("127.0.0.1", port, local_addr=("::1", 0))
    finally:
        server.close()


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_unix_connect_error_is_the_plain_error(impl, tmp_path):
    mod = aioring if impl == "aioring" else asyncio
    with pytest.raises(FileNotFoundError) as info:
        await mod.open_unix_connection(str(tmp_path / "missing.sock"))
    assert str(info.value) == "[Errno 2] No such file or directory"


async def test_a_failed_accept_is_reported_and_the_server_goes_on(monkeypatch, loop_errors):
    """One accept that fails with an error of its own (EPROTO here): asyncio's
    loop reports it to the exception handler and keeps listening."""
    from aioring import _streams
    real = _streams._Acceptor.accept
    failures = [-errno.EPROTO]

    def accept(self):
        if failures:
            return self._accepted(failures.pop())  # as the CQE of a failed accept
        return real(self)
    monkeypatch.setattr(_streams._Acceptor, "accept", accept)
    served = asyncio.get_running_loop().create_future()

    def handler(reader, writer):
        writer.close()
        if not served.done():
            served.set_result(None)
    server = await aioring.start_server(handler, "127.0.0.1", 0)
    try:
        _reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        await asyncio.wait_for(served, 5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert [e["exception"].errno for e in loop_errors] == [errno.EPROTO]
    loop_errors.clear()


async def test_a_refused_write_keeps_no_copy(socks):
    """write() after close() drops the data (as asyncio's transport does),
    without copying it first; a wrong type still raises TypeError."""
    a, _b = _tcp_pair(socks)
    _reader, writer = await aioring.open_connection(sock=a)
    writer.close()
    writer.write(bytearray(4 << 20))
    assert not writer.transport._tx._pooled and writer.transport.get_write_buffer_size() == 0
    with pytest.raises(TypeError):
        writer.write("text")
    await writer.wait_closed()


async def _steps(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("impl", IMPLS)
async def test_pause_reading_holds_reads_until_resume_reading(impl, socks):
    """transport.pause_reading(): reads wait (what was read before is still
    there), resume_reading() lets them go on; is_reading() says which."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    transport = writer.transport
    assert transport.is_reading()
    transport.pause_reading()
    transport.pause_reading()  # (twice: nothing more)
    assert not transport.is_reading()
    b.sendall(b"held")
    for reading in (reader.read(100), reader.readexactly(4)):
        task = asyncio.ensure_future(reading)
        await _steps(20)  # (the bytes are there: a reading transport takes them in a step or two)
        assert not task.done()
        transport.resume_reading()
        assert transport.is_reading()
        assert await asyncio.wait_for(task, 5) == b"held"
        transport.pause_reading()
        b.sendall(b"held")
    transport.resume_reading()
    buf = bytearray(70_000)  # a read straight into the caller's buffer waits too
    transport.pause_reading()
    task = asyncio.ensure_future(reader.readinto(buf) if impl == "aioring" else reader.read(70_000))
    await _steps(20)
    assert not task.done()
    transport.resume_reading()
    got = await asyncio.wait_for(task, 5)
    assert (bytes(buf[:got]) if impl == "aioring" else got) == b"held"
    transport.pause_reading()
    writer.close()  # closing while paused: a waiting read ends
    assert await asyncio.wait_for(reader.read(100), 5) == b""
    assert not transport.is_reading()


async def test_abort_after_close_never_touches_a_reused_fd():
    """close() of an idle pipe reader closes its fd at once; the number may
    then go to another pipe at once.  A later abort() does nothing, as
    asyncio's: it must not read (or close) whatever now has that number."""
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    reader.close()
    await reader.wait_closed()
    r2, w2 = os.pipe()
    try:
        os.write(w2, b"someone else's")
        reader._channel.abort()
        os.set_blocking(r2, False)
        assert os.read(r2, 100) == b"someone else's"
    finally:
        for fd in (w, r2, w2):
            os.close(fd)


@pytest.mark.parametrize("impl", IMPLS)
async def test_close_with_a_huge_limit_closes(impl, socks):
    a, b = _tcp_pair(socks)
    mod = aioring if impl == "aioring" else asyncio
    reader, writer = await mod.open_connection(sock=a, limit=2**40)
    b.sendall(b"hi")
    await _steps(20)
    writer.close()
    await asyncio.wait_for(writer.wait_closed(), 5)
    assert await asyncio.wait_for(reader.read(100), 5) == b"hi"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("reading", ["read", "readexactly"])
async def test_close_while_paused_ends_a_waiting_read_at_eof(impl, reading, socks):
    """A paused transport receives nothing more: closing it ends the read
    that waits at EOF, even if bytes arrived meanwhile."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    writer.transport.pause_reading()
    task = asyncio.ensure_future(reader.read(10) if reading == "read" else reader.readexactly(6))
    await _steps(5)
    b.sendall(b"abc")
    await _steps(20)
    writer.close()
    if reading == "read":
        assert await asyncio.wait_for(task, 5) == b""
    else:
        with pytest.raises(asyncio.IncompleteReadError):
            await asyncio.wait_for(task, 5)
    await asyncio.wait_for(writer.wait_closed(), 5)


@pytest.mark.parametrize("impl", IMPLS)
async def test_bytes_received_ahead_keep_their_order_with_reads_into_the_callers_buffer(impl, socks):
    """Small reads let the stream receive ahead into its buffer; larger
    reads then take those bytes first and the rest from the socket: the
    stream's bytes come out whole and in order, as with asyncio's reader."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    data = os.urandom(300_000)
    b.sendall(data[:10])
    got = bytearray(await reader.readexactly(4))
    b.sendall(data[10:40_000])  # (the next receive may be out already)
    got += await reader.readexactly(6)
    if impl == "aioring":
        buf = bytearray(100_000)
        b.sendall(data[40_000:150_000])
        assert await reader.readinto_exactly(buf) == len(buf)
        got += buf
        b.sendall(data[150_000:])
        while len(got) < len(data):
            view = memoryview(bytearray(70_000))
            got += view[:await reader.readinto(view)]
    else:
        b.sendall(data[40_000:])
        got += await reader.readexactly(len(data) - len(got))
    assert got == data
    await _close(writer)


_BODIES = [65536, 65536, 10, 70_000, 16384, 16383, 1, 200_000, 0, 3, 65536, 65536]


@pytest.mark.parametrize("how", ["whole", "header_apart", "split", "readinto"])
async def test_framed_reads_of_large_and_small_bodies_come_whole_and_in_order(how, socks, aioring_backend):
    """Frames of a header and a body read with readinto_exactly, bodies large
    (received straight into the caller's buffer) and small, in any mix: each
    read gets the peer's bytes whole and in order, however they arrive (a
    frame at once, its header apart, or its body in two parts around the
    read's start; or the body read with readinto, as much as came).  After
    a large body the next header's read takes no more than the header where
    the ring receives it, so that the body that follows stays in the socket
    for the caller's buffer."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    hdr = bytearray(8)
    after_large = False
    for n in _BODIES:
        body = os.urandom(n)
        frame = struct.pack(">Q", n) + body
        into = bytearray(n)
        if how in ("whole", "readinto"):
            b.sendall(frame)
        else:
            b.sendall(frame[:8] if how == "header_apart" else frame[:8 + n // 2])
        assert await reader.readinto_exactly(hdr) == 8
        assert struct.unpack(">Q", hdr)[0] == n
        if how == "whole" and after_large and aioring_backend == "io_uring":
            assert len(reader._buffer) == 0, "the body was received ahead into the reader's buffer"
        if how == "whole":
            assert await reader.readinto_exactly(into) == n
        elif how == "readinto":  # (as much as came, each time)
            got = 0
            while got < n:
                k = await reader.readinto(memoryview(into)[got:])
                assert k > 0
                got += k
        else:
            task = asyncio.ensure_future(reader.readinto_exactly(memoryview(into)))
            await asyncio.sleep(0)  # (its first step: what the socket holds of the body)
            b.sendall(frame[8:] if how == "header_apart" else frame[8 + n // 2:])
            assert await task == n
        assert into == body
        after_large = n >= 16384
    b.sendall(b"tail")
    assert await reader.readexactly(4) == b"tail"
    await _close(writer)


@pytest.mark.parametrize("cancelled", ["header", "body"])
async def test_a_framed_read_cancelled_after_a_large_body_loses_nothing(cancelled, socks):
    """After a large body, a header's read cancelled while it waits, or a
    body's read cancelled after part of the body came: the next reads get
    every byte the peer sent, in order (a cancelled readinto_exactly puts
    what it received back in front of the stream's buffer)."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    first = os.urandom(65536)
    b.sendall(struct.pack(">Q", len(first)) + first)
    hdr, body = bytearray(8), bytearray(65536)
    assert await reader.readinto_exactly(hdr) == 8
    assert await reader.readinto_exactly(body) == 65536 and body == first
    second = os.urandom(65536)
    frame = struct.pack(">Q", len(second)) + second
    if cancelled == "header":
        task = asyncio.ensure_future(reader.readinto_exactly(hdr))
        await asyncio.sleep(0)  # (it waits on the empty socket)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        b.sendall(frame)
        assert await reader.readinto_exactly(hdr) == 8
    else:
        b.sendall(frame[:8 + 1000])
        assert await reader.readinto_exactly(hdr) == 8
        task = asyncio.ensure_future(reader.readinto_exactly(body))
        await asyncio.sleep(0)  # (its first step: the 1,000 bytes there)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        b.sendall(frame[8 + 1000:])
    assert struct.unpack(">Q", hdr)[0] == len(second)
    assert await reader.readinto_exactly(body) == 65536
    assert body == second
    await _close(writer)


@pytest.mark.parametrize("after", ["a_small_read", "a_header"])
async def test_a_reset_after_a_frames_start_raises_connection_reset(after, socks):
    """A peer that resets the connection after sending part of a frame: the
    read of the rest raises ConnectionResetError once the bytes sent before
    were read, as a socket's recv() does; never a plain end of stream."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    if after == "a_header":  # (a large body read first: the header's read takes just the header)
        b.sendall(struct.pack(">Q", 65536) + bytes(65536))
        assert await reader.readinto_exactly(bytearray(8)) == 8
        assert await reader.readinto_exactly(bytearray(65536)) == 65536
        b.sendall(struct.pack(">Q", 65536))
    else:
        b.sendall(struct.pack(">Q", 65536) + b"x" * 100)
    assert await reader.readinto_exactly(bytearray(8)) == 8
    _reset(b)
    with pytest.raises(ConnectionResetError):
        await reader.readinto_exactly(bytearray(65536))
    await _close(writer)


@pytest.mark.parametrize("impl", IMPLS)
async def test_receiving_ahead_stops_near_the_readers_limit(impl, socks):
    """A reader that does not read holds at most what asyncio's would (its
    transport pauses above twice the limit, after a receive of up to 256
    KiB); the rest stays in the socket and comes with the next reads."""
    a, b = _tcp_pair(socks)
    limit = 4096
    if impl == "aioring":
        reader, writer = await aioring.open_connection(sock=a, limit=limit)
    else:
        reader, writer = await asyncio.open_connection(sock=a, limit=limit)
    b.sendall(b"x")
    assert await reader.readexactly(1) == b"x"
    b.setblocking(False)
    data = os.urandom(1 << 20)
    sent = 0
    with contextlib.suppress(BlockingIOError):
        while sent < len(data):
            sent += b.send(data[sent:sent + 65536])
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(reader._buffer) <= 2 * limit + 256 * 1024
    got = bytearray()
    while len(got) < sent:
        got += await reader.read(sent - len(got))
    assert got == data[:sent]
    await _close(writer)


async def _receive_all(sock: socket.socket, into: bytearray) -> None:
    """Receive what the peer sends on `sock` (made non-blocking) until its EOF."""
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    while data := await loop.sock_recv(sock, 1 << 20):
        into.extend(data)


async def _all_sent(writer: aioring.StreamWriter, receiving: asyncio.Future[None], got: bytearray,
                    expected: bytes | bytearray) -> None:
    """End the writes with EOF; the peer's receiver got exactly `expected`."""
    writer.write_eof()
    await asyncio.wait_for(receiving, 30)
    assert got == expected
    await _close(writer)


@pytest.mark.parametrize("impl", IMPLS)
async def test_writes_of_every_kind_leave_in_order_whole(impl, socks):
    """bytes, bytearrays and memoryviews written in one iteration and over
    many, small ones joined and large ones past what the kernel takes at
    once, arrive whole and in the order written, as with asyncio's writer."""
    a, b = _tcp_pair(socks)
    _reader, writer = await _streams(impl, a)
    got = bytearray()
    receiving = asyncio.ensure_future(_receive_all(b, got))
    rng = random.Random(7)
    expected = bytearray()
    for round_ in range(40):
        for _ in range(rng.randrange(1, 6)):
            chunk = os.urandom(rng.choice((1, 100, 4000, 20_000, 300_000)))
            kind = rng.randrange(3)
            data = chunk if kind == 0 else bytearray(chunk) if kind == 1 else memoryview(chunk)
            writer.write(data)
            expected += chunk
        if round_ % 3 == 0:
            await writer.drain()
    await _all_sent(writer, receiving, got, expected)


async def test_small_writes_of_any_buffer_arrive_as_they_were_at_write(socks):
    """Writes below the size the writer copies into memory it reuses, of a
    bytearray, a view of one, a typed array, a two-dimensional and a
    non-contiguous view, each changed right after write() returned, over a
    socket with a small send buffer (so that some leave at once only in
    part): the peer receives the bytes they held at write()
    (bytes(memoryview(data)) then), in order."""
    a, b = _tcp_pair(socks)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    _reader, writer = await aioring.open_connection(sock=a)
    got = bytearray()
    receiving = asyncio.ensure_future(_receive_all(b, got))
    expected = bytearray()
    rng = random.Random(3)
    for i in range(30):
        size = rng.choice([4000, 40_000, 200_000])
        chunk = bytearray(os.urandom(size))
        buffers = [chunk, memoryview(chunk)[10:3000], array.array("i", chunk[:400]),
                   memoryview(chunk).cast("B", (2, size // 2)), memoryview(chunk)[::3]]
        data = buffers[i % len(buffers)]
        writer.write(data)
        expected += bytes(memoryview(data))
        chunk[:] = b"\xee" * len(chunk)  # changed after write(): must not be sent
        if isinstance(data, array.array):
            data[:] = array.array("i", bytes(1600))
        if i % 4 == 0:
            await writer.drain()
    await _all_sent(writer, receiving, got, expected)


async def test_large_writes_of_any_buffer_arrive_as_their_bytes(socks):
    """Large writes (copied into memory the writer reuses) of a typed array,
    a two-dimensional view and a non-contiguous view arrive as the bytes
    those buffers hold (bytes(memoryview(data))), in order."""
    a, b = _tcp_pair(socks)
    _reader, writer = await aioring.open_connection(sock=a)
    got = bytearray()
    receiving = asyncio.ensure_future(_receive_all(b, got))
    chunk = os.urandom(600_000)
    buffers = [array.array("i", chunk), memoryview(chunk).cast("B", (2, 300_000)),
               memoryview(chunk)[::2], memoryview(array.array("d", chunk[:400_000]))]
    for data in buffers:
        writer.write(data)
    await _all_sent(writer, receiving, got, b"".join(bytes(memoryview(data)) for data in buffers))
