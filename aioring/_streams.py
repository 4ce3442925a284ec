"""L4: streams on the ring, mirroring asyncio's, for sockets and pipes.

``StreamReader`` is asyncio's own StreamReader (so read, readline, readuntil,
readexactly, limits and errors behave exactly as asyncio's) whose data
arrives by ring receives that it starts itself when it needs data, instead of
a transport pushing it.  It adds ``readinto(buf)`` and
``readinto_exactly(buf)``: bytes already buffered are copied once, the rest
is received by the kernel straight into the caller's buffer (one RECV with
MSG_WAITALL for a whole frame).

``StreamWriter`` has asyncio's StreamWriter methods.  ``write()`` never
blocks: the data goes out by SEND (SENDMSG, WRITEV for pipes) while the
caller goes on; writes made while a send is in flight leave together in one
vectored send.  ``bytes`` are sent as they are; any other buffer is copied
first, so changing it after ``write()`` returned changes nothing that is sent.

The channel under a stream (``_channel.py``) owns the fd: a transport, a
receive target that fills the reader's buffer, and a send queue.  A reader's
task waits on asyncio's own waiter future, so a read cancelled after its
bytes arrived leaves them in the buffer, as asyncio's does; a cancelled
``readinto_exactly`` puts the bytes it already received back in front of the
buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import os
import socket
import stat
import sys
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable
from asyncio import staggered
from typing import TYPE_CHECKING, Any, TypeVar

from ._channel import _ECANCELED, _Receiver
from ._core import StreamRead
from ._channel import _Channel as _Channel  # noqa: PLC0414  (re-exported: the TLS layer names it from here)
from ._binding import MSG_WAITALL, AcceptRequest, prep_accept, prep_poll
from ._net import check_socket, sock_connect
from ._ops import check_fd, standing_in
from ._ringbase import _DONE as _OP_DONE
from ._loops import get_ring
from ._ringbase import Op, os_error

if TYPE_CHECKING:
    from . import _tls  # (imported when a connection asks for TLS: ssl is not light)

__all__ = ["Server", "StreamReader", "StreamWriter", "open_connection", "open_pipe_reader",
           "open_pipe_writer", "open_unix_connection", "start_server", "start_unix_server"]

_F = TypeVar("_F", bound=Callable[..., Any])
_DEFAULT_LIMIT = 2**16  # asyncio's
# readinto and readinto_exactly receive requests this small into the stream's
# buffer (which may bring the next frame's bytes along, in one receive) and
# copy from there; larger ones go straight into the caller's buffer.
_READ_AHEAD = 16 * 1024
_WAITALL = MSG_WAITALL
_POLLIN = 1
# Errors of a peer that went away: they end the stream quietly.
_PEER_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _in_core(method: _F) -> _F:
    """read, readinto or readinto_exactly as the core's StreamRead
    (src/streamread.h): a read of a ring stream without TLS that needs no
    coroutine frame (one that reads ahead, or whose bytes are all buffered)
    runs in C; every other call is the method's own."""
    return standing_in(StreamRead(method, method.__name__, _READ_AHEAD, asyncio.IncompleteReadError), method)


class _Busy:
    """A reader's waiter while a read of its own is under way: asyncio's
    StreamReader takes it for a cancelled waiter and leaves it alone (its
    reads raise RuntimeError meanwhile).  One serves every reader."""

    __slots__ = ()

    def cancelled(self) -> bool:
        return True

    def done(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<busy>"


_BUSY: Any = _Busy()


def _buffer_view(buf: Any, func: str) -> memoryview:
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(f"{func}() argument must be a writable bytes-like object, "
                        f"not {type(buf).__name__}") from None
    if view.readonly:
        raise TypeError(f"{func}() argument must be a writable bytes-like object, "
                        f"not read-only {type(buf).__name__}")
    if not view.c_contiguous:
        raise TypeError(f"{func}() argument must be a contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class StreamReader(asyncio.StreamReader):
    """asyncio's StreamReader, fed by ring receives; plus readinto and readinto_exactly."""

    # asyncio.StreamReader's own state, which typeshed does not declare.
    _buffer: bytearray
    _eof: bool
    _exception: BaseException | None
    _waiter: asyncio.Future[None] | None
    _limit: int
    _loop: asyncio.AbstractEventLoop
    _paused: bool
    _transport: Any

    _channel: _Channel | None = None  # the transport
    _rx: _Receiver | None = None  # its receive target, which fills this reader's buffer
    _busy: Any = _BUSY
    # Over TLS, the side of the TLS layer that decrypts this reader's data (and _channel is None).
    _tls: _tls.TLSReceiver | None = None

    def _attach(self, channel: _Channel) -> None:
        self._channel = channel
        self._rx = rx = channel._rx
        rx._reader = self

    def set_exception(self, exc: Exception) -> None:
        """As asyncio.StreamReader.set_exception; its Receiver's reads look for it from then on."""
        super().set_exception(exc)
        rx = self._rx
        if rx is not None:
            rx._ended = True

    def _begin(self, func_name: str) -> None:
        if self._waiter is not None:
            raise RuntimeError(f"{func_name}() called while another coroutine is already "
                               "waiting for incoming data")
        self._waiter = self._busy

    async def _wait_for_data(self, func_name: str) -> None:
        if self._tls is not None:
            return await self._tls.wait_for_data(self, func_name)
        if self._rx is None:
            return await super()._wait_for_data(func_name)  # type: ignore[misc]
        # (What a read of a ring stream that wants more than is buffered
        # awaits: the core's arrival(), see src/channel.h.  Not a coroutine:
        # the reads' hot paths call it without a coroutine of their own.)
        waiter = self._rx.arrival(func_name)
        if waiter is not None:
            try:
                await waiter
            finally:
                self._waiter = None

    def _armed_waiter(self, rx: _Receiver) -> asyncio.Future[None]:
        waiter = self._waiter = self._loop.create_future()
        if not rx._armed:
            try:
                rx.arm()
            except BaseException:
                self._waiter = None
                raise
        return waiter

    async def _turn_then_wait(self) -> None:
        await self._turn()
        rx = self._rx
        assert rx is not None
        if not rx._armed and rx.pull():
            return
        try:
            await self._armed_waiter(rx)
        finally:
            self._waiter = None

    @_in_core
    async def read(self, n: int = -1) -> bytes:
        """As asyncio.StreamReader.read: the same arguments, result and exceptions."""
        # (The core's StreamRead takes every read that reads ahead; what it
        # leaves here is asyncio's, whose wait is _wait_for_data's below.)
        return await super().read(n)

    async def _turn(self) -> None:
        """Let the loop run once, as a reader that waits (others get RuntimeError)."""
        self._waiter = self._busy
        try:
            await asyncio.sleep(0)
        finally:
            self._waiter = None

    def feed_eof(self) -> None:
        """As asyncio.StreamReader.feed_eof: the same arguments, result and exceptions."""
        super().feed_eof()
        rx = self._rx
        if rx is not None:
            rx._ended = True  # (its reads look for the EOF from then on)
        channel = self._channel
        if channel is not None and not channel._writable:
            channel.close()  # a pipe's reader: nothing more can come, release the fd

    def close(self) -> None:
        """Close the channel the reader receives from (a pipe reader's pipe);
        a receive in flight ends as at EOF."""
        transport = self._channel if self._tls is None else self._tls._layer
        if transport is not None:
            transport.close()

    async def wait_closed(self) -> None:
        """Wait until the stream's fd is closed; raises the error that ended the connection, if one did."""
        transport = self._channel if self._tls is None else self._tls._layer
        if transport is not None:
            await transport.wait_closed()

    @_in_core
    async def readinto(self, buf: Any) -> int:
        """Read at least one byte into `buf` (0 at EOF): buffered bytes first,
        otherwise one receive straight into `buf`."""
        view = _buffer_view(buf, "readinto")
        try:
            if self._tls is not None:
                return await self._tls.readinto(self, view)
            return await self._readinto(view)
        finally:
            _let_go(view)

    async def _readinto(self, view: memoryview) -> int:
        if self._exception is not None:
            raise self._exception
        n = len(view)
        if not n:
            return 0
        buffered = self._buffer
        rx = self._rx
        if not buffered and not self._eof and (n < _READ_AHEAD or rx is None or rx._armed or rx._into_small):
            # A small read, or the peer's messages are small: read ahead.
            # (Or a receive into the buffer is out, started by a read that
            # was cancelled: its bytes come first.)
            await self._wait_for_data("readinto")
        if buffered:
            k = min(n, len(buffered))
            with memoryview(buffered) as m:
                view[:k] = m[:k]
            del buffered[:k]
            if k >= _READ_AHEAD and rx is not None:
                rx._bodies = True  # (read ahead and copied: the next header's wait takes no more)
                rx._into_small = False  # (and bulk data: the next one receives straight into buf)
            return k
        if self._eof or rx is None:
            return 0
        self._begin("readinto")
        try:
            got = await rx.receive_into(view, 0, False)  # (pinned until the kernel let go)
        except OSError as exc:
            self._waiter = None
            self.set_exception(exc)
            raise
        finally:
            self._waiter = None
        if not got:
            self.feed_eof()
        elif got < _READ_AHEAD:
            rx._into_small = True  # (small messages: the next one reads ahead, see src/channel.h)
        return got

    @_in_core
    async def readinto_exactly(self, buf: Any) -> int:
        """Fill all of `buf` and return its length, or raise
        asyncio.IncompleteReadError (with the bytes received) at EOF.

        Buffered bytes are copied first; the rest is received straight into
        `buf`.  If the task is cancelled, the bytes already received go back
        in front of the buffer: the next read returns them."""
        kind = type(buf)
        if kind is bytearray or (kind is memoryview and buf.format == "B" and buf.ndim == 1
                                 and buf.c_contiguous and not buf.readonly):
            tls = self._tls
            if tls is not None:
                if tls.take_exactly(self, buf):  # (all of it buffered already: no coroutine)
                    return len(buf)
                return await tls.readinto_exactly(self, buf)
            n = len(buf)
            if n < _READ_AHEAD:
                # A small read (a frame's header, say): read ahead into the
                # buffer as readexactly does, so that one receive also brings
                # what follows.  (_readinto_exactly's, inlined: the hot path.)
                if self._exception is not None:
                    raise self._exception
                buffered = self._buffer
                rx = self._rx
                while len(buffered) < n:
                    if self._eof:
                        partial = bytes(buffered)
                        buffered.clear()
                        raise asyncio.IncompleteReadError(partial, n)
                    if rx is None:
                        await self._wait_for_data("readinto_exactly")
                        continue
                    waiter = rx.arrival("readinto_exactly", n - len(buffered))
                    if waiter is not None:
                        try:
                            await waiter
                        finally:
                            self._waiter = None
                if len(buffered) == n:  # (the common case: one copy, no slice made)
                    buf[:] = buffered
                    buffered.clear()
                    return n
                buf[:] = buffered[:n]  # same length: a bytearray is not resized
                del buffered[:n]
                return n
        view = _buffer_view(buf, "readinto_exactly")
        try:
            if self._tls is not None:
                return await self._tls.readinto_exactly(self, view)
            return await self._readinto_exactly(view)
        finally:
            _let_go(view)

    async def _readinto_exactly(self, view: bytearray | memoryview) -> int:
        if self._exception is not None:
            raise self._exception
        n = len(view)
        buffered = self._buffer
        rx = self._rx
        if n < _READ_AHEAD or rx is None:
            # A small read (a frame's header, say): read ahead into the buffer
            # as readexactly does, so that one receive also brings what follows.
            while len(buffered) < n:
                if self._eof:
                    partial = bytes(buffered)
                    buffered.clear()
                    raise asyncio.IncompleteReadError(partial, n)
                await self._wait_for_data("readinto_exactly")
            view[:] = buffered[:n]  # same length: a bytearray is not resized
            del buffered[:n]
            return n
        assert isinstance(view, memoryview)
        k = min(n, len(buffered))
        if k < n and not self._eof:
            self._begin("readinto_exactly")  # refused before anything is consumed
        if k:
            with memoryview(buffered) as m:
                view[:k] = m[:k]
            del buffered[:k]
            rx._bodies = True  # (read ahead and copied: the next header's wait takes no more)
        if k == n:
            return n
        if self._eof:
            raise asyncio.IncompleteReadError(bytes(view[:k]), n)
        done = k
        try:
            while done < n:
                if rx._armed:
                    # A receive into the buffer is out, started by a read that
                    # was cancelled: its bytes come first.
                    waiter = self._waiter = self._loop.create_future()
                    try:
                        await waiter
                    finally:
                        self._waiter = self._busy
                    k = min(n - done, len(buffered))
                    if k:
                        with memoryview(buffered) as m:
                            view[done:done + k] = m[:k]
                        del buffered[:k]
                        done += k
                    if self._eof:
                        break
                    continue
                # (Pinned until the kernel let go; the rest received in C.)
                got = await rx.receive_into(view, done, True)
                if got == done:
                    break  # EOF
                done = got
        except BaseException as exc:
            self._waiter = None
            if done:
                self._buffer[:0] = view[:done]  # nothing received is lost
            if isinstance(exc, OSError):
                self.set_exception(exc)
            raise
        self._waiter = None
        if done < n:
            self.feed_eof()
            raise asyncio.IncompleteReadError(bytes(view[:done]), n)
        return n


def _let_go(view: memoryview) -> None:
    """Release our view of the caller's buffer, so that a bytearray can be
    resized again the moment the call returns or raises (a traceback keeps
    the frame, and with it the view, alive).  A view the kernel still holds
    (a closed coroutine's receive in flight) goes when the ring lets go."""
    try:
        view.release()
    except BufferError:
        pass


class StreamWriter:
    """asyncio's StreamWriter methods over a ring channel (or the TLS layer over one)."""

    _server_side = False  # a server's connection: start_tls() takes the server's part

    def __init__(self, channel: _Channel, reader: StreamReader | None,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._transport: Any = channel
        self._reader = reader
        self._loop = loop
        # The send queue (or the TLS layer): its own methods, without a call
        # in between, on the hot path.
        self._queue: Any = channel._tx
        self.write = channel._tx.write  # type: ignore[method-assign,assignment]

    def __del__(self, warnings: Any = warnings) -> None:
        # As asyncio's: a writer dropped unclosed closes its connection, and says so.
        channel = getattr(self, "_transport", None)
        if channel is None or channel.is_closing():
            return
        if self._loop.is_closed():
            warnings.warn("loop is closed", ResourceWarning)
            return
        self._loop.call_soon(channel.close)  # (not here: a collection may come at any line)
        warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)

    def __repr__(self) -> str:
        info = [self.__class__.__name__, f"transport={self._transport!r}"]
        if self._reader is not None:
            info.append(f"reader={self._reader!r}")
        return "<{}>".format(" ".join(info))

    @property
    def transport(self) -> Any:
        """The stream's transport, as asyncio.StreamWriter.transport: set_write_buffer_limits,
        pause_reading, resume_reading, is_reading, get_extra_info, close, abort (over TLS,
        the TLS layer's, with asyncio's TLS transport's get_extra_info names)."""
        return self._transport

    def write(self, data: Any) -> None:
        """As asyncio.StreamWriter.write: never blocks; a buffer other than bytes is copied
        first, so the caller may reuse it at once.  Raises what asyncio's raises."""
        self._transport.write(data)

    def writelines(self, data: Iterable[Any]) -> None:
        """As asyncio.StreamWriter.writelines: the same arguments, result and exceptions."""
        self._transport.writelines(data)

    def write_eof(self) -> None:
        """As asyncio.StreamWriter.write_eof: the same arguments, result and exceptions."""
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        """As asyncio.StreamWriter.can_write_eof: the same arguments, result and exceptions."""
        return self._transport.can_write_eof()

    def close(self) -> None:
        """As asyncio.StreamWriter.close: the same arguments, result and exceptions."""
        self._transport.close()

    def is_closing(self) -> bool:
        """As asyncio.StreamWriter.is_closing: the same arguments, result and exceptions."""
        return self._transport.is_closing()

    async def wait_closed(self) -> None:
        """asyncio.StreamWriter.wait_closed, awaited: the same arguments, result and exceptions."""
        await self._transport.wait_closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """As asyncio.StreamWriter.get_extra_info: the same arguments, result and exceptions."""
        return self._transport.get_extra_info(name, default)

    async def drain(self) -> None:
        """Wait until the buffered data fell to the low water mark; raise the
        error that ended the connection, as asyncio's drain does."""
        reader = self._reader
        if reader is not None and reader._exception is not None:
            raise reader._exception
        queue = self._queue
        if queue._pending_size <= queue._high and queue._write_exc is None and not queue._closing:
            return  # the common case, without a second coroutine; the iteration's flush sends
        await queue.drain()

    async def start_tls(self, sslcontext: Any, *, server_hostname: str | None = None,
                        ssl_handshake_timeout: float | None = None,
                        ssl_shutdown_timeout: float | None = None) -> None:
        """asyncio.StreamWriter.start_tls: upgrade this connection to TLS in
        place (the server's part for a server's connection); this writer and
        its reader carry plaintext over TLS from then on.  Raises TypeError for
        a context that is not an ssl.SSLContext or a connection that is TLS
        already, and what the handshake raises (see open_connection)."""
        import ssl

        from . import _tls
        if not isinstance(sslcontext, ssl.SSLContext):
            raise TypeError(f"sslcontext is expected to be an instance of ssl.SSLContext, "
                            f"got {sslcontext!r}")
        if not isinstance(self._transport, _Channel) or self._reader is None:
            raise TypeError(f"transport {self._transport!r} is not supported by start_tls()")
        _tls.client_context(sslcontext, None, server_hostname or "", ssl_handshake_timeout,
                            ssl_shutdown_timeout, func="start_tls")
        await self.drain()
        await _secure(self._reader, self, sslcontext, self._server_side, server_hostname,
                      ssl_handshake_timeout, ssl_shutdown_timeout)


# ------------------------------------------------------------ constructors
def _socket_extra(sock: socket.socket) -> dict[str, Any]:
    extra: dict[str, Any] = {"socket": sock}
    try:
        extra["sockname"] = sock.getsockname()
    except OSError:
        extra["sockname"] = None
    try:
        extra["peername"] = sock.getpeername()
    except OSError:
        extra["peername"] = None
    return extra


def _set_nodelay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def _streams_for(sock: socket.socket, limit: int,
                 loop: asyncio.AbstractEventLoop) -> tuple[StreamReader, StreamWriter]:
    sock.setblocking(False)
    _set_nodelay(sock)
    channel = _Channel(loop, sock.fileno(), sock, is_socket=True, readable=True, writable=True,
                       extra=_socket_extra(sock))
    reader = StreamReader(limit=limit, loop=loop)
    reader._attach(channel)
    return reader, StreamWriter(channel, reader, loop)


def _check_given_socket(sock: socket.socket, host: Any, port: Any) -> None:
    # The loop's checks and messages for a socket passed as sock=.
    if host is not None or port is not None:
        raise ValueError("host/port and sock can not be specified at the same time")
    check_socket(sock)
    if sock.type != socket.SOCK_STREAM:
        raise ValueError(f"A Stream Socket was expected, got {sock!r}")


def _check_port(port: Any, func: str) -> None:
    """What asyncio's loop raises for a bad port, whatever the loop's getaddrinfo
    would do (uvloop's raises TypeError; libc's wraps 70000 around to 4464)."""
    if isinstance(port, int):
        if not 0 <= port <= 65535:
            raise OverflowError(f"{func}(): port must be 0-65535.")
    elif port is not None and not isinstance(port, (str, bytes)):
        raise OSError("Int or String expected")


def _check_limit(limit: int) -> None:
    if limit <= 0:  # asyncio.StreamReader's check, made before anything connects
        raise ValueError("Limit cannot be <= 0")


# ------------------------------------------------------------- the TLS seam
async def _secure(reader: StreamReader, writer: StreamWriter, context: Any, server_side: bool,
                  server_hostname: str | None, handshake_timeout: float | None,
                  shutdown_timeout: float | None) -> None:
    """Put a TLS layer between the channel under `writer` and the program:
    after the handshake, `reader` decrypts through it and `writer` writes to it.
    The channel's data goes to a plain reader of the layer's own."""
    from . import _tls
    channel = writer._transport
    raw_reader = StreamReader(loop=channel._loop)
    raw_reader._attach(channel)
    layer = _tls.TLSLayer(channel._loop, channel, raw_reader, context, server_side=server_side,
                          server_hostname=server_hostname, handshake_timeout=handshake_timeout,
                          shutdown_timeout=shutdown_timeout)
    await layer.handshake()
    layer.attach(reader)
    reader._channel = reader._rx = None
    reader._tls = layer.receiver
    writer._transport = layer
    writer._queue = sender = layer.sender
    writer.write = sender.write  # type: ignore[method-assign]
    writer.drain = sender.drain  # type: ignore[method-assign]


def _client_tls(ssl: Any, host: Any, server_hostname: str | None, handshake_timeout: float | None,
                shutdown_timeout: float | None, **how: Any) -> tuple[Any, str | None]:
    """(context or None, name to verify): the TLS arguments of a connection, checked."""
    if not ssl and server_hostname is None and handshake_timeout is shutdown_timeout is None:
        return None, None
    from . import _tls
    return _tls.client_context(ssl, host, server_hostname, handshake_timeout, shutdown_timeout, **how)


def _server_tls(ssl: Any, handshake_timeout: float | None, shutdown_timeout: float | None,
                func: str = "create_server") -> Any:
    """The context of a TLS server (None: plain), its TLS arguments checked."""
    if ssl is None and handshake_timeout is shutdown_timeout is None:
        return None
    from . import _tls
    return _tls.server_context(ssl, handshake_timeout, shutdown_timeout, func)


async def _tls_streams(sock: socket.socket, limit: int, loop: asyncio.AbstractEventLoop,
                       context: Any, server_hostname: str | None, handshake_timeout: float | None,
                       shutdown_timeout: float | None) -> tuple[StreamReader, StreamWriter]:
    """The streams of a connected socket, over TLS when `context` is given."""
    reader, writer = _streams_for(sock, limit, loop)
    if context is not None:
        await _secure(reader, writer, context, False, server_hostname, handshake_timeout,
                      shutdown_timeout)
    return reader, writer


async def open_connection(host: str | None = None, port: int | str | None = None, *,
                          limit: int = _DEFAULT_LIMIT, ssl: Any = None, family: int = 0,
                          proto: int = 0, flags: int = 0, sock: socket.socket | None = None,
                          local_addr: tuple[str, int] | None = None,
                          server_hostname: str | None = None,
                          ssl_handshake_timeout: float | None = None,
                          ssl_shutdown_timeout: float | None = None,
                          happy_eyeballs_delay: float | None = None, interleave: int | None = None,
                          all_errors: bool = False) -> tuple[StreamReader, StreamWriter]:
    """asyncio.open_connection over the ring: (reader, writer).

    Tries each address getaddrinfo gives, as loop.create_connection does: one
    after the other, or with happy_eyeballs_delay, raced (RFC 8305) as
    asyncio.staggered races them, the next attempt starting after the delay
    or when the one before fails, the first connection winning and the
    others closed; interleave reorders the addresses by family first.

    Raises what asyncio.open_connection raises.  With `ssl` (an ssl.SSLContext,
    or True for ssl.create_default_context()), the connection is TLS, as
    asyncio's: ValueError for TLS arguments without ssl (or no name to
    verify), ssl.SSLCertVerificationError for a certificate that fails
    verification, ConnectionAbortedError when the handshake takes longer than
    ssl_handshake_timeout (60 s), and ConnectionResetError when the peer
    closes during it."""
    _check_limit(limit)
    context, server_hostname = _client_tls(ssl, host, server_hostname, ssl_handshake_timeout,
                                           ssl_shutdown_timeout)
    tls = (context, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout)
    loop = asyncio.get_running_loop()
    if sock is not None:
        _check_given_socket(sock, host, port)
        return await _tls_streams(sock, limit, loop, *tls)
    if host is None and port is None:
        raise ValueError("host and port was not specified and no sock specified")
    _check_port(port, "connect")
    infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM, proto=proto,
                                   flags=flags)
    if not infos:
        raise OSError("getaddrinfo() returned empty list")
    local_infos = None
    if local_addr is not None:
        local_infos = await loop.getaddrinfo(*local_addr, family=family, type=socket.SOCK_STREAM,
                                             proto=proto, flags=flags)
        if not local_infos:
            raise OSError("getaddrinfo() returned empty list")
    if happy_eyeballs_delay is not None and interleave is None:
        interleave = 1
    if interleave:
        infos = _interleave(infos, interleave)
    errors: list[list[OSError]] = []
    conn: socket.socket | None = None
    attempts = (functools.partial(_attempt, info, local_infos, errors) for info in infos)
    if happy_eyeballs_delay is None:
        for attempt in attempts:
            with contextlib.suppress(OSError):
                conn = await attempt()
                break
    else:
        conn = (await staggered.staggered_race(attempts, happy_eyeballs_delay, loop=loop))[0]
    if conn is not None:
        return await _tls_streams(conn, limit, loop, *tls)
    exceptions = [exc for attempt_errors in errors for exc in attempt_errors]
    if all_errors and sys.version_info >= (3, 11):
        raise ExceptionGroup("create_connection failed", exceptions)  # noqa: F821
    if len(exceptions) == 1:
        raise exceptions[0]
    if exceptions and all(str(exc) == str(exceptions[0]) for exc in exceptions):
        raise exceptions[0]
    raise OSError("Multiple exceptions: {}".format(", ".join(str(exc) for exc in exceptions)))


def _interleave(infos: list[Any], first_family_count: int) -> list[Any]:
    """getaddrinfo's addresses taking turns by family, as loop.create_connection
    orders them for `interleave`: `first_family_count` of the first family,
    then one of each family in turn."""
    by_family: dict[int, list[Any]] = {}
    for info in infos:
        by_family.setdefault(info[0], []).append(info)
    queues = list(by_family.values())
    ordered = queues[0][:first_family_count - 1]
    del queues[0][:first_family_count - 1]
    for turn in itertools.zip_longest(*queues):
        ordered.extend(info for info in turn if info is not None)
    return ordered


async def _attempt(info: Any, local_infos: list[Any] | None,
                   errors: list[list[OSError]]) -> socket.socket:
    """One connection attempt of open_connection: the connected socket, or
    the OSError (its errors, binding ones too, also go into `errors`, in the
    order the attempts started, as loop.create_connection collects them)."""
    fam, type_, pro, _, address = info
    mine: list[OSError] = []
    errors.append(mine)
    conn = socket.socket(fam, type_, pro)
    try:
        conn.setblocking(False)
        if local_infos is not None:
            _bind_local(conn, fam, local_infos, mine)
        await sock_connect(conn, address)
    except OSError as exc:
        conn.close()
        mine.append(exc)
        raise
    except BaseException:
        conn.close()
        raise
    return conn


def _bind_local(conn: socket.socket, fam: int, local_infos: list[Any], mine: list[OSError]) -> None:
    """Bind `conn` to the first local address of its family that binds."""
    for lfam, _, _, _, laddr in local_infos:
        if lfam != fam:
            continue
        try:
            conn.bind(laddr)
            return
        except OSError as exc:
            mine.append(OSError(exc.errno, f"error while attempting to bind on "
                                f"address {laddr!r}: {(exc.strerror or str(exc)).lower()}"))
    if not mine:
        raise OSError(f"no matching local address with family={fam!r} found")
    raise mine.pop()


async def open_unix_connection(path: str | bytes | os.PathLike[str] | None = None, *,
                               limit: int = _DEFAULT_LIMIT, ssl: Any = None,
                               sock: socket.socket | None = None,
                               server_hostname: str | None = None,
                               ssl_handshake_timeout: float | None = None,
                               ssl_shutdown_timeout: float | None = None,
                               ) -> tuple[StreamReader, StreamWriter]:
    """asyncio.open_unix_connection over the ring: (reader, writer); TLS with
    `ssl`, as open_connection's (server_hostname is then required).

    Raises what asyncio.open_unix_connection raises."""
    _check_limit(limit)
    context, server_hostname = _client_tls(ssl, None, server_hostname, ssl_handshake_timeout,
                                           ssl_shutdown_timeout, unix=True, func="create_unix_connection")
    tls = (context, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout)
    loop = asyncio.get_running_loop()
    if sock is not None:
        if path is not None:
            raise ValueError("path and sock can not be specified at the same time")
        check_socket(sock)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
        return await _tls_streams(sock, limit, loop, *tls)
    if path is None:
        raise ValueError("no path and sock were specified")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
    try:
        conn.setblocking(False)
        await sock_connect(conn, os.fspath(path))
    except BaseException:
        conn.close()
        raise
    return await _tls_streams(conn, limit, loop, *tls)


# ------------------------------------------------------------------ server
_HOLD_WRITERS = sys.version_info < (3, 13)  # (see Server._held)


class _Acceptor:
    """The accepts of one listening socket: one ring op, started again after
    each connection, whose CQE comes straight here (the ring's sink), as
    asyncio's loop accepts from a reader callback: no task, so a server
    closed as its loop ends leaves nothing pending behind."""

    def __init__(self, server: Server, listener: socket.socket) -> None:
        self._server = server
        self._listener = listener
        self._loop = server._loop
        self._ring = get_ring(self._loop)
        fd = listener.fileno()
        self._request = AcceptRequest(fd)  # (the op's memory: held as long as the acceptor)
        self._poll_args = (fd, _POLLIN)
        op = self._op = Op(None, prep_accept, self._request.args, None, None, 0)
        op.unbounded = True
        op.sink = self._accepted
        # A kernel that hands a non-blocking listener's EAGAIN back: the op
        # polls for a connection first, then accepts.
        self._polling = False
        self._stopped = False
        self._failed = 0  # accepts that failed in a row (see _accepted)
        self._later: asyncio.Handle | None = None

    def accept(self) -> None:
        self._later = None
        if self._stopped:
            return
        op = self._op
        if self._polling:
            op.prep, op.args = prep_poll, self._poll_args
        else:
            self._request.reset()
            op.prep, op.args = prep_accept, self._request.args
        try:
            self._ring.restart(self._loop, op)
        except RuntimeError:  # the loop's ring is closed: the loop is ending
            self._stopped = True

    def stop(self) -> None:
        """The server closed: accept no more (the listener was shut down)."""
        self._stopped = True
        if self._later is not None:
            self._later.cancel()
            self._later = None
        if self._op.state != _OP_DONE:
            self._ring.cancel(self._op)

    def _accepted(self, res: int) -> None:
        """The CQE of the accept, or of its poll (the ring's sink)."""
        if self._polling and res >= 0:
            self._polling = False
            self._later = self._loop.call_soon(self.accept)
            return
        self._polling = False
        if res >= 0:
            self._failed = 0
            conn = socket.socket(self._listener.family, self._listener.type, self._listener.proto, fileno=res)
            if self._stopped:
                conn.close()  # accepted as the server closed: refused, as from the backlog
                return
            conn.setblocking(False)
            self._server._connected(conn)
            # The next accept from the loop, not from inside this completion
            # (where a backlog of connections would recurse).
            self._later = self._loop.call_soon(self.accept)
            return
        if self._stopped or res == -_ECANCELED:
            self._stopped = True  # closed, or its loop's ring closing
            return
        exc = os_error(res)
        if isinstance(exc, (ConnectionAbortedError, BlockingIOError, InterruptedError)):
            self._polling = isinstance(exc, BlockingIOError)
            self._later = self._loop.call_soon(self.accept)
            return
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            # As asyncio: out of fds or memory; say so and retry in a second.
            self._loop.call_exception_handler({
                "message": "socket.accept() out of system resource", "exception": exc,
                "socket": self._listener})
            self._later = self._loop.call_later(1, self.accept)
            return
        # Any other error of one accept (EPROTO, EPERM from a firewall hook):
        # asyncio's loop logs it and goes on listening.  (An error that comes
        # back at every try would spin: wait longer each time, up to 1 s.)
        self._loop.call_exception_handler({
            "message": "Error accepting a connection", "exception": exc, "socket": self._listener})
        delay = min(1.0, 0.001 * (1 << min(self._failed, 10))) if self._failed else 0
        self._failed += 1
        self._later = self._loop.call_later(delay, self.accept)


ClientConnected = Callable[[StreamReader, StreamWriter], Awaitable[None] | None]


class Server:
    """asyncio.Server's interface for a ring server: close, wait_closed,
    serve_forever, start_serving, is_serving, sockets, async with."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket],
                 callback: ClientConnected, limit: int, backlog: int,
                 unix_path: tuple[str | bytes, int] | None = None,
                 tls: tuple[Any, ...] | None = None) -> None:
        self._loop = loop
        self._tls = tls  # (context, handshake timeout, shutdown timeout) of a TLS server
        self._sockets = sockets
        self._callback = callback
        self._limit = limit
        self._backlog = backlog
        self._unix_path = unix_path
        self._accepters: list[_Acceptor] = []
        self._serving = False
        self._closed = False
        self._serving_forever: asyncio.Future[None] | None = None
        self._channels: set[_Channel] = set()  # the connections accepted, until closed
        # Before 3.13 asyncio's protocol keeps each connection's writer until
        # the connection closes; from 3.13 on a writer the handler dropped is
        # collected, and closes its connection with a ResourceWarning.
        self._held: dict[_Channel, StreamWriter] = {}
        self._writers: weakref.WeakValueDictionary[_Channel, StreamWriter] = weakref.WeakValueDictionary()
        self._handlers: dict[asyncio.Task[Any], _Channel] = {}  # each running handler's connection
        self._all_closed = False
        self._closed_waiters: list[asyncio.Future[None]] = []  # wait_closed() callers
        self._listeners_closed = False

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} sockets={self.sockets!r}>"

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """asyncio.Server.sockets, of the wrapped object."""
        return () if self._closed else tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """As asyncio.Server.get_loop: the same arguments, result and exceptions."""
        return self._loop

    def is_serving(self) -> bool:
        """As asyncio.Server.is_serving: the same arguments, result and exceptions."""
        return self._serving

    async def start_serving(self) -> None:
        """asyncio.Server.start_serving, awaited: the same arguments, result and exceptions."""
        self._start()
        await asyncio.sleep(0)  # as asyncio's: the accept loops are running on return

    def _start(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            acceptor = _Acceptor(self, sock)
            self._accepters.append(acceptor)
            acceptor.accept()

    def _connected(self, conn: socket.socket) -> None:
        reader, writer = _streams_for(conn, self._limit, self._loop)
        writer._server_side = True
        channel = writer._transport
        self._channels.add(channel)
        self._writers[channel] = writer
        if _HOLD_WRITERS:
            self._held[channel] = writer
        channel._on_closed = self._forget
        if self._tls is not None:
            self._handle(self._secured(reader, writer), channel)
            return
        try:
            res = self._callback(reader, writer)
        except Exception as exc:
            self._report(exc, channel)
            return
        if asyncio.iscoroutine(res):
            self._handle(res, channel)

    def _handle(self, coro: Any, channel: _Channel) -> None:
        task = self._loop.create_task(coro)
        self._handlers[task] = channel
        task.add_done_callback(self._handler_done)

    async def _secured(self, reader: StreamReader, writer: StreamWriter) -> None:
        """A TLS server's connection: the handshake, then the callback.  A
        handshake that fails closes the connection quietly, as asyncio's server."""
        assert self._tls is not None
        context, handshake_timeout, shutdown_timeout = self._tls
        try:
            await _secure(reader, writer, context, True, None, handshake_timeout, shutdown_timeout)
        except OSError:
            return
        res = self._callback(reader, writer)
        if asyncio.iscoroutine(res):
            await res

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        channel = self._handlers.pop(task)
        if task.cancelled():
            self._close_connection(channel)
            return
        exc = task.exception()
        if exc is not None:
            self._report(exc, channel)

    def _report(self, exc: BaseException, channel: _Channel) -> None:
        # asyncio's StreamReaderProtocol says this and closes the transport.
        self._loop.call_exception_handler({
            "message": "Unhandled exception in client_connected_cb",
            "exception": exc, "transport": channel})
        self._close_connection(channel)

    def _close_connection(self, channel: _Channel) -> None:
        """Close through the writer while it lives (a TLS writer says close_notify first)."""
        writer = self._writers.get(channel)
        writer.close() if writer is not None else channel.close()

    def _forget(self, channel: _Channel) -> None:
        self._channels.discard(channel)
        self._held.pop(channel, None)
        self._check_all_closed()

    def _check_all_closed(self) -> None:
        if self._closed and self._listeners_closed and not self._channels \
                and not self._all_closed:
            self._all_closed = True
            waiters, self._closed_waiters = self._closed_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def close(self) -> None:
        """Stop listening at once and close the listening sockets; the
        connections accepted so far stay open."""
        if self._closed:
            return
        self._closed = True
        self._serving = False
        listeners = list(self._sockets)
        for sock in listeners:
            # A listener that an ACCEPT in flight still holds would go on
            # taking connections until that ends: shut it down now.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._remove_unix_path()
        accepters, self._accepters = self._accepters, []
        for acceptor in accepters:
            acceptor.stop()
        # Closed now, as asyncio's: an accept still in flight holds the
        # listener's file, not its fd, and ends at the shutdown above.
        for sock in listeners:
            sock.close()
        self._listeners_closed = True
        self._check_all_closed()
        if self._serving_forever is not None and not self._serving_forever.done():
            self._serving_forever.cancel()

    def _remove_unix_path(self) -> None:
        """Remove the listener's socket file, as 3.13's asyncio: only if it is
        still the one the server listened on (not replaced meanwhile)."""
        if self._unix_path is None:
            return
        path, inode = self._unix_path
        self._unix_path = None
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass

    def close_clients(self) -> None:
        """As asyncio.Server.close_clients: the same arguments, result and exceptions."""
        for channel in list(self._channels):
            self._close_connection(channel)

    def abort_clients(self) -> None:
        """As asyncio.Server.abort_clients: the same arguments, result and exceptions."""
        for channel in list(self._channels):
            writer = self._writers.get(channel)
            writer.transport.abort() if writer is not None else channel.abort()

    async def wait_closed(self) -> None:
        """Wait until the server is closed and every connection it accepted is
        closed (called before close(), it waits for close() too, as asyncio's)."""
        if self._all_closed:
            return
        fut = self._loop.create_future()
        self._closed_waiters.append(fut)
        await fut

    async def serve_forever(self) -> None:
        """asyncio.Server.serve_forever, awaited: the same arguments, result and exceptions."""
        if self._serving_forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        self._start()
        self._serving_forever = self._loop.create_future()
        try:
            await self._serving_forever
        except asyncio.CancelledError:
            try:
                self.close()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever = None

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.close()
        await self.wait_closed()


async def start_server(client_connected_cb: ClientConnected, host: Any = None,
                       port: int | str | None = None, *, limit: int = _DEFAULT_LIMIT,
                       family: int = socket.AF_UNSPEC, flags: int = socket.AI_PASSIVE,
                       sock: socket.socket | None = None, backlog: int = 100, ssl: Any = None,
                       reuse_address: bool | None = None, reuse_port: bool | None = None,
                       start_serving: bool = True, keep_alive: bool | None = None,
                       ssl_handshake_timeout: float | None = None,
                       ssl_shutdown_timeout: float | None = None) -> Server:
    """asyncio.start_server over the ring: a Server whose connections get
    (StreamReader, StreamWriter) pairs; `client_connected_cb` may be a coroutine function.

    Raises what asyncio.start_server raises.  With `ssl` (an ssl.SSLContext;
    TypeError for a bool), each connection is TLS and the callback runs after
    its handshake, as asyncio's; a handshake that fails or takes longer than
    ssl_handshake_timeout closes the connection without calling it."""
    _check_limit(limit)
    context = _server_tls(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
    tls = None if context is None else (context, ssl_handshake_timeout, ssl_shutdown_timeout)
    loop = asyncio.get_running_loop()
    if sock is not None:
        _check_given_socket(sock, host, port)
        sockets = [sock]
    else:
        sockets = await _listeners(loop, host, port, family, flags, reuse_address, reuse_port)
    for s in sockets:
        s.setblocking(False)
        if keep_alive:  # 3.13's option: accepted sockets inherit it
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
    server = Server(loop, sockets, client_connected_cb, limit, backlog, tls=tls)
    if start_serving:
        server._start()
        await asyncio.sleep(0)
    return server


async def _listeners(loop: asyncio.AbstractEventLoop, host: Any, port: Any, family: int, flags: int,
                     reuse_address: bool | None, reuse_port: bool | None) -> list[socket.socket]:
    # As loop.create_server: every address of every host, SO_REUSEADDR on
    # by default, IPV6_V6ONLY on IPv6 sockets, duplicates skipped.
    if host == "":
        hosts: list[Any] = [None]
    elif isinstance(host, str) or not isinstance(host, Iterable):
        hosts = [host]
    else:
        hosts = list(host)
    _check_port(port, "bind")
    infos = set()
    for h in hosts:
        found = await loop.getaddrinfo(h, port, family=family, type=socket.SOCK_STREAM, flags=flags)
        if not found:
            raise OSError(f"getaddrinfo({h!r}) returned empty list")
        infos.update(found)
    if reuse_address is None:
        reuse_address = os.name == "posix" and sys.platform != "cygwin"
    sockets: list[socket.socket] = []
    try:
        for af, type_, proto, _, address in sorted(infos, key=lambda i: (i[0], str(i[4]))):
            try:
                s = socket.socket(af, type_, proto)
            except OSError:
                continue  # an address family this host lacks
            sockets.append(s)
            if reuse_address:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
            if reuse_port:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, True)
            if af == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
            try:
                s.bind(address)
            except OSError as err:
                reason = (err.strerror or str(err)).lower()
                msg = f"error while attempting to bind on address {address!r}: {reason}"
                raise OSError(err.errno, msg) from None
    except BaseException:
        for s in sockets:
            s.close()
        raise
    return sockets


async def start_unix_server(client_connected_cb: ClientConnected,
                            path: str | bytes | os.PathLike[str] | None = None, *,
                            limit: int = _DEFAULT_LIMIT, sock: socket.socket | None = None,
                            backlog: int = 100, ssl: Any = None, start_serving: bool = True,
                            cleanup_socket: bool = True,
                            ssl_handshake_timeout: float | None = None,
                            ssl_shutdown_timeout: float | None = None) -> Server:
    """asyncio.start_unix_server over the ring.  A stale socket file at `path`
    is replaced, and the file is removed when the server closes, as in 3.13.
    TLS with `ssl`, as start_server's.

    Raises what asyncio.start_unix_server raises."""
    _check_limit(limit)
    context = _server_tls(ssl, ssl_handshake_timeout, ssl_shutdown_timeout, "create_unix_server")
    tls = None if context is None else (context, ssl_handshake_timeout, ssl_shutdown_timeout)
    loop = asyncio.get_running_loop()
    if path is not None:
        if sock is not None:
            raise ValueError("path and sock can not be specified at the same time")
        path = os.fspath(path)
        if path and path[0] not in (0, "\x00"):
            try:
                if stat.S_ISSOCK(os.stat(path).st_mode):
                    os.remove(path)
            except FileNotFoundError:
                pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
            raise
    elif sock is None:
        raise ValueError("path was not specified, and no sock specified")
    else:
        check_socket(sock)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
    unix_path = None
    bound = sock.getsockname()
    if cleanup_socket and bound and bound[0] not in (0, "\x00"):
        # The file it is bound to goes when the server closes, as in 3.13,
        # unless another has replaced it meanwhile.
        try:
            unix_path = (bound, os.stat(bound).st_ino)
        except FileNotFoundError:
            pass
    sock.setblocking(False)
    server = Server(loop, [sock], client_connected_cb, limit, backlog, unix_path, tls=tls)
    if start_serving:
        server._start()
        await asyncio.sleep(0)
    return server


# ------------------------------------------------------------------- pipes
def _pipe_fd(pipe: Any) -> tuple[int, Any]:
    if isinstance(pipe, int):
        return check_fd(pipe), pipe
    try:
        fd = pipe.fileno()
    except AttributeError:
        raise TypeError(f"a pipe must be a file object or an fd, not {type(pipe).__name__}") from None
    return check_fd(fd), pipe


def _check_pipe(fd: int) -> None:
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        raise ValueError("Pipe transport is only for pipes, sockets and character devices")


async def open_pipe_reader(pipe: Any, *, limit: int = _DEFAULT_LIMIT) -> StreamReader:
    """A StreamReader on the read end of a pipe (a file object or an fd).

    The reader owns the pipe from here on: closing it (feed_eof at EOF does
    not) is done by its channel, reachable as ``reader._channel``, or when
    the reader is garbage; a subprocess's stdout works as is.

    Raises TypeError for neither a file object nor an fd, ValueError (as
    asyncio's pipe transports) for an fd that is not a pipe, socket or
    character device, OSError (EBADF) for a closed one."""
    _check_limit(limit)
    loop = asyncio.get_running_loop()
    fd, owner = _pipe_fd(pipe)
    _check_pipe(fd)
    channel = _Channel(loop, fd, owner, is_socket=False, readable=True, writable=False,
                       extra={"pipe": pipe})
    reader = StreamReader(limit=limit, loop=loop)
    reader._attach(channel)
    return reader


async def open_pipe_writer(pipe: Any) -> StreamWriter:
    """A StreamWriter on the write end of a pipe (a file object or an fd);
    it owns the pipe: close() (or write_eof()) closes it once the data is out.

    Raises TypeError for neither a file object nor an fd, ValueError (as
    asyncio's pipe transports) for an fd that is not a pipe, socket or
    character device, OSError (EBADF) for a closed one."""
    loop = asyncio.get_running_loop()
    fd, owner = _pipe_fd(pipe)
    _check_pipe(fd)
    channel = _Channel(loop, fd, owner, is_socket=False, readable=False, writable=True,
                       extra={"pipe": pipe})
    return StreamWriter(channel, None, loop)
