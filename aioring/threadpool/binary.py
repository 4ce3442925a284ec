"""Async binary files: aiofiles.threadpool.binary's classes, on the ring."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from .._file import (DIRECT_READ, INF, REST_MAX, REST_MIN, RingFileIO, read_direct, read_rest,
                     read_rest_now, readinto_direct, write_direct)
from .. import _ops
from .._core import FileMethod
from .._rawfile import _OFF_MAX as OFF_MAX
from .._ops import pace, standing_in
from ..base import AsyncFileBase, AsyncIndirectBase, Plan

__all__ = ["AsyncBufferedIOBase", "AsyncBufferedReader", "AsyncFileIO", "AsyncIndirectBufferedIOBase",
           "AsyncIndirectBufferedReader", "AsyncIndirectFileIO"]


_NL = (b"\n",)

# A file opened "rb" and read whole whose pages are not cached: the first try
# from the page cache (read_rest_now) fails, but it has started the device's
# read of the file (the kernel's readahead).  The task then yields once and
# tries again before it builds the file's stack and reads through the ring:
# meanwhile the other tasks opening files start their devices' reads, so
# that the device serves them side by side, and the second try mostly finds
# the pages read.  Without the yield each task went on at once (the stack
# built, a second try), so the files of a gather() were read one after the
# other.  24 small files of 1 to 100 KiB, their pages dropped, read by a
# gather() (benchmarks/cold_reads.py, aioring.noretry without the yield):
# median wall time per round 2.3 ms against 4.5 ms on asyncio's loop, 2.1 ms
# against 4.3 ms on uvloop, blocking open() 3.4 ms (4 interleaved runs).  A
# file that is cached costs nothing more: its first try reads it whole.
COLD_RETRY = True


def _room(b: Any) -> int | None:
    """The bytes readinto(b) may fill; None when the stdlib's readinto refuses
    `b` (no buffer, read-only, not contiguous): then nothing is prefetched."""
    try:
        m = memoryview(b)
    except TypeError:
        return None
    with m:
        return None if m.readonly or not m.c_contiguous else m.nbytes


class _BinaryBase(AsyncFileBase):
    """What the buffered and the raw binary classes share."""

    # -- prefetch plans: which bytes a stdlib call can read ------------------
    def _plan(self, make: Callable[..., Plan], *args: Any) -> Plan:
        raw = self._raw
        if raw is None or raw.closed or not raw.readable():
            return None
        try:
            return make(raw, *args)
        except Exception:  # a bad argument or a detached file: the call itself raises
            return None

    def _read_plan(self, raw: RingFileIO, n: Any) -> Plan:
        file = self._file
        t = file.tell() if file is not raw else raw.pos
        rpos = raw.pos
        # BufferedRandom may read at the raw position before it flushes
        # pending writes (read1): cover from the lower of the two positions.
        start = t if t < rpos else rpos
        if n is None or n < 0:
            return ("range", start, INF)
        # A BufferedRandom with pending writes rereads what it holds: even a
        # read its buffer serves may reach the raw file.
        return ("range", start, max(t + n.__index__(), rpos) + raw.bufsize)

    def _line_plan(self, raw: RingFileIO, limit: Any) -> Plan:
        file = self._file
        t = file.tell() if file is not raw else raw.pos
        rpos = raw.pos
        start = t if t < rpos else rpos
        limit = -1 if limit is None else limit.__index__()
        cap = t + limit + 1 if limit >= 0 else INF
        # The line's end is searched from where the raw file will be read: a
        # BufferedRandom serves [t, rpos) from its buffer, and writes it holds
        # (which may replace a newline) end at t; it flushes them first.
        return ("line", start, t if t > rpos else rpos, _NL, raw.bufsize + 1, cap)

    def _lines_plan(self, raw: RingFileIO, hint: Any) -> Plan:
        hint = -1 if hint is None else hint.__index__()
        if hint <= 0:
            return self._read_plan(raw, -1)
        plan = self._line_plan(raw, -1)
        assert plan is not None
        return ("line", plan[1], plan[2] + hint, _NL, raw.bufsize + 1, INF)

    def _read1_plan(self, raw: RingFileIO, n: Any) -> Plan:
        t = self._file.tell()
        rpos = raw.pos
        n = -1 if n is None else n.__index__()
        return ("range", min(t, rpos), max(t, rpos) + max(n, raw.bufsize) + 1)

    def _readinto_plan(self, b: Any) -> Plan:
        room = _room(b)
        return None if room is None else self._plan(self._read_plan, room)

    def _replan(self, name: Any, args: tuple[Any, ...]) -> Plan:
        if name in ("read", "readall"):
            return self._plan(self._read_plan, args[0] if args else -1)
        if name == "readinto":
            return self._readinto_plan(args[0])
        if name == "readline":
            return self._plan(self._line_plan, args[0])
        if name == "readlines":
            return self._plan(self._lines_plan, args[0])
        if name in ("read1", "peek"):
            return self._plan(self._read1_plan, args[0] if name == "read1" else 0)
        return None

    # -- the methods every binary file has ------------------------------------
    async def read(self, size: Any = -1) -> bytes:
        return await self._call("read", self._plan(self._read_plan, size), size)

    async def readinto(self, b: Any) -> int:
        return await self._call("readinto", self._readinto_plan(b), b)

    def _line_ends(self) -> tuple[bytes, ...] | None:
        # A BufferedReader reads the raw file only past what it holds, a
        # buffer at a time; the other layers read or write more (not served).
        return _NL if type(self._file) is io.BufferedReader else None

    async def readlines(self, hint: Any = -1) -> list[bytes]:
        return await self._call("readlines", self._plan(self._lines_plan, hint), hint)

    async def write(self, b: Any) -> int:
        return await self._call("write", None, b)

    async def writelines(self, lines: Iterable[Any]) -> None:
        await self._call("writelines", None, lines)

    async def seek(self, offset: Any, whence: int = 0) -> int:
        raw = self._raw
        if (whence == 0 and type(offset) is int and offset >= 0 and type(self._file) is io.BufferedReader
                and raw is not None and not raw.busy and not raw.queue and not raw.closed
                and not raw.shared_offset):
            # A BufferedReader's seek to a position reads and writes nothing:
            # at once, paced (a task that only seeks yields now and then).
            if not pace():
                pos: int = self._file.seek(offset)
                return pos
            raw.busy = True
            try:
                await asyncio.sleep(0)
                pos = self._file.seek(offset)
                return pos
            finally:
                raw.release()
        return await self._call("seek", None, offset, whence, size_fresh=whence == 2)

    def readable(self) -> bool:
        return self._file.readable()



class AsyncBufferedIOBase(_BinaryBase):
    """The async io.BufferedWriter and io.BufferedIOBase (files opened "wb",
    "ab", "xb"; io.BytesIO through threadpool.wrap)."""

    async def read(self, size: Any = -1) -> bytes:
        """io.BufferedIOBase.read, awaited: the same arguments, result and exceptions."""
        rest = size is None or (type(size) is int and size < 0)
        if self._pending is None:
            raw = self._raw
            if raw is None:
                return await self._call("read", None, size)
            if rest and pace():
                await asyncio.sleep(0)  # (a task reading cached files would not yield otherwise)
        else:  # (a file read whole is read before its stack is built)
            if rest:
                data = await self._read_rest_unbuilt()
                if data is not None:
                    return data
            raw = self._raw
            assert raw is not None
        if not raw.busy and not raw.queue and not raw.closed and raw.readable():
            if rest:
                data = self._read_rest_now(raw)
                return data if data is not None else await self._read_rest_ring(raw)
            if type(size) is int and size >= DIRECT_READ:
                return await self._read_direct(raw, size)
            if type(size) is int and type(self._file) is io.BufferedReader:
                reads_at_random = size > 0 and raw.at_random(size) and self._file.tell() == raw.pos
                chunk: bytes = await (self._read_at_random(raw, size) if reads_at_random
                                      else self._call_now(raw, "read", size))
                return chunk
        return await self._call("read", self._plan(self._read_plan, size), size)

    async def _read_rest_unbuilt(self) -> bytes | None:
        """read() to end of file of a file whose stack is not built, from the
        page cache (see COLD_RETRY); None: the stack's turn."""
        if pace():
            await asyncio.sleep(0)
        pending = self._pending  # (the sleep may have let another call build it)
        data = pending.read_rest_now() if pending is not None else None
        if data is None and pending is not None and pending.missed and COLD_RETRY:
            # Not cached: the try started the device's read.  Other tasks
            # start theirs meanwhile, and the file is tried again.
            await asyncio.sleep(0)
            pending = self._pending
            data = pending.read_rest_now() if pending is not None else None
        return data

    def _read_rest_now(self, raw: RingFileIO) -> bytes | None:
        """read() to end of file with nothing buffered, at once from the page
        cache when it holds the whole rest: the kernel fills the result
        itself (one copy of the file, not a window and a copy of it).  None:
        _read_rest_ring's turn."""
        file = self._file
        n = raw.size - raw.pos
        if REST_MIN <= n <= REST_MAX and not raw.shared_offset and file.tell() == raw.pos:
            data = read_rest_now(raw, n)
            if data is not None:
                file.seek(raw.pos + n)  # (the stdlib file's position follows: nothing to read or write)
                return data
        return None

    async def _read_rest_ring(self, raw: RingFileIO) -> bytes:
        """read() to end of file with nothing buffered, through the ring: one
        read fills the result (see read_rest).  The file stays taken
        throughout."""
        file = self._file
        raw.busy = True
        try:
            raw.begin_call()
            n = raw.size - raw.pos
            if file.tell() != raw.pos or not REST_MIN <= n <= REST_MAX:
                return await self._run(raw, "read", self._plan(self._read_plan, -1), (-1,))
            data, eof = await read_rest(raw, n)
            _moved(raw, file, len(data))
            if not eof:
                raw.begin_call()  # it grew: the rest as BufferedReader reads it
                data += await self._run(raw, "read", self._plan(self._read_plan, -1), (-1,))
            return data
        finally:
            raw.release()

    async def readinto(self, b: Any) -> int:
        """io.BufferedIOBase.readinto, awaited: the same arguments, result and exceptions."""
        raw = self._raw
        if raw is not None and not raw.busy and not raw.queue and not raw.closed and raw.readable():
            try:
                view = memoryview(b)
            except TypeError:
                view = None
            if view is not None:
                with view:
                    if not view.readonly and view.nbytes >= DIRECT_READ:
                        if view.ndim == 1 and view.format == "B" and view.c_contiguous:
                            return await self._readinto_direct(raw, view)  # (a bytearray's, say)
                        with view.cast("B") as out:
                            return await self._readinto_direct(raw, out)
        return await self._call("readinto", self._readinto_plan(b), b)

    async def _read_direct(self, raw: RingFileIO, n: int) -> bytes:
        """A large read with nothing buffered: the whole blocks that
        BufferedReader reads past its buffer go straight from the ring into
        the result; the rest goes through the buffer, as BufferedReader's.
        The file stays taken throughout: no other call comes in between."""
        file = self._file
        raw.busy = True
        try:
            raw.begin_call()
            whole = n - n % raw.bufsize
            if file.tell() != raw.pos or raw.size - raw.pos < n:
                return await self._run(raw, "read", self._plan(self._read_plan, n), (n,))
            start = raw.pos
            data = await read_direct(raw, whole)
            _moved(raw, file, len(data))
            if len(data) < whole or whole == n:
                return data
            raw.begin_call()
            rest = n - whole
            try:
                return data + await self._run(raw, "read", self._plan(self._read_plan, rest), (rest,))
            except asyncio.CancelledError:
                # Cancelled before the rest: what was read reaches nobody, so
                # none of it is consumed (the file's position goes back).
                raw.begin_call()
                _moved(raw, file, start - raw.pos)
                raise
        finally:
            raw.release()

    async def _read_at_random(self, raw: RingFileIO, n: int) -> bytes:
        """A small read with nothing buffered, at random (see
        RingFileIO.at_random): the bytes asked for, straight from the file
        at the position, as BufferedReader's read(n) returns them."""
        raw.busy = True
        try:
            raw.begin_call()
            data = await read_direct(raw, n)
            raw.read_at_random(len(data))
            _moved(raw, self._file, len(data))
            return data
        finally:
            raw.release()

    async def _readinto_direct(self, raw: RingFileIO, out: memoryview) -> int:
        """A readinto larger than the buffer with nothing buffered: all of it
        straight from the raw file, as BufferedReader.readinto reads it."""
        file = self._file
        raw.busy = True
        try:
            raw.begin_call()
            if file.tell() != raw.pos or raw.size - raw.pos < len(out) or len(out) <= raw.bufsize:
                return await self._run(raw, "readinto", self._plan(self._read_plan, len(out)), (out,))
            n = await readinto_direct(raw, out)
            _moved(raw, file, n)
            return n
        finally:
            raw.release()

    async def read1(self, size: Any = -1) -> bytes:
        """io.BufferedIOBase.read1, awaited: the same arguments, result and exceptions."""
        return await self._call("read1", self._plan(self._read1_plan, size), size)

    def detach(self) -> Any:
        """As io.BufferedIOBase.detach: the same arguments, result and exceptions."""
        return self._file.detach()

    @property
    def raw(self) -> Any:
        """io.BufferedIOBase.raw, of the wrapped object."""
        return self._file.raw


class AsyncBufferedReader(AsyncBufferedIOBase):
    """The async io.BufferedReader and io.BufferedRandom ("rb", "rb+", "wb+", "ab+")."""

    async def peek(self, size: Any = 0) -> bytes:
        """io.BufferedReader.peek, awaited: the same arguments, result and exceptions."""
        return await self._call("peek", self._plan(self._read1_plan, 0), size)


class AsyncFileIO(_BinaryBase):
    """The async io.FileIO (binary files opened with buffering=0): every
    read and write is one ring operation at the file's position, as FileIO's
    are one syscall each."""

    async def readall(self) -> bytes:
        """io.FileIO.readall, awaited: the same arguments, result and exceptions."""
        return await self._call("readall", self._plan(self._read_plan, -1))

    async def read(self, size: Any = -1) -> bytes:
        """io.FileIO.read, awaited: the same arguments, result and exceptions."""
        raw = self._raw
        if raw is None or type(size) is not int or size < 0 or raw.closed or not raw.readable():
            return await self._call("read", self._plan(self._read_plan, size), size)
        return await self._direct(raw, read_direct, size)

    async def seek(self, offset: Any, whence: int = 0) -> int:
        """io.FileIO.seek, awaited: the same arguments, result and exceptions."""
        return await self._call("seek", None, offset, whence, size_fresh=whence == 2)

    # A small read, and a seek to a position, of a file no other call has
    # go through the core without a coroutine frame (src/filemethod.h): a
    # read is aioring.read's at the file's position, the file taken
    # meanwhile as _direct takes it; a seek needs no I/O, so no call of the
    # file's (paced, as a call served at once is).
    read = standing_in(FileMethod(read, "read", RingFileIO, _ops, DIRECT_READ), read)
    seek = standing_in(FileMethod(seek, "seek", RingFileIO, _ops, OFF_MAX), seek)

    async def readinto(self, b: Any) -> int:
        """io.FileIO.readinto, awaited: the same arguments, result and exceptions."""
        raw = self._raw
        if raw is None or raw.closed or not raw.readable():
            return await self._call("readinto", None, b)
        try:
            view = memoryview(b)
        except TypeError:
            return await self._call("readinto", None, b)
        with view:
            if view.readonly:
                return await self._call("readinto", None, b)
            with view.cast("B") as out:
                return await self._direct(raw, readinto_direct, out)

    async def write(self, b: Any) -> int:
        """io.FileIO.write, awaited: the same arguments, result and exceptions."""
        raw = self._raw
        if raw is None or raw.closed or not raw.writable() or isinstance(b, str):
            return await self._call("write", None, b)
        try:
            data = memoryview(b)
        except TypeError:
            return await self._call("write", None, b)
        with data:
            return await self._direct(raw, write_direct, data.cast("B"))

    async def _direct(self, raw: RingFileIO, func: Callable[..., Coroutine[Any, Any, Any]],
                      arg: Any) -> Any:
        await raw.enter()
        try:
            if raw.closed:  # closed by a call made before this one
                raise ValueError("I/O operation on closed file")
            try:
                result = await func(raw, arg)
                if func is not write_direct:
                    raw.pos += len(result) if isinstance(result, bytes) else result
            finally:
                raw.end_call()
        finally:
            raw.release()
        return result


class AsyncIndirectBufferedIOBase(AsyncIndirectBase, AsyncBufferedIOBase):
    """AsyncBufferedIOBase over an object looked up at each call (stdin_bytes, ...)."""


class AsyncIndirectBufferedReader(AsyncIndirectBase, AsyncBufferedReader):
    """AsyncBufferedReader over an object looked up at each call."""


class AsyncIndirectFileIO(AsyncIndirectBase, AsyncFileIO):
    """AsyncFileIO over an object looked up at each call."""


def _moved(raw: RingFileIO, file: Any, count: int) -> None:
    """After `count` bytes read straight from the raw position: the stdlib
    file's position follows (a seek, with nothing to read or write), and the
    call ends."""
    raw.defer = True
    try:
        file.seek(raw.pos + count)
    finally:
        raw.defer = False
        raw.end_call()
