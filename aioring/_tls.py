"""L4, over the streams: TLS for aioring's streams, as asyncio's sslproto gives it.

The ring carries ciphertext.  An ``ssl.SSLObject`` between two
``ssl.MemoryBIO`` objects turns it into plaintext and back, and nothing of
it blocks: the TLS library reads records from the incoming BIO and writes
records to the outgoing one, and says ``SSLWantReadError`` when it needs
bytes that have not come yet.

The layer meets the plain stream at one seam, and uses nothing else of it:

* ciphertext in: a plain ``StreamReader`` on the channel, its ``_buffer``,
  its ``_waiter`` (asyncio's own reader state) and, for the handshake and
  the shutdown, its ``_wait_for_data()``; once wrapped, the layer's own
  waiter stands in that reader's ``_waiter`` and the channel's receiver's
  ``arm()`` keeps a receive into the buffer out (``_armed`` while out, held
  back while ``_paused``), whose completion hands the bytes to the layer;
* ciphertext out: the channel's send queue (``_tx``, read directly: its
  writes are the hot path): its ``write()``, ``send()`` to hand a large
  write's slices to the kernel as they are encrypted (the peer decrypts one
  while this side encrypts the next), ``_send_now()`` for the small writes
  encrypted at the flush of the ring's ``defer()``, and its state
  (``_pending_size``, ``_high``, ``_write_exc``); the channel's ``drain()``;
* the end: the channel's ``close()``, ``abort()``, ``wait_closed()``,
  ``_fail()`` (an error wait_closed() raises), ``_closing``, ``_closed`` and
  ``_closed_future``.

Towards the program the layer is the transport of the ``StreamWriter``
(``write``, ``drain``, ``close``, ``get_extra_info`` ...) and the source of
the ``StreamReader``'s data.  ``TLSLayer`` makes the handshake and the
shutdown and answers the transport's calls; its two sides are
``TLSReceiver``, the plaintext that comes (the target of the channel's
receive, and the reader's reads), and ``TLSSender``, the plaintext that
goes (the writer's ``write``, ``drain`` and send queue), as the plain
channel's are its receiver and its send queue.  As asyncio's TLS transport, it reads all the
time: a receive is kept out, and what it brings is decrypted as its
completion comes in, within the ring's harvest, without waking a task.  A
read that waits does so on one future, which that completion resolves only
once the read has what it waits for: the bytes a ``readexactly`` or a small
``readinto_exactly`` needs in the reader's buffer, or, for reads of a
record's size or more (``readinto``, ``readinto_exactly``), plaintext
decrypted straight into the caller's buffer (``SSLObject.read(n, buffer)``).
A read whose bytes are there already returns without waiting.  The TLS
library is asked for plaintext only when it holds some: an
``SSLWantReadError`` costs more than decrypting a small record.

While nobody reads, what comes is decrypted into the reader's buffer until
that holds more than twice the reader's limit (reading resumes once it is
down to the limit, asyncio's flow control), so a peer's close_notify is
answered at once; ``pause_reading()`` stops all of it until
``resume_reading()``.  An error found there (a bad record, the socket's)
is handed to the loop, and the reader raises it.

Decrypting is synchronous, so a read cancelled while it waits loses
nothing: what the receive brought is in the reader's buffer (or still in the
incoming BIO), and a cancelled read into the caller's buffer puts what it
decrypted there back in front of the reader's buffer.

What asyncio does, and so this layer: a handshake that takes longer than
``ssl_handshake_timeout`` ends in ``ConnectionAbortedError``; a peer that
closes during the handshake, in ``ConnectionResetError``; a certificate that
fails verification, in ``ssl.SSLCertVerificationError``.  A peer that
closes without close_notify ends the stream as EOF; a close_notify ends it as
EOF too, and is answered with one.  ``close()`` sends close_notify and waits
up to ``ssl_shutdown_timeout`` for the peer's before it closes the socket
(``wait_closed()`` then raises ``TimeoutError`` on Python 3.11 and later,
whose asyncio has that timeout).  TLS has no half-close: ``write_eof()``
raises ``NotImplementedError``.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._streams import StreamReader, _Channel

__all__ = ["TLSLayer", "TLSReceiver", "TLSSender", "client_context", "server_context"]

HANDSHAKE_TIMEOUT = 60.0  # asyncio's constants.SSL_HANDSHAKE_TIMEOUT
SHUTDOWN_TIMEOUT = 30.0  # asyncio's constants.SSL_SHUTDOWN_TIMEOUT
# The most plaintext a TLS record carries.  A read of less decrypts whole
# records into the reader's buffer (one call each, where a header and the
# payload after it often share one) and copies from there; larger reads
# decrypt straight into the caller's buffer.
_RECORD = 16 * 1024
# A larger write is encrypted and handed to the kernel in slices of this much.
_SLICE = 128 * 1024
_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)
_HAS_SHUTDOWN_TIMEOUT = sys.version_info >= (3, 11)


def _check_shutdown_timeout(func: str, shutdown: float | None) -> None:
    if shutdown is not None and not _HAS_SHUTDOWN_TIMEOUT:  # (asyncio's before 3.11 has none)
        raise TypeError(f"{func}() got an unexpected keyword argument 'ssl_shutdown_timeout'")


def _check_timeouts(handshake: float | None, shutdown: float | None) -> None:
    for name, value in (("ssl_handshake_timeout", handshake), ("ssl_shutdown_timeout", shutdown)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} should be a positive number, got {value}")


def _only_with_ssl(**ssl_only: Any) -> None:
    for name, value in ssl_only.items():
        if value is not None:
            raise ValueError(f"{name} is only meaningful with ssl")


def client_context(ssl_arg: Any, host: Any, server_hostname: str | None, handshake_timeout: float | None,
                   shutdown_timeout: float | None, *, unix: bool = False,
                   func: str = "create_connection") -> tuple[ssl.SSLContext | None, str | None]:
    """The checks of loop.create_connection (create_unix_connection with
    `unix`) for its TLS arguments, made before anything connects:
    (the context or None for plain TCP, the name to verify)."""
    _check_shutdown_timeout(func, shutdown_timeout)
    if not ssl_arg:
        _only_with_ssl(server_hostname=server_hostname, ssl_handshake_timeout=handshake_timeout,
                       ssl_shutdown_timeout=shutdown_timeout)
        return None, None
    if server_hostname is None:
        if unix:
            raise ValueError("you have to pass server_hostname when using ssl")
        if not host:
            raise ValueError("You must set server_hostname when using ssl without a host")
        server_hostname = host
    _check_timeouts(handshake_timeout, shutdown_timeout)
    if isinstance(ssl_arg, ssl.SSLContext):
        return ssl_arg, server_hostname or None
    # ssl=True: asyncio's default client context.
    context = ssl.create_default_context()
    if not server_hostname:
        context.check_hostname = False
    return context, server_hostname or None


def server_context(ssl_arg: Any, handshake_timeout: float | None, shutdown_timeout: float | None,
                   func: str = "create_server") -> ssl.SSLContext | None:
    """The checks of loop.create_server for its TLS arguments: the context or None."""
    _check_shutdown_timeout(func, shutdown_timeout)
    if isinstance(ssl_arg, bool):
        raise TypeError("ssl argument must be an SSLContext or None")
    if ssl_arg is None:
        _only_with_ssl(ssl_handshake_timeout=handshake_timeout, ssl_shutdown_timeout=shutdown_timeout)
        return None
    _check_timeouts(handshake_timeout, shutdown_timeout)
    if not isinstance(ssl_arg, ssl.SSLContext):
        raise ValueError("Server side SSL needs a valid SSLContext")
    return ssl_arg


class TLSLayer:
    """The TLS state of one connection, and the transport of its StreamWriter.

    `raw` is the plain channel (its fd, its sends) and `raw_reader` a plain
    StreamReader on it, both owned by the layer from here on.  The layer
    makes the handshake and the shutdown and answers the transport's calls;
    the plaintext that comes is its `receiver`'s (the StreamReader's part),
    the plaintext that goes its `sender`'s (the StreamWriter's send queue)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, raw: _Channel, raw_reader: StreamReader,
                 context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None,
                 handshake_timeout: float | None, shutdown_timeout: float | None) -> None:
        self._loop = loop
        self._raw = raw
        self._tx = raw._tx  # its send queue
        self._raw_reader = raw_reader
        raw._rx._eager = True  # (it reads all the time: a completion starts the next receive at once)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._sslobj = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                        server_hostname=server_hostname)
        # The hot path calls the C object that ssl.SSLObject's read, write and
        # pending forward to, without the forwarding.
        self._obj: Any = getattr(self._sslobj, "_sslobj", self._sslobj)
        self._handshake_timeout = HANDSHAKE_TIMEOUT if handshake_timeout is None else handshake_timeout
        self._shutdown_timeout = SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout
        self._extra: dict[str, Any] = {"sslcontext": context}
        self._wrapped = False  # the handshake completed
        self._closing = False
        self._raw_eof = False  # the peer closed its end (no more ciphertext)
        self._notified = False  # the peer's close_notify came
        self._timed_out: BaseException | None = None  # what the handshake or shutdown timer found
        self._timer: asyncio.TimerHandle | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._reader: StreamReader | None = None  # the program's reader, once wrapped
        self.receiver = TLSReceiver(self)
        self.sender = TLSSender(self)

    # ------------------------------------------------------------ ciphertext
    def _flush(self) -> None:
        """Send what the TLS library wrote to the outgoing BIO."""
        if self._outgoing.pending:
            data = self._outgoing.read()
            try:
                self._tx.write(data)
            except (OSError, RuntimeError):
                pass  # the connection failed already: its reader says so

    async def _more(self) -> bool:
        """The handshake's and the shutdown's read: move what the socket
        brought into the incoming BIO, all of it, waiting for it if nothing
        came yet; False at the peer's end."""
        if self._raw_eof:
            return False
        raw = self._raw_reader
        if raw._waiter is self.receiver._feed:  # type: ignore[comparison-overlap]
            raw._waiter = None  # (the receive that is out is this read's)
        buffer = raw._buffer
        if not buffer and not raw._eof:
            if raw._exception is not None:
                raise raw._exception
            await raw._wait_for_data("read")
        if not buffer:
            if raw._exception is not None:
                raise raw._exception
            self._raw_eof = True
            return False
        self._incoming.write(buffer)
        buffer.clear()
        return True

    # ------------------------------------------------------------- handshake
    async def handshake(self) -> None:
        """Complete the handshake, or close the connection and raise what asyncio
        raises: ssl.SSLError (ssl.SSLCertVerificationError for a certificate),
        ConnectionResetError for a peer that closed, ConnectionAbortedError
        after ssl_handshake_timeout, the reset or other OSError of the socket."""
        self._timer = self._loop.call_later(self._handshake_timeout, self._handshake_timed_out)
        sslobj = self._sslobj
        try:
            while True:
                try:
                    sslobj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    if not await self._more():
                        if self._timed_out is not None:
                            raise self._timed_out from None
                        raise ConnectionResetError() from None
            self._flush()
            self._extra.update(peercert=sslobj.getpeercert(), cipher=sslobj.cipher(),
                               compression=sslobj.compression(), ssl_object=sslobj)
        except BaseException as exc:
            if isinstance(exc, ssl.SSLError):
                self._flush()  # the alert that tells the peer why
                self._raw.close()
            else:
                self._raw.abort()
            if self._timed_out is not None and isinstance(exc, OSError):
                raise self._timed_out from None
            raise
        finally:
            self._timer.cancel()
            self._timer = None
        self._wrapped = True

    def _handshake_timed_out(self) -> None:
        self._timed_out = ConnectionAbortedError(
            f"SSL handshake is taking longer than {self._handshake_timeout} seconds: "
            "aborting the connection")
        self._raw.abort()  # the read in flight ends: handshake() raises the error

    def attach(self, reader: StreamReader) -> None:
        """The program's reader takes its data from this layer from now on
        (and the reader asks the layer to resume reading, as asyncio's
        reader asks its transport)."""
        self._reader = self.receiver._reader = reader
        reader._transport = self
        self._raw._closed_future.add_done_callback(self.receiver._connection_lost)
        # At this iteration's flush (once the program could pause reading),
        # what came with the handshake's end is taken in, and a receive goes out.
        self._raw._ring.defer(self.receiver._attached)

    def fail(self, exc: BaseException) -> None:
        """A TLS error or the socket's: the reader raises it from now on, and the
        connection is closed at once, as asyncio's fatal errors close it
        (wait_closed() raises it too)."""
        if isinstance(exc, OSError):
            reader = self._reader
            if reader is not None and reader._exception is None:
                reader.set_exception(exc)
            self._closing = True
            self._raw._fail(exc)

    # ------------------------------------------------------------ transport
    def write(self, data: Any) -> None:
        self.sender.write(data)

    def writelines(self, list_of_data: Any) -> None:
        write = self.sender.write
        for data in list_of_data:
            write(data)

    def write_eof(self) -> None:
        raise NotImplementedError  # TLS has no half-close, as asyncio's TLS transport says

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """ssl_object, peercert, cipher, compression and sslcontext as asyncio's
        TLS transport gives them; the rest from the socket's channel."""
        if name in self._extra:
            return self._extra[name]
        return self._raw.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()
        # What came meanwhile (also asyncio's reader's call: its buffer is down to its limit).
        self.receiver._fed()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size() + self.sender._plain_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Send close_notify after the data written so far, then wait (up to
        ssl_shutdown_timeout) for the peer's before closing the socket."""
        if self._closing:
            return
        self._closing = True
        if not self._wrapped:
            self._raw.abort()  # (as asyncio's: a close during the handshake aborts)
            return
        self.sender.seal()
        try:
            self._sslobj.unwrap()
            self._notified = True  # (the peer's came already)
        except (ssl.SSLError, ValueError):
            pass  # the usual case: ours is out, theirs is to come
        self._flush()
        self._timer = self._loop.call_later(self._shutdown_timeout, self._shutdown_timed_out)
        self._shutdown_task = self._loop.create_task(self._wait_for_close_notify())

    async def _wait_for_close_notify(self) -> None:
        try:
            while not self._notified:
                try:
                    self._sslobj.unwrap()
                    break
                except _WANT:
                    pass
                except (ssl.SSLError, ValueError):
                    break  # (the peer's data after ours, say: the shutdown ends there)
                if not await self._more():
                    break
        except (OSError, RuntimeError):
            pass  # the socket's error: it is closed anyway
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._flush()
            self._raw.close()

    def _shutdown_timed_out(self) -> None:
        self._timer = None
        if _HAS_SHUTDOWN_TIMEOUT:
            # asyncio's: the connection is lost with this error, which wait_closed() raises.
            self._timed_out = TimeoutError("SSL shutdown timed out")
            self._raw._fail(self._timed_out)
        self._raw.abort()

    def abort(self) -> None:
        """Close at once, without close_notify."""
        self._closing = True
        self.sender.discard()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._raw.abort()

    async def wait_closed(self) -> None:
        await self._raw.wait_closed()

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} raw={self._raw!r}>"


class _Side:
    """What the layer's two sides keep of it (the hot path reads them
    without going through the layer)."""

    def __init__(self, layer: TLSLayer) -> None:
        self._layer = layer
        self._loop = layer._loop
        self._raw = layer._raw
        self._obj = layer._obj  # the TLS library's object
        self._outgoing = layer._outgoing


class _Feed:
    """The raw reader's waiter once the handshake is done, for the receive
    the receiver keeps out: the channel's receive hands it the ciphertext
    that came (TLSReceiver._fed, at once, without a task); the end of the
    socket or its error reach the receiver through the loop
    (TLSReceiver._heard)."""

    __slots__ = ("_receiver",)

    def __init__(self, receiver: TLSReceiver) -> None:
        self._receiver = receiver

    def done(self) -> bool:
        return False  # (the channel hands it every receive's bytes)

    def cancelled(self) -> bool:
        return False

    def set_result(self, _: Any) -> None:
        receiver = self._receiver
        raw = receiver._raw_reader
        if raw._eof or raw._exception is not None:
            self._later()
        else:
            receiver._fed()

    def set_exception(self, _: BaseException) -> None:
        self._later()  # (the raw reader keeps it: see TLSReceiver._fill)

    def _later(self) -> None:
        try:
            self._receiver._loop.call_soon(self._receiver._heard)
        except RuntimeError:
            pass  # (the loop is closed: its ring ends the receive, nobody is left to tell)


class TLSReceiver(_Side):
    """The plaintext that comes: the receive target of the layer's channel,
    and the StreamReader's reads (its `_tls`).  Decrypted as the ciphertext
    comes, into the reader's buffer or straight into the buffer of a read
    that waits (see the module's docstring)."""

    def __init__(self, layer: TLSLayer) -> None:
        super().__init__(layer)
        self._raw_reader = layer._raw_reader
        self._incoming = layer._incoming
        self._reader: StreamReader | None = None  # the program's reader, once wrapped
        # Whether the last read may have left plaintext of its record in the
        # TLS library (it filled all it was asked for): only then is
        # pending() asked, before more ciphertext is read.
        self._held = True
        self._error: ssl.SSLError | None = None  # a bad record's, raised once what came before is read
        # Once wrapped, a receive is kept out (see _listen), whose ciphertext
        # is decrypted as it comes (see _fed): for a read that waits for
        # `_need` bytes in the reader's buffer or, reading straight into the
        # caller's buffer, for `_into[_into_done:_into_n]` to hold
        # `_into_least` bytes.
        self._feed = _Feed(self)
        self._need = 0
        self._catch_up_due = False  # _catch_up is due at the flush
        self._into: memoryview | None = None
        self._into_done = self._into_n = self._into_least = 0
        busy = layer._loop.create_future()
        busy.cancel()  # the reader's stand-in waiter while a read is out: nothing sets it
        self._busy = busy

    # --------------------------------------------------------------- the end
    def _attached(self) -> None:
        reader = self._reader
        if reader is not None and reader._waiter is None:  # (else a read took over)
            self._take_in(reader)

    def _connection_lost(self, _: Any) -> None:
        """The socket is closed: what came stays readable, then the reader is
        at EOF, or raises the error that ended the connection (a failed send,
        say), as after asyncio's connection_lost (a read that is out sees the
        end itself)."""
        reader = self._reader
        if reader is None or reader._eof or reader._exception is not None:
            return
        waiter = reader._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)  # (the read sees the end itself: see _fill)
            return
        try:
            if self._incoming.pending or self._held:
                self._decrypt(reader)
        except ssl.SSLError:
            pass  # (a bad record at the very end: the stream ends before it)
        if not reader._eof:
            self._end(reader)

    def _end(self, reader: StreamReader) -> None:
        """The reader's end without close_notify: EOF, or the error that ended
        the connection (a failed send, say), as asyncio's connection_lost gives it."""
        lost = self._raw._lost
        if lost is not None:
            reader.set_exception(lost)
        else:
            reader.feed_eof()

    def _peer_ended(self, reader: StreamReader, notified: bool) -> None:
        """The peer's close_notify, or its end of the connection without one:
        the stream ends there (EOF, or the error that ended the connection,
        raised), and the connection is shut down."""
        layer = self._layer
        layer._notified = layer._notified or notified
        if notified:
            reader.feed_eof()
        else:
            self._end(reader)
        layer.close()
        if reader._exception is not None:
            raise reader._exception

    # ------------------------------------------------------------- receiving
    def _listen(self) -> None:
        """Keep a receive out for _fed, as asyncio's TLS transport reads all
        the time (unless paused by the program: resume_reading() arms it)."""
        raw = self._raw_reader
        if raw._waiter is not self._feed:  # type: ignore[comparison-overlap]
            layer = self._layer
            if raw._waiter is not None or layer._closing or layer._raw_eof or self._reader is None:
                return
            raw._waiter = self._feed  # type: ignore[assignment]
        rx = self._raw._rx
        if not rx._armed and not raw._eof and raw._exception is None:
            try:
                rx.arm()
            except OSError:
                pass  # the channel failed: the feed has its error (see _heard)

    def _fed(self) -> None:
        """A receive brought ciphertext (the channel's sink, through the raw
        reader's waiter): decrypted at once, into the buffer of a direct read
        that waits, or the reader's buffer; the program's read is woken only
        once it has what it waits for, and the receive goes out again.  An
        error is left to the loop (the sink must not raise)."""
        reader = self._reader
        if reader is None or self._layer._closing or self._raw._rx._paused:
            return  # (the shutdown takes it; or resume_reading())
        raw = self._raw_reader
        if raw._buffer:
            self._incoming.write(raw._buffer)
            raw._buffer.clear()
        waiter = reader._waiter
        woke = False
        try:
            if waiter is None:
                self._decrypt(reader)
            elif waiter.done():
                # The woken read comes first (a read into its caller's buffer
                # takes what follows straight there); the rest at the flush.
                self._catch_up_later()
            elif self._into is None:
                self._decrypt(reader, self._need)
                woke = len(reader._buffer) >= self._need or reader._eof or self._error is not None
            else:
                done = self._into_done
                got = self._read_into(reader, self._into_n - done, self._into[done:])
                if got > 0:
                    done = self._into_done = done + got
                    woke = done >= self._into_least
            if woke:
                if not waiter.done():  # type: ignore[union-attr]
                    waiter.set_result(None)  # type: ignore[union-attr]
                if self._incoming.pending:
                    self._catch_up_later()
        except Exception as exc:
            self._loop.call_soon(self._broke, exc)
            return
        if reader._eof or self._layer._closing or self._error is not None:
            return
        if len(reader._buffer) > 2 * reader._limit and (reader._waiter is None or reader._waiter.done()):
            reader._paused = True  # asyncio's flow control: reading resumes at the reader's limit
        else:
            self._listen()

    def _catch_up_later(self) -> None:
        if not self._catch_up_due:
            self._catch_up_due = True
            self._raw._ring.defer(self._catch_up)

    def _catch_up(self) -> None:
        """At the flush after a read ended: what it left in the incoming BIO
        goes to the reader's buffer (a close_notify is answered), unless a
        read waits again (it takes it itself)."""
        self._catch_up_due = False
        reader = self._reader
        if reader is not None and reader._waiter is None:
            self._take_in(reader)

    def _broke(self, exc: BaseException) -> None:
        reader = self._reader
        if reader is not None and reader._exception is None:
            self._layer.fail(exc)

    def _heard(self) -> None:
        """The receive found the socket's end or its error: a read that
        waits sees it itself (see _fill); else the stream ends here."""
        raw = self._raw_reader
        if raw._waiter is self._feed:  # type: ignore[comparison-overlap]
            raw._waiter = None
        reader = self._reader
        if reader is None or self._layer._closing or reader._eof or reader._exception is not None:
            return
        waiter = reader._waiter
        if waiter is None:
            self._take_in(reader)
        elif not waiter.done():
            waiter.set_result(None)

    def _take_in(self, reader: StreamReader) -> None:
        """While the program does not read: what came goes to the reader's
        buffer, as asyncio's TLS transport feeds its reader, until that holds
        more than twice the reader's limit (then it resumes at the limit); a
        close_notify ends the stream and is answered; the peer's end without
        one, or the socket's error, end it as a read would."""
        if (self._layer._closing or reader._eof or reader._exception is not None or self._error is not None
                or self._raw._rx._paused):
            return  # (paused by the program: nothing is decrypted, as with asyncio's)
        try:
            self._fill(reader, sys.maxsize)
        except OSError as exc:  # (ssl.SSLError among them)
            if reader._exception is None:
                if isinstance(exc, ssl.SSLError) and reader._buffer:
                    self._error = exc  # (the plaintext before it is read first)
                else:
                    self._layer.fail(exc)
            return
        if reader._eof or self._layer._closing:
            return
        if len(reader._buffer) > 2 * reader._limit:
            reader._paused = True
            return
        self._listen()

    def _resume_at_limit(self, reader: StreamReader) -> None:
        """asyncio's reader's resumption of its transport, after a read of ours."""
        if len(reader._buffer) <= reader._limit:
            reader._paused = False
            self._listen()

    # -------------------------------------------------------------- decrypting
    def _decrypt(self, reader: StreamReader, need: int = sys.maxsize) -> bool:
        """Move the plaintext of the records the incoming BIO holds into the
        reader's buffer (until it holds `need` bytes): whether that gave the
        reader something (or its end)."""
        if self._error is not None:
            raise self._error
        buffer = reader._buffer
        before = len(buffer)
        obj = self._obj
        incoming = self._incoming
        try:
            while (incoming.pending or (self._held and obj.pending())) and len(buffer) < need:
                chunk = obj.read(_RECORD)
                if not chunk:
                    self._peer_ended(reader, True)
                    return True
                self._held = len(chunk) == _RECORD
                buffer += chunk
        except _WANT:
            pass
        except ssl.SSLZeroReturnError:
            self._peer_ended(reader, True)
            return True
        except ssl.SSLError as exc:
            if len(buffer) == before:
                raise
            self._error = exc  # the plaintext before the bad record is read first
            return True
        finally:
            if self._outgoing.pending:
                self._layer._flush()  # (a TLS 1.3 key update, say)
        return len(buffer) > before

    def _fill(self, reader: StreamReader, need: int) -> bool:
        """What came, decrypted into the reader's buffer: True once that holds
        `need` bytes or the stream's end (the read goes on at once), False
        while more ciphertext must come.  Raises the error that ended it."""
        raw = self._raw_reader
        if raw._buffer:
            self._incoming.write(raw._buffer)
            raw._buffer.clear()
        if self._incoming.pending or (self._held and self._obj.pending()) or self._error is not None:
            self._decrypt(reader, need)
            if self._incoming.pending:
                self._catch_up_later()  # (what this read leaves: see _catch_up)
        if len(reader._buffer) >= need or reader._eof or reader._exception is not None:
            return True
        layer = self._layer
        if layer._closing and layer._wrapped:
            self._peer_ended(reader, False)  # (closed by the program: its shutdown reads the rest)
            return True
        if raw._eof or raw._exception is not None:
            if raw._exception is not None:
                raise raw._exception
            layer._raw_eof = True
            self._peer_ended(reader, False)
            return True
        return False

    def _read_into(self, reader: StreamReader, n: int, view: memoryview) -> int:
        """Decrypt at most n bytes into view, from as many records as the
        incoming BIO holds: their number, 0 at close_notify, -1 when more
        ciphertext is needed.  A close_notify after plaintext ends the
        stream too (the BIO no longer holds it): the plaintext is returned,
        and the next read sees the end."""
        if self._error is not None:
            raise self._error
        obj = self._obj
        incoming = self._incoming
        done = 0
        ended = False
        try:
            # (Asked only while it holds some: an SSLWantReadError costs more than the decryption.)
            while incoming.pending or (self._held and obj.pending()):
                got: int = obj.read(n - done, view[done:] if done else view)
                if not got:
                    ended = True
                    break
                done += got
                self._held = done == n  # (else the record's plaintext is all out)
                if done == n:
                    break
        except _WANT:
            pass
        except ssl.SSLZeroReturnError:
            ended = True
        except ssl.SSLError as exc:
            if not done:
                raise
            self._error = exc  # the plaintext before the bad record is read first
        finally:
            if self._outgoing.pending:
                self._layer._flush()
        if ended:
            self._peer_ended(reader, True)
            return done
        return done or -1

    # -------------------------------------------------------------- reading
    def _claim(self, reader: StreamReader, func_name: str) -> None:
        if reader._waiter is not None:
            raise RuntimeError(f"{func_name}() called while another coroutine is already "
                               "waiting for incoming data")
        reader._waiter = self._busy

    def _want(self, reader: StreamReader, need: int, func_name: str) -> asyncio.Future[None] | None:
        """A read's wait for `need` bytes in the reader's buffer: None when
        that (or the end) is there already, else the future _fed resolves."""
        if reader._waiter is not None:
            raise RuntimeError(f"{func_name}() called while another coroutine is already "
                               "waiting for incoming data")
        try:
            if self._fill(reader, need):
                return None
        except BaseException as exc:
            self._layer.fail(exc)
            raise
        waiter = reader._waiter = self._loop.create_future()
        self._need = need
        reader._paused = False  # (as asyncio's reader: a read that waits resumes reading)
        self._listen()
        return waiter

    async def wait_for_data(self, reader: StreamReader, func_name: str) -> None:
        """StreamReader._wait_for_data's part: some plaintext in the reader's
        buffer, or its end, or the error that ended the connection."""
        waiter = self._want(reader, len(reader._buffer) + 1, func_name)
        if waiter is not None:
            try:
                await waiter
            finally:
                reader._waiter = None

    async def _decrypt_into(self, reader: StreamReader, view: memoryview, done: int, n: int,
                            least: int) -> int:
        """Decrypt straight into view[done:n] until it holds `least` bytes,
        or the stream ends: how many it holds.  The caller claimed the
        reader; a cancelled read puts what it holds back in front of the
        reader's buffer."""
        raw = self._raw_reader
        try:
            while True:
                if raw._buffer:
                    self._incoming.write(raw._buffer)
                    raw._buffer.clear()
                got = self._read_into(reader, n - done, view[done:])
                if got > 0:
                    done += got
                    if done >= least:
                        break
                    continue
                if got == 0 or reader._eof:
                    break
                if self._fill(reader, 1):  # (the end: nothing came)
                    break
                waiter = reader._waiter = self._loop.create_future()
                self._into, self._into_done, self._into_n, self._into_least = view, done, n, least
                self._listen()
                try:
                    await waiter
                finally:
                    done = self._into_done
                    self._into = None
                    reader._waiter = self._busy
                if done >= least or reader._eof:
                    break
        except BaseException as exc:
            if done:
                reader._buffer[:0] = view[:done]  # nothing decrypted is lost
            self._layer.fail(exc)
            raise
        if self._incoming.pending:
            self._catch_up_later()  # (a close_notify after it is answered)
        return done

    async def readinto(self, reader: StreamReader, view: memoryview) -> int:
        """StreamReader.readinto's part: buffered plaintext first; else a
        record's size or more is decrypted straight into `view`, less
        through the buffer."""
        if reader._exception is not None:
            raise reader._exception
        n = len(view)
        if not n:
            return 0
        buffered = reader._buffer
        if not buffered and not reader._eof:
            if n >= _RECORD:
                self._claim(reader, "readinto")
                try:
                    return await self._decrypt_into(reader, view, 0, n, 1)
                finally:
                    reader._waiter = None
            await self.wait_for_data(reader, "readinto")
        k = min(n, len(buffered))
        with memoryview(buffered) as m:
            view[:k] = m[:k]
        del buffered[:k]
        if reader._paused:
            self._resume_at_limit(reader)
        return k

    def take_exactly(self, reader: StreamReader, buf: bytearray | memoryview) -> bool:
        """readinto_exactly at once, when the reader's buffer holds all of a
        small read (a frame's payload after its header): whether it did."""
        n = len(buf)
        buffered = reader._buffer
        if n >= _RECORD or len(buffered) < n or reader._exception is not None:
            return False
        buf[:] = buffered[:n]  # same length: a bytearray is not resized
        del buffered[:n]
        if reader._paused:
            self._resume_at_limit(reader)
        return True

    async def readinto_exactly(self, reader: StreamReader, buf: bytearray | memoryview) -> int:
        """StreamReader.readinto_exactly's part (`buf`: a bytearray or a
        memoryview of bytes): decrypt straight into `buf`; a cancelled read
        puts what it decrypted back in front of the reader's buffer."""
        if reader._exception is not None:
            raise reader._exception
        n = len(buf)
        buffered = reader._buffer
        if n < _RECORD:
            # (StreamReader.readinto_exactly tried take_exactly already.)
            while True:
                waiter = self._want(reader, n, "readinto_exactly")
                if waiter is not None:
                    try:
                        await waiter
                    finally:
                        reader._waiter = None
                if self.take_exactly(reader, buf):
                    return n
                if reader._exception is not None:
                    raise reader._exception
                if waiter is None:  # the end
                    partial = bytes(buffered)
                    buffered.clear()
                    raise asyncio.IncompleteReadError(partial, n)
        view = memoryview(buf)
        try:
            return await self._readinto_exactly(reader, view, n)
        finally:
            try:
                view.release()  # (a bytearray can be resized again once this returns)
            except BufferError:
                pass

    async def _readinto_exactly(self, reader: StreamReader, view: memoryview, n: int) -> int:
        buffered = reader._buffer
        k = min(n, len(buffered))
        if k < n and not reader._eof:
            self._claim(reader, "readinto_exactly")  # refused before anything is consumed
        if k:
            with memoryview(buffered) as m:
                view[:k] = m[:k]
            del buffered[:k]
        if k == n:
            return n
        done = k
        if not reader._eof:
            try:
                done = await self._decrypt_into(reader, view, done, n, n)
            finally:
                reader._waiter = None
        if done < n:
            raise asyncio.IncompleteReadError(bytes(view[:done]), n)
        return n


class TLSSender(_Side):
    """The plaintext that goes: encrypted and handed to the channel's send
    queue; the StreamWriter's `write` and `drain`, and its send queue."""

    def __init__(self, layer: TLSLayer) -> None:
        super().__init__(layer)
        self._tx = layer._tx
        # Small writes waiting for the iteration's end, to be encrypted together.
        self._plain: list[bytes] = []
        self._plain_size = 0

    def write(self, data: Any) -> None:
        """As asyncio's TLS transport: encrypt, send with the plain channel;
        dropped once closing or once a send failed (drain() raises its error).

        Small writes of one loop iteration are encrypted together at its end
        (or at drain() or close(), whichever comes first), in one record: a
        frame's header and payload, written apart, cost one record's
        encryption here and one decryption at the peer.  A buffer that is
        not bytes is copied for that, unless nothing waits (then it is
        encrypted at once)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, got {type(data).__name__}")
        if not data or self._layer._closing or self._tx._write_exc is not None:
            return
        total = data.nbytes if type(data) is memoryview else len(data)
        plain = self._plain
        if total + self._plain_size <= _RECORD and (plain or type(data) is bytes):
            if not plain:
                self._raw._ring.defer(self._seal_at_flush)
            plain.append(data if type(data) is bytes else bytes(data))
            self._plain_size += total
            return
        if plain:
            self._seal()  # (what waits goes first)
        self._encrypt(data, total)

    def seal(self) -> None:
        """Encrypt what waits now (the close's, before its close_notify)."""
        if self._plain:
            self._seal()

    def discard(self) -> None:
        """Drop what waits (the abort's)."""
        self._plain.clear()
        self._plain_size = 0

    def _seal_at_flush(self) -> None:
        """The iteration's flush: seal what waits, and send it in this flush
        (the channel's own send would wait for the next)."""
        if self._plain:
            self._seal()
            self._tx._send_now()

    def _seal(self) -> None:
        """Encrypt the writes that wait, in one record."""
        plain = self._plain
        data = plain[0] if len(plain) == 1 else b"".join(plain)
        plain.clear()
        self._plain_size = 0
        if self._tx._write_exc is None:
            try:
                self._encrypt(data, len(data))
            except ssl.SSLError:
                pass  # (the reader and drain() raise it: see TLSLayer.fail)

    def _encrypt(self, data: Any, total: int) -> None:
        sslobj = self._obj
        tx = self._tx
        try:
            if total <= _SLICE:
                done = sslobj.write(data)
                if done < total:  # (OpenSSL takes it all from a memory BIO; should it not)
                    view = memoryview(data).cast("B")
                    while done < total:
                        done += sslobj.write(view[done:])
                tx.write(self._outgoing.read())
                return
            # A large write leaves in slices, each as soon as it is encrypted:
            # the peer decrypts one while this side encrypts the next.
            view = memoryview(data).cast("B")
            done = 0
            while done < total:
                done += sslobj.write(view[done:done + _SLICE])
                tx.write(self._outgoing.read())
                tx.send()
        except ssl.SSLError as exc:
            self._layer.fail(exc)
            raise
        except OSError:
            pass  # a send failed: the channel keeps its error for drain(), as asyncio's

    async def drain(self) -> None:
        """The StreamWriter's drain over TLS (as StreamWriter.drain, reading
        this side's state without the properties below)."""
        layer = self._layer
        reader = layer._reader
        if reader is not None and reader._exception is not None:
            raise reader._exception
        tx = self._tx
        if tx._pending_size + self._plain_size <= tx._high and tx._write_exc is None and not layer._closing:
            return  # the common case: the iteration's flush encrypts and sends
        if self._plain:
            self._seal()
        raw = self._raw
        if layer._closing and not raw._closing:
            await asyncio.sleep(0)  # as asyncio's drain: let the close progress
            if raw._closed:
                raise ConnectionResetError("Connection lost")
            return
        await raw.drain()

    # What StreamWriter.drain's fast path reads of its send queue.
    @property
    def _pending_size(self) -> int:
        return self._tx._pending_size + self._plain_size

    @property
    def _high(self) -> int:
        return self._tx._high

    @property
    def _write_exc(self) -> OSError | None:
        return self._tx._write_exc

    @property
    def _closing(self) -> bool:
        return self._layer._closing
