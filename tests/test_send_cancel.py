"""A cancelled sock_sendall never sends after its cancellation, and the sends
of one socket keep their order: compared with the loop's sock_sendall under
seeded races of cancellation, sending and receiving."""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

import aioring
from aioring import _binding, _loops, _ringbase


def _pair(socks) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    socks(a, b)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _fill(sock: socket.socket) -> bytes:
    """Send until the kernel takes no more: what it took."""
    sent = bytearray()
    chunk = b"f" * 4096
    while True:
        try:
            sent += chunk[:sock.send(chunk)]
        except BlockingIOError:
            return bytes(sent)


def _drain(sock: socket.socket) -> bytes:
    got = bytearray()
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(got)
        if not data:
            return bytes(got)
        got += data


def _sendalls():
    loop = asyncio.get_running_loop()
    return {"ring": aioring.sock_sendall, "loop": loop.sock_sendall}


async def test_a_send_cancelled_before_it_went_out_sends_nothing(socks):
    """The send waits in the SQ (another operation began the iteration) when
    its task is cancelled, and the peer made room meanwhile: as with the
    loop's, nothing of it is sent and the task sees CancelledError."""
    outcomes = {}
    for name, sendall in _sendalls().items():
        a, b = _pair(socks)
        idle_a, idle_b = _pair(socks)
        filler = _fill(a)
        first = asyncio.ensure_future(aioring.sock_recv(idle_b, 10))  # the iteration's first operation
        sender = asyncio.ensure_future(sendall(a, b"hello"))

        async def cancel_after_making_room(b=b, sender=sender, filler=filler):
            assert _drain(b) == filler
            sender.cancel()

        canceller = asyncio.ensure_future(cancel_after_making_room())
        with pytest.raises(asyncio.CancelledError):
            await sender
        await canceller
        await sendall(a, b"world")
        a.shutdown(socket.SHUT_WR)
        outcomes[name] = await _read_all(b)
        idle_a.close()
        assert await first == b""
    assert outcomes["ring"] == outcomes["loop"] == b"world"


async def _read_all(sock: socket.socket) -> bytes:
    got = bytearray()
    while data := await aioring.sock_recv(sock, 1 << 20):
        got += data
    return bytes(got)


@pytest.mark.backends("io_uring")
async def test_cancelling_an_unsubmitted_send_takes_its_sqe_back(socks):
    """An op whose SQE is still in the SQ when its cancellation is handled is
    withdrawn (its SQE made a NOP), not cancelled afterwards."""
    loop = asyncio.get_running_loop()
    ring = _loops.get_ring(loop)
    a, b = _pair(socks)
    _fill(a)
    flush = ring._core.flush_handle
    if flush is None:  # begin an iteration whose flush is still to come
        ring._schedule_flush(loop)
    data = b"x" * 100
    op = ring.start(loop, None, (_binding.OP_SEND, a.fileno(), 0, 100, 0, 0), data, None, 0, unbounded=True)
    assert op.state == _ringbase._SUBMITTED and op.future is not None
    before = ring.statistics()
    _drain(b)  # room now: submitted, this send would go out
    op.future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await aioring._ops.result(ring, op)
    after = ring.statistics()
    assert after["withdrawn"] == before["withdrawn"] + 1
    assert after["cancels"] == before["cancels"]  # no ASYNC_CANCEL needed
    a.shutdown(socket.SHUT_WR)
    assert await _read_all(b) == b""
    await asyncio.sleep(0)  # the flush
    assert ring.statistics()["in_flight"] == 0  # the NOP's CQE was taken


async def _race(seed: int, sendall, socks) -> tuple[bytes, bytes, bytes, bytes, bool, bool]:
    """One seeded race: a task sends `hello` (on a full socket, or not), is
    cancelled after a few loop iterations while a reader takes data in
    random pieces, and `world` is sent before or after the cancelled task
    ended.  (filler, hello, world, received, cancelled, completed)"""
    rnd = random.Random(seed)
    loop = asyncio.get_running_loop()
    a, b = _pair(socks)
    recv = aioring.sock_recv if sendall is aioring.sock_sendall else loop.sock_recv
    filler = _fill(a) if rnd.random() < 0.7 else b""
    hello = bytes([65 + seed % 26]) * rnd.choice([10, 5000, 200_000])
    world = b"w" * rnd.choice([10, 5000])
    got = bytearray()
    completed = []

    async def reader():
        while True:
            for _ in range(rnd.randrange(4)):
                await asyncio.sleep(0)
            data = await recv(b, rnd.choice([100, 10_000, 1 << 20]))
            if not data:
                return
            got.extend(data)

    async def send_hello():
        await sendall(a, hello)
        completed.append(True)

    readers = [asyncio.ensure_future(reader())] if rnd.random() < 0.5 else []
    sender = asyncio.ensure_future(send_hello())
    for _ in range(rnd.randrange(6)):
        await asyncio.sleep(0)
    sender.cancel()
    if not readers:
        readers.append(asyncio.ensure_future(reader()))
    world_first = rnd.random() < 0.5
    if world_first:
        await sendall(a, world)
    try:
        await sender
        cancelled = False
    except asyncio.CancelledError:
        cancelled = True
    if not world_first:
        await sendall(a, world)
    a.shutdown(socket.SHUT_WR)
    await readers[0]
    return filler, hello, world, bytes(got), cancelled, bool(completed)


def _check(outcome: tuple[bytes, bytes, bytes, bytes, bool, bool]) -> int:
    """What the loop's sock_sendall guarantees: the filler, then a prefix of
    hello, then all of world; hello sent whole if its call returned, and a
    call that sent nothing raised CancelledError.  The prefix's length."""
    filler, hello, world, got, cancelled, completed = outcome
    assert got.startswith(filler)
    rest = got[len(filler):]
    k = len(rest) - len(world)
    assert k >= 0 and rest == hello[:k] + world, (len(rest), rest[:16], rest[-16:])
    if completed:
        assert k == len(hello) and not cancelled
    if k == 0:
        assert cancelled
    return k


@pytest.mark.parametrize("block", range(2))
async def test_seeded_races_of_cancel_and_send_keep_the_stream(socks, block):
    """Seeded races of cancellation, sending and receiving: what the peer
    receives is always what the loop's sock_sendall could have delivered, and
    both ways of ending (nothing sent, all sent) are seen, as with the loop."""
    kinds: dict[str, set[str]] = {"ring": set(), "loop": set()}
    for seed in range(block * 40, block * 40 + 40):
        for name, sendall in _sendalls().items():
            k = _check(await _race(seed, sendall, socks))
            kinds[name].add("none" if k == 0 else "some")
    assert kinds["ring"] == kinds["loop"] == {"none", "some"}


async def test_a_later_send_waits_for_a_cancelled_one_still_in_the_kernel(socks):
    """The first send is in the kernel, waiting for room, when its task is
    cancelled; a second send of the same socket made right then goes out
    only after the first let go: the peer never sees world before hello."""
    for _ in range(3):
        a, b = _pair(socks)
        filler = _fill(a)
        hello = b"h" * 100_000
        sender = asyncio.ensure_future(aioring.sock_sendall(a, hello))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # its operation is in the kernel
        reader = asyncio.ensure_future(_read_all(b))
        sender.cancel()
        await aioring.sock_sendall(a, b"world")
        try:
            await sender
        except asyncio.CancelledError:
            pass
        a.shutdown(socket.SHUT_WR)
        got = await reader
        rest = got[len(filler):]
        assert got.startswith(filler)
        k = len(rest) - 5
        assert rest == hello[:k] + b"world"


async def test_concurrent_sends_of_one_socket_keep_their_order(socks):
    """Sends that wait for room leave in the order they were called."""
    a, b = _pair(socks)
    filler = _fill(a)
    parts = [bytes([65 + i]) * 30_000 for i in range(6)]
    senders = [asyncio.ensure_future(aioring.sock_sendall(a, part)) for part in parts]
    reader = asyncio.ensure_future(_read_all(b))
    await asyncio.gather(*senders)
    a.shutdown(socket.SHUT_WR)
    assert await reader == filler + b"".join(parts)


async def test_a_send_cancelled_while_it_waits_for_its_turn_sends_nothing(socks):
    a, b = _pair(socks)
    filler = _fill(a)
    first = asyncio.ensure_future(aioring.sock_sendall(a, b"1" * 50_000))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(aioring.sock_sendall(a, b"2" * 10))
    third = asyncio.ensure_future(aioring.sock_sendall(a, b"3" * 10))
    await asyncio.sleep(0)
    second.cancel()
    reader = asyncio.ensure_future(_read_all(b))
    with pytest.raises(asyncio.CancelledError):
        await second
    await first
    await third
    a.shutdown(socket.SHUT_WR)
    assert await reader == filler + b"1" * 50_000 + b"3" * 10
