"""L4: opening a file as builtin open does, with its raw layer on the ring.

``open_stack`` builds exactly the stack builtin ``open`` builds
(TextIOWrapper over BufferedReader/Writer/Random over a raw file), with
OPENAT and CLOSE on the ring; for a regular file the raw layer is a
``RingFileIO``.  ``check_open`` raises what builtin open raises for bad
arguments before anything is opened.
"""

from __future__ import annotations

import codecs
import errno
import functools
import io
import os
import stat
import warnings
from typing import Any

from . import _pathops
from ._binding import AT_FDCWD as _AT_FDCWD
from ._core import fstat_brief, read_whole_now
from ._file import REST_MAX, REST_MIN, RingFileIO
from ._ops import _yield_keeping, pace
from ._rawfile import _FS_CLOSES_AT_ONCE, _closes_at_once

__all__ = ["UnbuiltReader", "check_open", "line_terminator", "open_reader", "open_stack", "text_encoding"]


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


# The plans of the modes that check_open found good for a path opened with
# every other argument left to its default (bounded as _MODE_PLANS).
_DEFAULT_PLANS: dict[str, tuple[str, bool, bool, int]] = {}

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
    if (type(file) is str and type(mode) is str and mode in _DEFAULT_PLANS and opener is None
            and type(buffering) is int and buffering == -1 and encoding is None and errors is None
            and newline is None and closefd is True):
        # A path opened with every other argument left to its default, in a
        # mode found good before: the most common open, with nothing to check.
        plan = _DEFAULT_PLANS[mode]
        name: Any = file
        shared_offset = False
        fd = await _pathops.open_encoded(file, _pathops._encode(file, "open"), plan[3], 0o666)
    else:
        check_open(file, mode, buffering, encoding, errors, newline, closefd)
        plan = _MODE_PLANS.get(mode) or _mode_plan(mode)
        shared_offset = isinstance(file, int)
        if shared_offset:
            if file < 0:
                raise ValueError("negative file descriptor")  # as builtin open
            fd = file
            name = file
        else:
            if (type(file) is str and opener is None and type(buffering) is int and buffering == -1
                    and encoding is None and errors is None and newline is None and closefd is True
                    and len(_DEFAULT_PLANS) < 64):
                _DEFAULT_PLANS[mode] = plan
            name = os.fspath(file) if not isinstance(file, (str, bytes)) else file
            if opener is None:
                fd = await _pathops.open_encoded(name, _pathops._encode(name, "open"), plan[3], 0o666)
            else:
                fd = opener(name, plan[3])
                if not isinstance(fd, int):
                    raise TypeError("expected integer from opener")
                if fd < 0:
                    raise ValueError(f"opener returned {fd}")
    return await _stack(fd, name, plan, mode, buffering, encoding, errors, newline, closefd, shared_offset)


async def _stack(fd: int, name: Any, plan: tuple[str, bool, bool, int], mode: str, buffering: int,
                 encoding: str | None, errors: str | None, newline: str | None, closefd: bool,
                 shared_offset: bool, st: os.stat_result | None = None) -> tuple[Any, bool]:
    """open_stack's part once `fd` is open (`st`: its fstat, if asked already)."""
    rawmode, binary, plus, _ = plan
    owned = closefd
    try:
        if st is None:
            st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
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


# -- a reader whose stack is built when first needed ------------------------

_RB_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_RB_PLAN = ("r", True, False, _RB_FLAGS)
_S_ISREG = stat.S_ISREG


class UnbuiltReader:
    """A regular file that open(path, "rb") opened (every other argument
    left to its default), before its stack is built.

    Most such files are read whole and closed; that needs neither the
    RingFileIO nor the BufferedReader over it, whose making costs as much
    as the open itself.  So until anything else is asked of the file, the
    async wrapper holds only this: the fd, what fstat said of it at the
    open (fstat_brief), and the position that read_rest_now moved to.
    build() then makes exactly the stack open_stack makes, at that
    position; the file is the stack's from then on.  Unclosed and dropped,
    it warns and closes its fd as the stack's finalizer does."""

    __slots__ = ("closed", "facts", "fd", "missed", "name", "pos", "taken")

    def __init__(self, fd: int, name: str, facts: tuple[int, int, int, int, int]) -> None:
        self.fd = fd
        self.name = name
        self.facts = facts  # (st_mode, st_size, st_dev, st_ino, st_blksize)
        self.pos = 0
        self.closed = False  # closed before its stack was built
        self.taken = False  # the fd is its stack's
        self.missed = False  # read_rest_now tried the page cache, which did not hold it all

    def read_rest_now(self) -> bytes | None:
        """read() from the position to end of file, at once from the page
        cache, as the stack's read_rest_now; None: the stack's turn."""
        pos = self.pos
        n = self.facts[1] - pos
        if self.taken or self.closed or not REST_MIN <= n <= REST_MAX:
            return None
        out = read_whole_now(self.fd, n, pos)  # (the kernel fills it: never zeroed)
        if out is not None:
            self.pos = pos + n
        else:
            self.missed = True
        return out

    def closes_at_once(self) -> bool:
        """Whether close() needs no ring: as RingFileIO.closes_at_once."""
        if self.taken:
            return False
        dev = self.facts[2]
        known = _FS_CLOSES_AT_ONCE.get(dev)
        return _closes_at_once(self.fd, dev) if known is None else known

    def close(self) -> None:
        """Close the fd at once (closes_at_once said so), as the stack's close."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def build(self) -> Any:
        """The stack open_stack makes for this file, at the position reached;
        closed if the file is (its name, mode and errors then those of a
        closed stack: made over a placeholder fd, as the file's own is gone)."""
        mode, size, dev, ino, blksize = self.facts
        bufsize = blksize if blksize > 1 else io.DEFAULT_BUFFER_SIZE
        closed = self.closed
        if closed:
            fd = os.open(os.devnull, _RB_FLAGS)
            st = os.stat_result((mode, ino, dev, 1, 0, 0, size, 0, 0, 0))
        else:
            fd = self.fd
            st = os.fstat(fd)
        try:
            raw = RingFileIO(fd, "rb", self.name, True, st)
        except BaseException:
            if closed:
                os.close(fd)
            raise
        raw.pos = self.pos
        raw.bufsize = bufsize
        self.taken = True
        buffer = io.BufferedReader(raw, bufsize)
        if closed:
            buffer.close()
        return buffer

    def __del__(self) -> None:
        if not (self.taken or self.closed):
            self.closed = True
            warnings.warn(f"unclosed file <_io.BufferedReader name={self.name!r}>", ResourceWarning,
                          stacklevel=2, source=self)
            os.close(self.fd)


async def open_reader(file: str) -> Any:
    """open_stack(file, "rb"): an UnbuiltReader for a regular file, else the stack."""
    encoded = _pathops._encode(file, "open")
    fd = _pathops._opened_now(_AT_FDCWD, encoded, _RB_FLAGS, file)
    if fd < 0:
        fd = await _pathops.open_after(file, encoded, _RB_FLAGS, 0o666, None, fd)
    elif pace():
        await _yield_keeping()
    try:
        facts = fstat_brief(fd)
    except BaseException:
        await _pathops.close(fd)
        raise
    if _S_ISREG(facts[0]):
        return UnbuiltReader(fd, file, facts)
    file_object, _ = await _stack(fd, file, _RB_PLAN, "rb", -1, None, None, None, True, False)
    return file_object
