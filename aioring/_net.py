"""L2/L4: socket operations on the ring, mirroring the event loop's sock_* methods.

Each function takes the same arguments as its ``loop.sock_*`` namesake and
returns the same result: received data, the number of bytes, a new socket
with its peer's address.  The data moves through IORING_OP_RECV, SEND,
RECVMSG, SENDMSG, ACCEPT, CONNECT and SPLICE; the kernel waits for the socket
itself (it polls internally).  sock_recv, sock_recv_into and sock_sendall
first try the socket at once, as the loop's do: what it already holds, or
has room for, moves without a ring operation.

Sockets may be blocking or not; the ring never blocks the loop either way.
Arguments are checked before anything is submitted; kernel errors arrive as
the OSError subclass of their errno (ConnectionResetError, BrokenPipeError,
ConnectionRefusedError, ...).  A cancelled call whose operation the kernel
had not taken yet does nothing and raises CancelledError, as the loop's; one
whose operation completed anyway returns its result (the bytes are not lost)
and the cancellation is delivered at the task's next await.  The sends of one
socket (sock_sendall, sock_sendfile) reach it in the order they were called.
"""

from __future__ import annotations

import asyncio
import errno
import io
import operator
import os
import select
import socket
import struct
import sys
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from . import _binding, _redelivery
from ._binding import (MSG_NOSIGNAL, MSG_WAITALL, OP_RECV, OP_RECVMSG, OP_SEND, OP_SENDMSG,
                       AcceptRequest, ConnectRequest, MsgRequest)
from ._ops import (MAX_RW, _finish_read, _yield_keeping, check_fd, new_bytes, pace, readable_size, result,
                   ring_of, writable_size)
from ._loops import get_ring
from ._ringbase import RingBase, os_error

__all__ = ["sock_accept", "sock_connect", "sock_recv", "sock_recv_into", "sock_recvfrom",
           "sock_recvfrom_into", "sock_sendall", "sock_sendfile", "sock_sendto"]

_POLLIN = select.POLLIN
_POLLOUT = select.POLLOUT
_get_running_loop = asyncio.get_running_loop
_SPLICE_CHUNK = 1 << 20  # bytes per splice round trip of sock_sendfile
_DONTWAIT = socket.MSG_DONTWAIT
_SEND_NOW = socket.MSG_DONTWAIT | MSG_NOSIGNAL

# Receives and sends are tried at once first, without waiting (MSG_DONTWAIT),
# as the loop's sock_* methods try them: what the socket already holds, or
# has room for, moves without a ring operation or a trip through the loop.
# A receive that finds nothing sends the next receives of its fd straight to
# the ring, twice as many each time, up to 64: a peer that answers only when
# asked is not asked in vain before every receive.
# fd -> (receives left for the ring, next backoff, the socket missed): the
# socket by a weak reference, so that a socket given the fd number of one
# closed after misses does not inherit its backoff.
_recv_misses: dict[int, tuple[int, int, weakref.ref[socket.socket]]] = {}


def _recv_due(fd: int, sock: socket.socket) -> bool:
    """Whether this receive of sock (at fd) is tried at once (else: the ring's)."""
    state = _recv_misses.get(fd)
    if state is None:
        return True
    left, backoff, missed = state
    if missed() is not sock:
        del _recv_misses[fd]  # (another socket's, closed since)
        return True
    if left:
        _recv_misses[fd] = (left - 1, backoff, missed)
        return False
    return True


def _recv_missed(fd: int, sock: socket.socket) -> None:
    state = _recv_misses.get(fd)
    backoff = state[1] if state is not None and state[2]() is sock else 1
    _recv_misses[fd] = (backoff, min(backoff * 2, 64), weakref.ref(sock))


# ------------------------------------------------------------------ checks
def check_socket(sock: Any) -> int:
    """The fd of `sock`, a socket.socket; TypeError for anything else, as the loop's."""
    if not isinstance(sock, socket.socket):
        raise TypeError(f"a socket.socket is required, not {type(sock).__name__}")
    ssl = sys.modules.get("ssl")  # (not imported: no SSLSocket exists)
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")
    return check_fd(sock.fileno())


def _ring_and_loop() -> tuple[asyncio.AbstractEventLoop, RingBase]:
    loop = _get_running_loop()
    return loop, get_ring(loop)


def check_mode(sock: socket.socket) -> None:
    """In the loop's debug mode, a blocking socket is refused, as the loop's sock_* refuse it."""
    if _get_running_loop().get_debug() and sock.gettimeout() != 0:
        raise ValueError("the socket must be non-blocking")


# --------------------------------------------------------------- addresses
def _ipv6_scope(scope_id: int, packed: bytes) -> str:
    """getnameinfo's suffix: %interface for link-local addresses with a scope."""
    if not scope_id or not ((packed[0] == 0xFE and packed[1] & 0xC0 == 0x80)
                            or (packed[0] == 0xFF and packed[1] & 0x0F == 0x02)):
        return ""
    try:
        return "%" + socket.if_indextoname(scope_id)
    except OSError:
        return f"%{scope_id}"


def decode_sockaddr(raw: bytes, family: int) -> Any:
    """A kernel sockaddr as Python's socket module gives it (recvfrom, accept)."""
    if len(raw) < 2:
        return None  # no address at all (an unbound sender), as socket gives it
    fam = struct.unpack_from("=H", raw)[0]
    if fam == socket.AF_INET:
        port = struct.unpack_from("!H", raw, 2)[0]
        return socket.inet_ntop(socket.AF_INET, raw[4:8]), port
    if fam == socket.AF_INET6:
        port, flowinfo = struct.unpack_from("!HI", raw, 2)
        packed = raw[8:24]
        scope_id = struct.unpack_from("=I", raw, 24)[0]
        host = socket.inet_ntop(socket.AF_INET6, packed) + _ipv6_scope(scope_id, packed)
        return host, port, flowinfo, scope_id
    if fam == socket.AF_UNIX:
        path = raw[2:]
        if path[:1] == b"\0":
            return path  # abstract namespace: bytes, as socket gives them
        return os.fsdecode(path.split(b"\0", 1)[0])
    return fam, raw[2:]


def _encode_inet(family: int, address: Any, func: str) -> bytes | None:
    """Pack a numeric (host, port[, flowinfo, scope_id]) address; None when
    the host is a name that needs resolving first."""
    if not isinstance(address, tuple):
        raise TypeError(f"{_family_name(family)} address must be tuple, not {type(address).__name__}")
    if family == socket.AF_INET:
        if len(address) != 2:
            raise TypeError(f"AF_INET address must be a pair (host, port), not {address!r}")
        host, port = address
    else:
        if not 2 <= len(address) <= 4:
            raise TypeError(f"AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]]), "
                            f"not {address!r}")
        host, port = address[:2]
    if isinstance(host, bytes):
        host = host.decode("idna")
    if not isinstance(host, str):
        raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
    if not isinstance(port, int):
        raise TypeError(f"'{type(port).__name__}' object cannot be interpreted as an integer")
    if not 0 <= port <= 0xFFFF:
        raise OverflowError(f"{func}(): port must be 0-65535.")
    if family == socket.AF_INET:
        if host == "":
            packed = bytes(4)
        elif host == "<broadcast>":
            packed = b"\xff\xff\xff\xff"
        else:
            try:
                packed = socket.inet_pton(socket.AF_INET, host)
            except OSError:
                return None
        return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + packed + bytes(8)
    flowinfo = address[2] if len(address) > 2 else 0
    scope_id = address[3] if len(address) > 3 else 0
    if not 0 <= flowinfo <= 0xFFFFF:
        raise OverflowError("flowinfo must be 0-1048575.")
    if host == "":
        packed = bytes(16)
    else:
        if "%" in host:
            return None  # a scoped address: getaddrinfo resolves the interface
        try:
            packed = socket.inet_pton(socket.AF_INET6, host)
        except OSError:
            return None
    return (struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, flowinfo) + packed
            + struct.pack("=I", scope_id))


def _family_name(family: int) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return str(family)


async def encode_sockaddr(sock: socket.socket, address: Any, loop: asyncio.AbstractEventLoop,
                          func: str = "connect") -> tuple[bytes | None, Any]:
    """(`address` as a kernel sockaddr for `sock`'s family, the address used),
    resolving host names through the loop's getaddrinfo as the loop's
    sock_connect does.  (None, `address`) for a family other than IPv4, IPv6
    and unix: the socket module converts those itself (see _passed_through)."""
    family = sock.family
    if family in (socket.AF_INET, socket.AF_INET6):
        packed = _encode_inet(family, address, func)
        if packed is not None:
            return packed, address
        infos = await loop.getaddrinfo(address[0], address[1], family=family, type=sock.type,
                                       proto=sock.proto)
        if not infos:
            raise OSError(f"getaddrinfo({address[0]!r}) returned empty list")
        resolved = infos[0][4]
        packed = _encode_inet(family, resolved, func)
        if packed is None:  # pragma: no cover - getaddrinfo returns numeric hosts
            raise OSError(f"cannot use the address {resolved!r}")
        return packed, resolved
    if family == socket.AF_UNIX:
        if isinstance(address, str):
            path = os.fsencode(address)
        elif isinstance(address, (bytes, bytearray, memoryview)):
            path = bytes(address)
        elif isinstance(address, os.PathLike):
            path = os.fsencode(address)
        else:
            raise TypeError(f"a bytes-like object is required, not '{type(address).__name__}'")
        # As socket's own conversion: no NUL counted after a path, and an
        # empty one is an abstract address (which autobinds).
        if len(path) > 107 + (path[:1] in (b"\0", b"")):
            raise OSError("AF_UNIX path too long")
        return struct.pack("=H", socket.AF_UNIX) + path, address
    return None, address


async def _passed_through(sock: socket.socket, call: Callable[[], Any]) -> Any:
    """`call` (the socket module's own connect or sendto, for an address
    family the ring is given no sockaddr of), made again each time the socket
    becomes writable while it would block, as the loop makes it."""
    while True:
        try:
            return call()
        except (BlockingIOError, InterruptedError):
            pass
        await _writable(sock)


async def _writable(sock: socket.socket) -> None:
    loop, ring = _ring_and_loop()
    op = ring.start(loop, _binding.prep_poll, (sock.fileno(), _POLLOUT), None, None, 0, unbounded=True)
    await result(ring, op)


# ---------------------------------------------------------------- receive
def _now_ok(sock: socket.socket) -> bool:
    """Whether the socket module's own call with MSG_DONTWAIT returns at once:
    not on a socket with a timeout, which it would first wait on."""
    timeout = sock.gettimeout()
    return timeout is None or timeout == 0


async def sock_recv(sock: socket.socket, nbytes: int) -> bytes:
    """loop.sock_recv: at most `nbytes` bytes from `sock`, b"" at EOF.

    Raises what loop.sock_recv raises."""
    fd = check_socket(sock)
    check_mode(sock)
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError("negative buffersize in recv")
    if nbytes > sys.maxsize:
        raise OverflowError("Python int too large to convert to C ssize_t")
    if _redelivery.owed:
        _redelivery.deliver_owed()  # a cancellation this task owes comes first, as in Ring.start
    loop = _get_running_loop()
    ring = ring_of(loop)
    if not nbytes:
        return b""  # as recv(0): nothing to wait for
    n = min(nbytes, MAX_RW)
    if _recv_due(fd, sock) and _now_ok(sock):
        try:
            data = sock.recv(n, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            _recv_missed(fd, sock)
        else:
            _recv_misses.pop(fd, None)
            if pace():
                await _yield_keeping()
            return data
    # (The pin need not be writable: out is this call's own, which the kernel fills.)
    out = new_bytes(n) if n > 1 else bytearray(n)
    op = ring.start(loop, None, (OP_RECV, fd, 0, n, 0, 0), out, _finish_read, _POLLIN, unbounded=True)
    return await result(ring, op)


async def sock_recv_into(sock: socket.socket, buf: Any) -> int:
    """loop.sock_recv_into: receive into `buf`; the number of bytes, 0 at EOF.

    Raises what loop.sock_recv_into raises."""
    fd = check_socket(sock)
    check_mode(sock)
    if _redelivery.owed:
        _redelivery.deliver_owed()
    loop = _get_running_loop()
    ring = ring_of(loop)
    n = min(writable_size(buf), MAX_RW)
    if not n:
        return 0  # as recv_into of an empty buffer: nothing to wait for
    if _recv_due(fd, sock) and _now_ok(sock):
        try:
            got = sock.recv_into(buf, n, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            _recv_missed(fd, sock)
        else:
            _recv_misses.pop(fd, None)
            if pace():
                await _yield_keeping()
            return got
    op = ring.start(loop, None, (OP_RECV, fd, 0, n, 0, 0), buf, None, _POLLIN, unbounded=True, writable=True)
    return await result(ring, op)


async def _recvmsg(sock: socket.socket, buf: Any, nbytes: int) -> tuple[int, Any]:
    """One RECVMSG of nbytes into buf (checked writable): (count, sender)."""
    fd = check_socket(sock)
    loop, ring = _ring_and_loop()
    request = MsgRequest(OP_RECVMSG, fd, buf, nbytes, None, 0)
    closed = False
    try:
        op = ring.start(loop, _binding.prep_msg, request.args, request.keep, None, _POLLIN, unbounded=True)
        n = await result(ring, op)
        return n, decode_sockaddr(request.address(), sock.family)
    except GeneratorExit:
        closed = True  # the op keeps the exports until the kernel let go
        raise
    finally:
        if not closed:
            request.release()  # so that the caller's bytearray can be resized again at once


async def sock_recvfrom(sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
    """loop.sock_recvfrom: (data, address) of one datagram (or stream chunk).

    Raises what loop.sock_recvfrom raises."""
    check_socket(sock)
    check_mode(sock)
    bufsize = operator.index(bufsize)
    if bufsize < 0:
        raise ValueError("negative buffersize in recvfrom")
    buf = bytearray(max(bufsize, 1))
    n, address = await _recvmsg(sock, buf, bufsize)
    return bytes(memoryview(buf)[:n]), address


async def sock_recvfrom_into(sock: socket.socket, buf: Any, nbytes: int = 0) -> tuple[int, Any]:
    """loop.sock_recvfrom_into: (bytes received into buf, address).

    Raises what loop.sock_recvfrom_into raises."""
    check_socket(sock)
    check_mode(sock)
    size = writable_size(buf)
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError("negative buffersize in recvfrom_into")
    if nbytes == 0:
        nbytes = size
    elif nbytes > size:
        raise ValueError("nbytes is greater than the length of the buffer")
    return await _recvmsg(sock, buf, nbytes)


# ------------------------------------------------------------------- send
async def send_all(fd: int, data: Any, length: int, done: int = 0) -> None:
    """Send the bytes of `data` from `done` to `length` completely: SEND with
    MSG_WAITALL, again after a short send, until every byte went out or the
    kernel reports an error.  Each op pins `data` until its CQE."""
    loop = _get_running_loop()
    ring = ring_of(loop)
    while done < length:
        n = min(length - done, MAX_RW)
        op = ring.start(loop, None, (OP_SEND, fd, done, n, 0, MSG_NOSIGNAL | MSG_WAITALL), data, None,
                        _POLLOUT, unbounded=True)
        done += await result(ring, op)


# The sends of one socket reach it in the order they were called.  A send
# that cannot go at once takes the socket's turn until its last operation
# has left the kernel; a later send of the socket waits for that before it
# tries the socket at all.  So a cancelled send, whose operation the kernel
# may still hold until its cancellation is through, never lands after a later
# send's bytes.  (fd -> a future done when the send holding the turn let go.)
_send_turns: dict[int, asyncio.Future[None]] = {}


async def _take_turn(fd: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """This send's turn on fd, once the sends before it let go (see _send_turns).
    If the caller is cancelled while it waits, nothing was sent, and the sends
    after it still wait for the ones before it."""
    turn = loop.create_future()
    before = _send_turns.get(fd)
    _send_turns[fd] = turn
    if before is not None and not before.done() and before.get_loop() is loop:
        try:
            await asyncio.shield(before)
        except BaseException:
            before.add_done_callback(lambda _: _end_turn(fd, turn))
            raise
    return turn


def _new_turn(fd: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    turn = _send_turns[fd] = loop.create_future()
    return turn


def _end_turn(fd: int, turn: asyncio.Future[None]) -> None:
    if _send_turns.get(fd) is turn:
        del _send_turns[fd]
    if not turn.done():
        try:
            turn.set_result(None)
        except RuntimeError:  # its loop is closed: nobody waits any more
            pass


async def sock_sendall(sock: socket.socket, data: Any) -> None:
    """loop.sock_sendall: send all of `data`; returns None once the kernel took it.

    The buffer belongs to the kernel until this returns (a bytearray cannot be
    resized meanwhile).  Sends of one socket go out in the order they were
    called, each after the one before has left the kernel.  A cancelled call
    raises CancelledError and sends nothing more, unless the kernel had
    already taken (part of) the data: that part stays sent, as with the
    loop's, and is never overtaken by a later send."""
    fd = check_socket(sock)
    check_mode(sock)
    if _redelivery.owed:
        _redelivery.deliver_owed()
    length = readable_size(data)
    turn = None
    if fd in _send_turns:  # an earlier send of this socket is still out: after it
        turn = await _take_turn(fd, _get_running_loop())
    try:
        await _sendall(sock, fd, data, length, turn is not None)
    finally:
        if turn is not None:
            _end_turn(fd, turn)


async def _sendall(sock: socket.socket, fd: int, data: Any, length: int, in_turn: bool) -> None:
    """sock_sendall of `length` bytes once no earlier send of fd is out; it
    takes the socket's turn while it waits, unless the caller holds it."""
    sent = 0
    if length and _now_ok(sock):
        try:
            sent = sock.send(data, _SEND_NOW)
        except (BlockingIOError, InterruptedError):
            pass
    if sent == length:
        if pace():
            await _yield_keeping()
        return
    if in_turn:
        await send_all(fd, data, length, sent)
        return
    turn = _new_turn(fd, _get_running_loop())
    try:
        await send_all(fd, data, length, sent)
    finally:
        _end_turn(fd, turn)


async def sock_sendto(sock: socket.socket, data: Any, address: Any) -> int:
    """loop.sock_sendto: send one datagram to `address`; the bytes sent.

    Raises what loop.sock_sendto raises."""
    fd = check_socket(sock)
    check_mode(sock)
    length = readable_size(data)
    loop, ring = _ring_and_loop()
    name, _ = await encode_sockaddr(sock, address, loop, "sendto")
    if name is None:
        return int(await _passed_through(sock, lambda: sock.sendto(data, address)))
    request = MsgRequest(OP_SENDMSG, fd, data, length, name, MSG_NOSIGNAL)
    closed = False
    try:
        op = ring.start(loop, _binding.prep_msg, request.args, request.keep, None, _POLLOUT, unbounded=True)
        return int(await result(ring, op))
    except GeneratorExit:
        closed = True  # the op keeps the exports until the kernel let go
        raise
    finally:
        if not closed:
            request.release()


# ---------------------------------------------------------------- connect
async def sock_connect(sock: socket.socket, address: Any) -> None:
    """loop.sock_connect: connect `sock`, resolving a host name first as the loop does.

    Raises what loop.sock_connect raises (the resolved address in a connect error)."""
    fd = check_socket(sock)
    check_mode(sock)
    loop, ring = _ring_and_loop()
    name, address = await encode_sockaddr(sock, address, loop)
    if name is None:
        await _connect_other(sock, address)
        return
    request = ConnectRequest(fd, name)
    op = ring.start(loop, _binding.prep_connect, request.args, request.keep, None, 0, unbounded=True)
    try:
        await result(ring, op)
        return
    except OSError as exc:
        if exc.errno not in (errno.EINPROGRESS, errno.EALREADY, errno.EAGAIN):
            raise _connect_error(exc, address) from None
    # An older kernel hands a non-blocking socket's EINPROGRESS back: wait
    # until it is writable, then read the outcome, as the loop does.
    await _writable(sock)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise _connect_error(OSError(err, os.strerror(err)), address)


async def _connect_other(sock: socket.socket, address: Any) -> None:
    """sock_connect for a family other than IPv4, IPv6 and unix, as the loop's:
    sock.connect, and when it is under way, SO_ERROR once writable."""
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    await _writable(sock)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, f"Connect call failed {address}")


def _connect_error(exc: OSError, address: Any) -> OSError:
    # asyncio's selector loop raises OSError(err, f"Connect call failed {address}")
    # for an IP address; a unix socket's connect fails at once, with the plain error.
    if exc.errno is None or not isinstance(address, tuple):
        return exc
    return os_error(-exc.errno).__class__(exc.errno, f"Connect call failed {address}")


# ----------------------------------------------------------------- accept
async def sock_accept(sock: socket.socket) -> tuple[socket.socket, Any]:
    """loop.sock_accept: (a new non-blocking socket, the peer's address).

    Raises what loop.sock_accept raises."""
    fd = check_socket(sock)
    check_mode(sock)
    loop, ring = _ring_and_loop()
    request = AcceptRequest(fd)
    while True:
        op = ring.start(loop, _binding.prep_accept, request.args, request.keep, None, 0, unbounded=True)
        try:
            new_fd = await result(ring, op)
            break
        except BlockingIOError:
            # An older kernel hands a non-blocking listener's EAGAIN back:
            # wait until a connection is there, through the ring too.
            op = ring.start(loop, _binding.prep_poll, (fd, _POLLIN), None, None, 0, unbounded=True)
            await result(ring, op)
    conn = socket.socket(sock.family, sock.type, sock.proto, fileno=new_fd)
    conn.setblocking(False)
    return conn, decode_sockaddr(request.address(), sock.family)


# --------------------------------------------------------------- sendfile
def _check_sendfile(sock: socket.socket, file: Any, offset: Any, count: Any) -> None:
    # The loop's messages, word for word.
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.type == socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


async def _splice(ring: RingBase, loop: asyncio.AbstractEventLoop, fd_in: int, off_in: int,
                  fd_out: int, nbytes: int) -> int:
    while True:
        op = ring.start(loop, _binding.prep_splice,
                        (fd_in, off_in, fd_out, -1, nbytes, _binding.SPLICE_F_MOVE, 0), None, None, 0,
                        unbounded=True)
        try:
            return await result(ring, op)
        except BlockingIOError:
            # A non-blocking socket with a full send buffer: wait until it
            # takes more, through the ring too.
            op = ring.start(loop, _binding.prep_poll, (fd_out, _POLLOUT), None, None, 0, unbounded=True)
            await result(ring, op)


async def sock_sendfile(sock: socket.socket, file: Any, offset: int = 0, count: int | None = None,
                        *, fallback: bool = True) -> int:
    """loop.sock_sendfile: send `file` from `offset`, `count` bytes or to its end.

    The pages go from the file to a pipe and from the pipe to the socket by
    IORING_OP_SPLICE, never through Python.  Returns the bytes sent and leaves
    the file's position after them, as the loop does.  A file without an fd
    is read and sent in chunks when `fallback` is true, otherwise raises
    asyncio.SendfileNotAvailableError."""
    fd = check_socket(sock)
    check_mode(sock)
    _check_sendfile(sock, file, offset, count)
    try:
        file_fd = file.fileno()
    except (AttributeError, io.UnsupportedOperation) as exc:
        if not fallback:
            raise asyncio.SendfileNotAvailableError(
                f"syscall sendfile is not available for socket {sock!r} and file {file!r} "
                "combination") from exc
        return await _in_turn(fd, _sendfile_by_copy(sock, fd, file, offset, count))
    return await _in_turn(fd, _sendfile(fd, file_fd, file, offset, count))


async def _in_turn(fd: int, coro: Coroutine[Any, Any, int]) -> int:
    """Run `coro`, which sends on fd, in the socket's turn (see _send_turns)."""
    loop = _get_running_loop()
    try:
        turn = await _take_turn(fd, loop) if fd in _send_turns else _new_turn(fd, loop)
    except BaseException:
        coro.close()
        raise
    try:
        return await coro
    finally:
        _end_turn(fd, turn)


async def _sendfile(fd: int, file_fd: int, file: Any, offset: int, count: int | None) -> int:
    loop, ring = _ring_and_loop()
    total = 0
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            import fcntl
            fcntl.fcntl(wfd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _SPLICE_CHUNK)
            chunk = _SPLICE_CHUNK
        except OSError:
            chunk = 1 << 16  # a pipe's default size
        while count is None or total < count:
            want = chunk if count is None else min(chunk, count - total)
            got = await _splice(ring, loop, file_fd, offset + total, wfd, want)
            if got == 0:
                break
            while got:  # total counts what reached the socket, also when cancelled
                moved = await _splice(ring, loop, rfd, -1, fd, got)
                got -= moved
                total += moved
        return total
    finally:
        os.close(rfd)
        os.close(wfd)
        if total:
            file.seek(offset + total)


async def _sendfile_by_copy(sock: socket.socket, fd: int, file: Any, offset: int, count: int | None) -> int:
    if not callable(getattr(file, "readinto", None)):
        raise TypeError(f"file must be a binary file object, not {type(file).__name__}")
    loop = _get_running_loop()
    total = 0
    try:
        if offset:
            file.seek(offset)
        buf = bytearray(min(count, 1 << 18) if count else 1 << 18)
        view = memoryview(buf)
        while count is None or total < count:
            want = len(buf) if count is None else min(len(buf), count - total)
            n = await loop.run_in_executor(None, file.readinto, view[:want])
            if not n:
                break
            await _sendall(sock, fd, view[:n], n, in_turn=True)
            total += n
        return total
    finally:
        if total:
            file.seek(offset + total)
