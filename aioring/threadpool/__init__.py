"""aiofiles.threadpool's API: `open`, `wrap` and the stdio objects.

Files that `open` opens have their data, open and close on the ring; `wrap`
also accepts any io object (io.BytesIO, a file from builtin open), whose
calls then run in the executor as aiofiles runs them.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import os
import sys
from concurrent.futures import Executor
from io import (BufferedIOBase, BufferedRandom, BufferedReader, BufferedWriter, FileIO, TextIOBase,
                TextIOWrapper)
from pathlib import PurePath
from typing import Any

from .._file import RingFileIO
from .._open import UnbuiltReader, open_reader, open_stack
from ..base import AiofilesContextManager, AsyncBase
from .binary import (
    AsyncBufferedIOBase,
    AsyncBufferedReader,
    AsyncFileIO,
    AsyncIndirectBufferedIOBase,
    AsyncIndirectBufferedReader as AsyncIndirectBufferedReader,
    AsyncIndirectFileIO as AsyncIndirectFileIO,
)
from .text import AsyncTextIndirectIOWrapper, AsyncTextIOWrapper

__all__ = ("open", "stderr", "stderr_bytes", "stdin", "stdin_bytes", "stdout", "stdout_bytes")

# The blocking opener, as in aiofiles: code that replaces it (test doubles)
# gets its objects opened in the executor and wrapped as aiofiles wraps them.
sync_open = builtins.open


def open(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
         errors: str | None = None, newline: str | None = None, closefd: bool = True,
         opener: Any = None, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None) -> AiofilesContextManager[Any]:
    """Open `file` as builtin open does and return an awaitable async context
    manager for the async file object (AsyncTextIOWrapper, AsyncBufferedReader,
    AsyncBufferedIOBase or AsyncFileIO, by mode).  Nothing happens until it is
    awaited; every error of builtin open is raised then, identical in type,
    errno and message."""
    if ((type(file) is str or isinstance(file, PurePath)) and mode == "rb" and buffering == -1
            and type(buffering) is int and encoding is None and errors is None and newline is None
            and closefd is True and opener is None):
        return AiofilesContextManager(_open_reader(file, loop, executor))  # (the most common open)
    return AiofilesContextManager(_open(file, mode, buffering, encoding, errors, newline, closefd,
                                        opener, loop=loop, executor=executor))


async def _open_reader(file: str | PurePath, loop: asyncio.AbstractEventLoop | None,
                       executor: Executor | None) -> Any:
    """_open(file, "rb"): a regular file's stack is built when first needed.
    A path object is opened by its str, which builtin open names the file."""
    path = file if type(file) is str else os.fspath(file)
    if sync_open is not builtins.open or type(path) is not str:
        return await _open(file, "rb", loop=loop, executor=executor)
    if loop is None:
        loop = asyncio.get_running_loop()
    f = await open_reader(path)
    if type(f) is UnbuiltReader:
        return AsyncBufferedReader.unbuilt(f, loop, executor)
    return wrap(f, loop=loop, executor=executor)


async def _open(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
                errors: str | None = None, newline: str | None = None, closefd: bool = True,
                opener: Any = None, *, loop: asyncio.AbstractEventLoop | None = None,
                executor: Executor | None = None) -> Any:
    if loop is None:
        loop = asyncio.get_running_loop()
    if sync_open is not builtins.open:
        f = await loop.run_in_executor(executor, functools.partial(
            sync_open, file, mode=mode, buffering=buffering, encoding=encoding, errors=errors,
            newline=newline, closefd=closefd, opener=opener))
    else:
        f, _ = await open_stack(file, mode, buffering, encoding, errors, newline, closefd, opener)
        cls = _CLASSES.get(type(f))
        if cls is not None:
            return cls(f, loop, executor)
    return wrap(f, loop=loop, executor=executor)


@functools.singledispatch
def wrap(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
         executor: Executor | None = None) -> AsyncBase:
    """The async file class for an io object, by its type (as aiofiles')."""
    raise TypeError(f"Unsupported io type: {file}.")


@wrap.register(TextIOBase)
def _(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase:
    return AsyncTextIOWrapper(file, loop=loop, executor=executor)


@wrap.register(BufferedWriter)
@wrap.register(BufferedIOBase)
def _(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase:
    return AsyncBufferedIOBase(file, loop=loop, executor=executor)


@wrap.register(BufferedReader)
@wrap.register(BufferedRandom)
def _(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase:
    return AsyncBufferedReader(file, loop=loop, executor=executor)


@wrap.register(FileIO)
def _(file: Any, *, loop: asyncio.AbstractEventLoop | None = None,
      executor: Executor | None = None) -> AsyncBase:
    return AsyncFileIO(file, loop=loop, executor=executor)


# What wrap gives each class that open_stack returns.
_CLASSES: dict[type, type[AsyncBase]] = {
    TextIOWrapper: AsyncTextIOWrapper, BufferedReader: AsyncBufferedReader,
    BufferedRandom: AsyncBufferedReader, BufferedWriter: AsyncBufferedIOBase, RingFileIO: AsyncFileIO,
}


# The process's standard streams, looked up at every call (sys.stdout may be
# replaced at any time); they run in the executor, as aiofiles' do.
stdin = AsyncTextIndirectIOWrapper("sys.stdin", None, None, indirect=lambda: sys.stdin)
stdout = AsyncTextIndirectIOWrapper("sys.stdout", None, None, indirect=lambda: sys.stdout)
stderr = AsyncTextIndirectIOWrapper("sys.stderr", None, None, indirect=lambda: sys.stderr)
stdin_bytes = AsyncIndirectBufferedIOBase("sys.stdin.buffer", None, None, indirect=lambda: sys.stdin.buffer)
stdout_bytes = AsyncIndirectBufferedIOBase("sys.stdout.buffer", None, None,
                                           indirect=lambda: sys.stdout.buffer)
stderr_bytes = AsyncIndirectBufferedIOBase("sys.stderr.buffer", None, None,
                                           indirect=lambda: sys.stderr.buffer)
