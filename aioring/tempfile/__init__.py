"""aiofiles.tempfile's API: temporary files created, read, written and closed
through the ring.

TemporaryFile uses O_TMPFILE where the filesystem has it (else a named file
that is unlinked at once), NamedTemporaryFile creates its file with OPENAT
(O_EXCL, mode 0o600, retrying on a name clash, as tempfile.mkstemp) and
deletes it as the stdlib's does.  SpooledTemporaryFile stays in memory until
it rolls over to such a file.  TemporaryDirectory creates and removes its
directory in the executor (removal walks a tree, which io_uring cannot).
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import tempfile as _tempfile
from concurrent.futures import Executor
from functools import partial
from typing import Any

from .. import _pathops
from .._open import check_open, open_stack, text_encoding
from ..base import AiofilesContextManager
from ..threadpool import wrap as _wrap_io
from .temptypes import AsyncSpooledTemporaryFile, AsyncTemporaryDirectory

__all__ = ["NamedTemporaryFile", "SpooledTemporaryFile", "TemporaryDirectory", "TemporaryFile"]

Loop = asyncio.AbstractEventLoop | None

if sys.version_info >= (3, 12):

    def NamedTemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: str | None = None,
                           newline: str | None = None, suffix: Any = None, prefix: Any = None,
                           dir: Any = None, delete: bool = True, delete_on_close: bool = True,
                           loop: Loop = None, executor: Executor | None = None
                           ) -> AiofilesContextManager[Any]:
        """An async tempfile.NamedTemporaryFile."""
        return AiofilesContextManager(_temporary_file(
            True, mode, buffering, encoding, newline, suffix, prefix, dir, delete, loop, executor,
            delete_on_close=delete_on_close))

else:

    def NamedTemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: str | None = None,
                           newline: str | None = None, suffix: Any = None, prefix: Any = None,
                           dir: Any = None, delete: bool = True,
                           loop: Loop = None, executor: Executor | None = None
                           ) -> AiofilesContextManager[Any]:
        """An async tempfile.NamedTemporaryFile."""
        return AiofilesContextManager(_temporary_file(
            True, mode, buffering, encoding, newline, suffix, prefix, dir, delete, loop, executor))


def TemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: str | None = None,
                  newline: str | None = None, suffix: Any = None, prefix: Any = None,
                  dir: Any = None, loop: Loop = None,
                  executor: Executor | None = None) -> AiofilesContextManager[Any]:
    """An async tempfile.TemporaryFile: no name (its `name` is the fd)."""
    return AiofilesContextManager(_temporary_file(
        False, mode, buffering, encoding, newline, suffix, prefix, dir, True, loop, executor))


def SpooledTemporaryFile(max_size: int = 0, mode: str = "w+b", buffering: int = -1,
                         encoding: str | None = None, newline: str | None = None, suffix: Any = None,
                         prefix: Any = None, dir: Any = None, loop: Loop = None,
                         executor: Executor | None = None) -> AiofilesContextManager[Any]:
    """An async tempfile.SpooledTemporaryFile: in memory until a write takes
    it past max_size (0: never by itself) or fileno() is called."""
    return AiofilesContextManager(_spooled(max_size, mode, buffering, encoding, newline, suffix,
                                           prefix, dir, loop, executor))


def TemporaryDirectory(suffix: Any = None, prefix: Any = None, dir: Any = None,
                       loop: Loop = None, executor: Executor | None = None
                       ) -> AiofilesContextManagerTempDir:
    """An async tempfile.TemporaryDirectory: `async with` gives its path,
    `await` an object with `name`, `cleanup()` and `close()`."""
    return AiofilesContextManagerTempDir(_temporary_directory(suffix, prefix, dir, loop, executor))


class AiofilesContextManagerTempDir(AiofilesContextManager[Any]):
    """`async with TemporaryDirectory() as path` gives the path, as the stdlib's."""

    async def __aenter__(self) -> Any:
        self._obj = await self._coro
        return self._obj.name


async def _mkstemp(dir: Any, prefix: Any, suffix: Any, flags: int) -> tuple[int, Any]:
    names = _tempfile._get_candidate_names()  # type: ignore[attr-defined]
    if isinstance(dir, bytes):
        names = (os.fsencode(n) for n in names)
    for _ in range(_tempfile.TMP_MAX):
        path = os.path.join(dir, prefix + next(names) + suffix)
        try:
            fd = await _pathops.open(path, flags, 0o600)
        except FileExistsError:
            continue
        return fd, os.path.abspath(path)  # noqa: ASYNC240 (no I/O)
    raise FileExistsError(errno.EEXIST, "No usable temporary file name found")


async def create_unnamed(mode: str, buffering: int, encoding: str | None, newline: str | None,
                         suffix: Any, prefix: Any, dir: Any,
                         errors: str | None = None) -> Any:
    """The stdlib object tempfile.TemporaryFile returns, opened on the ring."""
    check_open(0, mode, buffering, encoding, errors, newline, True)  # before the file exists
    if "b" not in mode:
        encoding = _encoding(encoding)
    prefix, suffix, dir, _ = _tempfile._sanitize_params(prefix, suffix, dir)  # type: ignore[attr-defined]
    flags = _tempfile._bin_openflags  # type: ignore[attr-defined]
    fd = None
    if getattr(os, "O_TMPFILE", 0):
        try:
            fd = await _pathops.open(dir, (flags | os.O_TMPFILE) & ~os.O_CREAT, 0o600)
        except OSError:
            fd = None  # no O_TMPFILE on this filesystem: a named file, unlinked at once
    if fd is None:
        fd, path = await _mkstemp(dir, prefix, suffix, flags)
        try:
            await _pathops.unlink(path)
        except BaseException:
            await _pathops.close(fd)
            raise
    file, _ = await open_stack(fd, mode, buffering, encoding, errors, newline, True)
    return file


def _encoding(encoding: str | None) -> str:
    return text_encoding(encoding)


async def _temporary_file(named: bool, mode: str, buffering: int, encoding: str | None,
                          newline: str | None, suffix: Any, prefix: Any, dir: Any,
                          delete: bool, loop: Loop, executor: Executor | None,
                          delete_on_close: bool = True) -> Any:
    if loop is None:
        loop = asyncio.get_running_loop()
    if not named:
        file = await create_unnamed(mode, buffering, encoding, newline, suffix, prefix, dir)
        return _wrap_io(file, loop=loop, executor=executor)
    check_open(0, mode, buffering, encoding, None, newline, True)
    if "b" not in mode:
        encoding = _encoding(encoding)
    prefix, suffix, dir, _ = _tempfile._sanitize_params(prefix, suffix, dir)  # type: ignore[attr-defined]
    fd, path = await _mkstemp(dir, prefix, suffix, _tempfile._bin_openflags)  # type: ignore[attr-defined]
    try:
        file, _ = await open_stack(fd, mode, buffering, encoding, None, newline, True)
        raw = getattr(file, "buffer", file)
        raw = getattr(raw, "raw", raw)
        raw.name = path
        if sys.version_info >= (3, 12):
            wrapper = _tempfile._TemporaryFileWrapper(file, path, delete, delete_on_close)
        else:
            wrapper = _tempfile._TemporaryFileWrapper(file, path, delete)
    except BaseException:
        await _pathops.unlink(path)
        raise
    result = _wrap_io(file, loop=loop, executor=executor)
    result._file = wrapper
    if sys.version_info >= (3, 12):
        result._closer = wrapper._closer  # type: ignore[attr-defined]
    else:
        result.delete = wrapper.delete  # type: ignore[attr-defined]
    return result


async def _spooled(max_size: int, mode: str, buffering: int, encoding: str | None, newline: str | None,
                   suffix: Any, prefix: Any, dir: Any, loop: Loop,
                   executor: Executor | None) -> AsyncSpooledTemporaryFile:
    if loop is None:
        loop = asyncio.get_running_loop()
    # In memory: nothing touches the disk until the rollover.
    file = _tempfile.SpooledTemporaryFile(max_size=max_size, mode=mode, buffering=buffering,
                                          encoding=encoding, newline=newline, suffix=suffix,
                                          prefix=prefix, dir=dir)
    return AsyncSpooledTemporaryFile(file, loop=loop, executor=executor)


async def _temporary_directory(suffix: Any, prefix: Any, dir: Any, loop: Loop,
                               executor: Executor | None) -> AsyncTemporaryDirectory:
    if loop is None:
        loop = asyncio.get_running_loop()
    directory = await loop.run_in_executor(executor, partial(_tempfile.TemporaryDirectory, suffix,
                                                             prefix, dir))
    return AsyncTemporaryDirectory(directory, loop=loop, executor=executor)
