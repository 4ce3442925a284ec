"""Async text files: aiofiles.threadpool.text's classes, on the ring."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._file import INF, RingFileIO
from .._open import line_terminator
from ..base import AsyncFileBase, AsyncIndirectBase, Plan

__all__ = ["AsyncTextIOWrapper", "AsyncTextIndirectIOWrapper"]

# No common codec needs more bytes than this for one character (UTF-8, UTF-16
# and UTF-32 with surrogates, "\r\n" translated to one "\n").
_MAX_BYTES_PER_CHAR = 4
_MASK64 = (1 << 64) - 1


class AsyncTextIOWrapper(AsyncFileBase):
    """The async io.TextIOWrapper (every text mode)."""

    def __init__(self, file: Any, loop: Any, executor: Any) -> None:
        super().__init__(file, loop, executor)
        self._term: tuple[bytes, ...] | None = None
        if self._raw is not None:
            self._term = line_terminator(file.encoding, self._raw.newline)

    # -- prefetch plans --------------------------------------------------------
    def _slack(self, raw: RingFileIO) -> int:
        return max(self._file._CHUNK_SIZE, raw.bufsize) + raw.bufsize

    def _readable_raw(self) -> RingFileIO | None:
        raw = self._raw
        if raw is None or raw.closed or not raw.readable():
            return None
        return raw

    def _read_plan(self, size: Any) -> Plan:
        raw = self._readable_raw()
        if raw is None:
            return None
        try:
            n = -1 if size is None else size.__index__()
            start = raw.pos
            if n < 0:
                return ("range", start, INF)
            return ("range", start, start + n * _MAX_BYTES_PER_CHAR + self._slack(raw))
        except Exception:  # a bad argument or a detached file: the call itself raises
            return None

    def _line_plan(self, size: Any) -> Plan:
        raw = self._readable_raw()
        if raw is None:
            return None
        try:
            n = -1 if size is None else size.__index__()
            slack = self._slack(raw)
            start = raw.pos
            cap = start + n * _MAX_BYTES_PER_CHAR + 1 if n >= 0 else INF
            return ("line", start, start, self._term, slack, cap)
        except Exception:
            return None

    def _lines_plan(self, hint: Any) -> Plan:
        raw = self._readable_raw()
        if raw is None:
            return None
        try:
            n = -1 if hint is None else hint.__index__()
            if n <= 0:
                return self._read_plan(-1)
            start = raw.pos
            return ("line", start, start + n * _MAX_BYTES_PER_CHAR, self._term, self._slack(raw), INF)
        except Exception:
            return None

    def _seek_plan(self, cookie: Any, whence: int) -> Plan:
        raw = self._readable_raw()
        if raw is None or whence != 0 or type(cookie) is not int or cookie < 0:
            return None
        try:
            start = cookie & _MASK64
            to_feed = (cookie >> 128) & _MASK64
            if not to_feed and not cookie >> 192:
                return None
            return ("range", start, start + to_feed + self._slack(raw))
        except Exception:
            return None

    def _replan(self, name: Any, args: tuple[Any, ...]) -> Plan:
        if name == "read":
            return self._read_plan(args[0])
        if name == "readline":
            return self._line_plan(args[0])
        if name == "readlines":
            return self._lines_plan(args[0])
        if name == "seek":
            return self._seek_plan(args[0], args[1])
        return None

    # -- methods -----------------------------------------------------------------
    async def read(self, size: Any = -1) -> str:
        """io.TextIOWrapper.read, awaited: the same arguments, result and exceptions."""
        return await self._call("read", self._read_plan(size), size)

    def _line_ends(self) -> tuple[bytes, ...] | None:
        return self._term

    async def readlines(self, hint: Any = -1) -> list[str]:
        """io.TextIOWrapper.readlines, awaited: the same arguments, result and exceptions."""
        return await self._call("readlines", self._lines_plan(hint), hint)

    async def write(self, s: Any) -> int:
        """io.TextIOWrapper.write, awaited: the same arguments, result and exceptions."""
        return await self._call("write", None, s)

    async def writelines(self, lines: Iterable[Any]) -> None:
        """io.TextIOWrapper.writelines, awaited: the same arguments, result and exceptions."""
        await self._call("writelines", None, lines)

    async def seek(self, cookie: Any, whence: int = 0) -> int:
        """io.TextIOWrapper.seek, awaited: the same arguments, result and exceptions."""
        return await self._call("seek", self._seek_plan(cookie, whence), cookie, whence,
                                size_fresh=whence == 2)

    async def readable(self) -> bool:
        """io.TextIOWrapper.readable, awaited: the same arguments, result and exceptions."""
        return await self._call("readable", None)

    def detach(self) -> Any:
        """As io.TextIOWrapper.detach: the same arguments, result and exceptions."""
        return self._file.detach()

    @property
    def buffer(self) -> Any:
        """io.TextIOWrapper.buffer, of the wrapped object."""
        return self._file.buffer

    @property
    def encoding(self) -> str:
        """io.TextIOWrapper.encoding, of the wrapped object."""
        return self._file.encoding

    @property
    def errors(self) -> str:
        """io.TextIOWrapper.errors, of the wrapped object."""
        return self._file.errors

    @property
    def line_buffering(self) -> bool:
        """io.TextIOWrapper.line_buffering, of the wrapped object."""
        return self._file.line_buffering

    @property
    def newlines(self) -> Any:
        """io.TextIOWrapper.newlines, of the wrapped object."""
        return self._file.newlines


class AsyncTextIndirectIOWrapper(AsyncIndirectBase, AsyncTextIOWrapper):
    """AsyncTextIOWrapper over an object looked up at each call (stdin, stdout, stderr)."""

    def __init__(self, name: str, loop: Any, executor: Any, indirect: Any) -> None:
        AsyncIndirectBase.__init__(self, name, loop, executor, indirect)
        self._term = None
