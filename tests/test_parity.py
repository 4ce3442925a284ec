"""Streams, servers and sock_* where CPython's own asyncio tests found them
behaving differently from asyncio: each compared with asyncio's own."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import warnings

import pytest

import aioring

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
