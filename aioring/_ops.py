"""L2: fd-level operations, one function per opcode.

Each function checks its arguments completely before anything reaches the
ring (a bad argument never leaves an SQE behind), exports the buffer
the kernel will touch, and hands the ring a finish function for the CQE.

A read or write at offset -1 (the fd's position: pipes, sockets, terminals)
may wait for a peer as long as the peer likes, so it is exempt from the
ring's backpressure (Ring.start's `unbounded`): otherwise as many reads
waiting for their writes as the completion queue holds would keep those
writes from ever being submitted.  Reads at an offset are file reads, which
the kernel completes by itself, and they wait their turn.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import mmap
import operator
import os
import select
from collections.abc import Callable
from typing import Any

from ._liburing import ffi, lib
from . import _loops, _redelivery
from ._loops import get_ring
from ._ringbase import Op, RingBase, os_error, ready

__all__ = ["aligned_buffer", "fsync", "read", "readinto", "result", "write"]

# The kernel moves at most this much in one read or write (MAX_RW_COUNT).
MAX_RW = 0x7FFFF000
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)
_OFF_MAX = 2**63 - 1

_READ = lib.IORING_OP_READ
_WRITE = lib.IORING_OP_WRITE
_FSYNC = lib.IORING_OP_FSYNC
_DATASYNC = lib.IORING_FSYNC_DATASYNC
_PREP_RW = lib.aior_prep_rw
_PREP_RW_SQE = lib.aior_prep_rw_sqe
_IOSQE_ASYNC = lib.IOSQE_ASYNC
_POLLIN = select.POLLIN
_POLLOUT = select.POLLOUT
_NULL = ffi.NULL

# from_buffer with a ready ctype and positional arguments costs a third of
# from_buffer(buf, require_writable=True): no cdecl parsing, no keywords.
_from_buffer = ffi.from_buffer
_CHARS = ffi.typeof("char[]")
_get_running_loop = asyncio.get_running_loop

# Read buffers are overwritten by the kernel: no need to zero them first.
_alloc = ffi.new_allocator(should_clear_after_alloc=False)


# Results at least this large are read into a bytes object that is not
# zeroed first: the kernel overwrites it, and zeroing 1 MiB costs about a
# sixth of reading it from the page cache (16 of 92 us here).  Below it the
# zeroing costs a few microseconds at most, less than loading ctypes costs a
# program that only ever reads small files (0.4 MiB of RSS).
UNZEROED_MIN = 128 * 1024
_new_unzeroed: Any = None


def new_bytes(n: int) -> bytes:
    """A new bytes object of n (> 1) bytes for the kernel to fill, as os.read
    fills the one it returns: never one that Python shares (b"" and the
    one-byte objects are).  From UNZEROED_MIN on its contents are undefined
    until filled, so only what the kernel filled may leave the caller."""
    if n < UNZEROED_MIN:
        return bytes(n)
    global _new_unzeroed
    if _new_unzeroed is None:
        # CPython's own constructor, which leaves the bytes as they are when
        # given no source; ctypes, loaded on the first large read only.
        import ctypes
        make = ctypes.pythonapi.PyBytes_FromStringAndSize
        make.restype = ctypes.py_object
        make.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
        _new_unzeroed = make
    out: bytes = _new_unzeroed(None, n)
    return out


# Calls served without suspending (from a file's window, a direct read, or
# ring operations that completed at once) yield to the loop every this many,
# so that a task reading a file does not starve the others.  (A direct read
# yields after it read, a file call before it begins.)
YIELD_EVERY = 64
_unyielded = [0, 0]  # calls since the last yield, yields since fds were forgotten

# A read at an offset is first tried as a non-blocking system call
# (preadv2 with RWF_NOWAIT): from the page cache it completes there and
# then, without a trip through the ring and the loop; where it would wait
# for the disk the kernel says EAGAIN and the ring does it.
_preadv = os.preadv
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 8)

# Reads and writes at the fd's own position (offset -1) are tried the same
# way (lib.aior_rw_now): what a pipe or a socket holds or has room for, and
# the page cache's part of a file, move at once; the rest goes to the ring.
_RW_NOW = lib.aior_rw_now
_PARTIAL = lib.AIOR_PARTIAL
# What the try at once answers for an fd that cannot say without waiting (a
# terminal, a file system without non-blocking I/O, an O_DIRECT buffer the
# kernel refuses): the ring's turn, whose operation says it again if it is an
# error.  Any other error is raised at once (a socket's reset, say, is
# reported once: the ring would not see it again).
_RING_DECIDES = frozenset({-errno.EAGAIN, -errno.EOPNOTSUPP, -errno.EINVAL, -errno.ENOSYS})


def _rw_now(write: int, fd: int, cbuf: Any, n: int) -> int:
    """-1 - count when the read or write at the fd's position was done at
    once; else the count done so far (0: none), the ring's to go on from."""
    res = _RW_NOW(write, fd, cbuf, n)
    if res >= _PARTIAL:
        return res - _PARTIAL
    if res >= 0:
        return -1 - res
    if res in _RING_DECIDES:
        return 0
    raise os_error(res)


def pace() -> bool:
    """Count one call; True when the caller should yield to the loop now."""
    _unyielded[0] += 1
    if _unyielded[0] >= YIELD_EVERY:
        _unyielded[0] = 0
        _unyielded[1] += 1
        if _unyielded[1] >= FORGET_EVERY:  # (see cache_due)
            _unyielded[1] = 0
            _fd_cache.clear()
            _plain.clear()
        return True
    return False


async def _yield_keeping() -> None:
    """Yield to the loop after a read served at once (a task reading from the
    page cache would not yield otherwise).  What was read is the caller's: a
    cancellation meanwhile is owed, not raised, and comes before the task's
    next operation or at its next await."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError as exc:
        _redelivery.redeliver_later(exc)


# Whether the page-cache try pays is learnt per fd, as sockets learn it for
# receives.  A try that finds the data not cached costs a system call and
# starts the disk read from the loop's thread, one device request at a time
# (measured on a virtio disk: random 4 KiB reads at 64 tasks, 15.7k/s with
# the try before every read, 28k/s without it).  So a miss sends the next
# reads of that fd straight to the ring, twice as many after each further
# miss, up to CACHE_BACKOFF_MAX; a hit begins again at one.  Only while other
# reads of uncached pages are in flight, though: one read at a time is faster
# with the try (70 us against 105 us here), which starts the device read at
# once, so that the ring's read that follows often finds it done.
#
# An O_DIRECT fd is never tried: there the "non-blocking" read is a
# synchronous device read (55 us here), which would stall the loop.  When the
# kernel refuses its buffer, length or offset (EINVAL), the error names the
# alignment the kernel reports for it (statx's STATX_DIOALIGN).
#
# What is known of the fds is forgotten every FORGET_EVERY yields of pace (some
# 4096 calls), as an fd number may be closed and given to another file.  (Every
# yield was too often: 64 tasks reading 64 files cold then tried each read.)  A
# page-cache hit on an fd known to be tried (_plain) costs one set lookup.
CACHE_BACKOFF_MAX = 64
FORGET_EVERY = 64
_fcntl = fcntl.fcntl
_F_GETFL = fcntl.F_GETFL
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_DIO_ALIGN = lib.aior_dio_align
# fd -> [reads left for the ring alone, the next backoff, O_DIRECT's buffer
# alignment (0: not O_DIRECT, 1: not reported), O_DIRECT's offset and length
# alignment]
_fd_cache: dict[int, list[int]] = {}
# fds whose reads at an offset are tried: not O_DIRECT, and no miss pending.
_plain: set[int] = set()


def fd_state(fd: int) -> list[int]:
    """What is known of fd (see _fd_cache), its flags looked up if nothing is."""
    state = _fd_cache.get(fd)
    return state if state is not None else _flags_looked_up(fd)


def _flags_looked_up(fd: int) -> list[int]:
    try:
        direct = _fcntl(fd, _F_GETFL) & _O_DIRECT
    except (OSError, ValueError, OverflowError):  # (a bad fd: the operation itself reports it)
        direct = 0
    state = _fd_cache[fd] = [0, 1, 0, 0]
    if direct:
        _plain.discard(fd)
        mem, off = ffi.new("unsigned *"), ffi.new("unsigned *")
        known = _DIO_ALIGN(fd, mem, off) == 0
        state[2], state[3] = (mem[0], off[0]) if known else (1, 1)  # (unknown: the kernel judges)
    return state


def cache_due(fd: int) -> bool:
    """Whether this read at an offset of fd, which is not in _plain, is tried
    from the page cache at once (then cache_hit or cache_missed follows)."""
    state = fd_state(fd)
    if state[2]:
        return False
    if state[0] and _cold_reads[0]:
        state[0] -= 1
        return False
    return True


def cache_hit(fd: int) -> None:
    state = fd_state(fd)
    state[0], state[1] = 0, 1
    _plain.add(fd)


def cache_missed(fd: int) -> None:
    _plain.discard(fd)
    state = fd_state(fd)
    state[0] = state[1]
    state[1] = min(state[1] * 2, CACHE_BACKOFF_MAX)


# A ring read of pages that are not cached, issued in the submitting call,
# starts the device read there, in the loop's thread (some 35 us a read on a
# virtio disk); handed to the kernel's workers (IOSQE_ASYNC), that work runs
# beside the loop.  Measured, random 4 KiB reads not cached: 16 tasks 9.9k/s
# issued inline, 16.4k/s handed over; 64 tasks 11.9k/s and 17.4k/s.  One read
# at a time is faster inline (the loop has nothing else to do, and the hand-over
# adds a worker's wake-up).  So a read is handed over when its fd's last try
# missed the page cache (its backoff is past one) and another such read is in
# flight; any other read is issued inline, where cached pages are copied at
# once.  An O_DIRECT read (never tried at once) is handed over the same way
# while another is in flight: the worker only issues it, and the device
# completes it without the worker (measured, random 4 KiB O_DIRECT reads at
# 64 tasks, 4 interleaved runs: 11.0k/s handed over, 10.5k/s inline; the loop's
# thread 22.8 us a read against 24.8 us, 2.5 us more in all).
#
# The kernel could also read such pages without a worker (ext4 and xfs wait
# for the page with a callback, which is how fio's buffered io_uring reads go),
# but here that loses: random 4 KiB reads not cached at 64 tasks, interleaved,
# ran 14.7k/s handed over against 8.5k/s issued inline (medians of 4 runs each,
# a shared 2-core machine; 11.8k against 7.3k and 10.3k against 9.9k in two
# more such comparisons), the loop's thread spending 31 us a read against 38 us
# (the inline issue allocates the pages and starts the device read there).  The
# workers are not the limit: the kernel ran 64 of them for 64 reads, and capping
# them at 8, 16 or 32 (IORING_REGISTER_IOWQ_MAX_WORKERS) changed nothing
# measurable; fio read at least as fast with every read handed over (--force_async).
# COLD_HANDOFF = False issues them all inline (benchmarks/cold_reads.py measures both).
COLD_HANDOFF = True
_cold_reads = [0]  # reads of pages thought not cached, in flight


def read_request(fd: int, addr: Any, n: int, offset: int) -> tuple[Any, tuple[Any, ...], bool]:
    """The prep function and its arguments for a ring read of n bytes of fd
    at offset (-1: its position) into addr, and whether the pages are thought
    not cached (then await it with read_result)."""
    if offset >= 0:
        state = _fd_cache.get(fd)
        if state is not None and (state[1] > 1 or state[2]):
            if _cold_reads[0] and COLD_HANDOFF:
                return _PREP_RW_SQE, (_READ, fd, addr, n, offset, 0, _IOSQE_ASYNC), True
            return _PREP_RW, (_READ, fd, addr, n, offset, 0), True
    return _PREP_RW, (_READ, fd, addr, n, offset, 0), False


async def read_result(ring: RingBase, op: Op, cold: bool) -> Any:
    """result() of a read made by read_request, counting it among the cold
    reads in flight meanwhile if it is one."""
    if not cold:
        return await result(ring, op)
    _cold_reads[0] += 1
    try:
        return await result(ring, op)
    finally:
        _cold_reads[0] -= 1


def direct_error(fd: int, buffer: Any, offset: int) -> OSError | None:
    """For the kernel's EINVAL on a read or write of fd: when fd is opened with
    O_DIRECT (looked up afresh), the OSError EINVAL that names the alignment
    the file needs and what was given; else None (the kernel's error stands)."""
    state = _flags_looked_up(fd)
    if not state[2]:
        return None
    with memoryview(buffer) as view:
        n = view.nbytes
    cbuf = _from_buffer(_CHARS, buffer, False)
    addr = int(ffi.cast("uintptr_t", cbuf))
    ffi.release(cbuf)
    need = (f"a buffer at an address that is a multiple of {state[2]} and a length and an offset that are "
            f"multiples of {state[3]}" if state[2] > 1 else
            "buffers, lengths and offsets aligned to the disk's block size (the kernel does not report it "
            "here; 512 or 4096 on most disks)")
    return OSError(errno.EINVAL, f"{os.strerror(errno.EINVAL)}: this fd was opened with O_DIRECT, "
                   f"which needs {need} (got address 0x{addr:x}, length {n}, offset {offset}); "
                   "aioring.aligned_buffer(n) makes such buffers")


def aligned_buffer(size: int) -> mmap.mmap:
    """A writable buffer of `size` zero bytes at a page-aligned address, as
    O_DIRECT reads and writes need (aioring.read, readinto and write, or
    os.preadv/os.pwritev): an anonymous mmap.mmap.  Its length is `size`;
    O_DIRECT also needs lengths and offsets that are multiples of the file's
    alignment (512 or 4096 bytes on most disks).  Close it (or let it be
    collected) to give the memory back.

    Raises TypeError for a non-integer, ValueError for a size below 1 (as
    mmap.mmap), OSError when the memory cannot be mapped.
    """
    size = operator.index(size)
    if size < 1:
        raise ValueError(f"aligned_buffer() needs a size of at least 1 byte, not {size}")
    return mmap.mmap(-1, size)


def read_now(fd: int, target: Any, n: int, offset: int) -> int:
    """The bytes a non-blocking read of n bytes at `offset` into `target` (a
    writable buffer) delivered, 0 at end of file, or -1: nothing known (the
    data is not in the page cache, the file system does not read without
    blocking, the fd's recent reads missed it (cache_due), or an error, which
    the ring's read reports as the kernel's)."""
    if fd not in _plain:
        return _read_now_learning(fd, target, offset)
    try:
        return _preadv(fd, (target,), offset, _RWF_NOWAIT)  # (also for n == 0: EBADF is checked)
    except BlockingIOError:
        cache_missed(fd)
        return -1
    except (OSError, TypeError, ValueError, BufferError):
        return -1


def _read_now_learning(fd: int, target: Any, offset: int) -> int:
    """read_now for an fd not in _plain: tried if cache_due, and learnt from."""
    if not cache_due(fd):
        return -1
    try:
        got: int = _preadv(fd, (target,), offset, _RWF_NOWAIT)
    except BlockingIOError:
        cache_missed(fd)
        return -1
    except (OSError, TypeError, ValueError, BufferError):
        return -1
    cache_hit(fd)
    return got


def check_int(value: Any, name: str = "fd") -> int:
    """`value` as a C int: TypeError and OverflowError as os's functions raise them."""
    value = operator.index(value)
    if not _INT_MIN <= value <= _INT_MAX:
        raise OverflowError(f"{name} is out of range for a C int")
    return value


check_fd = check_int


def _einval() -> OSError:
    """What os.read, os.pread and os.ftruncate raise for a negative size or offset."""
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def check_size(size: Any) -> int:
    size = operator.index(size)
    if size < 0:
        raise _einval()
    if size >= 1 << 63:  # (an off_t, as os converts it)
        raise OverflowError("Python int too large to convert to C long")
    return size


def check_offset(offset: Any) -> int:
    """-1 (the fd's own position, as os.read and os.write) or an offset (os.pread)."""
    offset = operator.index(offset)
    if offset < -1:
        raise _einval()
    if offset > _OFF_MAX:
        raise OverflowError("offset is too large")
    return offset


def writable_buffer(buffer: Any) -> Any:
    """Export `buffer` for the kernel to write into (TypeError when it cannot)."""
    try:
        return _from_buffer(_CHARS, buffer, True)
    except (TypeError, BufferError, ValueError):
        raise TypeError("readinto() argument must be a writable contiguous bytes-like object, "
                        f"not {type(buffer).__name__}") from None


def readable_buffer(data: Any) -> Any:
    """Export `data` for the kernel to read from (TypeError when it cannot)."""
    if isinstance(data, str):
        raise TypeError("a bytes-like object is required, not 'str'")
    try:
        return _from_buffer(_CHARS, data, False)
    except (TypeError, BufferError, ValueError):
        pass
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"a bytes-like object is required, not {type(data).__name__!r}") from None
    with view:
        if not view.c_contiguous:  # what os.write and socket.send raise
            raise BufferError("memoryview: underlying buffer is not C-contiguous")
    raise TypeError(f"a contiguous bytes-like object is required, not {type(data).__name__!r}")


async def result(ring: RingBase, op: Op) -> Any:
    """Await `op`; if the caller is cancelled, wait for the kernel (Ring.settle)."""
    if op.future is None:
        return ready(op)
    try:
        return await op.future
    except asyncio.CancelledError as exc:
        return await ring.settle(op, exc)
    except GeneratorExit:
        ring.abandon(op)  # the coroutine was closed: op.keep stays with the kernel
        raise


def _finish_read(op: Op, res: int) -> bytes:
    return ffi.buffer(op.keep, res)[:]


def _filled(out: bytes, n: int) -> bytes:
    """What the kernel filled of `out`, a new_bytes object."""
    return out if n == len(out) else out[:n]


def _finish_read_filled(out: bytes, got: int, op: Op, res: int) -> bytes:
    return _filled(out, got + res)


async def read(fd: int, size: int, offset: int = -1) -> bytes:
    """Read at most `size` bytes from `fd`, like os.read (offset -1) or os.pread.

    Returns what the kernel delivered, b"" at end of file.  On a pipe or a
    socket the kernel ignores the offset (io_uring does not raise ESPIPE as
    os.pread does).  Bad arguments raise what os.read or os.pread raises
    (TypeError, OverflowError, OSError EINVAL for a negative size or an
    offset below -1) before anything is submitted; the kernel's errors come
    as the OSError subclass of their errno (EBADF for a closed fd, EISDIR
    for a directory, ...).
    """
    fd = check_fd(fd)
    size = check_size(size)
    offset = check_offset(offset)
    if _redelivery.owed:
        _redelivery.deliver_owed()
    if offset < 0 and fd_state(fd)[2]:  # (an O_DIRECT fd: never tried at once)
        return await _read_aligned(fd, size, offset)
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    # A large result is the bytes object the kernel fills (no copy follows);
    # a small one is copied out of memory that is not zeroed either.
    out = new_bytes(size) if size >= UNZEROED_MIN else None
    buf = _alloc("char[]", size) if out is None else _from_buffer(_CHARS, out, False)
    if offset >= 0:
        got = _read_now_into(fd, ffi.buffer(buf), buf, size, offset)
    else:
        got = _rw_now(0, fd, buf, min(size, MAX_RW)) if size else 0
    if got < 0:  # all of it from the page cache, or end of file
        if out is None:
            data = ffi.buffer(buf, -got - 1)[:]
        else:
            ffi.release(buf)
            data = _filled(out, -got - 1)
        if pace():
            await _yield_keeping()
        return data
    if out is not None:
        finish: Callable[[Op, int], bytes] = functools.partial(_finish_read_filled, out, got)
    else:
        finish = _finish_read if not got else functools.partial(_finish_rest, got)
    if not got and fd_state(fd)[2]:  # an O_DIRECT fd (learnt by the try): aligned memory
        if out is not None:
            ffi.release(buf)
        return await _read_aligned(fd, size, offset)
    prep, args, cold = read_request(fd, buf + got, min(size - got, MAX_RW),
                                    offset + got if offset >= 0 else -1)
    op = ring.start(loop, prep, args, buf, finish, _POLLIN, offset == -1)
    try:
        return await read_result(ring, op, cold)
    except OSError as exc:
        # (An O_DIRECT fd that was not known as one: nothing was read.)
        if exc.errno != errno.EINVAL or got or not _flags_looked_up(fd)[2]:
            raise
    return await _read_aligned(fd, size, offset)


async def _read_aligned(fd: int, size: int, offset: int) -> bytes:
    """read() of an O_DIRECT fd: into an aligned buffer of its own, copied out."""
    buf = aligned_buffer(max(size, 1))
    view = memoryview(buf)[:size]
    try:
        n = await readinto(fd, view, offset)
        return bytes(view[:n])
    finally:
        view.release()
        try:
            buf.close()
        except BufferError:  # (the coroutine was closed: the kernel still holds it)
            pass


def _finish_rest(got: int, op: Op, res: int) -> bytes:
    """The ring read the rest of what began from the page cache."""
    return ffi.buffer(op.keep, got + res)[:]


async def readinto(fd: int, buffer: Any, offset: int = -1) -> int:
    """Read from `fd` straight into `buffer` (any writable bytes-like object).

    Returns the number of bytes read, 0 at end of file, like os.readv.  The
    buffer belongs to the kernel until this returns or raises; a bytearray
    cannot be resized meanwhile.  Raises TypeError for a read-only or
    non-buffer object (as FileIO.readinto), OSError EINVAL for an offset
    below -1 (as os.preadv), OSError from the kernel.  At an offset, the
    page cache's bytes come at once, without a trip through the loop.
    """
    if type(fd) is not int or not _INT_MIN <= fd <= _INT_MAX:
        fd = check_fd(fd)
    if type(offset) is not int or not -1 <= offset <= _OFF_MAX:
        offset = check_offset(offset)
    if _redelivery.owed:
        _redelivery.deliver_owed()  # a cancellation this task owes comes first, as in Ring.start
    if offset >= 0:
        kind = type(buffer)
        if kind is bytearray:
            direct, n = True, len(buffer)
        elif kind is memoryview:
            try:
                direct, n = not buffer.readonly and buffer.c_contiguous, buffer.nbytes
            except ValueError:  # released: the general path raises FileIO's TypeError
                direct, n = False, 0
        else:
            direct, n = False, 0
        if direct:
            # The hottest path: a page-cache hit read at once, written out here.
            if fd not in _plain:
                got = _read_now_learning(fd, buffer, offset)
            else:
                try:
                    got = _preadv(fd, (buffer,), offset, _RWF_NOWAIT)
                except BlockingIOError:
                    cache_missed(fd)
                    got = -1
                except OSError:
                    got = -1  # (the ring's read reports a real error as the kernel's)
            if got in (n, 0):
                if pace():
                    await _yield_keeping()
                return got
    # The ring lookup and result() are written out here, which saves two
    # Python calls per read (measured: 2.5k instructions).
    loop = _get_running_loop()
    ring = _loops._last()
    if ring is None or ring._loop_ref() is not loop or ring._closed:
        ring = get_ring(loop)
    # Exported last: from here on nothing raises before the ring owns it or
    # it is released.
    try:
        cbuf = _from_buffer(_CHARS, buffer, True)
    except (TypeError, BufferError, ValueError):
        cbuf = writable_buffer(buffer)
    n = len(cbuf)
    try:
        if fd_state(fd)[2]:
            got = 0  # (an O_DIRECT fd: never tried at once)
        elif offset >= 0:
            got = _read_now_into(fd, buffer, cbuf, n, offset)
        else:
            got = _rw_now(0, fd, cbuf, min(n, MAX_RW)) if n else 0
    except OSError:
        ffi.release(cbuf)
        raise
    if got < 0:  # all of it, or end of file
        ffi.release(cbuf)
        if pace():
            await _yield_keeping()
        return -got - 1
    # (Part of it, or none, was cached: the ring reads the rest, as a
    # blocking read would, so that a short read still means end of file.)
    prep, args, cold = read_request(fd, cbuf + got, min(n - got, MAX_RW),
                                    offset + got if offset >= 0 else -1)
    op = ring.start(loop, prep, args, cbuf, None, _POLLIN, offset == -1)
    try:
        if op.future is None:
            return got + ready(op)
        if got:
            return got + await _rest(op.future)
        return await read_result(ring, op, cold)
    except OSError as exc:
        if exc.errno == errno.EINVAL and (error := direct_error(fd, buffer, offset)) is not None:
            raise error from None
        raise


def _read_now_into(fd: int, buffer: Any, cbuf: Any, n: int, offset: int) -> int:
    """readinto's direct try: -1 - count when it read all of it or reached
    end of file, else how much of the start it read (the ring's turn)."""
    got = read_now(fd, buffer, n, offset)
    if 0 < got < n:  # end of file, or only part of it was cached: ask again
        more = read_now(fd, ffi.buffer(cbuf + got, n - got), n - got, offset + got)
        if more == 0:
            return -1 - got
        got += max(more, 0)
    if got in (n, 0):
        return -1 - got
    return max(got, 0)


async def _rest(fut: asyncio.Future[int]) -> int:
    """The ring's part of a read that began directly.  It is not cancelled:
    the caller's buffer is no longer untouched, so the read must end whole;
    a cancellation meanwhile comes at the caller's next await."""
    owed = None
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError as exc:
            owed = exc
    if owed is not None:
        _redelivery.redeliver_later(owed)
    return fut.result()


async def write(fd: int, data: Any, offset: int = -1) -> int:
    """Write `data` (any bytes-like object) to `fd`, like os.write or os.pwrite.

    Returns the number of bytes written, which may be fewer than len(data).
    Raises TypeError for a str or non-buffer, BufferError for a
    non-contiguous one (as os.write), OSError EINVAL for an offset below -1
    (as os.pwrite), OSError from the kernel (EPIPE as BrokenPipeError, ...).
    """
    fd = check_fd(fd)
    offset = check_offset(offset)
    if _redelivery.owed:
        _redelivery.deliver_owed()  # (before the export, which must not be left to the collector)
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    cbuf = readable_buffer(data)
    n = min(len(cbuf), MAX_RW)
    done = 0
    if offset == -1 and n and not fd_state(fd)[2]:  # (O_DIRECT: never tried at once)
        try:
            done = _rw_now(1, fd, cbuf, n)
        except OSError:
            ffi.release(cbuf)
            raise
        if done < 0:  # all of it, or what a pipe or a socket had room for
            ffi.release(cbuf)
            if pace():
                await _yield_keeping()
            return -done - 1
    op = ring.start(loop, _PREP_RW, (_WRITE, fd, cbuf + done, n - done, offset, 0),
                    cbuf, None, _POLLOUT, offset == -1)
    try:
        if done:
            return done + await _rest(op.future) if op.future is not None else done + ready(op)
        return await result(ring, op)
    except OSError as exc:
        if exc.errno == errno.EINVAL and (error := direct_error(fd, data, offset)) is not None:
            raise error from None
        raise


async def fsync(fd: Any, *, datasync: bool = False) -> None:
    """Flush `fd`'s data (and, unless datasync, its metadata) to storage.

    Like os.fsync / os.fdatasync: `fd` is an fd or has a fileno() method;
    raises the OSError the kernel reports.
    """
    if not isinstance(fd, int) and hasattr(fd, "fileno"):
        fd = fd.fileno()
    fd = check_fd(fd)
    if fd < 0:
        raise ValueError(f"file descriptor cannot be a negative integer ({fd})")
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    flags = _DATASYNC if datasync else 0
    op = ring.start(loop, _PREP_RW, (_FSYNC, fd, _NULL, 0, 0, flags), None, _finish_none)
    await result(ring, op)


def _finish_none(op: Op, res: int) -> None:
    return None
