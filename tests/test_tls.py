"""TLS on aioring's streams, against asyncio's TLS streams: echo both ways
byte for byte, the errors asyncio raises (an untrusted certificate, a peer
that closes or resets during the handshake, a handshake that takes too
long), close_notify, start_tls, and cancelled reads that lose nothing.
Certificates are made here, by trustme."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme

import aioring

HOST = "127.0.0.1"
NAME = "aioring.test"


class Certs:
    def __init__(self) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert(NAME, HOST)
        self.server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.server)
        self.client = ssl.create_default_context()
        self.ca.configure_trust(self.client)


@pytest.fixture(scope="module")
def certs() -> Certs:
    return Certs()


def pattern(n: int, seed: int = 0) -> bytes:
    block = bytes((seed + i * 7) & 0xFF for i in range(251))
    return (block * (n // 251 + 1))[:n]


Handler = Callable[[Any, Any], Awaitable[None]]


async def echo_frames(reader: Any, writer: Any) -> None:
    """Echo 8-byte-length framed payloads until EOF, then close."""
    while True:
        try:
            header = await reader.readexactly(8)
        except asyncio.IncompleteReadError:
            break
        (n,) = struct.unpack(">Q", header)
        payload = await reader.readexactly(n)
        writer.write(header + payload)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def serve(module: Any, handler: Handler, certs: Certs, **kwargs: Any) -> tuple[Any, int]:
    server = await module.start_server(handler, HOST, 0, ssl=certs.server, **kwargs)
    return server, server.sockets[0].getsockname()[1]


async def connect(module: Any, port: int, certs: Certs, **kwargs: Any) -> tuple[Any, Any]:
    return await module.open_connection(HOST, port, ssl=certs.client, server_hostname=NAME, **kwargs)


SIZES = (1, 1000, 16 * 1024 + 1, 300_000, 16 * 1024 * 1024)


@pytest.mark.parametrize("server_module, client_module, sizes", [
    (aioring, aioring, SIZES),
    (asyncio, aioring, (*SIZES[:-1], 3 * 1024 * 1024)),
    (aioring, asyncio, (*SIZES[:-1], 3 * 1024 * 1024)),
], ids=["aioring-aioring", "asyncio-server", "asyncio-client"])
async def test_echo_byte_for_byte(certs: Certs, server_module: Any, client_module: Any,
                                  sizes: tuple[int, ...]) -> None:
    server, port = await serve(server_module, echo_frames, certs)
    reader, writer = await connect(client_module, port, certs)
    ssl_object = writer.get_extra_info("ssl_object")
    assert isinstance(ssl_object, ssl.SSLObject)
    assert writer.get_extra_info("peercert") == ssl_object.getpeercert()
    assert writer.get_extra_info("cipher") == ssl_object.cipher()
    assert writer.get_extra_info("compression") == ssl_object.compression()
    assert writer.get_extra_info("sslcontext") is certs.client
    assert writer.get_extra_info("peername") == (HOST, port)
    assert writer.get_extra_info("socket") is not None
    for i, n in enumerate(sizes):
        payload = pattern(n, i)
        writer.write(struct.pack(">Q", n))
        writer.write(memoryview(payload))
        await writer.drain()
        if client_module is aioring and i % 2:
            header = bytearray(8)
            await reader.readinto_exactly(header)
            buf = bytearray(n)
            await reader.readinto_exactly(buf)
            echoed = bytes(header) + bytes(buf)
        else:
            echoed = await reader.readexactly(8 + n)
        assert echoed == struct.pack(">Q", n) + payload, n
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_readinto_and_lines(certs: Certs) -> None:
    async def handler(reader: Any, writer: Any) -> None:
        writer.write(b"line one\nline two\n" + pattern(70_000))
        await writer.drain()
        writer.close()

    # The server waits 30 s (the shutdown's default timeout) for the client's
    # close_notify, far longer than the read below may take: the end must
    # come from the server's close_notify, which arrives with the last
    # plaintext, not from the server giving up.
    server, port = await serve(aioring, handler, certs)
    reader, writer = await connect(aioring, port, certs)
    assert await reader.readline() == b"line one\n"
    assert await reader.readuntil(b"\n") == b"line two\n"
    got = bytearray()
    buf = bytearray(50_000)
    gave_up: list[bool] = []  # (the client closing first, should the end never come)
    watchdog = asyncio.get_running_loop().call_later(20, lambda: (gave_up.append(True), writer.close()))
    while n := await reader.readinto(buf):
        got += buf[:n]
    watchdog.cancel()
    assert not gave_up
    assert got == pattern(70_000)
    assert await reader.read() == b""  # the peer's close_notify: EOF
    assert reader.at_eof()
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_untrusted_certificate(certs: Certs) -> None:
    other = ssl.create_default_context()
    trustme.CA().configure_trust(other)
    server, port = await serve(aioring, echo_frames, certs)
    with pytest.raises(ssl.SSLCertVerificationError):
        await aioring.open_connection(HOST, port, ssl=other, server_hostname=NAME)
    with pytest.raises(ssl.SSLCertVerificationError):  # a name the certificate does not carry
        await aioring.open_connection(HOST, port, ssl=certs.client, server_hostname="other.test")
    server.close()
    await server.wait_closed()


async def test_untrusted_client_leaves_server_serving(certs: Certs) -> None:
    other = ssl.create_default_context()
    trustme.CA().configure_trust(other)
    server, port = await serve(aioring, echo_frames, certs)
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.open_connection(HOST, port, ssl=other, server_hostname=NAME)
    reader, writer = await connect(aioring, port, certs)
    writer.write(struct.pack(">Q", 3) + b"abc")
    assert await reader.readexactly(11) == struct.pack(">Q", 3) + b"abc"
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


def listener(socks: Callable[..., socket.socket]) -> tuple[socket.socket, int]:
    sock = socks(socket.socket())
    sock.bind((HOST, 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_peer_ends_during_handshake(certs: Certs, socks: Callable[..., socket.socket],
                                          how: str) -> None:
    """asyncio: ConnectionResetError for a peer that closes during the handshake,
    the socket's ConnectionResetError for one that resets it."""
    sock, port = listener(socks)
    loop = asyncio.get_running_loop()

    async def peer() -> None:
        conn, _ = await loop.run_in_executor(None, sock.accept)
        socks(conn)
        await loop.run_in_executor(None, conn.recv, 1)  # the ClientHello has come
        if how == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    task = asyncio.ensure_future(peer())
    with pytest.raises(ConnectionResetError):
        await connect(aioring, port, certs)
    await task


@pytest.mark.parametrize("module", [aioring, asyncio], ids=["aioring", "asyncio"])
async def test_corrupt_record_raises_ssl_error(certs: Certs, socks: Callable[..., socket.socket],
                                              module: Any) -> None:
    """A record that fails to decrypt ends the stream with the ssl.SSLError, as asyncio's."""
    sock, port = listener(socks)
    loop = asyncio.get_running_loop()

    def peer() -> None:
        conn, _ = sock.accept()
        with certs.server.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"fine")
            tls.recv(1)
            socket.socket.sendall(tls, b"\x17\x03\x03\x00\x20" + bytes(32))  # not TLS's
            socket.socket.recv(tls, 1)  # until the client is gone

    task = loop.run_in_executor(None, peer)
    reader, writer = await connect(module, port, certs)
    assert await reader.readexactly(4) == b"fine"
    writer.write(b"!")
    with pytest.raises(ssl.SSLError):
        await reader.read(10)
    writer.close()
    with contextlib.suppress(ssl.SSLError):
        await writer.wait_closed()
    await task


async def test_handshake_timeout(certs: Certs, socks: Callable[..., socket.socket]) -> None:
    """A peer that never answers: ConnectionAbortedError after ssl_handshake_timeout, as asyncio's."""
    _sock, port = listener(socks)
    message = "SSL handshake is taking longer than 0.05 seconds: aborting the connection"
    with pytest.raises(ConnectionAbortedError, match=re.escape(message)):
        await connect(aioring, port, certs, ssl_handshake_timeout=0.05)


async def test_server_handshake_timeout(certs: Certs) -> None:
    """A client that never says hello: the server drops it after ssl_handshake_timeout,
    without calling back, and goes on serving."""
    called = []

    async def handler(reader: Any, writer: Any) -> None:
        called.append(writer)
        writer.close()

    server, port = await serve(aioring, handler, certs, ssl_handshake_timeout=0.05)
    loop = asyncio.get_running_loop()
    with socket.create_connection((HOST, port)) as silent:
        silent.settimeout(10)
        try:
            got = await loop.run_in_executor(None, silent.recv, 1)
        except ConnectionResetError:
            got = b""
    assert got == b"" and not called
    _, writer = await connect(aioring, port, certs)
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    assert len(called) == 1


async def test_cancelled_during_handshake(certs: Certs, socks: Callable[..., socket.socket]) -> None:
    sock, port = listener(socks)
    task = asyncio.ensure_future(connect(aioring, port, certs))
    conn, _ = await asyncio.get_running_loop().run_in_executor(None, sock.accept)
    socks(conn)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    conn.settimeout(5)
    while conn.recv(65536):  # the client closed its end
        pass


async def test_cancelled_reads_lose_nothing(certs: Certs) -> None:
    total = 3 * 1024 * 1024 + 17
    sent = pattern(total, 3)

    async def handler(reader: Any, writer: Any) -> None:
        for i in range(0, total, 10_000):
            writer.write(sent[i:i + 10_000])
            await writer.drain()
        await reader.read()
        writer.close()

    server, port = await serve(aioring, handler, certs)
    reader, writer = await connect(aioring, port, certs)
    got = bytearray()
    turns = 0
    while len(got) < total:
        size = min((4096, 100_000, 1, 70_000)[turns % 4], total - len(got))
        buf = bytearray(size)
        kind = turns % 3
        call = (reader.readinto_exactly, reader.readinto, reader.readexactly)[kind]
        task = asyncio.ensure_future(call(size) if kind == 2 else call(buf))
        for _ in range(turns % 5):
            await asyncio.sleep(0)
        task.cancel()
        turns += 1
        try:
            res = await task
        except asyncio.CancelledError:
            continue
        got += res if kind == 2 else buf[:res]
    assert got == sent
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_close_notify_both_ways(certs: Certs) -> None:
    """Each side's close() sends close_notify: the other reads EOF.  TLS has no
    half-close: write_eof() raises NotImplementedError, as asyncio's."""
    got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handler(reader: Any, writer: Any) -> None:
        got.set_result(await reader.read())
        writer.close()

    server, port = await serve(asyncio, handler, certs)
    reader, writer = await connect(aioring, port, certs)
    assert not writer.can_write_eof()
    with pytest.raises(NotImplementedError):
        writer.write_eof()
    with pytest.raises(TypeError, match="data: expecting a bytes-like instance, got str"):
        writer.write("text")
    writer.write(b"last words")
    writer.close()
    assert writer.is_closing()
    await writer.wait_closed()
    assert reader.at_eof()  # the connection is gone, as after asyncio's connection_lost
    assert await got == b"last words"
    server.close()
    await server.wait_closed()

    async def closer(reader: Any, writer: Any) -> None:
        writer.write(b"bye")
        writer.close()
        await writer.wait_closed()

    server, port = await serve(aioring, closer, certs)
    reader, writer = await connect(asyncio, port, certs)
    assert await reader.read() == b"bye"
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_peer_closes_without_close_notify(certs: Certs) -> None:
    """A peer that ends the TCP connection without close_notify: EOF, as asyncio's streams see it."""
    async def handler(reader: Any, writer: Any) -> None:
        writer.write(b"data")
        assert await reader.readexactly(1) == b"!"  # (the client has the data)
        writer.transport.abort()

    server, port = await serve(aioring, handler, certs)
    for module in (aioring, asyncio):
        reader, writer = await connect(module, port, certs)
        assert await reader.readexactly(4) == b"data"
        writer.write(b"!")
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_shutdown_timeout(certs: Certs) -> None:
    """A peer that never answers close_notify (its reading paused): the socket
    is closed after ssl_shutdown_timeout; wait_closed() raises TimeoutError
    where asyncio's does (3.11+)."""
    done = asyncio.Event()

    async def handler(reader: Any, writer: Any) -> None:
        writer.transport.pause_reading()  # takes nothing in: never answers
        await done.wait()
        writer.close()

    server, port = await serve(aioring, handler, certs)
    if sys.version_info < (3, 11):
        with pytest.raises(TypeError):
            await connect(aioring, port, certs, ssl_shutdown_timeout=0.05)
        _, writer = await connect(aioring, port, certs)
        writer.transport.abort()
    else:
        _reader, writer = await connect(aioring, port, certs, ssl_shutdown_timeout=0.05)
        writer.close()
        with pytest.raises(TimeoutError):
            await writer.wait_closed()
    done.set()
    server.close()
    await server.wait_closed()


async def test_start_tls_upgrades_a_plain_connection(certs: Certs) -> None:
    async def handler(reader: Any, writer: Any) -> None:
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"GO\n")
        await writer.drain()
        await writer.start_tls(certs.server)
        assert writer.get_extra_info("ssl_object") is not None
        await echo_frames(reader, writer)

    server = await aioring.start_server(handler, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await aioring.open_connection(HOST, port)
    assert writer.get_extra_info("ssl_object") is None
    writer.write(b"STARTTLS\n")
    assert await reader.readline() == b"GO\n"
    message = "sslcontext is expected to be an instance of ssl.SSLContext"
    with pytest.raises(TypeError, match=re.escape(message)):
        await writer.start_tls(object())
    await writer.start_tls(certs.client, server_hostname=NAME)
    assert isinstance(writer.get_extra_info("ssl_object"), ssl.SSLObject)
    with pytest.raises(TypeError, match="is not supported by start_tls"):
        await writer.start_tls(certs.client, server_hostname=NAME)
    payload = pattern(200_000)
    writer.write(struct.pack(">Q", len(payload)) + payload)
    assert await reader.readexactly(8 + len(payload)) == struct.pack(">Q", len(payload)) + payload
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_unix_streams(certs: Certs, tmp_path: Any) -> None:
    path = str(tmp_path / "tls.sock")
    server = await aioring.start_unix_server(echo_frames, path, ssl=certs.server)
    with pytest.raises(ValueError, match="you have to pass server_hostname when using ssl"):
        await aioring.open_unix_connection(path, ssl=certs.client)
    reader, writer = await aioring.open_unix_connection(path, ssl=certs.client, server_hostname=NAME)
    writer.write(struct.pack(">Q", 5) + b"hello")
    assert await reader.readexactly(13) == struct.pack(">Q", 5) + b"hello"
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_arguments_checked_as_asyncio(certs: Certs) -> None:
    """The stdlib loop's errors for TLS arguments, before anything connects."""
    cases: list[tuple[Any, dict[str, Any], type[Exception], str]] = [
        (aioring.open_connection, {"host": HOST, "port": 1, "server_hostname": NAME}, ValueError,
         "server_hostname is only meaningful with ssl"),
        (aioring.open_connection, {"host": HOST, "port": 1, "ssl_handshake_timeout": 1}, ValueError,
         "ssl_handshake_timeout is only meaningful with ssl"),
        (aioring.open_connection, {"sock": socket.socket(), "ssl": certs.client}, ValueError,
         "You must set server_hostname when using ssl without a host"),
        (aioring.open_connection, {"host": HOST, "port": 1, "ssl": certs.client,
                                   "ssl_handshake_timeout": 0}, ValueError,
         "ssl_handshake_timeout should be a positive number, got 0"),
        (aioring.start_server, {"client_connected_cb": echo_frames, "ssl": True}, TypeError,
         "ssl argument must be an SSLContext or None"),
        (aioring.start_server, {"client_connected_cb": echo_frames, "ssl_handshake_timeout": 1}, ValueError,
         "ssl_handshake_timeout is only meaningful with ssl"),
    ]
    for func, kwargs, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            await func(**kwargs)
        if "sock" in kwargs:
            kwargs["sock"].close()


STREAMS_WITH_START_TLS = [aioring, *([asyncio] if sys.version_info >= (3, 11) else [])]


@pytest.mark.parametrize("module", STREAMS_WITH_START_TLS, ids=lambda m: m.__name__)
async def test_start_tls_after_buffered_plaintext_and_on_a_closing_writer(certs: Certs, module: Any) -> None:
    """Plaintext read ahead before start_tls stays in front of the reader's
    buffer; start_tls on a closed writer raises ConnectionResetError, as asyncio's."""
    accepted: asyncio.Queue[Any] = asyncio.Queue()

    async def handler(reader: Any, writer: Any) -> None:
        await accepted.put(writer)

    server = await module.start_server(handler, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await module.open_connection(HOST, port)
    peer = await accepted.get()
    peer.write(b"GO\nearly")
    await peer.drain()
    assert await reader.readline() == b"GO\n"
    upgrade = asyncio.ensure_future(peer.start_tls(certs.server))
    await writer.start_tls(certs.client, server_hostname=NAME)
    await upgrade
    peer.write(b" then TLS")
    assert await reader.readexactly(14) == b"early then TLS"
    writer.close()
    peer.close()
    await writer.wait_closed()
    await peer.wait_closed()

    _, writer = await module.open_connection(HOST, port)
    peer = await accepted.get()
    writer.close()
    with pytest.raises(ConnectionResetError, match="Connection lost"):
        await writer.start_tls(certs.client, server_hostname=NAME)
    peer.close()
    await peer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_read_only_buffers_refused_before_reading(certs: Certs) -> None:
    async def handler(reader: Any, writer: Any) -> None:
        writer.write(b"abc")
        await writer.drain()
        await reader.read()
        writer.close()

    server, port = await serve(aioring, handler, certs)
    reader, writer = await connect(aioring, port, certs)
    for call in (reader.readinto, reader.readinto_exactly):
        for buf in (b"xyz", memoryview(bytearray(3)).toreadonly()):
            with pytest.raises(TypeError, match="writable bytes-like object"):
                await call(buf)
    assert await reader.readexactly(3) == b"abc"
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("module", [aioring, asyncio], ids=["aioring", "asyncio"])
async def test_peer_reset_raises_from_drain_and_reads_not_write(certs: Certs, module: Any) -> None:
    """A peer that aborts: write() still never raises (data is dropped), drain()
    raises the connection's error, and so do reads after it, as asyncio's
    TLS streams (not EOF)."""
    accepted: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def handler(reader: Any, writer: Any) -> None:
        accepted.set_result(writer)

    server, port = await serve(asyncio, handler, certs)
    reader, writer = await connect(module, port, certs)
    (await accepted).transport.abort()
    with pytest.raises(ConnectionError):
        for i in range(1000):
            writer.write(b"x" * (200_000 if i % 2 else 1000))  # (large writes leave in slices)
            await writer.drain()
    for size in (10, 1 << 20):
        writer.write(b"x" * size)  # dropped
    writer.close()
    with pytest.raises(ConnectionError):
        await writer.wait_closed()
    with pytest.raises(ConnectionError):
        await reader.read()
    server.close()
    await server.wait_closed()


# The peer's close must finish well before this; a side that never answers
# close_notify makes it end in TimeoutError (3.11+) or never (3.10).
PEER_CLOSE = 2.0


def _shutdown_timeout() -> dict[str, float]:
    return {"ssl_shutdown_timeout": PEER_CLOSE} if sys.version_info >= (3, 11) else {}


@pytest.mark.parametrize("module", [aioring, asyncio],
                         ids=["aioring", "asyncio"])
async def test_close_notify_answered_while_not_reading_server(certs: Certs, module: Any) -> None:
    """A server whose handler does not read answers the client's close_notify
    at once, as asyncio's TLS server does (it reads all the time): the
    client's wait_closed() ends without waiting for ssl_shutdown_timeout, and
    a later read in the handler gets what the client wrote, then EOF."""
    peer_closed = asyncio.Event()
    seen: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handler(reader: Any, writer: Any) -> None:
        writer.write(b"hello")
        await peer_closed.wait()  # reads nothing until the client is gone
        seen.set_result(await reader.read())
        writer.close()
        await writer.wait_closed()

    server, port = await serve(module, handler, certs)
    reader, writer = await connect(asyncio, port, certs, **_shutdown_timeout())
    assert await reader.readexactly(5) == b"hello"
    writer.write(b"request")
    writer.close()
    await asyncio.wait_for(writer.wait_closed(), PEER_CLOSE + 5)
    peer_closed.set()
    assert await asyncio.wait_for(seen, PEER_CLOSE + 5) == b"request"
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("module", [aioring, asyncio],
                         ids=["aioring", "asyncio"])
async def test_close_notify_answered_while_not_reading_client(certs: Certs, module: Any) -> None:
    """The mirror: a client that wrote its request and does not read answers
    the server's close_notify; the server's wait_closed() ends at once, and
    the client then reads the reply, then EOF."""
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler(reader: Any, writer: Any) -> None:
        writer.write(b"reply")
        writer.close()
        try:
            await writer.wait_closed()
        except BaseException as exc:
            closed.set_exception(exc)
        else:
            closed.set_result(None)

    server = await asyncio.start_server(handler, HOST, 0, ssl=certs.server, **_shutdown_timeout())
    port = server.sockets[0].getsockname()[1]
    reader, writer = await connect(module, port, certs)
    writer.write(b"request")
    await asyncio.wait_for(closed, PEER_CLOSE + 5)  # (no read meanwhile)
    assert await reader.read() == b"reply"
    writer.close()
    await asyncio.wait_for(writer.wait_closed(), PEER_CLOSE + 5)
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("module", [aioring, asyncio], ids=["aioring", "asyncio"])
async def test_writes_of_one_iteration_arrive_as_written(certs: Certs, module: Any) -> None:
    """Small writes of one loop iteration (encrypted together by aioring) arrive
    in order, and a buffer changed after write() returned changes nothing
    sent, as with asyncio's TLS streams."""
    server, port = await serve(aioring, echo_frames, certs)
    reader, writer = await connect(module, port, certs)
    payload = bytearray(b"payload!")
    writer.write(struct.pack(">Q", 11))
    writer.write(b"abc")
    writer.write(payload)
    payload[:] = b"changed!"
    writer.writelines([struct.pack(">Q", 1), memoryview(b"z")])
    await writer.drain()
    expected = struct.pack(">Q", 11) + b"abcpayload!" + struct.pack(">Q", 1) + b"z"
    assert await reader.readexactly(len(expected)) == expected
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def test_pause_reading_keeps_what_comes_until_resume_reading(certs: Certs) -> None:
    """transport.pause_reading() over TLS: reads wait and nothing that came
    meanwhile is lost; resume_reading() hands it over in order."""
    payload = pattern(600_000, 5)  # (more than one receive brings: see the read that waits)

    async def handler(reader: Any, writer: Any) -> None:
        assert await reader.readexactly(1) == b"!"
        writer.write(payload)
        await writer.drain()
        await reader.read()
        writer.close()

    server, port = await serve(aioring, handler, certs)
    reader, writer = await connect(aioring, port, certs)
    transport = writer.transport
    transport.pause_reading()
    assert not transport.is_reading()
    writer.write(b"!")
    await writer.drain()
    read = asyncio.ensure_future(reader.readexactly(len(payload)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not read.done()
    transport.resume_reading()
    assert transport.is_reading()
    assert await read == payload
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
