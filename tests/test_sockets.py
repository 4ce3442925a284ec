"""The sock_* functions on the ring, compared with the loop's sock_* methods and
the socket module: same arguments, same results, same errors."""

from __future__ import annotations

import array
import asyncio
import functools
import io
import os
import random
import socket
import struct
import threading

import pytest

import aioring
from aioring import statistics

MiB = 1 << 20


# ------------------------------------------------------------------ helpers
@functools.cache
def _payload(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def _has_ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback here")


def _tcp_pair(keep, family: int = socket.AF_INET) -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair, both non-blocking."""
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        client = socket.socket(family, socket.SOCK_STREAM)
        keep(client)
        client.connect(listener.getsockname())
        server, _ = listener.accept()
        keep(server)
    client.setblocking(False)
    server.setblocking(False)
    return client, server


def _listener(keep, family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    s = keep(socket.socket(family, socket.SOCK_STREAM))
    s.bind((host, 0))
    s.listen(16)
    s.setblocking(False)
    return s


def _udp(keep, family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    s = keep(socket.socket(family, socket.SOCK_DGRAM))
    s.bind((host, 0))
    s.setblocking(False)
    return s


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


def _counter_pattern(nbytes: int) -> bytes:
    return array.array("I", range(nbytes // 4)).tobytes()


async def _recv_exactly_into(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = await aioring.sock_recv_into(sock, view[got:])
        assert n, f"EOF after {got} of {size} bytes"
        got += n
    return buf


# ---------------------------------------------------------------------- echo
async def _echo_with(api: str, conn: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    recv = aioring.sock_recv if api == "aioring" else loop.sock_recv
    sendall = aioring.sock_sendall if api == "aioring" else loop.sock_sendall
    while True:
        data = await recv(conn, 256 * 1024)
        if not data:
            break
        await sendall(conn, data)
    conn.shutdown(socket.SHUT_WR)


@pytest.mark.parametrize("size,echo_api", [
    (size, api) for size in (1, 1000, 65535, 65537, MiB + 3, 64 * MiB) for api in ("aioring", "loop")
    if size < 64 * MiB or api == "aioring"])
async def test_echo_checked_byte_for_byte(socks, size, echo_api):
    """sock_sendall and sock_recv_into against an echo made with sock_recv and
    sock_sendall, the ring's or the loop's: every byte comes back in order."""
    client, server = _tcp_pair(socks)
    payload = _payload(size)
    echo = asyncio.ensure_future(_echo_with(echo_api, server))

    async def send():
        await aioring.sock_sendall(client, payload)
        client.shutdown(socket.SHUT_WR)

    sender = asyncio.ensure_future(send())
    got = await _recv_exactly_into(client, size)
    assert await aioring.sock_recv(client, 100) == b""  # the echo saw EOF and closed its side
    await asyncio.gather(sender, echo)
    assert got == payload


async def test_sendall_accepts_every_buffer_type_the_loop_does(socks):
    client, server = _tcp_pair(socks)
    data = bytes(range(256)) * 10
    for obj in (data, bytearray(data), memoryview(data), memoryview(data)[::1],
                array.array("B", data), memoryview(bytearray(data)).cast("B")):
        await aioring.sock_sendall(client, obj)
        assert await _recv_exactly_into(server, len(data)) == data
    await aioring.sock_sendall(client, b"")  # nothing to send: returns at once, as the loop's
    arr = array.array("i", [1, -2, 3])
    await aioring.sock_sendall(client, arr)
    assert bytes(await _recv_exactly_into(server, arr.itemsize * 3)) == arr.tobytes()


async def test_recv_matches_the_loop_and_the_socket_module(socks):
    """sock_recv(n) returns at most n bytes and leaves the rest; recv(0) is b""
    and consumes nothing; EOF is b""; as loop.sock_recv and socket.recv."""
    loop = asyncio.get_running_loop()
    results = {}
    for name, recv, recv_into in (("ring", aioring.sock_recv, aioring.sock_recv_into),
                                  ("loop", loop.sock_recv, loop.sock_recv_into)):
        client, server = _tcp_pair(socks)
        client.sendall(b"0123456789")
        got = [await recv(server, 0), await recv(server, 3)]
        buf = bytearray(4)
        n = await recv_into(server, buf)
        got += [n, bytes(buf)]
        got.append(await recv(server, 100))
        client.close()
        got.append(await recv(server, 100))
        got.append(await recv_into(server, bytearray(5)))
        results[name] = got
    assert results["ring"] == results["loop"] == [b"", b"012", 4, b"3456", b"789", b"", 0]


async def test_a_reset_peer_gives_the_loops_errors(socks, loop_errors):
    loop = asyncio.get_running_loop()
    for recv in (aioring.sock_recv, loop.sock_recv):
        client, server = _tcp_pair(socks)
        pending = asyncio.ensure_future(recv(server, 100))
        await asyncio.sleep(0)  # may or may not be in flight: either way it must fail so
        _reset(client)
        with pytest.raises(ConnectionResetError):
            await pending
    # Sending to a reset peer: EPIPE or ECONNRESET, never anything for the loop's handler.
    for sendall in (aioring.sock_sendall, loop.sock_sendall):
        client, server = _tcp_pair(socks)
        _reset(client)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(1000):
                await sendall(server, b"x" * 1000)
    assert loop_errors == []


async def test_a_reset_seen_by_a_receive_at_once_is_the_loops_error(socks, loop_errors):
    """A reset that has already arrived when the receive is made: the try at
    once reports it, as the loop's receive does (and not EOF afterwards)."""
    loop = asyncio.get_running_loop()
    outcomes = {}
    for name, recv in (("ring", aioring.sock_recv), ("loop", loop.sock_recv)):
        client, server = _tcp_pair(socks)
        _reset(client)
        with pytest.raises(ConnectionResetError) as caught:
            await recv(server, 100)
        outcomes[name] = (caught.value.errno, str(caught.value))
        assert await recv(server, 100) == b""  # the error was the kernel's once, as for the loop
    assert outcomes["ring"] == outcomes["loop"]
    assert loop_errors == []


async def test_what_already_arrived_is_received_at_once(socks):
    """Receives of data already in the socket and sends that fit its buffer
    need no ring op (as the loop's, which try the socket first); the data is
    the same as the loop's methods give."""
    client, server = _tcp_pair(socks)
    client.sendall(b"0123456789")
    assert select_readable(server, 30)  # (the bytes are in the server's socket: a wait, not a sleep)
    statistics()
    before = statistics()["submit_calls"], statistics()["completions"]
    assert await aioring.sock_recv(server, 4) == b"0123"
    buf = bytearray(10)
    assert await aioring.sock_recv_into(server, buf) == 6 and buf[:6] == b"456789"
    await aioring.sock_sendall(server, b"back")
    assert (statistics()["submit_calls"], statistics()["completions"]) == before  # no ring op
    assert client.recv(10) == b"back"


async def test_receives_that_find_nothing_wait_on_the_ring(socks):
    """A receive made before its data arrives waits for it on the ring; so do
    the next ones for a while (they are not tried at once in vain), and every
    byte still arrives in order."""
    client, server = _tcp_pair(socks)
    before = statistics()["completions"]
    got = []
    for i in range(50):
        pending = asyncio.ensure_future(aioring.sock_recv(server, 100))
        await asyncio.sleep(0)  # the receive starts on the empty socket
        client.send(i.to_bytes(2, "big"))
        got.append(await pending)
    assert b"".join(got) == b"".join(i.to_bytes(2, "big") for i in range(50))
    assert statistics()["completions"] >= before + 50


async def test_a_task_that_always_finds_data_still_lets_the_loop_run(socks):
    client, server = _tcp_pair(socks)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1
    task = asyncio.ensure_future(other())
    try:
        await asyncio.sleep(0)
        turns = 0
        for i in range(300):  # every receive finds its byte, every send has room
            client.send(bytes([i % 256]))
            while not select_readable(server):
                pass
            assert await aioring.sock_recv(server, 10) == bytes([i % 256])
            await aioring.sock_sendall(server, b"k")
        assert turns > 0
        assert client.recv(1000) == b"k" * 300
    finally:
        task.cancel()


async def test_a_sendall_larger_than_the_socket_buffer_sends_the_rest_on_the_ring(socks):
    """The try at once sends what fits; the ring sends the rest, in order."""
    client, server = _tcp_pair(socks)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    data = _payload(8 * MiB)
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(data):
            chunk = await aioring.sock_recv(client, MiB)
            assert chunk
            received.extend(chunk)
    reading = asyncio.ensure_future(drain())
    before = statistics()["completions"]
    await aioring.sock_sendall(server, data)
    await reading
    assert received == data
    assert statistics()["completions"] > before  # (the ring sent what did not fit at once)



async def test_a_socket_does_not_inherit_the_receive_backoff_of_a_closed_one(socks):
    """A receive that found nothing makes the next few of that socket go to
    the ring; a new socket given the same fd number once it closed is tried
    at once again."""
    client, server = _tcp_pair(socks)
    task = asyncio.ensure_future(aioring.sock_recv(server, 10))
    await asyncio.sleep(0)  # (its try found nothing: the ring waits for the byte)
    client.sendall(b"x")
    assert await task == b"x"
    client, other = _tcp_pair(socks)
    fd = server.fileno()
    server.close()  # (nothing opens an fd until the dup2 takes this number again)
    server = socks(socket.socket(fileno=os.dup2(other.fileno(), fd)))
    server.setblocking(False)
    client.sendall(b"0123")
    assert select_readable(server, 30)
    statistics()
    before = statistics()["submit_calls"], statistics()["completions"]
    assert await aioring.sock_recv(server, 4) == b"0123"
    assert (statistics()["submit_calls"], statistics()["completions"]) == before  # no ring op

def select_readable(sock: socket.socket, timeout: float = 0) -> bool:
    """Whether `sock` is readable, waiting for it at most `timeout` seconds."""
    import select
    return bool(select.select([sock], [], [], timeout)[0])


# -------------------------------------------------------------------- accept
@pytest.mark.parametrize("family", [socket.AF_INET, pytest.param(socket.AF_INET6, marks=needs_ipv6),
                                    socket.AF_UNIX], ids=["inet", "inet6", "unix"])
async def test_accept_is_socket_accept_made_non_blocking(socks, tmp_path, family):
    """sock_accept returns what socket.accept returns for the same kind of
    client (an address of the same form), but non-blocking and close-on-exec,
    as the loop's sock_accept."""
    loop = asyncio.get_running_loop()
    listener = keep = socks(socket.socket(family, socket.SOCK_STREAM))
    if family == socket.AF_UNIX:
        address = str(tmp_path / "s")
    else:
        address = ("127.0.0.1" if family == socket.AF_INET else "::1", 0)
    keep.bind(address)
    listener.listen(8)
    listener.setblocking(False)
    target = listener.getsockname()

    def connect() -> socket.socket:
        c = socks(socket.socket(family, socket.SOCK_STREAM))
        c.connect(target)
        return c

    results = []
    for accept in (aioring.sock_accept, loop.sock_accept, "socket"):
        client = connect()
        if accept == "socket":
            listener.setblocking(True)
            conn, addr = listener.accept()
            listener.setblocking(False)
            conn.setblocking(False)  # the loop's convention, for the comparison below
        else:
            conn, addr = await accept(listener)
        socks(conn)
        assert addr == (client.getsockname() if family != socket.AF_UNIX else "")
        if family != socket.AF_UNIX:
            assert addr == conn.getpeername()
        results.append((type(addr), len(addr) if isinstance(addr, tuple) else addr, conn.family,
                        conn.type, conn.proto, conn.getblocking(), conn.gettimeout(),
                        conn.get_inheritable()))
        client.sendall(b"ping")
        assert await aioring.sock_recv(conn, 10) == b"ping"
    assert results[0] == results[1] == results[2]
    assert results[0][5] is False  # non-blocking


async def test_accept_from_an_abstract_unix_address_gives_bytes(socks):
    loop = asyncio.get_running_loop()
    name = b"\0aioring-test-%d" % os.getpid()
    listener = socks(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    listener.bind(name)
    listener.listen(2)
    listener.setblocking(False)
    got = []
    for accept in (aioring.sock_accept, loop.sock_accept):
        client = socks(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        client.bind(name + b"-client-%d" % len(got))
        client.connect(name)
        conn, addr = await accept(listener)
        socks(conn)
        got.append(addr)
        assert addr == client.getsockname()
    assert type(got[0]) is type(got[1]) is bytes


async def test_a_cancelled_accept_loses_no_connection(socks):
    listener = _listener(socks)
    task = asyncio.ensure_future(aioring.sock_accept(listener))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    client = socks(socket.create_connection(listener.getsockname()))
    conn, addr = await aioring.sock_accept(listener)
    socks(conn)
    assert addr == client.getsockname()


async def test_accept_races_its_cancellation_and_keeps_the_connection(socks):
    """The connection arrives in the same iteration as the cancel: either the
    accept returns it, or the next accept does; it is never dropped."""
    listener = _listener(socks)
    for _ in range(20):
        task = asyncio.ensure_future(aioring.sock_accept(listener))
        await asyncio.sleep(0)
        client = socks(socket.create_connection(listener.getsockname()))
        task.cancel()
        try:
            conn, addr = await task
        except asyncio.CancelledError:
            conn, addr = await aioring.sock_accept(listener)
        socks(conn)
        assert addr == client.getsockname()


# ------------------------------------------------------------------- connect
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_connect_to_a_closed_port_is_refused_like_the_loop(socks, host):
    loop = asyncio.get_running_loop()
    closed = socks(socket.socket())
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused
    port = closed.getsockname()[1]
    errors = []
    for connect in (loop.sock_connect, aioring.sock_connect):
        s = socks(socket.socket())
        s.setblocking(False)
        with pytest.raises(ConnectionRefusedError) as info:
            await connect(s, (host, port))
        errors.append((type(info.value), info.value.errno, str(info.value)))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("blocking", [False, True], ids=["nonblocking", "blocking"])
async def test_connect_resolves_localhost_like_the_loop(socks, blocking):
    listener = _listener(socks)
    port = listener.getsockname()[1]
    s = socks(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    s.setblocking(blocking)
    await aioring.sock_connect(s, ("localhost", port))
    assert s.getpeername() == ("127.0.0.1", port)
    conn, addr = await aioring.sock_accept(listener)
    socks(conn)
    assert addr == s.getsockname()
    await aioring.sock_sendall(s, b"over localhost")
    assert await aioring.sock_recv(conn, 100) == b"over localhost"


@needs_ipv6
async def test_connect_and_accept_over_ipv6(socks):
    listener = _listener(socks, socket.AF_INET6, "::1")
    s = socks(socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    s.setblocking(False)
    accept = asyncio.ensure_future(aioring.sock_accept(listener))
    await aioring.sock_connect(s, listener.getsockname()[:2])
    conn, addr = await accept
    socks(conn)
    assert addr == s.getsockname() == conn.getpeername()
    assert len(addr) == 4


async def test_connect_a_unix_socket(socks, tmp_path):
    path = str(tmp_path / "u")
    listener = socks(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    listener.bind(path)
    listener.listen(1)
    for target in (path, os.fsencode(path), tmp_path / "u"):
        s = socks(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        s.setblocking(False)
        await aioring.sock_connect(s, target)
        assert s.getpeername() == path
        socks(listener.accept()[0])
    s = socks(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    with pytest.raises(FileNotFoundError):
        await aioring.sock_connect(s, str(tmp_path / "missing"))


# ----------------------------------------------------------------------- UDP
def _datagram_endpoints(keep, family):
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    return _udp(keep, family, host), _udp(keep, family, host)


def _blocking_recvfrom(sock: socket.socket, n: int):
    sock.settimeout(10)
    try:
        return sock.recvfrom(n)
    finally:
        sock.setblocking(False)


@pytest.mark.parametrize("family", [socket.AF_INET, pytest.param(socket.AF_INET6, marks=needs_ipv6)],
                         ids=["inet", "inet6"])
async def test_udp_addresses_equal_the_socket_modules(socks, family):
    a, b = _datagram_endpoints(socks, family)
    b_addr = b.getsockname()
    # What the socket module says the sender is.
    a.sendto(b"reference", b_addr)
    data, reference_addr = _blocking_recvfrom(b, 100)
    assert data == b"reference"
    # sock_sendto, then sock_recvfrom and sock_recvfrom_into.
    assert await aioring.sock_sendto(a, b"one", b_addr) == 3
    data, addr = await aioring.sock_recvfrom(b, 100)
    assert (data, addr) == (b"one", reference_addr)
    assert await aioring.sock_sendto(a, bytearray(b"two!"), b_addr) == 4
    buf = bytearray(10)
    n, addr = await aioring.sock_recvfrom_into(b, buf)
    assert (n, bytes(buf[:n]), addr) == (4, b"two!", reference_addr)
    # The other way round, to an address given as a full tuple.
    assert await aioring.sock_sendto(b, b"back", a.getsockname()) == 4
    assert await aioring.sock_recvfrom(a, 100) == (b"back", b_addr)


@pytest.mark.parametrize("family", [socket.AF_INET, pytest.param(socket.AF_INET6, marks=needs_ipv6)],
                         ids=["inet", "inet6"])
async def test_udp_results_equal_the_socket_modules(socks, family):
    """Truncation, empty datagrams, nbytes: each call of the ring is run next to
    the socket module's on an identical datagram."""
    a, b = _datagram_endpoints(socks, family)
    b_addr = b.getsockname()
    cases = [
        ("recvfrom", b"a truncated datagram", (5,)),
        ("recvfrom", b"", (10,)),
        ("recvfrom", b"zero size read", (0,)),
        ("recvfrom", bytes(range(256)) * 200, (65535,)),
        ("recvfrom_into", b"into a buffer", (bytearray(20),)),
        ("recvfrom_into", b"into a buffer, truncated", (bytearray(20), 7)),
        ("recvfrom_into", b"into a small buffer", (bytearray(4),)),
        ("recvfrom_into", b"", (bytearray(4),)),
    ]
    for method, datagram, args in cases:
        a.sendto(datagram, b_addr)
        ref_args = tuple(bytearray(x) if isinstance(x, bytearray) else x for x in args)
        b.settimeout(10)
        expected = getattr(b, method)(*ref_args)
        b.setblocking(False)
        assert await aioring.sock_sendto(a, datagram, b_addr) == len(datagram)
        got = await getattr(aioring, "sock_" + method)(b, *args)
        assert got == expected, (method, datagram[:20], args)
        if method == "recvfrom_into":
            assert args[0] == ref_args[0]


async def test_sendto_resolves_a_host_name(socks):
    a, b = _datagram_endpoints(socks, socket.AF_INET)
    port = b.getsockname()[1]
    assert await aioring.sock_sendto(a, b"by name", ("localhost", port)) == 7
    assert await aioring.sock_recvfrom(b, 100) == (b"by name", a.getsockname())


async def test_udp_matches_the_loops_methods(socks):
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop) or not hasattr(loop, "sock_sendto"):
        pytest.skip("no loop.sock_sendto here (uvloop; asyncio before 3.11)")
    a, b = _datagram_endpoints(socks, socket.AF_INET)
    results = []
    for sendto, recvfrom, recvfrom_into in (
            (aioring.sock_sendto, aioring.sock_recvfrom, aioring.sock_recvfrom_into),
            (loop.sock_sendto, loop.sock_recvfrom, loop.sock_recvfrom_into)):
        got = [await sendto(a, b"datagram", b.getsockname())]
        got.append(await recvfrom(b, 4))
        await sendto(a, b"datagram", b.getsockname())
        buf = bytearray(6)
        got.append(await recvfrom_into(b, buf, 5))
        got.append(bytes(buf))
        results.append(got)
    assert results[0] == results[1]


@pytest.mark.parametrize("kind", ["unix-dgram-unbound-sender", "unix-dgram-bound-sender",
                                  "unix-stream-pair", "tcp"])
async def test_recvfrom_addresses_of_unix_and_stream_sockets(socks, tmp_path, kind):
    """recvfrom on a socket whose peer has no address (an unbound unix socket),
    or on a stream socket, gives what socket.recvfrom gives."""
    if kind.startswith("unix-dgram"):
        b = socks(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
        b.bind(str(tmp_path / "b"))
        a = socks(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
        if kind == "unix-dgram-bound-sender":
            a.bind(str(tmp_path / "a"))
        a.connect(str(tmp_path / "b"))
    elif kind == "unix-stream-pair":
        a, b = socket.socketpair()
        socks(a, b)
    else:
        a, b = _tcp_pair(socks)
    b.setblocking(False)
    a.send(b"message 0")
    b.settimeout(10)
    expected = b.recvfrom(9)
    b.setblocking(False)
    a.send(b"message 1")
    got = await aioring.sock_recvfrom(b, 9)
    assert (got[0], expected[0]) == (b"message 1", b"message 0")
    assert got[1] == expected[1]


# ------------------------------------------------------------------ sendfile
@pytest.fixture
def disk_file(disk_dir):
    path = os.path.join(disk_dir, "sendfile.bin")
    content = _payload(3 * MiB + 7)
    with open(path, "wb") as f:
        f.write(content)
    return path, content


def _reference_sendfile(path: str, offset: int, count: int | None, start: int,
                        sndbuf: int | None) -> tuple[int, bytes, int]:
    """loop.sock_sendfile on asyncio's selector loop (uvloop has none), in a thread."""

    async def run():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        with a, b:
            if sndbuf:
                a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            a.setblocking(False)
            b.setblocking(False)
            with open(path, "rb") as f:
                f.seek(start)

                async def send():
                    try:
                        return await loop.sock_sendfile(a, f, offset, count)
                    finally:
                        a.shutdown(socket.SHUT_WR)

                sender = asyncio.ensure_future(send())
                chunks = []
                while chunk := await loop.sock_recv(b, 1 << 16):
                    chunks.append(chunk)
                return await sender, b"".join(chunks), f.tell()

    loop = asyncio.SelectorEventLoop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


async def _ring_sendfile(path, offset, count, start, sndbuf, tcp_socks=None):
    a, b = tcp_socks if tcp_socks else socket.socketpair()
    if sndbuf:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
    a.setblocking(False)
    b.setblocking(False)
    try:
        with open(path, "rb") as f:
            f.seek(start)

            async def send():
                try:
                    return await aioring.sock_sendfile(a, f, offset, count)
                finally:
                    a.shutdown(socket.SHUT_WR)

            sender = asyncio.ensure_future(send())
            chunks = []
            while chunk := await aioring.sock_recv(b, 1 << 16):
                chunks.append(chunk)
            return await sender, b"".join(chunks), f.tell()
    finally:
        a.close()
        b.close()


SENDFILE_CASES = [(0, None), (1000, None), (5, 100_000), (0, 3 * MiB + 100), (3 * MiB + 7, None),
                  (3 * MiB + 100, 10), (123, 1), (MiB - 1, MiB + 2)]


@pytest.mark.parametrize("offset,count", SENDFILE_CASES)
async def test_sendfile_result_and_position_equal_the_loops(disk_file, offset, count):
    path, content = disk_file
    start = 17  # where the file object stands before the call
    expected = await asyncio.to_thread(_reference_sendfile, path, offset, count, start, None)
    got = await _ring_sendfile(path, offset, count, start, None)
    assert got[0] == expected[0]
    assert got[1] == expected[1] == content[offset:offset + expected[0]]
    assert got[2] == expected[2]


async def test_sendfile_waits_for_a_full_socket_buffer_as_the_loop_does(disk_file):
    """A small send buffer: the loop's sendfile waits for the socket to become
    writable; the ring's must not give up with EAGAIN."""
    path, content = disk_file
    expected = await asyncio.to_thread(_reference_sendfile, path, 0, None, 0, 4096)
    assert expected[0] == len(content)
    got = await _ring_sendfile(path, 0, None, 0, 4096)
    assert got == expected


async def test_sendfile_over_tcp(disk_file, socks):
    path, content = disk_file
    a, b = _tcp_pair(socks)
    n, data, pos = await _ring_sendfile(path, 10, 2 * MiB, 0, None, (a, b))
    assert (n, data, pos) == (2 * MiB, content[10:10 + 2 * MiB], 10 + 2 * MiB)


@pytest.mark.parametrize("fallback", [True, False])
async def test_sendfile_of_a_file_without_an_fd(socks, fallback):
    """A BytesIO has no fileno: the loop falls back to reading and sending, or
    raises SendfileNotAvailableError when told not to."""
    data = _payload(300_000)
    results = []
    for which in ("ring", "loop"):
        a, b = _tcp_pair(socks)
        f = io.BytesIO(data)
        f.seek(3)
        if which == "ring":
            call = aioring.sock_sendfile(a, f, 1000, 200_000, fallback=fallback)
        else:
            call = asyncio.to_thread(_selector_loop_sendfile, a, f, 1000, 200_000, fallback)
        try:
            n = await call
        except asyncio.SendfileNotAvailableError as exc:
            results.append((type(exc), f.tell()))
            continue
        a.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := await aioring.sock_recv(b, 1 << 16):
            chunks.append(chunk)
        results.append((n, b"".join(chunks) == data[1000:201_000], f.tell()))
    assert results[0] == results[1]


def _selector_loop_sendfile(sock, file, offset, count, fallback):
    """loop.sock_sendfile on a selector loop of its own (uvloop has none), for a thread."""
    loop = asyncio.SelectorEventLoop()
    try:
        return loop.run_until_complete(loop.sock_sendfile(sock, file, offset, count, fallback=fallback))
    finally:
        loop.close()


def _loop_sendfile_error(sock, file, offset, count):
    """The exception asyncio's loop raises for these sendfile arguments."""
    try:
        asyncio.base_events.BaseEventLoop._check_sendfile_params(None, sock, file, offset, count)
    except (TypeError, ValueError) as exc:
        return exc
    raise AssertionError("the loop accepts these arguments")


async def test_sendfile_bad_arguments_raise_the_loops_errors(disk_file, socks, tmp_path):
    path, _ = disk_file
    a, _b = _tcp_pair(socks)
    udp = _udp(socks)
    text = open(path, encoding="latin-1")
    binary = open(path, "rb")
    loop = asyncio.get_running_loop()
    try:
        cases = [(a, text, 0, None), (udp, binary, 0, None), (a, binary, 0, 0), (a, binary, 0, -1),
                 (a, binary, 0, 1.5), (a, binary, 0, "1"), (a, binary, -1, None), (a, binary, 1.5, None),
                 (a, binary, "0", None), (a, binary, None, None)]
        statistics()  # the ring exists
        before = statistics()["submit_calls"]
        for sock, f, offset, count in cases:
            expected = _loop_sendfile_error(sock, f, offset, count)
            with pytest.raises((TypeError, ValueError)) as info:
                await aioring.sock_sendfile(sock, f, offset, count)
            assert (type(info.value), str(info.value)) == (type(expected), str(expected))
            if isinstance(loop, asyncio.BaseEventLoop):  # asyncio's loop: its real method
                with pytest.raises((TypeError, ValueError)) as info:
                    await loop.sock_sendfile(sock, f, offset, count)
                assert (type(info.value), str(info.value)) == (type(expected), str(expected))
        assert statistics()["submit_calls"] == before
        assert binary.tell() == 0
    finally:
        text.close()
        binary.close()


# ------------------------------------------------------------- bad arguments
def _socket_error(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError(f"{fn} accepted {args!r}")


async def test_bad_arguments_raise_the_socket_modules_errors_before_submitting(socks):
    stream, _peer = _tcp_pair(socks)
    udp = _udp(socks)
    fresh = socks(socket.socket())
    fresh.setblocking(False)
    ro = memoryview(bytes(8))
    addr = ("127.0.0.1", 9)
    cases = [  # (method, socket, arguments): aioring.sock_<method>(socket, *arguments) and
        #        socket.<method>(*arguments) must fail with the same exception type
        ("recv", stream, (-1,)), ("recv", stream, (1.5,)), ("recv", stream, ("1",)),
        ("recv_into", stream, (b"read-only",)), ("recv_into", stream, (ro,)),
        ("recv_into", stream, ("str",)), ("recv_into", stream, (None,)),
        ("sendall", stream, ("str",)), ("sendall", stream, (5,)), ("sendall", stream, (None,)),
        ("recvfrom", udp, (-1,)), ("recvfrom", udp, (None,)),
        ("recvfrom_into", udp, (bytearray(2), 3)), ("recvfrom_into", udp, (bytearray(2), -1)),
        ("recvfrom_into", udp, (b"ro",)),
        ("sendto", udp, ("str", addr)), ("sendto", udp, (b"x", ("127.0.0.1", 70000))),
        ("sendto", udp, (b"x", ("127.0.0.1", -1))), ("sendto", udp, (b"x", "not a tuple")),
        ("sendto", udp, (b"x", ("127.0.0.1",))), ("sendto", udp, (b"x", ("127.0.0.1", "9"))),
        ("sendto", udp, (b"x", (1, 9))),
        ("connect", fresh, (("127.0.0.1", 70000),)), ("connect", fresh, ("not a tuple",)),
        ("connect", fresh, (("127.0.0.1", 1, 2),)),
    ]
    statistics()  # the ring exists
    before = statistics()["submit_calls"], statistics()["completions"]
    for method, sock, args in cases:
        expected = _socket_error(getattr(sock, method), *args)
        with pytest.raises(Exception) as info:
            await getattr(aioring, "sock_" + method)(sock, *args)
        assert type(info.value) is type(expected), (method, args, info.value, expected)
    assert (statistics()["submit_calls"], statistics()["completions"]) == before


@pytest.mark.parametrize("call", [
    lambda: aioring.sock_recv(object(), 10),
    lambda: aioring.sock_recv_into(3, bytearray(3)),
    lambda: aioring.sock_sendall(None, b"x"),
    lambda: aioring.sock_accept("listener"),
    lambda: aioring.sock_connect(b"sock", ("127.0.0.1", 1)),
    lambda: aioring.sock_sendto(1.5, b"x", ("127.0.0.1", 1)),
    lambda: aioring.sock_recvfrom(io.BytesIO(), 1),
    lambda: aioring.sock_recvfrom_into(object(), bytearray(1)),
    lambda: aioring.sock_sendfile(object(), io.BytesIO()),
], ids=["recv", "recv_into", "sendall", "accept", "connect", "sendto", "recvfrom", "recvfrom_into",
        "sendfile"])
async def test_a_non_socket_is_a_type_error_before_submitting(call):
    # asyncio's loop fails with AttributeError, uvloop's with ValueError or later; TypeError is
    # what a wrong argument type should give, and nothing may reach the kernel.
    statistics()  # the ring exists
    before = statistics()["submit_calls"], statistics()["completions"]
    with pytest.raises(TypeError):
        await call()
    assert (statistics()["submit_calls"], statistics()["completions"]) == before


async def test_a_closed_socket_fails_as_the_socket_module(socks):
    s = socks(socket.socket())
    s.close()
    for ring_call, socket_call in (
            (lambda: aioring.sock_recv(s, 10), lambda: s.recv(10)),
            (lambda: aioring.sock_sendall(s, b"x"), lambda: s.sendall(b"x")),
            (lambda: aioring.sock_accept(s), s.accept)):
        expected = _socket_error(socket_call)
        with pytest.raises(OSError) as info:
            await ring_call()
        assert (type(info.value), info.value.errno) == (type(expected), expected.errno)


# -------------------------------------------------------------- cancellation
async def test_cancelled_receives_lose_and_duplicate_nothing(socks):
    """A peer thread streams a counter pattern; sock_recv and sock_recv_into of
    random sizes are cancelled after a random number of loop iterations; what
    the calls returned reassembles the stream exactly."""
    loop = asyncio.get_running_loop()
    client, server = _tcp_pair(socks)
    pattern = _counter_pattern(4 * MiB)
    client.setblocking(True)

    def peer():
        rng = random.Random(5)
        view = memoryview(pattern)
        pos = 0
        try:
            while pos < len(pattern):
                n = rng.choice([1, 7, 1000, 65536, 300_000])
                client.sendall(view[pos:pos + n])
                pos += n
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    thread = threading.Thread(target=peer)
    thread.start()
    rng = random.Random(11)
    parts: list[bytes] = []
    cancelled = completed = 0
    try:
        while True:
            size = rng.choice([1, 3, 100, 4096, 65536, 200_000])
            if rng.random() < 0.5:
                async def op(size=size):
                    return await aioring.sock_recv(server, size)
            else:
                async def op(size=size):
                    buf = bytearray(size)
                    n = await aioring.sock_recv_into(server, buf)
                    return bytes(buf[:n])
            task = asyncio.ensure_future(op())
            _cancel_after(loop, task, rng.randrange(0, 4))
            try:
                data = await task
            except asyncio.CancelledError:
                cancelled += 1
                continue
            completed += 1
            if not data:
                break
            parts.append(data)
    finally:
        thread.join()
    got = b"".join(parts)
    assert len(got) == len(pattern)
    assert got == pattern
    assert cancelled and completed


def _cancel_after(loop: asyncio.AbstractEventLoop, task: asyncio.Task, iterations: int) -> None:
    if iterations == 0:
        task.cancel()
    else:
        loop.call_soon(_cancel_after, loop, task, iterations - 1)


# ----------------------------------------------------------------- fd leaks
async def test_no_fd_is_left_behind(socks, disk_file):
    path, _ = disk_file
    statistics()  # the ring exists
    before = _open_fds()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    client = socket.socket()
    client.setblocking(False)
    accepting = asyncio.ensure_future(aioring.sock_accept(listener))
    await aioring.sock_connect(client, listener.getsockname())
    conn, _ = await accepting
    await aioring.sock_sendall(client, b"x" * 100_000)
    await _recv_exactly_into(conn, 100_000)
    with open(path, "rb") as f:
        sender = asyncio.ensure_future(aioring.sock_sendfile(conn, f, 0, 500_000))
        await _recv_exactly_into(client, 500_000)
        assert await sender == 500_000
    for s in (listener, client, conn):
        s.close()
    assert _open_fds() == before
