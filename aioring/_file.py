"""L4: file objects whose data moves through the ring.

The semantics of Python's file objects (buffering, text decoding and
encoding, newline translation, tell cookies, append and update modes, every
error message) live in the stdlib's io stack, and the surest way to be
identical to it is to use it.  `open_stack` (in `_open`) builds exactly the
stack builtin `open` builds (TextIOWrapper over BufferedReader/Writer/Random
over a raw file), with one difference: the raw file is a `RingFileIO`, a
`RawFile` (in `_rawfile`: a FileIO that tracks its own position and never
blocks inside the event loop) whose data this module moves through the ring.

The async wrappers (threadpool.binary/text) drive it in three steps per call:

1. prefetch: before the stdlib method runs, the wrapper predicts which bytes
   the call can read (a read(n) needs n bytes past what is buffered, a
   readline up to the next encoded newline, read() up to end of file, ...)
   plus the one extra raw read the stdlib may make to fill its buffer, and
   `fill` reads them through the ring into the raw file's *window*;
2. the stdlib method runs synchronously; the raw file serves its reads from
   the window and queues its writes, truncates and close (`defer`);
3. `drain` performs the queue through the ring, in order.

Reads always see the file's latest contents: queued writes are copied into
the window as they are queued, and a read beyond the window drains the queue
first.  If a prediction falls short, the raw file reads synchronously
(counted in `SYNC_READS`) rather than ever returning short data that the
stdlib would take for end of file.  Outside a wrapper's call (a detached
buffer, a finalizer) RingFileIO behaves as a plain FileIO with real syscalls.
"""

from __future__ import annotations

import asyncio
import collections
import io
import os
import sys
from typing import Any

from . import _binding, _core, _ops, _pathops
from ._binding import Filling, VectorRead
from ._ops import YIELD_EVERY, _unyielded, pace  # noqa: F401 (the tests read and set them here)
from ._loops import get_ring
from ._rawfile import CLOSE, TRUNCATE, WRITE, RawFile, find_line_end
from ._ringbase import _DONE as _OP_DONE

__all__ = ["DIRECT_READ", "INF", "REST_MAX", "REST_MIN", "RingFileIO", "read_direct", "read_rest",
           "read_rest_now", "readinto_direct", "ring_raw", "write_direct"]

INF = 1 << 62
_MIN_FILL = 128 * 1024  # a sequential fill reads at least this much ahead
DIRECT_READ = 64 * 1024  # binary reads this large skip the window
_REST_SPARE = 4096  # read(-1) reads this much past the size it knows: the end shows
REST_MIN = 2  # (bytes of length 0 and 1 are shared objects: never filled)
REST_MAX = _ops.MAX_RW - _REST_SPARE
_read_whole_now = _core.read_whole_now


class RingFileIO(RawFile):
    """The raw file aioring.open puts under the stdlib's buffered layer: a
    RawFile whose window and queue the async wrappers fill and drain through
    the ring, one call at a time (see the module docstring).

    What the async wrappers (aioring.base, aioring.threadpool) use besides
    FileIO's own methods, and nothing else of it:

    * ``pos``: the file's position (FileIO's ``tell()``, without its check
      of a closed file); ``size``: its size as the current call knows it;
      ``appending``: opened in append mode.
    * ``busy``: a wrapper call has the file (``enter``/``acquire`` take it,
      ``release`` gives it up); ``queue``: the writes, truncates and close
      that the stdlib's methods made while ``defer`` was set, which ``drain``
      (or ``finish_close_now``) performs.
    * ``begin_call``/``end_call`` around a call; ``holds``/``holds_line``
      ask the window, ``fill``/``fill_line`` fill it through the ring;
      ``at_random``/``read_at_random`` tell and note a read at random;
      ``refresh_size``; ``closes_at_once``.
    * ``shared_offset``, ``newline``, ``bufsize``: what the opener set.
    """

    __slots__ = ("_random_end", "_waiters", "busy")  # (read and set at every call: see RawFile's slots)

    def __init__(self, fd: int, rawmode: str, name: Any, closefd: bool, st: os.stat_result) -> None:
        super().__init__(fd, rawmode, name, closefd, st)
        self.busy = False
        self._waiters: collections.deque[asyncio.Future[None]] = ()  # type: ignore[assignment]  # calls waiting to take the file
        self._random_end = -1  # where the last read at random ended (see at_random)

    newline: str | None = None  # the text layer's newline argument, for line prefetch
    _read_end = -1  # where the last large read ended (see _large_read)
    _advised = _unadvised = False  # POSIX_FADV_SEQUENTIAL given, and taken back
    bufsize = io.DEFAULT_BUFFER_SIZE  # the buffered layer's size, for prefetch slack

    def at_random(self, n: int) -> bool:
        """Whether a buffered read of `n` bytes (fewer than DIRECT_READ) at
        the position is a read at random: one that the window neither holds
        nor continues, nor continues the last read at random, within the
        size this file knows.  Such a read goes straight to the file
        (read_direct), without the window's read-ahead around it: a fill
        would read a buffer more than was asked and copy it twice."""
        pos = self.pos
        ws = self._wstart
        return (pos != self._random_end and not ws <= pos <= ws + len(self._wbuf) and pos + n <= self.size
                and not self.shared_offset)

    def read_at_random(self, n: int) -> None:
        """A read at random of `n` bytes was made at the position (the stdlib
        file's seek moves the position past it)."""
        self._random_end = self.pos + n

    # -- the async side: used by the wrappers, under `acquire` ---------------
    async def acquire(self) -> None:
        """One wrapper call at a time drives this file (FIFO)."""
        if not self.busy:
            self.busy = True
            return
        waiter = asyncio.get_running_loop().create_future()
        waiters = self._waiters
        if not waiters:
            waiters = self._waiters = collections.deque()
        waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the file, but cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    async def enter(self, drain: bool = True) -> bool:
        """Start a wrapper call: take the file (True if that meant waiting for
        other calls), finish what an earlier call left queued (unless not
        `drain`), and begin_call.  The caller must release() when done, also
        on error."""
        waited = self.busy
        if waited:
            await self.acquire()
        else:
            self.busy = True
        try:
            if drain and self.queue:
                await self.drain()
            self.begin_call()
        except BaseException:
            self.release()
            raise
        return waited

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.busy = False

    def closes_at_once(self) -> bool:
        """Whether closing the file now needs nothing but a plain close of its
        fd, done at once as the ring would do it: a file only read, on a file
        system that needs no flush (see _rawfile), with no call under
        way and nothing queued, whose fd is not the caller's."""
        return self._close_now and not (self.busy or self.queue or self.shared_offset)

    def finish_close_now(self) -> None:
        """A close was cancelled before its writes and CLOSE went through the
        ring: do them now with plain syscalls, so that the data is written and
        the fd closed whatever the caller does next (os.close and page-cache
        writes do not wait for the disk).  Nothing to do unless the file is
        closed and no call has it."""
        if not self.closed or self.busy:
            return
        while self.queue:
            try:
                self._flush_sync()
            except OSError:
                self.queue.popleft()  # a write that failed is dropped, as by a close; the close goes on

    async def fill(self, start: int, end: int) -> None:
        """Make the window hold the file's bytes [start, end), or all of
        [start, EOF) with _weof set, reading through the ring."""
        if self.holds(start, end):
            return
        if self.queue:
            await self.drain()
        stamp = self._validate() if not self._fresh else None
        buf = self._wbuf
        ws = self._wstart
        we = ws + len(buf)
        keep = we - start if ws <= start <= we else 0
        if end >= INF:  # to end of file: one byte more than its size shows where it ends
            want = max(self.size - start, keep) + 1
        else:
            want = end - start
            if keep or start == we:  # sequential: read ahead generously
                want = max(want, _MIN_FILL)
        new = bytearray(max(want, keep))
        if keep:
            new[:keep] = memoryview(buf)[start - ws:]
        got = keep
        self._stamp_window(stamp)  # first: a change during the read shows next time (one fstat a fill)
        while True:
            got += await _read_into(self._fd, new, got, len(new) - got, start + got, self.size)
            eof = got < len(new)
            if eof or end < INF:
                break
            new += bytes(len(new))  # read() to EOF and the file grew: keep going
        del new[got:]
        if eof and not got and start:
            # Nothing at `start`: the file ends at or before it.  The window
            # must end exactly at end of file, for writes that extend it.
            self.size = os.fstat(self._fd).st_size
            start = min(start, self.size)
        self._wbuf = new
        self._wstart = start
        self._weof = eof

    async def fill_line(self, start: int, search_from: int, terminator: tuple[bytes, ...] | None,
                        slack: int, cap: int) -> None:
        """Make the window hold [start, E + slack), E being the end of the
        first `terminator` at or after `search_from`, or `cap` if that comes
        first, or end of file."""
        if terminator is None:  # unknown line ends: read ahead blindly
            await self.fill(start, min(cap, search_from + _MIN_FILL) + slack)
            return
        step = 4096
        while True:
            buf = self._wbuf
            ws = self._wstart
            we = ws + len(buf)
            if ws <= start and search_from <= we:
                i = find_line_end(buf, terminator, search_from - ws)
                if i >= 0:
                    await self.fill(start, min(ws + i, cap) + slack)
                    return
                if we >= cap:
                    await self.fill(start, cap + slack)
                    return
                if self._weof:
                    return  # no terminator before end of file
            elif self._weof and ws <= start:
                return  # the window holds all from start to end of file
            # Read further: each round asks for more than the window holds.
            step *= 2
            await self.fill(start, min(max(search_from, we, start) + step, cap + slack))

    async def drain(self) -> None:
        """Perform the queued writes, truncates and close through the ring, in
        order.  An entry leaves the queue only once done: if the caller is
        cancelled, the rest stays queued for the next call, close() or the
        finalizer, so no written byte is lost.  A failed write stays queued
        for the next flush, as BufferedWriter keeps what it could not write,
        unless a close follows: then, as with close(), it is dropped."""
        q = self.queue
        error: OSError | None = None
        wrote = False
        try:
            while q:
                entry = q[0]
                kind = entry[0]
                try:
                    if kind == WRITE:
                        _, off, data = entry
                        n = await _ops.write(self._fd, data, off)
                        wrote = True
                        if n < len(data):
                            q[0] = (WRITE, off if off < 0 else off + n, data[n:])
                            continue
                    elif kind == TRUNCATE:
                        await _pathops.ftruncate(self._fd, entry[1])
                        wrote = True
                    elif self._close_now:
                        os.close(self._fd)
                    else:
                        await _pathops.close(self._fd)
                except OSError as exc:
                    if kind == CLOSE:
                        q.popleft()
                        raise
                    if error is None:
                        error = exc
                    if not any(e[0] == CLOSE for e in q):
                        raise
                    while q[0][0] != CLOSE:  # closing: what failed is dropped, the close goes on
                        q.popleft()
                    continue
                q.popleft()
        finally:
            if wrote:
                self._wrote()
        if error is not None:
            raise error


async def _read_into(fd: int, buf: bytes | bytearray, at: int, n: int, offset: int, size: int = -1) -> int:
    """Read up to `n` bytes of `fd` at `offset` into buf[at:at + n] through
    the ring, again after a partial read, until `n` or a short read (a regular
    file reads short only at its end).  Returns how many arrived.  `buf` is a
    bytearray, or a new bytes object that its caller fills (see Filling).
    `size`, the file's size as the caller knows it: a read from the page
    cache that stops there stopped at the end of the file (no second try)."""
    if offset >= 0 and not _ops.cache_due(fd):
        got = 0  # (its recent tries missed the page cache, or O_DIRECT: the ring's at once)
    else:
        # A read tried at once is paced (a task reading from the page cache
        # would not yield otherwise); one that goes to the ring waits for the
        # loop anyway, and is not counted: counted, the reads of uncached data
        # had what is known of each fd forgotten every few thousand reads.
        if pace():
            await asyncio.sleep(0)
        got, done = _read_now_into(fd, buf, at, n, offset, size)
        if done:
            return got
    loop = asyncio.get_running_loop()
    ring = _ops.ring_of(loop)
    while got < n:
        asked = min(n - got, _ops.MAX_RW)
        # The op pins buf until its CQE, also if this coroutine is closed.
        args, cold = _ops.read_request(fd, at + got, asked, offset + got)
        on = _ops.device_ring_of(loop, ring) if cold else ring
        op = on.start(loop, None, args, buf, None, 0)
        k = int(await _ops.result(on, op, cold))
        got += k
        if k < asked:
            break
    return got


def _read_now_into(fd: int, buf: bytes | bytearray, at: int, n: int, offset: int,
                   size: int) -> tuple[int, bool]:
    """_read_into's part from the page cache, at once (again after a short
    read: the end of the file, or only part of it was cached): how much of
    buf[at:at + n] it filled, and whether that is all of it."""
    got = 0
    tries = 2
    if at == 0 and n == len(buf) and type(buf) is bytearray:  # (a window's fill: no view needed)
        got = _ops.read_now(fd, buf, n, offset)
        if got in (0, n) or (got > 0 and offset + got == size):
            return got, True
        if got < 0:
            return 0, False
        tries = 1
    with Filling(buf) if type(buf) is bytes else memoryview(buf) as view:
        for _ in range(tries):
            with view[at + got:at + n] as part:
                k = _ops.read_now(fd, part, n - got, offset + got)
            if k > 0:
                got += k
            if k == 0 or got == n:
                return got, True
            if k < 0:
                break
    return got, False


# A file that aioring opened and that is read from the device in large steps,
# each where the last ended, is advised as read sequentially
# (POSIX_FADV_SEQUENTIAL, given once, to the file's own open file description:
# never to an fd the caller gave): the kernel's readahead window for it
# doubles, so more of the file is asked of the device ahead of the reader.
# (A file whose pages are cached is not advised: no system call for nothing.)  Measured on cold 1 GiB reads in
# 1 MiB chunks (a virtio disk whose readahead is 8 MiB, interleaved runs):
# 1.10x the synchronous readinto loop with the advice against 1.02x without
# on asyncio's loop, 1.60x against 1.42x on uvloop (the same advice given to
# the synchronous loop made it 1.07x and 1.31x); benchmarks/cold_reads.py
# measures aioring.open.noadvice.  A large read elsewhere than where the last
# ended takes the advice back (POSIX_FADV_NORMAL), once: the file is then read
# at random, where a larger readahead only reads what nobody asked for.
# Tried and not kept: POSIX_FADV_WILLNEED of the 8 MiB 16 MiB ahead of the
# reader, given by a thread at every 8 MiB read: the kernel then asked the
# device for 1 MiB at a time instead of 4 MiB, 0.82x and 0.98x the
# synchronous loop against 1.15x and 1.85x for the advice above (a disk
# shared with other work that run: the spread of a variant's runs was 70% to
# 310%, the order of the variants the same in every run).  On an otherwise
# idle machine it neither gains nor costs: two quiet runs of cold_reads.py
# gave 1,906 and 2,140 MB/s with it against 2,113 and 2,196 without on
# asyncio's loop, 2,113 and 2,281 against 2,101 and 2,100 on uvloop (the
# spread of a variant's runs up to 30%).  Kept for the disk shared with
# other work, where it gained.
SEQUENTIAL_ADVICE = True


def _large_read(raw: RingFileIO, n: int) -> None:
    """Note a read of n (>= DIRECT_READ) bytes at the raw position; advise
    the kernel as SEQUENTIAL_ADVICE says."""
    pos = raw.pos
    if (pos == raw._read_end and not raw._advised and SEQUENTIAL_ADVICE and not raw.shared_offset
            and _ops.missed_lately(raw._fd)):
        raw._advised = True
        _advise(raw._fd, os.POSIX_FADV_SEQUENTIAL)
    elif pos != raw._read_end and raw._advised and not raw._unadvised:
        raw._unadvised = True
        _advise(raw._fd, os.POSIX_FADV_NORMAL)
    raw._read_end = pos + n


def _advise(fd: int, advice: int) -> None:
    try:
        os.posix_fadvise(fd, 0, 0, advice)
    except OSError:  # (advice is advice: a file system may refuse it)
        pass


async def read_direct(raw: RingFileIO, n: int) -> bytes:
    """Read up to `n` bytes at the raw position straight into the result, as
    a buffered read(n) with nothing buffered would (loops until n or EOF).

    A read of DIRECT_READ or more lets the kernel fill a new bytes object, as
    os.read fills the one it returns: nothing else can see it before it is
    returned, and no copy follows the kernel's.  A smaller one is
    aioring.read's, whose try of the page cache is the core's."""
    pos = raw.pos
    if n < DIRECT_READ:
        data = await _ops.read(raw._fd, n, pos)
        while 0 < len(data) < n:  # (the end of the file; or it grew)
            more = await _ops.read(raw._fd, n - len(data), pos + len(data))
            if not more:
                break
            data += more
        return data
    out = _ops.new_bytes(n)
    _large_read(raw, n)
    got = await _read_into(raw._fd, out, 0, n, pos)
    return out if got == n else out[:got]


def read_rest_now(raw: RingFileIO, n: int) -> bytes | None:
    """read(-1) from the raw position of a file thought to hold `n` more
    bytes (REST_MIN <= n <= REST_MAX), at once from the page cache: a new
    bytes object that the kernel fills, as os.read fills the one it returns,
    when the file is all cached and ends there; else None (read_rest's turn)."""
    return _read_whole_now(raw._fd, n, raw.pos)


async def read_rest(raw: RingFileIO, n: int) -> tuple[bytes, bool]:
    """read(-1) as read_rest_now, through the ring: one read fills a new
    bytes object of n bytes and past it a small spare buffer, whose filling
    shows whether the file ends there.  Returns (the bytes, whether they
    reach end of file).  No copy follows the kernel's unless the file changed
    size meanwhile."""
    out = _ops.new_bytes(n)
    spare = bytearray(_REST_SPARE)
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    request = VectorRead(raw._fd, (out, spare), raw.pos)
    op = None
    try:
        # The op holds the exports and the iovecs until its CQE, also if
        # this coroutine is closed (a tuple: the ring drops it, never releases it).
        op = ring.start(loop, _binding.prep_rw, request.args, request.keep, None, 0)
        got = int(await _ops.result(ring, op))
    finally:
        if op is None or op.state == _OP_DONE:
            request.release()
    if got == n:
        return out, True
    if got < n:  # (a regular file reads short only at its end: it shrank)
        return out[:got], True
    return out + spare[:got - n], got < n + _REST_SPARE  # it grew


async def readinto_direct(raw: RingFileIO, view: memoryview) -> int:
    """Fill `view` at the raw position through the ring (loops until full or EOF)."""
    n = len(view)
    if n >= DIRECT_READ:
        _large_read(raw, n)
    got = await _ops.readinto(raw._fd, view, raw.pos)
    while 0 < got < n:
        k = await _ops.readinto(raw._fd, view[got:], raw.pos + got)
        if k == 0:
            break
        got += k
    return got


async def write_direct(raw: RingFileIO, data: memoryview) -> int:
    """One write at the raw position (at the end in append mode) through the
    ring, as FileIO.write makes one write(2); the window and the size follow."""
    if not data:
        return 0  # as write(2) of nothing: the position stays, even in append mode
    if raw.appending:
        n = int(await _ops.write(raw._fd, data, -1))
        # Where it went: the fd's position is past it (another writer may
        # have appended since any size this file knew).
        off = os.lseek(raw._fd, 0, os.SEEK_CUR) - n
    else:
        off = raw.pos
        n = int(await _ops.write(raw._fd, data, off))
    raw._patch(off, bytes(data[:n]))
    raw._wrote()
    raw.pos = off + n
    raw.size = max(raw.size, raw.pos)
    return n


def ring_raw(file: Any) -> RingFileIO | None:
    """The RingFileIO under a stdlib file object, or None for any other object."""
    obj = file
    if type(obj) is io.BufferedReader:  # (what most callers pass)
        try:
            raw = obj.raw
        except ValueError:
            return None  # detached
        if type(raw) is RingFileIO:
            return raw
    tempfile = sys.modules.get("tempfile")  # (not imported: no such wrapper exists)
    if tempfile is not None and isinstance(obj, tempfile._TemporaryFileWrapper):
        obj = obj.file
    for _ in range(3):
        if isinstance(obj, RingFileIO):
            return obj
        try:
            obj = obj.buffer if isinstance(obj, io.TextIOWrapper) else obj.raw
        except (AttributeError, ValueError):
            return None
    return None
