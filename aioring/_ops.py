"""L2: fd-level operations, one function per opcode.

Each function checks its arguments completely before anything reaches the
ring (a bad argument never leaves an SQE behind), tries the call at once
where the kernel can answer without waiting (the page cache, a pipe's or a
socket's buffer), and otherwise hands the ring the buffer the kernel will
touch and a finish function for the CQE.  Reads and writes of one buffer
are prepared by the core, which pins the buffer itself (Ring.start with prep
None); nothing here touches ffi or lib, whatever needs C memory built is the
binding's (_binding).

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
import inspect
import mmap
import operator
import os
import select
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import _binding, _loops, _redelivery
from ._binding import FSYNC_DATASYNC, IOSQE_ASYNC, OP_FSYNC, OP_READ, OP_WRITE, Filling
from ._core import TRY_READ, TRY_READINTO, CacheFirst, fileops_setup, read_cached, readinto_cached
from ._core import pace as pace  # noqa: PLC0414  (re-exported: the layers above count their calls by it)
from ._loops import get_ring
from ._ringbase import Op, RingBase, ready

__all__ = ["aligned_buffer", "fsync", "read", "readinto", "result", "write"]

# The kernel moves at most this much in one read or write (MAX_RW_COUNT).
MAX_RW = 0x7FFFF000
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)
_OFF_MAX = 2**63 - 1

_POLLIN = select.POLLIN
_POLLOUT = select.POLLOUT
_get_running_loop = asyncio.get_running_loop


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
# way (preadv2 and pwritev2 at offset -1): what a pipe or a socket holds or
# has room for, and the page cache's part of a file, move at once; the rest
# goes to the ring.
_readv_now = os.preadv
_writev_now = os.pwritev
_fstat = os.fstat
_S_ISREG = stat.S_ISREG
# What the try at once answers for an fd that cannot say without waiting (a
# terminal, a file system without non-blocking I/O, an O_DIRECT buffer the
# kernel refuses): the ring's turn, whose operation says it again if it is an
# error.  Any other error is raised at once (a socket's reset, say, is
# reported once: the ring would not see it again).
_RING_DECIDES = frozenset({errno.EAGAIN, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


def _rw_now(write: bool, fd: int, buffer: Any, n: int) -> int:
    """Read into (or write) the first n (> 0) bytes of `buffer` at the fd's
    position without waiting: -1 - count when done (all of it, what a pipe
    or a socket held or had room for, or up to end of file); else the count
    done so far (0: none), the ring's to go on from."""
    call = _writev_now if write else _readv_now
    try:
        got: int = call(fd, (buffer,), -1, _RWF_NOWAIT)
    except OSError as exc:
        if exc.errno in _RING_DECIDES:
            return 0
        raise
    if got == 0 or got >= n:
        return -1 - got
    try:
        regular = _S_ISREG(_fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        return -1 - got  # a pipe's or a socket's share
    # A regular file: the page cache held only part of it (or it ends here).
    view = memoryview(buffer).cast("B")
    while got < n:
        try:
            more: int = call(fd, (view[got:n],), -1, _RWF_NOWAIT)
        except OSError:
            return got
        if more == 0 and not write:
            break  # the end of the file
        if more <= 0:
            return got
        got += more
    return -1 - got


# pace() -> bool (the core's): count one call; True when the caller should
# yield to the loop now.  The core counts it in _unyielded[0], and hands the
# call that makes YIELD_EVERY to _pace_due.
def _pace_due() -> bool:
    """pace() of the call that makes YIELD_EVERY: the yield's bookkeeping."""
    _unyielded[0] += 1
    if _unyielded[0] >= YIELD_EVERY:
        _unyielded[0] = 0
        _unyielded[1] += 1
        if _unyielded[1] >= FORGET_EVERY:  # (see cache_due)
            _unyielded[1] = 0
            now = _monotonic()
            if now >= _forget_at[0]:
                _forget_at[0] = now + FORGET_SECONDS
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
# CACHE_BACKOFF_MAX is 1024, not 64: a try that misses while the device is
# busy takes the loop's thread 35 us on average (the page's read is set up
# and the device notified, one request at a time), and at 64 the loop made one
# every 32 reads (random 4 KiB reads at 64 tasks, system calls timed by
# perf trace: 3.2% of the loop's time in the tries, 1.1 us a read); at 1024,
# one every 450 reads.  Side by side, 5 interleaved runs each, the loop's
# thread spent 28.7 us against 27.0 us a read on asyncio's loop, 23.1 against
# 22.8 on uvloop (64 tasks; 16 tasks: 33.1 against 32.9, 27.7 against 28.0,
# within the noise).  A file whose pages become cached while it is read is
# noticed after at most 1024 reads by the ring (which the page cache serves
# inside the submit call), some 40 ms at these rates.
#
# An O_DIRECT fd is never tried: there the "non-blocking" read is a
# synchronous device read (55 us here), which would stall the loop.  When the
# kernel refuses its buffer, length or offset (EINVAL), the error names the
# alignment the kernel reports for it (statx's STATX_DIOALIGN).
#
# What is known of the fds is forgotten every FORGET_EVERY yields of pace (some
# 4096 calls), once FORGET_SECONDS passed since it was last forgotten, as an
# fd number may be closed and given to another file.  (Every yield was too
# often: 64 tasks reading 64 files cold then tried each read.  And by the
# count alone, 64 tasks reading 64 files cold through aioring.open, two paced
# calls a read (the seek's and the read's), forgot it every 2,000 reads, some
# 0.1 s here, and tried 15% of their reads: 1,976 tries, 1,787 of them
# missed, in 12,800 reads.)  A page-cache hit on an fd known to be tried
# (_plain) costs one set lookup; once in 64 such calls the core looks the
# fd's flags up again (src/fileops.h), so that an fd number reused for an
# O_DIRECT file leaves _plain within a few dozen reads, not a second of
# synchronous device reads.
CACHE_BACKOFF_MAX = 1024
FORGET_EVERY = 64
FORGET_SECONDS = 1.0
_forget_at = [0.0]  # (time.monotonic)
_monotonic = time.monotonic
_fcntl = fcntl.fcntl
_F_GETFL = fcntl.F_GETFL
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_NOT_PLAIN = _O_DIRECT | getattr(os, "O_PATH", 0)
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
        state[2], state[3] = _binding.dio_align(fd) or (1, 1)  # (unknown: the kernel judges)
    return state


def cache_due(fd: int) -> bool:
    """Whether this read at an offset of fd is tried from the page cache at
    once (then cache_hit or cache_missed follows).  Asked again before the
    try itself, it answers the same."""
    return _due(fd_state(fd))


def _due(state: list[int]) -> bool:
    """cache_due of the fd whose state (_fd_cache) this is."""
    if state[2]:
        return False
    if state[0] and _cold_reads[0]:
        state[0] -= 1
        return False
    return True


def missed_lately(fd: int) -> bool:
    """Whether the last try from the page cache of a read of fd at an offset
    missed (and no hit came since): its pages are read from the device."""
    state = _fd_cache.get(fd)
    return state is not None and state[1] > 1


def opened(fd: int, flags: int) -> None:
    """aioring opened a file at fd with `flags`: what was known of the fd
    number was another file's.  Unless O_DIRECT (looked up at its first
    read) or O_PATH (never read), its reads at an offset are tried at once
    until one misses."""
    _fd_cache.pop(fd, None)
    if flags & _NOT_PLAIN:
        _plain.discard(fd)
    else:
        _plain.add(fd)


def cache_hit(fd: int) -> None:
    state = fd_state(fd)
    state[0], state[1] = 0, 1
    _plain.add(fd)


def cache_missed(fd: int) -> None:
    _plain.discard(fd)
    state = fd_state(fd)
    state[0] = state[1]
    state[1] = min(state[1] * 2, CACHE_BACKOFF_MAX)


# The page-cache hit of a read at an offset of an fd in _plain, the hottest
# path, is taken by the core (read_cached, readinto_cached: src/fileops.h)
# with the decisions written here: it tries only an fd in _plain, while
# nothing is owed and no yield is due (those calls come here), counts the
# calls it serves in _unyielded and reports a miss to cache_missed; and for
# read() it says (Ellipsis) when a read goes straight to the ring
# (_cold_op), counting down the fd's backoff in _fd_cache.
_cold_reads = [0]  # reads of pages thought not cached, in flight
fileops_setup(_plain, _redelivery.owed, _unyielded, YIELD_EVERY, UNZEROED_MIN, cache_missed, _pace_due,
              _fd_cache, _cold_reads)


# A 4 KiB read served by the page cache costs a synchronous os.pread loop
# 2,205 instructions (callgrind, the loop's own included) and 1.3 us, most of
# it the kernel's.  As a Python coroutine calling the core's try, aioring's
# readinto cost 3,682: the coroutine's frame and its creation were 730 of
# them, the GIL's release and retaking around a copy of one page 320, and the
# Python path that every 64th call took for its yield to the loop 130 a read
# (asyncio's loop; its yield itself, some 20,000 instructions, is 300 a
# read).  Hence CacheFirst (the try and its hit without a frame), the GIL
# kept over small reads into heap memory (src/fileops.c), and a hit served
# in C when a yield is due: 2,426 instructions.  The kernel's preadv2 costs
# 0.1 us more than pread (the iovec), whatever its flags.
_F = TypeVar("_F", bound=Callable[..., Any])


async def _served_at_yield(result: Any) -> Any:
    """A read the core served when a yield to the loop was due: counted by
    pace, which yields (after the read, as a read served here does)."""
    if pace():
        await _yield_keeping()
    return result


def _cache_first(kind: int, rest: Callable[..., Any], *cold: Callable[..., Any]) -> Callable[[_F], _F]:
    """The decorated coroutine function as the core's CacheFirst: a call
    awaited tries the page cache (its kind's try: TRY_READINTO or TRY_READ)
    in its first step, without a coroutine frame, and returns a hit there
    (when a yield to the loop is due, after _served_at_yield's yield);
    otherwise it goes on in rest's coroutine with the try's answer, as the
    decorated function does; `cold` (_cold_op, _cold_raised for TRY_READ,
    _direct_op, _direct_raised for TRY_READINTO) starts the ring's read of
    the try's Ellipsis, or of an O_DIRECT fd's readinto, and the call awaits
    its future without a coroutine (see _cold_op).  Calls with keywords or a wrong count of
    arguments are the function's own (its binding, its errors).  Name,
    docstring and signature are the function's (functools.update_wrapper),
    and asyncio.iscoroutinefunction() says True for it, as for the function."""
    def wrap(func: _F) -> _F:
        return standing_in(CacheFirst(kind, func, rest, _served_at_yield, *cold), func)
    return wrap


def standing_in(fast: Any, func: _F) -> _F:
    """`fast`, a C callable of the core that stands in for the coroutine
    function `func`, with func's name, docstring and signature
    (functools.update_wrapper), and taken for a coroutine function by
    asyncio.iscoroutinefunction() and inspect, as func is."""
    functools.update_wrapper(fast, func)
    fast._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
    if hasattr(inspect, "markcoroutinefunction"):  # (Python 3.12 on)
        inspect.markcoroutinefunction(fast)
    return fast


# A ring read of pages that are not cached is issued in the submitting call:
# ext4 and xfs allocate the pages, start the device read and wait for it with
# a callback, without a worker (how fio's buffered io_uring reads go).  Handed
# to the kernel's workers (IOSQE_ASYNC, COLD_HANDOFF) the read costs a
# worker's wake-up and its blocking read besides: measured, random 4 KiB reads
# not cached, 6 interleaved runs each, process CPU per read (loop's thread):
# 64 tasks 36.2 us (22.4) handed over against 24.4 us (24.4) inline, at the
# same rate (23.3k/s and 23.0k/s); 16 tasks 47.5 us (27.6) against 30.3 us
# (30.3), 20.6k/s against 27.3k/s (the wake-up is latency at lower depth).
# The loop's thread saves 2 to 3 us a read by the hand-over, the process
# spends 12 to 18 us more.  (On a machine loaded by other work the 64 workers'
# share of the CPUs made the hand-over up to twice as fast in earlier runs:
# more threads, more CPU time, not less work.)
#
# An O_DIRECT read (never tried at once) is issued inline too.  Handed over
# while another is in flight, the worker only issues it and the device
# completes it without the worker, which once measured even (random 4 KiB
# O_DIRECT reads at 64 tasks, 6 interleaved runs: the loop's thread 21.0 us a
# read handed over against 22.2 us inline; 4 earlier runs: 11.0k/s against
# 10.5k/s; a quiet run later: 35.0k against 36.2k on asyncio's loop, 41.3k
# against 41.1k on uvloop).  Since then inline has been ahead in 5 of 6 runs
# of cold_reads.py on one day, by 1.3x-2.3x the reads a second (quiet: 31.7k
# against 19.1k, 33.8k against 22.1k; the other run: 31.4k against 32.0k,
# 37.1k against 33.6k), and in both runs of the version before, run
# alternately with this one.
# benchmarks/cold_reads.py measures both choices (DIRECT_HANDOFF, COLD_HANDOFF).
#
# No readahead advice is given for an fd read at random offsets: the kernel
# already reads a lone random 4 KiB read as it is (the device was asked 3.7
# to 4.0 KiB per read, /sys/block/*/stat, with and without advice), and
# POSIX_FADV_RANDOM set on the fd saved nothing measurable: the process spent
# 25.2 us a read with it and 25.2 without on asyncio's loop, 22.0 against
# 21.4 on uvloop (random 4 KiB reads at 64 tasks, 6 interleaved runs); fio's
# figure is the same with its default hint and --fadvise_hint=0.  The advice
# would also change the open file for every other user of it.
COLD_HANDOFF = False
DIRECT_HANDOFF = False


def read_request(fd: int, start: int, n: int, offset: int) -> tuple[tuple[int, ...], bool]:
    """The core's arguments (Ring.start with prep None) for a ring read of n
    bytes of fd at offset (-1: its position) into the op's pinned buffer from
    `start` on, and whether the pages are thought not cached (then await it
    with result(..., cold))."""
    if offset >= 0:
        state = _fd_cache.get(fd)
        if state is not None and (state[1] > 1 or state[2]):
            if _cold_reads[0] and (DIRECT_HANDOFF if state[2] else COLD_HANDOFF):
                return (OP_READ, fd, start, n, offset, 0, IOSQE_ASYNC), True
            return (OP_READ, fd, start, n, offset, 0), True
    return (OP_READ, fd, start, n, offset, 0), False


def direct_error(fd: int, buffer: Any, offset: int) -> OSError | None:
    """For the kernel's EINVAL on a read or write of fd: when fd is opened with
    O_DIRECT (looked up afresh), the OSError EINVAL that names the alignment
    the file needs and what was given; else None (the kernel's error stands)."""
    state = _flags_looked_up(fd)
    if not state[2]:
        return None
    with memoryview(buffer) as view:
        n = view.nbytes
    addr = _binding.buffer_address(buffer)
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


_READINTO_TYPE = "readinto() argument must be a writable contiguous bytes-like object, not {}"


def writable_size(buffer: Any) -> int:
    """The size in bytes of `buffer`, which the kernel will write into:
    TypeError, as FileIO.readinto raises it, when it cannot."""
    if type(buffer) is bytearray:
        return len(buffer)
    try:
        view = memoryview(buffer)
    except (TypeError, ValueError):
        raise TypeError(_READINTO_TYPE.format(type(buffer).__name__)) from None
    with view:
        if view.readonly or not view.c_contiguous:
            raise TypeError(_READINTO_TYPE.format(type(buffer).__name__))
        return view.nbytes


def readable_size(data: Any) -> int:
    """The size in bytes of `data`, which the kernel will read: TypeError
    for a str or a non-buffer, BufferError for a non-contiguous one, as
    os.write raises them."""
    kind = type(data)
    if kind is bytes or kind is bytearray:
        return len(data)
    if isinstance(data, str):
        raise TypeError("a bytes-like object is required, not 'str'")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"a bytes-like object is required, not {type(data).__name__!r}") from None
    with view:
        if not view.c_contiguous:  # what os.write and socket.send raise
            raise BufferError("memoryview: underlying buffer is not C-contiguous")
        return view.nbytes


async def result(ring: RingBase, op: Op, cold: bool = False) -> Any:
    """Await `op`; if the caller is cancelled, wait for the kernel (Ring.settle).
    `cold`: a read made by read_request of pages thought not cached, counted
    among the cold reads in flight meanwhile."""
    if op.future is None:
        return ready(op)
    if cold:
        _hurried(ring, op)
        _cold_reads[0] += 1
    try:
        return await op.future
    except asyncio.CancelledError as exc:
        return await ring.settle(op, exc)
    except GeneratorExit:
        ring.abandon(op)  # the coroutine was closed: the op keeps its pin for the kernel
        raise
    finally:
        if cold:
            _cold_reads[0] -= 1


def _hurried(ring: RingBase, op: Op) -> None:
    """`op`, a read of pages thought not cached, was queued: ring.hurry(),
    and should that raise, the op abandoned (the kernel may hold its buffer)."""
    try:
        ring.hurry()
    except BaseException:
        ring.abandon(op)
        raise


def ring_of(loop: asyncio.AbstractEventLoop) -> RingBase:
    """get_ring(loop), with the ring of the last lookup checked first
    (written out here, it saves a Python call per operation)."""
    ring = _loops._last()
    if ring is None or ring._loop_ref() is not loop or ring._closed:
        ring = get_ring(loop)
    return ring


def device_ring_of(loop: asyncio.AbstractEventLoop, ring: RingBase | None = None) -> RingBase:
    """The ring of a read that waits for the device (pages thought not
    cached, an O_DIRECT fd): `ring` (default ring_of(loop)), or with
    aioring.set_sqpoll the loop's polling ring (_loops.device_ring)."""
    if ring is None:
        ring = ring_of(loop)
    if _loops.sqpoll_idle_ms is None:
        return ring
    return _loops.device_ring(loop, ring)


# A read tried at once lands in a buffer of the thread's own (one per
# thread: the try releases the GIL), whose bytes are copied out at once:
# cheaper than a new zeroed buffer for each read.
class _Scratch(threading.local):
    buf = bytearray(0)  # (of length 0 until a thread reads: never written)


_scratch_of = _Scratch()


def _scratch(n: int) -> bytearray:
    """This thread's buffer for a read of n (< UNZEROED_MIN) bytes tried at once."""
    buf = _scratch_of.buf
    if len(buf) != n:
        buf = _scratch_of.buf = bytearray(n)
    return buf


def _filled(out: bytes | bytearray, n: int) -> bytes:
    """The first n bytes of `out` (a new_bytes object, or a bytearray), as bytes."""
    if type(out) is bytes:
        return out if n == len(out) else out[:n]
    return bytes(out) if n == len(out) else bytes(memoryview(out)[:n])


def _finish_read(op: Op, res: int) -> bytes:
    """read()'s result: what the kernel filled of the pinned buffer (from
    args[2], the start of the ring's part, on) and what came before it."""
    return _filled(op.pinned, op.args[2] + res)


def _try_read(fd: int, target: Any, n: int, offset: int) -> int:
    """The try at once of a read of n bytes into `target`: -1 - count when it
    read all of it or reached end of file, else how much of the start it read
    (the ring's turn from there)."""
    if offset >= 0:
        return _read_now_into(fd, target, n, offset)
    return _rw_now(False, fd, target, min(n, MAX_RW)) if n else 0  # (0 bytes: the ring checks the fd)


def _read_rest(fd: int, size: int, offset: int, head: Any) -> Awaitable[bytes]:
    """read() after the core's try, which answered `head` (read_cached's
    answer: the page cache's hit, served; or its start; Ellipsis; or None):
    what the call awaits.  (A function: no coroutine of its own between the
    caller and the one it returns.)"""
    if head is ...:
        return _cold_call(fd, size, offset)
    return _read_tried(fd, size, offset, head)


async def _read_tried(fd: int, size: int, offset: int, head: bytes | bytearray | None) -> bytes:
    """_read_rest's await, but for the core's Ellipsis."""
    if type(head) is bytes:
        return head
    out: bytes | bytearray | None = None
    target: Any
    ring = None
    if head is not None:  # (tried: none or the start of it was cached, the ring reads the rest)
        target, got = head, len(head)
    else:
        if type(fd) is not int or not _INT_MIN <= fd <= _INT_MAX:
            fd = check_fd(fd)
        if type(size) is not int or not 0 <= size < UNZEROED_MIN:
            size = check_size(size)
        if type(offset) is not int or not -1 <= offset <= _OFF_MAX:
            offset = check_offset(offset)
        if _redelivery.owed:
            _redelivery.deliver_owed()
        loop = _get_running_loop()
        ring = ring_of(loop)  # (first: a refused io_uring raises, even where the try would do)
        state = _fd_cache.get(fd)
        if state is None:
            state = _flags_looked_up(fd)
        if state[2]:  # an O_DIRECT fd: never tried at once, and into aligned memory
            # (Its flags looked up again first: the number may be another
            # file's by now, whose reads would pay for an aligned buffer each
            # until what is known of fds is forgotten.  This path makes an
            # mmap a call anyway.)
            state = _flags_looked_up(fd)
            if state[2]:
                return await _read_aligned(fd, size, offset)
        # A small result is tried into the thread's scratch buffer and copied
        # out; a large one is the bytes object the kernel fills (no copy follows).
        if offset >= 0 and not _due(state):
            target, got = None, 0  # (its recent tries missed: the ring's at once)
        elif size < UNZEROED_MIN:
            target = _scratch(size)
            got = _try_read(fd, target, size, offset)
        else:
            out = new_bytes(size)
            with Filling(out) as target:
                got = _try_read(fd, target, size, offset)
    if got < 0:  # all of it from the page cache, or end of file
        data = _filled(target if out is None else out, -got - 1)
        if pace():
            await _yield_keeping()
        return data
    if ring is None:
        loop = _get_running_loop()
        ring = ring_of(loop)
    if out is None:
        if got:  # (the start from the page cache, the rest through the ring)
            out = bytearray(size)
            out[:got] = memoryview(target)[:got]
        else:
            out = new_bytes(size) if size > 1 else bytearray(size)
    args, cold = read_request(fd, got, min(size - got, MAX_RW), offset + got if offset >= 0 else -1)
    if cold:
        ring = device_ring_of(loop, ring)
    return await _read_by_ring(loop, ring, fd, out, got, size, offset, args, cold)


def _cold_op(fd: int, size: int, offset: int) -> bytes | tuple[RingBase, Op, bytes, asyncio.Future[int]]:
    """read() of data that is not cached, its hottest case, which the core's
    try answered with Ellipsis (src/fileops.h: while other reads of uncached
    pages are in flight, a small read at an offset of an fd known, not
    O_DIRECT, whose recent tries missed, nothing owed): the ring's read of it
    started, into a bytes object that is the result.  The bytes when the read
    completed at once; else (ring, op, out, future), the future's result the
    count read into out.  CacheFirst's call awaits the future itself and
    counts the read among the cold ones meanwhile (src/fileops.c), also for
    a call of read() that is not its own (_read_rest's _cold_call)."""
    loop = _get_running_loop()
    ring = device_ring_of(loop)
    out = bytes(size)
    args: tuple[int, ...] = (OP_READ, fd, 0, size, offset, 0)
    if COLD_HANDOFF:
        args += (IOSQE_ASYNC,)
    op = ring.start(loop, None, args, out, None, _POLLIN)
    fut = op.future
    if fut is None:
        n = ready(op)
        return out if n == size else out[:n]
    _hurried(ring, op)
    return ring, op, out, fut


async def _cold_raised(ring: RingBase, op: Op, fd: int, size: int, offset: int, out: bytes,
                       exc: BaseException) -> bytes:
    """The await of a cold read's future (see _cold_op) met `exc`, thrown
    in or the future's: a cancellation waits for the kernel (Ring.settle),
    an O_DIRECT fd that was not known as one is read as one (nothing was
    read), anything else is raised.  The read is counted out at the end."""
    try:
        if isinstance(exc, asyncio.CancelledError):
            n = await ring.settle(op, exc)
        elif isinstance(exc, OSError) and exc.errno == errno.EINVAL and _flags_looked_up(fd)[2]:
            return await _read_aligned(fd, size, offset)
        else:
            raise exc
    finally:
        _cold_reads[0] -= 1
    return out if n == size else out[:n]


async def _read_by_ring(loop: asyncio.AbstractEventLoop, ring: RingBase, fd: int, out: bytes | bytearray,
                        got: int, size: int, offset: int, args: tuple[int, ...], cold: bool) -> bytes:
    """read()'s ring read (read_request's `args` and `cold`) into `out`,
    this call's own, whose first `got` bytes the page cache gave."""
    # (The pin need not be writable: out is this call's own, which the kernel
    # fills.  No finish function: the count is cut here, in the task, which
    # saves the dispatch a Python call per completion.)
    op = ring.start(loop, None, args, out, None, _POLLIN, offset == -1)
    try:
        return _filled(out, got + await result(ring, op, cold))
    except OSError as exc:
        # (An O_DIRECT fd that was not known as one: nothing was read.)
        if exc.errno != errno.EINVAL or got or not _flags_looked_up(fd)[2]:
            raise
    return await _read_aligned(fd, size, offset)


@_cache_first(TRY_READ, _read_rest, _cold_op, _cold_raised)
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
    return await _read_rest(fd, size, offset, read_cached(fd, size, offset))


# The awaitable of a read whose try answered Ellipsis (the C steps of read()'s
# CacheFirst call after its try, for a call that is not its own).
_cold_call = read.cold_call  # type: ignore[attr-defined]


async def _read_aligned(fd: int, size: int, offset: int) -> bytes:
    """read() of an O_DIRECT fd: into an aligned buffer of its own, copied out."""
    buf = aligned_buffer(max(size, 1))
    view = memoryview(buf)[:size]
    try:
        n = await readinto(fd, view, offset)
        return bytes(view[:n])
    finally:
        try:
            view.release()
            buf.close()
        except BufferError:  # (the coroutine was closed: the kernel still holds them, its op lets go)
            pass


async def _readinto_rest(fd: int, buffer: Any, offset: int, got: int) -> int:
    """readinto() after the core's try, which answered `got` (readinto_cached's
    answer: 0 or more, the page cache's hit, served)."""
    if got >= 0:
        return got
    # What the core's try read (0: none, the page cache missed; part of it:
    # the rest follows, never read twice), -1 if it made none.
    tried = -2 - got if got < -1 else -1
    if type(fd) is not int or not _INT_MIN <= fd <= _INT_MAX:
        fd = check_fd(fd)
    if type(offset) is not int or not -1 <= offset <= _OFF_MAX:
        offset = check_offset(offset)
    if _redelivery.owed:
        _redelivery.deliver_owed()  # a cancellation this task owes comes first, as in Ring.start
    loop = _get_running_loop()
    ring = ring_of(loop)
    n = writable_size(buffer)
    state = _fd_cache.get(fd)
    if state is None:
        state = _flags_looked_up(fd)
    if tried >= 0:  # (the fast path's try missed, or read part of it: from there on)
        got = _rest_now(fd, buffer, n, offset, tried) if tried else 0
    elif state[2] or (offset >= 0 and not _due(state)):
        got = 0  # (an O_DIRECT fd, never tried at once; or its recent tries missed)
    else:
        got = _try_read(fd, buffer, n, offset)
    if got < 0:  # all of it, or end of file
        if pace():
            await _yield_keeping()
        return -got - 1
    # (Part of it, or none, was cached: the ring reads the rest, as a
    # blocking read would, so that a short read still means end of file.)
    args, cold = read_request(fd, got, min(n - got, MAX_RW), offset + got if offset >= 0 else -1)
    if cold:
        ring = device_ring_of(loop, ring)
    op = ring.start(loop, None, args, buffer, None, _POLLIN, offset == -1, writable=True)
    try:
        if op.future is None:
            return got + ready(op)
        if got:
            return got + await _rest(op.future)
        return await result(ring, op, cold)
    except OSError as exc:
        if exc.errno == errno.EINVAL and (error := direct_error(fd, buffer, offset)) is not None:
            raise error from None
        raise


def _direct_op(fd: int, buffer: Any, offset: int) -> int | tuple[RingBase, Op, Any, asyncio.Future[int]]:
    """readinto() of an fd known as O_DIRECT, at an offset, which is never
    tried from the page cache (the core's CacheFirst call, src/fileops.h):
    the ring's read into `buffer` started.  The count when it completed at
    once; else (ring, op, buffer, future), the future's result the count.
    As _readinto_rest's read of such an fd, with its checks of the buffer."""
    n = writable_size(buffer)
    loop = _get_running_loop()
    ring = device_ring_of(loop)
    args: tuple[int, ...] = (OP_READ, fd, 0, min(n, MAX_RW), offset, 0)
    if DIRECT_HANDOFF and _cold_reads[0]:
        args += (IOSQE_ASYNC,)
    op = ring.start(loop, None, args, buffer, None, _POLLIN, writable=True)
    fut = op.future
    if fut is None:
        try:
            return ready(op)
        except OSError as exc:
            if exc.errno == errno.EINVAL and (error := direct_error(fd, buffer, offset)) is not None:
                raise error from None
            raise
    _hurried(ring, op)
    return ring, op, buffer, fut


async def _direct_raised(ring: RingBase, op: Op, fd: int, buffer: Any, offset: int, _: Any,
                         exc: BaseException) -> int:
    """The await of _direct_op's future met `exc`, thrown in or the
    future's: a cancellation waits for the kernel (Ring.settle), EINVAL
    names the alignment O_DIRECT needs (direct_error), anything else is
    raised.  The read is counted out at the end."""
    try:
        if isinstance(exc, asyncio.CancelledError):
            return await ring.settle(op, exc)
        if isinstance(exc, OSError) and exc.errno == errno.EINVAL:
            error = direct_error(fd, buffer, offset)
            if error is not None:
                raise error from None
        raise exc
    finally:
        _cold_reads[0] -= 1


@_cache_first(TRY_READINTO, _readinto_rest, _direct_op, _direct_raised)
async def readinto(fd: int, buffer: Any, offset: int = -1) -> int:
    """Read from `fd` straight into `buffer` (any writable bytes-like object).

    Returns the number of bytes read, 0 at end of file, like os.readv.  The
    buffer belongs to the kernel until this returns or raises; a bytearray
    cannot be resized meanwhile.  Raises TypeError for a read-only or
    non-buffer object (as FileIO.readinto), OSError EINVAL for an offset
    below -1 (as os.preadv), OSError from the kernel.  At an offset, the
    page cache's bytes come at once, without a trip through the loop.
    """
    return await _readinto_rest(fd, buffer, offset, readinto_cached(fd, buffer, offset))


def _read_now_into(fd: int, buffer: Any, n: int, offset: int) -> int:
    """The try at once of a read of n bytes at `offset` into `buffer`: -1 -
    count when it read all of it or reached end of file, else how much of
    the start it read (the ring's turn)."""
    return _rest_now(fd, buffer, n, offset, read_now(fd, buffer, n, offset))


def _rest_now(fd: int, buffer: Any, n: int, offset: int, got: int) -> int:
    """_read_now_into after its first try, which answered `got` (as read_now)."""
    if 0 < got < n:  # end of file, or only part of it was cached: ask again
        with memoryview(buffer) as whole, whole.cast("B") as view, view[got:n] as rest:
            more = read_now(fd, rest, n - got, offset + got)
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
    if type(fd) is not int or not _INT_MIN <= fd <= _INT_MAX:
        fd = check_fd(fd)
    if type(offset) is not int or not -1 <= offset <= _OFF_MAX:
        offset = check_offset(offset)
    if _redelivery.owed:
        _redelivery.deliver_owed()
    loop = _get_running_loop()
    ring = ring_of(loop)
    n = min(readable_size(data), MAX_RW)
    done = 0
    if offset == -1 and n and not fd_state(fd)[2]:  # (O_DIRECT: never tried at once)
        done = _rw_now(True, fd, data, n)
        if done < 0:  # all of it, or what a pipe or a socket had room for
            if pace():
                await _yield_keeping()
            return -done - 1
    op = ring.start(loop, None, (OP_WRITE, fd, done, n - done, offset, 0), data, None, _POLLOUT,
                    offset == -1)
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
    flags = FSYNC_DATASYNC if datasync else 0
    op = ring.start(loop, _binding.prep_rw, (OP_FSYNC, fd, _binding.NULL, 0, 0, flags), None, _finish_none)
    await result(ring, op)


def _finish_none(op: Op, res: int) -> None:
    return None
