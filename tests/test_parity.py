"""Streams, servers and sock_* where CPython's own asyncio tests found them
behaving differently from asyncio: each compared with asyncio's own."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import struct
import sys
import warnings
import weakref

import pytest
import uvloop

import aioring
from aioring import _loops

_STREAMS = {"ring": aioring, "asyncio": asyncio}


async def _echo_server(api):
    async def handle(reader, writer):
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()
    return await api.start_server(handle, "127.0.0.1", 0)


async def test_at_eof_after_close_and_wait_closed():
    """reader.at_eof() is True once the writer closed and wait_closed()
    returned, as asyncio's (the connection is gone), with nothing read."""
    seen = {}
    for name, api in _STREAMS.items():
        server = await _echo_server(api)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await api.open_connection("127.0.0.1", port)
        writer.close()
        await writer.wait_closed()
        seen[name] = (reader.at_eof(), await reader.read())
        server.close()
        await server.wait_closed()
    assert seen["ring"] == seen["asyncio"] == (True, b"")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio's StreamWriter warns from 3.11 on")
async def test_a_dropped_unclosed_writer_warns_and_closes():
    """A writer dropped without close() says so with a ResourceWarning and
    closes the connection, even while its reader lives on, as asyncio's."""
    outcomes = {}
    for name, api in _STREAMS.items():
        with socket.create_server(("127.0.0.1", 0)) as listener:
            reader, writer = await api.open_connection(*listener.getsockname())
            peer, _ = listener.accept()
        with peer:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                del writer
                gc.collect()
            messages = [str(w.message) for w in caught if w.category is ResourceWarning]
            for _ in range(3):
                await asyncio.sleep(0)  # the close it asked for
            peer.settimeout(5)
            outcomes[name] = ([m.split(" ")[0] + " " + m.split(" ")[1][:13] for m in messages],
                              peer.recv(10))
            del reader
    assert outcomes["ring"] == outcomes["asyncio"] == (["unclosed <StreamWriter"], b"")


async def test_debug_mode_refuses_blocking_sockets(socks):
    """In the loop's debug mode every sock_* refuses a blocking socket with the
    loop's ValueError before doing anything."""
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    socks(a, b)
    a.setblocking(True)
    calls = {
        "sock_recv": (a, 10), "sock_recv_into": (a, bytearray(10)), "sock_sendall": (a, b"x"),
        "sock_connect": (a, "/nonexistent"), "sock_accept": (a,),
    }
    if sys.version_info >= (3, 11) and isinstance(loop, asyncio.BaseEventLoop):  # (uvloop lacks them)
        calls.update({"sock_recvfrom": (a, 10), "sock_recvfrom_into": (a, bytearray(10)),
                      "sock_sendto": (a, b"x", "/nonexistent")})
    loop.set_debug(True)
    try:
        for name, args in calls.items():
            errors = []
            for func in (getattr(aioring, name), getattr(loop, name)):
                with pytest.raises(ValueError) as caught:
                    await func(*args)
                errors.append(str(caught.value))
            assert errors == ["the socket must be non-blocking"] * 2, name
        with pytest.raises(ValueError, match="the socket must be non-blocking"):
            await aioring.sock_sendfile(a, open(__file__, "rb"))
    finally:
        loop.set_debug(False)
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(1)  # nothing was sent


async def test_server_close_closes_the_listeners_at_once():
    """Server.close() closes its listening sockets there and then, as
    asyncio's; a connection tried right after is refused."""
    for api in _STREAMS.values():
        server = await _echo_server(api)
        listeners = list(server.sockets)
        address = listeners[0].getsockname()
        server.close()
        assert [s.fileno() for s in listeners] == [-1] * len(listeners)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=5).close()
        await server.wait_closed()


def test_a_server_closed_as_its_loop_ends_leaves_nothing_behind(new_loop):
    """A server closed just before its loop ends (as at the end of
    asyncio.run) leaves no task or coroutine behind and no listener open."""
    loop = new_loop()
    kept = []

    async def main():
        server = await aioring.start_server(lambda r, w: None, "127.0.0.1", 0)
        kept.extend(server.sockets)
        server.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.run_until_complete(main())
        loop.close()
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert [s.fileno() for s in kept] == [-1]


def _netlink() -> socket.socket:
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    except (AttributeError, OSError) as exc:
        pytest.skip(f"no AF_NETLINK here: {exc}")
    sock.setblocking(False)
    return sock


# RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, for AF_UNSPEC: the kernel answers
# with RTM_NEWLINK messages.
_GETLINK = struct.pack("=IHHII", 20, 18, 0x301, 1, 0) + struct.pack("=B3x", 0)


async def test_other_address_families_are_passed_through():
    """sock_sendto and sock_connect take a family other than IPv4, IPv6 and
    unix (netlink here) as the loop's do: the socket module's own call, its
    result and its errors."""
    with _netlink() as ring_sock, _netlink() as std_sock:
        assert await aioring.sock_sendto(ring_sock, _GETLINK, (0, 0)) == std_sock.sendto(_GETLINK, (0, 0))
        reply = await aioring.sock_recv(ring_sock, 65536)
        assert struct.unpack_from("=IH", reply)[1] == 16  # RTM_NEWLINK
    with _netlink() as ring_sock, _netlink() as std_sock:
        await aioring.sock_connect(ring_sock, (0, 0))
        std_sock.connect((0, 0))
        assert ring_sock.getpeername() == std_sock.getpeername()
        await aioring.sock_sendall(ring_sock, _GETLINK)
        assert struct.unpack_from("=IH", await aioring.sock_recv(ring_sock, 65536))[1] == 16
    with _netlink() as ring_sock, _netlink() as std_sock:
        for bad in ("x", (0,)):
            with pytest.raises(TypeError) as std:
                std_sock.connect(bad)
            with pytest.raises(TypeError) as ring:
                await aioring.sock_connect(ring_sock, bad)
            assert str(ring.value) == str(std.value)


def _closed_port(host: str) -> int:
    with socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        return s.getsockname()[1]


def _info(host: str, port: int) -> tuple:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    address = (host, port, 0, 0) if ":" in host else (host, port)
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)


def _resolving_to(monkeypatch: pytest.MonkeyPatch, infos: list) -> None:
    async def getaddrinfo(*args, **kwargs):
        return list(infos)
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)


def _apis() -> dict:
    """aioring's open_connection, and asyncio's where the loop's own
    create_connection goes through loop.getaddrinfo (asyncio's loop)."""
    if isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop):
        return _STREAMS
    return {"ring": aioring}


async def test_interleave_orders_the_attempts_and_errors_as_asyncio(monkeypatch):
    """interleave (and happy_eyeballs_delay, which implies interleave=1)
    take the addresses' families in turn; every refused attempt's error is
    reported, in the order the attempts were made, as asyncio's."""
    v4 = [_info("127.0.0.1", _closed_port("127.0.0.1")) for _ in range(3)]
    v6 = [_info("::1", _closed_port("::1")) for _ in range(2)]
    _resolving_to(monkeypatch, v4 + v6)
    orders = {1: [v4[0], v6[0], v4[1], v6[1], v4[2]], 2: [v4[0], v4[1], v6[0], v4[2], v6[1]]}
    for name, api in _apis().items():
        for kwargs, order in (({"interleave": 2}, orders[2]),
                              ({"happy_eyeballs_delay": 0.25}, orders[1])):
            with pytest.raises(OSError) as caught:
                await api.open_connection("localhost", 1, **kwargs)
            expected = ", ".join(f"[Errno 111] Connect call failed {info[4]}" for info in order)
            assert str(caught.value) == f"Multiple exceptions: {expected}", name


async def test_happy_eyeballs_races_past_an_attempt_that_hangs(monkeypatch):
    """With happy_eyeballs_delay, an attempt that hangs (a listener whose
    backlog is full drops the SYN) does not hold up the next address: the
    first to connect wins and the hanging one is closed, as asyncio's."""
    full = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = [socket.create_connection(full.getsockname())]
    server = await aioring.start_server(lambda r, w: w.close(), "::1", 0)
    good = server.sockets[0].getsockname()
    _resolving_to(monkeypatch, [_info(*full.getsockname()), _info("::1", good[1])])
    try:
        for name, api in _apis().items():
            _, writer = await asyncio.wait_for(
                api.open_connection("localhost", 1, happy_eyeballs_delay=0.05), 60)
            assert writer.get_extra_info("peername")[:2] == good[:2], name
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
        for sock in filler:
            sock.close()
        full.close()


_LOOPS = {"asyncio": asyncio.SelectorEventLoop, "uvloop": uvloop.new_event_loop}


def _fd_open(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


@pytest.mark.parametrize("kind", _LOOPS)
def test_a_loop_dropped_unclosed_with_operations_in_flight_goes_with_its_ring(kind, aioring_backend):
    """A loop dropped without close() while a read waits is collected as a
    loop without aioring is; its ring goes with it, drained first (the read
    cancelled), its fds closed.  asyncio warns of the unclosed loop and of
    the pending task, as it does without aioring."""
    def bare() -> weakref.ref:
        loop = _LOOPS[kind]()
        loop.run_until_complete(asyncio.sleep(0))
        return weakref.ref(loop)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        dropped = bare()
        gc.collect()
    if dropped() is not None:
        pytest.skip(f"{kind} keeps a loop dropped unclosed alive even without aioring")

    r, w = os.pipe()
    errors: list[dict] = []

    def dropping() -> tuple:
        loop = _LOOPS[kind]()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))

        async def start() -> asyncio.Task:
            task = asyncio.ensure_future(aioring.read(r, 100))
            await asyncio.sleep(0)
            return task

        loop.run_until_complete(start())
        ring = _loops.get_ring(loop)
        return weakref.ref(loop), weakref.ref(ring), [ring._efd] + (
            [ring.fd] if aioring_backend == "io_uring" else [])

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loop_ref, ring_ref, fds = dropping()
            names = [_fd_open(fd) for fd in fds]
            assert None not in names
            gc.collect()
        assert loop_ref() is None and ring_ref() is None
        assert [_fd_open(fd) for fd in fds] != names  # closed (or, if reused, something else)
        assert all(issubclass(w.category, ResourceWarning) and "unclosed event loop" in str(w.message)
                   for w in caught)
        assert [e["message"] for e in errors] in ([], ["Task was destroyed but it is pending!"])
    finally:
        os.close(r)
        os.close(w)
