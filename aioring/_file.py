"""L4: file objects whose data moves through the ring.

The semantics of Python's file objects (buffering, text decoding and
encoding, newline translation, tell cookies, append and update modes, every
error message) live in the stdlib's io stack, and the surest way to be
identical to it is to use it.  `open_stack` builds exactly the stack builtin
`open` builds (TextIOWrapper over BufferedReader/Writer/Random over a raw
file), with one difference: the raw file is a `RingFileIO`, a FileIO that
tracks its own position and never blocks inside the event loop.

The async wrappers (threadpool.binary/text) drive it in three steps per call:

1. prefetch: before the stdlib method runs, the wrapper predicts which bytes
   the call can read (a read(n) needs n bytes past what is buffered, a
   readline up to the next encoded newline, read() up to end of file, ...)
   plus the one extra raw read the stdlib may make to fill its buffer, and
   `fill` reads them through the ring into the raw file's *window*;
2. the stdlib method runs synchronously; the raw file serves its reads from
   the window and queues its writes, truncates and close (`_defer`);
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
import codecs
import collections
import errno
import functools
import io
import operator
import os
import stat
import sys
import warnings
from typing import Any

from . import _ops, _pathops
from ._ops import YIELD_EVERY, _unyielded, pace  # noqa: F401 (the tests read and set them here)
from ._liburing import ffi, lib
from ._loops import get_ring
from ._ringbase import _DONE as _OP_DONE

__all__ = ["RingFileIO", "open_stack", "ring_raw"]

SYNC_READS = [0]  # reads the prefetch did not foresee; tests assert it stays 0

# Writes through any RingFileIO of this process, per (st_dev, st_ino): a file
# whose window predates the latest of them drops it.  An entry lives while a
# RingFileIO of that file is open (_OPEN counts them).
_GENERATIONS: dict[tuple[int, int], int] = {}
_OPEN: dict[tuple[int, int], int] = {}

_OFF_MAX = 2**63 - 1

# File systems whose files have no flush operation: closing one of their
# files never waits for the disk or a server, so the kernel closes it inside
# the ring's submit call too (it hands the close of a file that has a flush,
# on NFS, FUSE, CIFS or overlayfs say, to a worker thread).  A file opened
# only for reading on one of them is closed at once: no ring op, no wait.
_NO_FLUSH_FS = frozenset({
    0xEF53,  # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0xF2F52010,  # f2fs
})
_FS_CLOSES_AT_ONCE: dict[int, bool] = {}  # per st_dev


def _closes_at_once(fd: int, dev: int) -> bool:
    known = _FS_CLOSES_AT_ONCE.get(dev)
    if known is None:
        known = _FS_CLOSES_AT_ONCE[dev] = lib.aior_fs_type(fd) in _NO_FLUSH_FS
    return known

INF = 1 << 62
_MIN_FILL = 128 * 1024  # a sequential fill reads at least this much ahead
_MAX_WINDOW = 8 * 1024 * 1024  # writes never grow the window past this
DIRECT_READ = 64 * 1024  # binary reads this large skip the window
_WRITE, _TRUNCATE, _CLOSE = 0, 1, 2
_READ_OP = lib.IORING_OP_READ
_READV_OP = lib.IORING_OP_READV
_REST_SPARE = 4096  # read(-1) reads this much past the size it knows: the end shows
REST_MIN = 4096  # (bytes of length 0 and 1 are shared objects: never filled)
REST_MAX = _ops.MAX_RW - _REST_SPARE
_CHARS = ffi.typeof("char[]")
_from_buffer = ffi.from_buffer
_PREP_RW = lib.aior_prep_rw
_read_whole_now = lib.aior_read_whole_now


class RingFileIO(io.FileIO):
    """A FileIO over an fd that aioring opened; see the module docstring.

    It is a real io.FileIO (mode, name, fileno, isatty, readable, writable
    and the error messages are FileIO's own), created with closefd=False so
    that FileIO never closes the fd behind the ring's back; `closefd`
    reports what the caller asked for.

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
      ``refresh_size``; ``closes_at_once``.
    * ``shared_offset``, ``newline``, ``bufsize``: what the opener set.
    """

    # What every file sets as it starts (slots: a file is opened for every
    # few reads, and a slot is set and read faster than the instance dict).
    __slots__ = ("_close_now", "_counted", "_fd", "_gen", "_key", "_owns_fd", "_wbuf", "appending", "name",
                 "pos", "queue", "size")

    # What most files keep as it starts; an instance sets its own when it changes.
    _wstart = 0  # the window (_wbuf) holds bytes [_wstart, _wstart + len) of the file
    _weof = False  # the window ends at end of file (checked in this call)
    defer = False
    busy = False
    _waiters: collections.deque[asyncio.Future[None]] = ()  # type: ignore[assignment]  # calls waiting to take the file
    _stamp: tuple[int, int, int] | None = None
    _fresh = False
    shared_offset = False  # opened from an fd: keep the fd's offset in step
    newline: str | None = None  # the text layer's newline argument, for line prefetch
    bufsize = io.DEFAULT_BUFFER_SIZE  # the buffered layer's size, for prefetch slack

    def __init__(self, fd: int, rawmode: str, name: Any, closefd: bool, st: os.stat_result) -> None:
        io.FileIO.__init__(self, fd, rawmode, closefd=False)
        self.name = name
        self._fd = fd
        self._owns_fd = closefd
        self.appending = append = "a" in rawmode
        self.size = size = st.st_size
        self.pos = size if append else 0
        self._wbuf = bytearray()
        self.queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._key = key = (st.st_dev, st.st_ino)
        # A file only read, on a file system whose files need no flush at
        # close, is closed at once (see _closes_at_once).
        self._close_now = rawmode == "rb" and _closes_at_once(fd, st.st_dev)
        self._gen = _GENERATIONS.get(key, 0)
        _OPEN[key] = _OPEN.get(key, 0) + 1
        self._counted = True

    # -- what FileIO reports ----------------------------------------------
    @property
    def closefd(self) -> bool:
        return self._owns_fd

    def __repr__(self) -> str:
        if self.closed:
            return "<_io.FileIO [closed]>"
        return f"<_io.FileIO name={self.name!r} mode={self.mode!r} closefd={self._owns_fd!r}>"

    def _dealloc_warn(self, source: Any) -> None:
        if not self.closed and self._owns_fd:
            warnings.warn(f"unclosed file {source!r}", ResourceWarning, stacklevel=2, source=source)

    def __del__(self) -> None:
        if self.queue:  # a drain that was cancelled and never resumed
            self.defer = False
            try:
                self._flush_sync()
            except OSError:
                pass
        if not self.closed and self._owns_fd:
            warnings.warn(f"unclosed file {self!r}", ResourceWarning, stacklevel=2, source=self)
        super().__del__()

    # -- position ----------------------------------------------------------
    def seekable(self) -> bool:
        io.FileIO.readable(self)  # ValueError when closed
        return True  # a regular file (FileIO would ask the kernel with an lseek)

    def tell(self) -> int:
        io.FileIO.readable(self)  # ValueError when closed
        return self.pos

    def seek(self, pos: Any, whence: int = 0) -> int:
        io.FileIO.readable(self)
        if whence == 0 and type(pos) is int and 0 <= pos <= _OFF_MAX:  # (a buffered layer's seek)
            self.pos = pos
            return pos
        pos = _off_t(pos)
        if whence == os.SEEK_SET:
            new = pos
        elif whence == os.SEEK_CUR:
            new = self.pos + pos
        elif whence == os.SEEK_END:
            new = (self.size if self.defer else os.fstat(self._fd).st_size) + pos
        else:  # SEEK_DATA, SEEK_HOLE: ask the kernel, on the real file
            self._flush_sync()
            new = os.lseek(self._fd, pos, whence)
        if new < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        self.pos = new
        return new

    # -- reading -----------------------------------------------------------
    def readinto(self, b: Any) -> int:
        if not io.FileIO.readable(self):
            raise io.UnsupportedOperation("File not open for reading")
        try:
            view = memoryview(b)
        except TypeError:
            raise TypeError("readinto() argument must be read-write bytes-like object, "
                            f"not {type(b).__name__}") from None
        with view:
            if view.readonly:
                raise TypeError("readinto() argument must be read-write bytes-like object, "
                                f"not {type(b).__name__}")
            with view.cast("B") as out:
                return self._readinto(out)

    def _readinto(self, out: memoryview) -> int:
        pos = self.pos
        n = len(out)
        if self.defer and n:
            if not self._fresh:
                self._validate()
            off = pos - self._wstart
            have = len(self._wbuf) - off
            # A read the window serves whole, or up to a known end of file:
            # the same length a read(2) of the file returns.
            if off >= 0 and have > 0 and (have >= n or self._weof):
                k = n if n < have else have
                with memoryview(self._wbuf) as w:
                    out[:k] = w[off:off + k]
                self.pos = pos + k
                return k
            if off >= 0 and have <= 0 and self._weof:
                return 0
            if pos >= self._exact_size():
                return 0  # at or past end of file (fstat never waits for the disk)
            SYNC_READS[0] += 1
        self._flush_sync()
        k = os.preadv(self._fd, [out], pos)
        self.pos = pos + k
        return k

    def read(self, size: Any = -1) -> bytes:
        if not io.FileIO.readable(self):
            raise io.UnsupportedOperation("File not open for reading")
        if size is not None and not isinstance(size, int):
            try:
                size = operator.index(size)
            except TypeError:
                raise TypeError(f"argument should be integer or None, not '{type(size).__name__}'") from None
        if size is None or size < 0:
            return self.readall()
        b = bytearray(size)
        with memoryview(b) as m:
            k = self._readinto(m) if io.FileIO.readable(self) else self.readinto(b)
        del b[k:]
        return bytes(b)

    def readall(self) -> bytes:
        if not io.FileIO.readable(self):  # as FileIO.readall: read(2) says EBADF
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        chunks = []
        if self.defer and not self._fresh:
            self._validate()
        while True:
            off = self.pos - self._wstart
            if self.defer and 0 <= off < len(self._wbuf) and self._weof:
                chunk = bytes(memoryview(self._wbuf)[off:])
                self.pos += len(chunk)
                chunks.append(chunk)
                # Read to its end: the window's bytes are the caller's now.
                # Only where it ends stays known (a whole file read then
                # holds one copy of the file, not two).
                self._wbuf = bytearray()
                self._wstart = self.pos
                break
            chunk = self.read(max(io.DEFAULT_BUFFER_SIZE, len(self._wbuf) - off if off >= 0 else 0))
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    # -- writing -----------------------------------------------------------
    def write(self, b: Any) -> int:
        if not io.FileIO.writable(self):
            raise io.UnsupportedOperation("File not open for writing")
        if isinstance(b, str):
            raise TypeError("a bytes-like object is required, not 'str'")
        try:
            data = bytes(memoryview(b))
        except TypeError:
            raise TypeError(f"a bytes-like object is required, not '{type(b).__name__}'") from None
        if not data:
            return 0  # as write(2) of nothing: the position stays, even in append mode
        if not self.defer:
            return self._write_sync(data)
        off = self.size if self.appending else self.pos
        self.queue.append((_WRITE, -1 if self.appending else off, data))
        self._patch(off, data)
        self.pos = off + len(data)
        self.size = max(self.size, self.pos)
        return len(data)

    def _write_sync(self, data: bytes) -> int:
        self._flush_sync()
        if self.appending:
            n = os.write(self._fd, data)
            self.pos = os.lseek(self._fd, 0, os.SEEK_CUR)
        else:
            n = os.pwrite(self._fd, data, self.pos)
            self.pos += n
        self.size = max(self.size, self.pos)
        self._wbuf = bytearray()  # outside the wrapper's calls nothing is cached
        return n

    def _patch(self, off: int, data: bytes) -> None:
        """Keep the window equal to the file after a queued write of `data` at `off`."""
        if self._wbuf and not self._fresh:
            self._validate()  # a change made meanwhile by someone else: not patched into "current"
        buf = self._wbuf
        ws = self._wstart
        we = ws + len(buf)
        end = off + len(data)
        if not buf:  # the written bytes are known: they start a window
            if self._weof and end >= ws and end - min(off, ws) <= _MAX_WINDOW:
                # the file ended at ws: now it ends at `end`
                self._wbuf = bytearray(off - ws) + data if off > ws else bytearray(data)
                self._wstart = min(off, ws)
            elif len(data) <= _MAX_WINDOW:
                self._weof = False  # where the file ends is not known
                self._wbuf = bytearray(data)
                self._wstart = off
            else:
                self._weof = False
            return
        if end < ws:
            return
        s = max(off, ws)
        e = min(end, we)
        if s < e:
            buf[s - ws:e - ws] = memoryview(data)[s - off:e - off]
        if end > we:
            if off <= we and end - ws <= _MAX_WINDOW:
                buf += memoryview(data)[we - off:]
            elif off > we and self._weof and end - ws <= _MAX_WINDOW:
                buf += bytes(off - we)  # a hole reads as zeros
                buf += data
            else:
                self._weof = False  # the window no longer knows where the file ends

    def truncate(self, size: Any = None) -> int:
        if not io.FileIO.writable(self):
            raise io.UnsupportedOperation("File not open for writing")
        size = self.pos if size is None else _off_t(size)
        if size < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if not self.defer:
            self._flush_sync()
            os.ftruncate(self._fd, size)
            self.size = size
            self._wbuf = bytearray()
            return size
        self.queue.append((_TRUNCATE, size))
        self.size = size
        if self._wbuf and not self._fresh:
            self._validate()
        ws = self._wstart
        we = ws + len(self._wbuf)
        if size <= ws:
            self._wbuf = bytearray()
            self._wstart = size
            self._weof = True
        elif size < we:
            del self._wbuf[size - ws:]
            self._weof = True
        elif size > we:
            if self._weof and size - ws <= _MAX_WINDOW:
                self._wbuf += bytes(size - we)
            else:
                self._weof = False
        return size

    def _uncount(self) -> None:
        if getattr(self, "_counted", False):  # (False: __init__ failed before counting it)
            self._counted = False
            left = _OPEN.get(self._key, 1) - 1
            if left:
                _OPEN[self._key] = left
            else:
                _OPEN.pop(self._key, None)
                _GENERATIONS.pop(self._key, None)

    def close(self) -> None:
        if self.closed:
            return
        self._uncount()
        if self.defer and not (self._close_now and not self.queue):  # (else: at once, below)
            try:
                io.FileIO.close(self)  # closefd=False: marks it closed, the fd stays open
            finally:
                if self._owns_fd:
                    self.queue.append((_CLOSE,))
            return
        try:
            self._flush_sync()
        finally:
            try:
                io.FileIO.close(self)
            finally:
                if self._owns_fd:
                    os.close(self._fd)

    def _flush_sync(self) -> None:
        """Perform what is queued with plain syscalls (a read the prefetch did
        not foresee, a finalizer, a cancelled drain nobody resumed)."""
        q = self.queue
        while q:
            entry = q[0]
            if entry[0] == _WRITE:
                _, off, data = entry
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view) if off < 0 else os.pwrite(self._fd, view, off)
                    view = view[n:]
                    if off >= 0:
                        off += n
            elif entry[0] == _TRUNCATE:
                os.ftruncate(self._fd, entry[1])
            else:
                os.close(self._fd)
            q.popleft()
            _GENERATIONS[self._key] = self._gen = _GENERATIONS.get(self._key, 0) + 1

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

    def _exact_size(self) -> int:
        """The file's size now, counting what is queued."""
        size = os.fstat(self._fd).st_size
        for entry in self.queue:
            if entry[0] == _WRITE:
                off = size if entry[1] < 0 else entry[1]
                size = max(size, off + len(entry[2]))
            elif entry[0] == _TRUNCATE:
                size = entry[1]
        return size

    def begin_call(self) -> None:
        """A wrapper call starts: nothing known about end of file yet; the
        window is dropped if the file changed since it was read (a write
        through another handle of this process, or any change fstat shows);
        an fd the caller gave follows its own offset."""
        self._weof = False
        if self.closed:
            return
        if self.shared_offset:
            self.pos = os.lseek(self._fd, 0, os.SEEK_CUR)
        if self._wbuf and _GENERATIONS.get(self._key, 0) != self._gen:
            self._wbuf = bytearray()
            self._wstart = self.pos
        self._fresh = False  # fstat is asked once, when the call first reads the window

    def _validate(self) -> None:
        """Drop the window if fstat shows the file changed since it was read."""
        self._fresh = True
        if self._wbuf and self._stat_stamp() != self._stamp:
            self._wbuf = bytearray()
            self._wstart = self.pos

    def end_call(self) -> None:
        if self.shared_offset and not (self.closed and self._owns_fd):
            try:
                os.lseek(self._fd, self.pos, os.SEEK_SET)
            except OSError:
                pass  # the caller closed its fd

    def _stat_stamp(self) -> tuple[int, int, int]:
        st = os.fstat(self._fd)
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _wrote(self) -> None:
        """This handle changed the file: other handles' windows are stale,
        this one's (patched as it wrote) is current."""
        gen = _GENERATIONS.get(self._key, 0) + 1
        _GENERATIONS[self._key] = gen
        self._gen = gen
        if self._wbuf:
            try:
                self._stamp = self._stat_stamp()
            except OSError:  # closed meanwhile
                self._wbuf = bytearray()

    def refresh_size(self) -> None:
        """The size for SEEK_END and append-mode writes, read as the call
        starts (fstat on an open fd never waits for the disk)."""
        self.size = os.fstat(self._fd).st_size

    def holds(self, start: int, end: int) -> bool:
        """Whether the window holds the file's bytes [start, end)."""
        ws = self._wstart
        return ws <= start and end <= ws + len(self._wbuf)

    def holds_line(self, terminator: tuple[bytes, ...], slack: int) -> bool:
        """Whether the window holds the line at the position, up to the end
        of the first `terminator`, and `slack` bytes past that end."""
        off = self.pos - self._wstart
        if off < 0:
            return False
        buf = self._wbuf
        i = find_line_end(buf, terminator, off)
        return i >= 0 and i + slack <= len(buf)

    def closes_at_once(self) -> bool:
        """Whether closing the file now needs nothing but a plain close of its
        fd, done at once as the ring would do it: a file only read, on a file
        system that needs no flush (see _closes_at_once), with no call under
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
        if not self._fresh:
            self._validate()
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
        self._stamp = self._stat_stamp()  # taken first: a change during the read shows next time
        self._gen = _GENERATIONS.get(self._key, 0)
        while True:
            got += await _read_into(self._fd, new, got, len(new) - got, start + got)
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
                    if kind == _WRITE:
                        _, off, data = entry
                        n = await _ops.write(self._fd, data, off)
                        wrote = True
                        if n < len(data):
                            q[0] = (_WRITE, off if off < 0 else off + n, data[n:])
                            continue
                    elif kind == _TRUNCATE:
                        await _pathops.ftruncate(self._fd, entry[1])
                        wrote = True
                    elif self._close_now:
                        os.close(self._fd)
                    else:
                        await _pathops.close(self._fd)
                except OSError as exc:
                    if kind == _CLOSE:
                        q.popleft()
                        raise
                    if error is None:
                        error = exc
                    if not any(e[0] == _CLOSE for e in q):
                        raise
                    while q[0][0] != _CLOSE:  # closing: what failed is dropped, the close goes on
                        q.popleft()
                    continue
                q.popleft()
        finally:
            if wrote:
                self._wrote()
        if error is not None:
            raise error


async def _read_into(fd: int, buf: bytes | bytearray, at: int, n: int, offset: int) -> int:
    """Read up to `n` bytes of `fd` at `offset` into buf[at:at + n] through
    the ring, again after a partial read, until `n` or a short read (a regular
    file reads short only at its end).  Returns how many arrived."""
    if pace():
        await asyncio.sleep(0)  # (a task reading from the page cache would not yield otherwise)
    cbuf = _from_buffer(_CHARS, buf, False)
    got = 0
    # From the page cache, at once (again after a short read: the end of the
    # file, or only part of it was cached); the rest through the ring.
    for _ in range(2):
        k = _ops.read_now(fd, ffi.buffer(cbuf + at + got, n - got), n - got, offset + got)
        if k > 0:
            got += k
        if k == 0 or got == n:
            ffi.release(cbuf)
            return got
        if k < 0:
            break
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    op = None
    try:
        while got < n:
            asked = min(n - got, _ops.MAX_RW)
            # The op holds the export (a tuple: the ring drops it, never
            # releases it) until its CQE, also if this coroutine is closed.
            prep, args, cold = _ops.read_request(fd, cbuf + at + got, asked, offset + got)
            op = ring.start(loop, prep, args, (cbuf,), None, 0)
            k = int(await _ops.read_result(ring, op, cold))
            got += k
            if k < asked:
                break
    finally:
        if op is None or op.state == _OP_DONE:
            ffi.release(cbuf)
    return got


async def read_direct(raw: RingFileIO, n: int) -> bytes:
    """Read up to `n` bytes at the raw position straight into the result, as
    a buffered read(n) with nothing buffered would (loops until n or EOF).

    A large read lets the kernel fill a new bytes object, as os.read fills the
    one it returns: nothing else can see it before it is returned, and no
    copy follows the kernel's (bytes of length 0 and 1 are shared objects,
    hence the bytearray for small reads)."""
    out: bytes | bytearray = _ops.new_bytes(n) if n >= 4096 else bytearray(n)
    got = await _read_into(raw._fd, out, 0, n, raw.pos)
    return bytes(out if got == n else out[:got])


def read_rest_now(raw: RingFileIO, n: int) -> bytes | None:
    """read(-1) from the raw position of a file thought to hold `n` more
    bytes (REST_MIN <= n <= REST_MAX), at once from the page cache: a new
    bytes object that the kernel fills, as os.read fills the one it returns,
    when the file is all cached and ends there; else None (read_rest's turn)."""
    out = _ops.new_bytes(n)
    c_out = _from_buffer(_CHARS, out, False)
    missed = _read_whole_now(raw._fd, c_out, n, raw.pos)
    ffi.release(c_out)
    return None if missed else out


async def read_rest(raw: RingFileIO, n: int) -> tuple[bytes, bool]:
    """read(-1) as read_rest_now, through the ring: one read fills a new
    bytes object of n bytes and past it a small spare buffer, whose filling
    shows whether the file ends there.  Returns (the bytes, whether they
    reach end of file).  No copy follows the kernel's unless the file changed
    size meanwhile."""
    out = _ops.new_bytes(n)
    c_out = _from_buffer(_CHARS, out, False)
    pos = raw.pos
    spare = bytearray(_REST_SPARE)
    c_spare = _from_buffer(_CHARS, spare, False)
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    iov = ffi.new("struct iovec[2]")
    iov[0].iov_base = c_out
    iov[0].iov_len = n
    iov[1].iov_base = c_spare
    iov[1].iov_len = _REST_SPARE
    op = None
    try:
        # The op holds the exports and the iovecs until its CQE, also if
        # this coroutine is closed (a tuple: the ring drops it, never releases it).
        op = ring.start(loop, _PREP_RW, (_READV_OP, raw._fd, iov, 2, pos, 0), (c_out, c_spare, iov),
                        None, 0)
        got = int(await _ops.result(ring, op))
    finally:
        if op is None or op.state == _OP_DONE:
            ffi.release(c_out)
            ffi.release(c_spare)
    if got == n:
        return out, True
    if got < n:  # (a regular file reads short only at its end: it shrank)
        return out[:got], True
    return out + spare[:got - n], got < n + _REST_SPARE  # it grew


async def readinto_direct(raw: RingFileIO, view: memoryview) -> int:
    """Fill `view` at the raw position through the ring (loops until full or EOF)."""
    n = len(view)
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


def _off_t(value: Any) -> int:
    """A file offset, checked as FileIO checks one (TypeError, OverflowError)."""
    value = operator.index(value)
    if not -_OFF_MAX - 1 <= value <= _OFF_MAX:
        raise OverflowError("Python int too large to convert to C long")
    return value


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


def text_encoding(encoding: str | None) -> str:
    """io.text_encoding: the encoding a text file gets when none is given."""
    return encoding if encoding is not None else io.text_encoding(None)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=64)
def line_terminator(encoding: str, newline: str | None) -> tuple[bytes, ...] | None:
    """The encoded byte strings that can end a line of a text file (with
    universal newlines "\r" and "\n"), or None if the encoding hides them
    (the line prefetch then reads ahead blindly).  Asked at every text open:
    kept per encoding and newline."""
    # ("\n" first: find_line_end then looks for "\r" only before it, not
    # through the whole window of a file that has none.)
    ends = ["\n", "\r"] if newline in (None, "") else [newline]
    try:
        encoder = codecs.getincrementalencoder(encoding)()
        encoder.encode("a")  # past any BOM
        terms = tuple(encoder.encode(end) for end in ends)
    except (LookupError, UnicodeError, TypeError):
        return None
    return terms if all(terms) else None


_NEAR = 4096  # find_line_end looks this far first


def find_line_end(buf: bytearray, terms: tuple[bytes, ...], start: int) -> int:
    """The index just past the first of `terms` in buf[start:], or -1.

    It looks near `start` first: a window holds many lines, and a line end
    that the file never uses ("\r" with universal newlines, say) would
    otherwise be searched for through all of it at every line."""
    end = len(buf)
    stop = start + _NEAR if start + _NEAR < end else end
    while True:
        best = -1
        for term in terms:
            i = buf.find(term, start, stop)  # only an earlier end matters: search no further
            if i >= 0:
                best = stop = i + len(term)
        if best >= 0 or stop >= end:
            return best
        stop = end  # (an end that straddles the first stop is found here)


# -- opening ---------------------------------------------------------------

_MODE_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
               "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND}


# What open_stack makes of a mode check_open found good: (raw mode, binary,
# "+", open flags); bounded, as callers may pass many distinct values.
_MODE_PLANS: dict[str, tuple[str, bool, bool, int]] = {}


def _mode_plan(mode: str) -> tuple[str, bool, bool, int]:
    modes = set(mode)
    plus = "+" in modes
    rawmode = "".join(c for c in "xrwa" if c in modes) + ("+" if plus else "")
    flags = _MODE_FLAGS[rawmode[0]]
    if plus:
        flags = (flags & ~(os.O_WRONLY | os.O_RDONLY)) | os.O_RDWR
    plan = (rawmode, "b" in modes, plus, flags | os.O_CLOEXEC)
    if len(_MODE_PLANS) < 64:
        _MODE_PLANS[mode] = plan
    return plan


# Arguments of opens that check_open found good (their checks depend on
# nothing else); bounded, as callers may pass many distinct values.
_GOOD_ARGS: set[tuple[Any, ...]] = set()
_TEXT_ARG = (str, type(None))


def check_open(file: Any, mode: str, buffering: int, encoding: str | None, errors: str | None,
               newline: str | None, closefd: bool) -> None:
    """Raise what builtin open raises for these arguments, without opening anything."""
    is_fd = isinstance(file, int)
    if not is_fd and type(file) is not str:
        os.fspath(file)  # TypeError as builtin open's
    cacheable = (type(mode) is str and type(buffering) is int and type(closefd) is bool
                 and type(encoding) in _TEXT_ARG and type(errors) in _TEXT_ARG
                 and type(newline) in _TEXT_ARG)
    if cacheable:
        key = (is_fd, mode, buffering, closefd, encoding, errors, newline)
        if key in _GOOD_ARGS:
            return
    _check_open(file, mode, buffering, encoding, errors, newline, closefd)
    if cacheable and len(_GOOD_ARGS) < 64:
        _GOOD_ARGS.add(key)


def _check_open(file: Any, mode: str, buffering: int, encoding: str | None, errors: str | None,
                newline: str | None, closefd: bool) -> None:
    # Let builtin open check every argument (same exceptions, same messages):
    # on fd -1 it gets as far as creating the FileIO and stops there.
    try:
        probe = open(-1, mode, buffering, encoding, errors, newline, closefd=False)
    except ValueError as exc:
        if str(exc) != "negative file descriptor":
            raise
    else:  # pragma: no cover - fd -1 never opens
        probe.close()
    if not closefd and not isinstance(file, int):
        raise ValueError("Cannot use closefd=False with file name")
    modes = set(mode)
    if not modes & {"x", "r", "w", "a"}:  # FileIO's check, which the probe never reached
        raise ValueError("Must have exactly one of create/read/write/append mode and at most one plus")
    if "b" not in modes:
        # And what builtin open checks only after opening: the text layer's arguments.
        if buffering == 0:
            raise ValueError("can't have unbuffered text I/O")
        io.TextIOWrapper(io.BytesIO(), text_encoding(encoding), errors, newline)


async def open_stack(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
                     errors: str | None = None, newline: str | None = None, closefd: bool = True,
                     opener: Any = None) -> tuple[Any, bool]:
    """Open like builtin open, with OPENAT and CLOSE on the ring.

    Returns (file object, on_ring): the same stack builtin open returns; for a
    regular file its raw layer is a RingFileIO (on_ring True); for anything
    else (a FIFO, a terminal, a device) it is the stdlib's own FileIO, which
    the wrappers then drive from the executor as aiofiles does.
    """
    check_open(file, mode, buffering, encoding, errors, newline, closefd)
    rawmode, binary, plus, flags = _MODE_PLANS.get(mode) or _mode_plan(mode)
    shared_offset = isinstance(file, int)
    if shared_offset:
        if file < 0:
            raise ValueError("negative file descriptor")  # as builtin open
        fd = file
        name: Any = file
    else:
        name = os.fspath(file) if not isinstance(file, (str, bytes)) else file
        if opener is None:
            fd = await _pathops.open_encoded(name, _pathops._encode(name, "open"), flags, 0o666)
        else:
            fd = opener(name, flags)
            if not isinstance(fd, int):
                raise TypeError("expected integer from opener")
            if fd < 0:
                raise ValueError(f"opener returned {fd}")
    owned = closefd
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
        if not stat.S_ISREG(st.st_mode):
            result = open(fd, mode, buffering, encoding, errors, newline, closefd=closefd)  # noqa: ASYNC230 (an open fd: no I/O)
            top: Any = result
            raw_of = top if buffering == 0 else getattr(top, "buffer", top).raw
            raw_of.name = name
            owned = False
            return result, False
        raw = RingFileIO(fd, rawmode + "b", name, closefd, st)
        if shared_offset:  # FileIO reads and writes at the fd's own offset
            raw.shared_offset = True
            raw.pos = os.lseek(fd, 0, os.SEEK_CUR)
    except BaseException:
        if owned:
            await _pathops.close(fd)
        raise
    try:
        line_buffering = False
        if buffering == 1:  # (a regular file is never a terminal: no isatty to ask)
            buffering = -1
            line_buffering = True
        if buffering < 0:
            buffering = st.st_blksize if st.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE
        raw.bufsize = buffering if buffering > 0 else io.DEFAULT_BUFFER_SIZE
        if buffering == 0:
            if binary:
                return raw, True
            raise ValueError("can't have unbuffered text I/O")
        if plus:
            buffer: Any = io.BufferedRandom(raw, buffering)
        elif rawmode[0] in "wxa":
            buffer = io.BufferedWriter(raw, buffering)
        else:
            buffer = io.BufferedReader(raw, buffering)
        if binary:
            return buffer, True
        encoding = text_encoding(encoding)
        text = io.TextIOWrapper(buffer, encoding, errors, newline, line_buffering)
        text.mode = mode  # type: ignore[misc]
        raw.newline = newline
        return text, True
    except BaseException:
        raw.defer = True  # close through the ring: queue, then drain
        try:
            raw.close()
        finally:
            raw.defer = False
        await raw.drain()
        raise
