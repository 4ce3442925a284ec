"""aiofiles.tempfile.temptypes: the async spooled file and temporary directory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import Executor
from functools import partial
from typing import Any

from ..base import AsyncBase

__all__ = ["AsyncSpooledTemporaryFile", "AsyncTemporaryDirectory"]


class AsyncSpooledTemporaryFile(AsyncBase):
    """An async tempfile.SpooledTemporaryFile.

    Before the rollover its data is in memory and every call is served at
    once; the rollover moves it to a TemporaryFile on the ring, which then
    serves every call.
    """

    def __init__(self, file: Any, loop: asyncio.AbstractEventLoop | None,
                 executor: Executor | None) -> None:
        super().__init__(file, loop, executor)
        self._disk: Any = None  # the async file after the rollover

    async def _on(self, name: str, *args: Any) -> Any:
        if self._disk is not None:
            return await getattr(self._disk, name)(*args)
        return getattr(self._file, name)(*args)

    async def rollover(self) -> None:
        """Move the data to a temporary file on disk (once)."""
        from . import create_unnamed
        from ..threadpool import wrap

        spooled = self._file
        if spooled._rolled:
            return
        args = spooled._TemporaryFileArgs
        newfile = await create_unnamed(args["mode"], args["buffering"], args["encoding"],
                                       args["newline"], args["suffix"], args["prefix"], args["dir"],
                                       errors=args.get("errors"))
        disk = wrap(newfile, loop=self._ref_loop, executor=self._executor)
        memory = spooled._file

        def move() -> None:
            pos = memory.tell()
            if hasattr(newfile, "buffer"):
                newfile.buffer.write(memory.detach().getvalue())
            else:
                newfile.write(memory.getvalue())
            newfile.seek(pos, 0)

        await disk._call(move, None)
        spooled._file = newfile
        del spooled._TemporaryFileArgs
        spooled._rolled = True
        self._disk = disk

    async def _check(self) -> None:
        spooled = self._file
        if not spooled._rolled and spooled._max_size and spooled._file.tell() > spooled._max_size:
            await self.rollover()

    async def write(self, s: Any) -> int:
        """tempfile.SpooledTemporaryFile.write, awaited: the same arguments, result and exceptions."""
        if self._disk is not None:
            return await self._disk.write(s)
        n = self._file._file.write(s)
        await self._check()
        return n

    async def writelines(self, lines: Iterable[Any]) -> None:
        """tempfile.SpooledTemporaryFile.writelines, awaited: the same arguments, result and exceptions."""
        if self._disk is not None:
            return await self._disk.writelines(lines)
        self._file._file.writelines(lines)
        await self._check()

    async def fileno(self) -> int:
        """tempfile.SpooledTemporaryFile.fileno, awaited: the same arguments, result and exceptions."""
        await self.rollover()
        return self._file.fileno()

    async def truncate(self, size: Any = None) -> int:
        """tempfile.SpooledTemporaryFile.truncate, awaited: the same arguments, result and exceptions."""
        spooled = self._file
        if self._disk is None and size is not None and size > spooled._max_size:
            await self.rollover()
        if self._disk is not None:
            return await self._disk.truncate(size)
        return spooled.truncate(size)

    async def read(self, *args: Any) -> Any:
        """tempfile.SpooledTemporaryFile.read, awaited: the same arguments, result and exceptions."""
        return await self._on("read", *args)

    async def readline(self, *args: Any) -> Any:
        """tempfile.SpooledTemporaryFile.readline, awaited: the same arguments, result and exceptions."""
        return await self._on("readline", *args)

    async def readlines(self, *args: Any) -> Any:
        """tempfile.SpooledTemporaryFile.readlines, awaited: the same arguments, result and exceptions."""
        return await self._on("readlines", *args)

    async def seek(self, *args: Any) -> int:
        """tempfile.SpooledTemporaryFile.seek, awaited: the same arguments, result and exceptions."""
        return await self._on("seek", *args)

    async def tell(self) -> int:
        """tempfile.SpooledTemporaryFile.tell, awaited: the same arguments, result and exceptions."""
        return await self._on("tell")

    async def flush(self) -> None:
        """tempfile.SpooledTemporaryFile.flush, awaited: the same arguments, result and exceptions."""
        await self._on("flush")

    async def close(self) -> None:
        """tempfile.SpooledTemporaryFile.close, awaited: the same arguments, result and exceptions."""
        await self._on("close")

    async def isatty(self) -> bool:
        """tempfile.SpooledTemporaryFile.isatty, awaited: the same arguments, result and exceptions."""
        return await self._on("isatty")

    async def _exit(self, *exc_info: Any) -> None:
        if self._disk is not None:
            await self._disk._exit(*exc_info)
        else:
            self._file.__exit__(*exc_info)

    @property
    def closed(self) -> bool:
        """tempfile.SpooledTemporaryFile.closed, of the wrapped object."""
        return self._file.closed

    @property
    def encoding(self) -> Any:
        """tempfile.SpooledTemporaryFile.encoding, of the wrapped object."""
        return self._file.encoding

    @property
    def mode(self) -> Any:
        """tempfile.SpooledTemporaryFile.mode, of the wrapped object."""
        return self._file.mode

    @property
    def name(self) -> Any:
        """tempfile.SpooledTemporaryFile.name, of the wrapped object."""
        return self._file.name

    @property
    def newlines(self) -> Any:
        """tempfile.SpooledTemporaryFile.newlines, of the wrapped object."""
        return self._file.newlines


class AsyncTemporaryDirectory:
    """What `await TemporaryDirectory()` gives: `name`, `cleanup()`, `close()`."""

    def __init__(self, file: Any, loop: asyncio.AbstractEventLoop | None,
                 executor: Executor | None) -> None:
        self._file = file
        self._loop = loop
        self._executor = executor

    @property
    def name(self) -> Any:
        """tempfile.TemporaryDirectory.name, of the wrapped object."""
        return self._file.name

    async def cleanup(self) -> None:
        """tempfile.TemporaryDirectory.cleanup, awaited: the same arguments, result and exceptions."""
        loop = self._loop or asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, partial(self._file.cleanup))

    async def close(self) -> None:
        """tempfile.TemporaryDirectory.cleanup, awaited (aiofiles' name for it): raises what
        cleanup raises."""
        await self.cleanup()

    async def _exit(self, *exc_info: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._file.__exit__, *exc_info)
