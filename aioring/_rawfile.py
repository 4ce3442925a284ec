"""L4: the raw file under the stdlib's buffered layer, with plain system calls.

``RawFile`` is a FileIO over an fd aioring opened that keeps its own
position (``pos``) and size, so that nothing it does asks the kernel where
the file is.  Two things let a caller run the stdlib's synchronous methods
inside the event loop without them blocking:

* the *window*: bytes of the file read ahead (by ``_file``, through the
  ring), which reads are served from while ``defer`` is set;
* the *queue*: the writes, truncates and close made while ``defer`` is set,
  performed later in order (through the ring by ``_file``, or here with
  plain system calls by ``_flush_sync``).

Queued writes are copied into the window as they are queued, so reads see
the latest contents.  The window is dropped when another handle of this
process wrote the file (generations per (st_dev, st_ino)), or when fstat
shows a change.  Outside a wrapper's call (``defer`` unset) it behaves as a
plain FileIO with real system calls.
"""

from __future__ import annotations

import collections
import errno
import io
import operator
import os
import warnings
from typing import Any

from ._binding import fs_type

__all__ = ["CLOSE", "SYNC_READS", "TRUNCATE", "WRITE", "RawFile", "find_line_end"]

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
        known = _FS_CLOSES_AT_ONCE[dev] = fs_type(fd) in _NO_FLUSH_FS
    return known


_MAX_WINDOW = 8 * 1024 * 1024  # writes never grow the window past this
WRITE, TRUNCATE, CLOSE = 0, 1, 2  # the kinds of queue entries


class RawFile(io.FileIO):
    """The raw file under the stdlib's buffered layer: a FileIO over an fd
    that aioring opened, with its own position, its window and its queue
    (see the module docstring).

    It is a real io.FileIO (mode, name, fileno, isatty, readable, writable
    and the error messages are FileIO's own), created with closefd=False so
    that FileIO never closes the fd behind the ring's back; `closefd`
    reports what the caller asked for.
    """

    # What every file sets as it starts.  Slots: a file is opened for every
    # few reads, and a slot is read and set faster than FileIO's instance
    # dict, which CPython's specializing interpreter does not specialize.
    __slots__ = ("_close_now", "_counted", "_fd", "_fresh", "_gen", "_key", "_owns_fd", "_stamp", "_wbuf",
                 "_weof", "_wstart", "appending", "defer", "name", "pos", "queue", "shared_offset", "size")

    def __init__(self, fd: int, rawmode: str, name: Any, closefd: bool, st: os.stat_result) -> None:
        io.FileIO.__init__(self, fd, rawmode, closefd=False)
        self._wstart = 0  # the window (_wbuf) holds bytes [_wstart, _wstart + len) of the file
        self._weof = False  # the window ends at end of file (checked in this call)
        self.defer = False
        self._stamp: tuple[int, int, int] | None = None
        self._fresh = False
        self.shared_offset = False  # opened from an fd: keep the fd's offset in step
        self.name = name
        self._fd = fd
        self._owns_fd = closefd
        self.size = size = st.st_size
        if rawmode == "rb":  # (most files: only read)
            self.appending = False
            self.pos = 0
            # A file only read, on a file system whose files need no flush
            # at close, is closed at once (see _closes_at_once).
            dev = st.st_dev
            known = _FS_CLOSES_AT_ONCE.get(dev)
            self._close_now = _closes_at_once(fd, dev) if known is None else known
        else:
            self.appending = append = "a" in rawmode
            self.pos = size if append else 0
            self._close_now = False
        self._wbuf = bytearray()
        self.queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._key = key = (st.st_dev, st.st_ino)
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
        if not self.closed:  # (closed: nothing left for FileIO's finalizer to do)
            if self._owns_fd:
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
        self.queue.append((WRITE, -1 if self.appending else off, data))
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
        self.queue.append((TRUNCATE, size))
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

    def close(self) -> None:
        if self.closed:
            return
        if getattr(self, "_counted", False):  # (False: __init__ failed before counting it)
            self._counted = False
            key = self._key
            left = _OPEN.get(key, 1) - 1
            if left:
                _OPEN[key] = left
            else:
                _OPEN.pop(key, None)
                _GENERATIONS.pop(key, None)
        queued = self.queue
        if self.defer and (queued or not self._close_now):  # (else: at once, below)
            try:
                io.FileIO.close(self)  # closefd=False: marks it closed, the fd stays open
            finally:
                if self._owns_fd:
                    queued.append((CLOSE,))
            return
        try:
            if queued:
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
            if entry[0] == WRITE:
                _, off, data = entry
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view) if off < 0 else os.pwrite(self._fd, view, off)
                    view = view[n:]
                    if off >= 0:
                        off += n
            elif entry[0] == TRUNCATE:
                os.ftruncate(self._fd, entry[1])
            else:
                os.close(self._fd)
            q.popleft()
            _GENERATIONS[self._key] = self._gen = _GENERATIONS.get(self._key, 0) + 1

    def _exact_size(self) -> int:
        """The file's size now, counting what is queued."""
        size = os.fstat(self._fd).st_size
        for entry in self.queue:
            if entry[0] == WRITE:
                off = size if entry[1] < 0 else entry[1]
                size = max(size, off + len(entry[2]))
            elif entry[0] == TRUNCATE:
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

    def _validate(self) -> tuple[int, int, int] | None:
        """Drop the window if fstat shows the file changed since it was read;
        the fstat's stamp (None when there was no window to check)."""
        self._fresh = True
        if not self._wbuf:
            return None
        stamp = self._stat_stamp()
        if stamp != self._stamp:
            self._wbuf = bytearray()
            self._wstart = self.pos
        return stamp

    def end_call(self) -> None:
        if self.shared_offset and not (self.closed and self._owns_fd):
            try:
                os.lseek(self._fd, self.pos, os.SEEK_SET)
            except OSError:
                pass  # the caller closed its fd

    def _stamp_window(self, stamp: tuple[int, int, int] | None = None) -> None:
        """The window is read from now on: a change made after this shows.
        `stamp`: one taken earlier in this call, with nothing written since
        (a change after it shows too)."""
        self._stamp = self._stat_stamp() if stamp is None else stamp
        self._gen = _GENERATIONS.get(self._key, 0)

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


def _off_t(value: Any) -> int:
    """A file offset, checked as FileIO checks one (TypeError, OverflowError)."""
    value = operator.index(value)
    if not -_OFF_MAX - 1 <= value <= _OFF_MAX:
        raise OverflowError("Python int too large to convert to C long")
    return value


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
