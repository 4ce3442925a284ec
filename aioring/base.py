"""aiofiles.base counterparts: the async file base classes, the context manager
that `open` returns, and the executor wrapper for what io_uring cannot do."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ._file import RingFileIO, ring_raw
from ._ops import pace

if TYPE_CHECKING:
    from ._open import UnbuiltReader

__all__ = ["AiofilesContextManager", "AsyncBase", "AsyncFileBase", "AsyncIndirectBase", "wrap"]

_T = TypeVar("_T")
_PAST_END = 64 * 1024  # prefetch stops this far past the known end of file


def wrap(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Make a blocking function awaitable: it runs in `executor` (default: the
    loop's default executor), with the same arguments, result and exceptions.
    `loop` and `executor` are keyword-only and never passed to `func`."""

    @functools.wraps(func)
    async def run(*args: Any, loop: asyncio.AbstractEventLoop | None = None,
                  executor: Executor | None = None, **kwargs: Any) -> Any:
        if loop is None:
            loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(func, *args, **kwargs))

    return run


# A prefetch plan: ("range", start, end) or ("line", start, search_from, terminator, slack, cap).
Plan = tuple[Any, ...] | None


class AsyncBase:
    """An async file: each method awaits what its stdlib counterpart does.

    For a file aioring opened (its raw layer is a RingFileIO) the data moves
    through the ring (see aioring._file); for any other object (io.BytesIO, a
    FIFO, sys.stdout, a file opened by builtin open and passed to
    threadpool.wrap) each call runs in `executor` as aiofiles runs it.
    """

    # A file aioring opened "rb" whose stack is not built yet (see
    # _open.UnbuiltReader): `_file` and `_raw` are then unset, and the first
    # look at either builds them (__getattr__).
    _pending: UnbuiltReader | None = None

    def __init__(self, file: Any, loop: asyncio.AbstractEventLoop | None,
                 executor: Executor | None) -> None:
        self._file = file
        self._executor = executor
        self._ref_loop = loop
        self._raw: RingFileIO | None = ring_raw(file)

    @classmethod
    def unbuilt(cls, pending: UnbuiltReader, loop: asyncio.AbstractEventLoop | None,
                executor: Executor | None) -> Any:
        """The async file over `pending`, whose stack is built when first needed."""
        self = cls.__new__(cls)
        self._executor = executor
        self._ref_loop = loop
        self._pending = pending
        return self

    def __getattr__(self, name: str) -> Any:
        # (Only reached when `name` is not set: the stack of an unbuilt file.)
        pending = self.__dict__.get("_pending")
        if pending is None or name not in ("_file", "_raw"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        file = pending.build()
        self._file = file
        self._raw = ring_raw(file)
        self._pending = None
        return self._file if name == "_file" else self._raw

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self._ref_loop or asyncio.get_running_loop()

    def __aiter__(self) -> AsyncBase:
        """The file is its own async iterator: lines from the current position."""
        return self

    async def __anext__(self) -> Any:
        line = await self.readline()
        if line:
            return line
        raise StopAsyncIteration

    def __repr__(self) -> str:
        return super().__repr__() + " wrapping " + repr(self._file)

    async def readline(self, size: Any = -1) -> Any:  # overridden by every file class
        """io.IOBase.readline, awaited: the same arguments, result and exceptions."""
        raise NotImplementedError

    def _replan(self, name: Any, args: tuple[Any, ...]) -> Plan:
        """The prefetch plan of call `name` from the current position."""
        return None

    async def _exit(self, *exc_info: Any) -> None:
        """The file's __exit__, for AiofilesContextManager.__aexit__: through
        the ring to its end even if the task is cancelled meanwhile; for other
        objects in the loop's default executor, as aiofiles."""
        pending = self._pending
        if pending is not None and pending.closes_at_once():
            pending.close()
            return
        if self._closes_at_once():
            self._file.__exit__(*exc_info)
            return
        if self._raw is None:
            await asyncio.get_running_loop().run_in_executor(None, self._file.__exit__, *exc_info)
            return
        try:
            await self._call("__exit__", None, *exc_info)
        except asyncio.CancelledError:
            _close_now(self._raw)
            raise

    def _closes_at_once(self) -> bool:
        """Whether closing the file now needs nothing but a plain close of its
        fd, done at once as the ring would do it (a file only read, on a file
        system that needs no flush, with no call under way)."""
        raw = self._raw
        return raw is not None and raw.closes_at_once()

    # -- the two ways a call runs -------------------------------------------
    async def _executor_call(self, name: str, *args: Any) -> Any:
        func = functools.partial(getattr(self._file, name), *args)
        return await self._loop.run_in_executor(self._executor, func)

    async def _call(self, name: str | Callable[..., Any], plan: Plan, *args: Any,
                    size_fresh: bool = False) -> Any:
        """Run the stdlib method `name` of the file (or a function of it) with
        its data on the ring: prefetch what `plan` says it reads, run it,
        drain what it wrote."""
        raw = self._raw
        if raw is None:
            assert isinstance(name, str)
            return await self._executor_call(name, *args)
        if raw.busy or raw.queue:
            # (A close drains what is queued after it queued its own close: a
            # write that keeps failing is then dropped and the fd still closed.)
            if await raw.enter(drain=name not in _ENDING):
                plan = self._replan(name, args)  # the calls before this one moved the position
        else:  # (enter's work, without a coroutine)
            raw.busy = True
            try:
                raw.begin_call()
            except BaseException:
                raw.release()
                raise
        try:
            return await self._run(raw, name, plan, args, size_fresh)
        finally:
            raw.release()

    async def _run(self, raw: RingFileIO, name: str | Callable[..., Any], plan: Plan,
                   args: tuple[Any, ...], size_fresh: bool = False) -> Any:
        """_call's work, with the file taken (raw.enter) and begun (begin_call)."""
        file = self._file
        if raw.closed:
            plan = None  # the stdlib method raises ValueError; the fd is not touched
        if size_fresh or raw.appending:
            if not raw.closed:
                raw.refresh_size()
        if plan is not None:
            # Never read ahead much past the end of file, whatever was asked.
            limit = max(plan[1], raw.size) + _PAST_END
            if plan[0] == "range":
                start, end = plan[1], min(plan[2], limit)
                if end >= raw.size:
                    end += 1  # reaching end of file: read past it, so the window knows it
                if not raw.holds(start, end):
                    await raw.fill(start, end)
            else:
                await raw.fill_line(plan[1], min(plan[2], limit), plan[3], plan[4],
                                    min(plan[5], limit))
        if name not in _ENDING and pace():
            await asyncio.sleep(0)  # never before a close: one cancelled here would not close
        raw.defer = True
        try:
            result = (getattr(file, name) if isinstance(name, str) else name)(*args)
        finally:
            raw.defer = False
            try:
                if raw.queue:
                    await raw.drain()
            finally:
                raw.end_call()
        return result


_ENDING = ("close", "__exit__")


class AsyncFileBase(AsyncBase):
    """What the binary and the text file classes share."""

    # -- reads the window serves at once ----------------------------------------
    async def readline(self, size: Any = -1) -> Any:
        """io.IOBase.readline, awaited: the same arguments, result and exceptions."""
        raw = self._raw
        if size == -1 and raw is not None and not raw.busy and not raw.queue and self._line_ends():
            return await self._call_now(raw, "readline", -1)
        return await self._call("readline", self._replan("readline", (size,)), size)

    async def __anext__(self) -> Any:
        raw = self._raw
        if raw is not None and not raw.busy and not raw.queue and self._line_ends():
            line = await self._call_now(raw, "readline", -1)  # (readline's, one coroutine fewer)
        else:
            line = await self.readline()
        if line:
            return line
        raise StopAsyncIteration

    def _line_ends(self) -> tuple[bytes, ...] | None:
        """The encoded line ends that _fits looks for (None: readline never
        runs at once)."""
        return None

    def _slack(self, raw: RingFileIO) -> int:
        """How far past a line's end the stdlib's readline may read the raw file."""
        return raw.bufsize + 1

    def _fits(self, raw: RingFileIO, name: str, arg: int) -> bool:
        """Whether the window holds all that the stdlib's readline() or (for a
        BufferedReader) read(arg) can read of the raw file: the next line and
        the slack past it; `arg` bytes and a buffer more."""
        if name == "read":
            return raw.holds(raw.pos, raw.pos + arg + raw.bufsize)
        terms = self._line_ends()
        assert terms is not None
        return raw.holds_line(terms, self._slack(raw))

    async def _call_now(self, raw: RingFileIO, name: str, arg: int) -> Any:
        """_call for a read that the window usually serves whole (iterating a
        file, reading it in chunks): then the stdlib's method runs at once,
        with no plan and no fill.  The file is taken throughout, so calls
        made after this one still run after it."""
        raw.busy = True
        try:
            if pace():
                await asyncio.sleep(0)  # (a task reading cached bytes would not yield otherwise)
            raw.begin_call()  # drops a stale window
            if not self._fits(raw, name, arg):
                return await self._run(raw, name, self._replan(name, (arg,)), (arg,))
            raw.defer = True
            try:
                result = getattr(self._file, name)(arg)
            finally:
                raw.defer = False
                try:
                    if raw.queue:  # ("+" modes flush pending writes first)
                        await raw.drain()
                finally:
                    raw.end_call()
            return result
        finally:
            raw.release()

    async def tell(self) -> int:
        """io.IOBase.tell, awaited: the same arguments, result and exceptions."""
        return await self._call("tell", None)

    async def truncate(self, size: Any = None) -> int:
        """io.IOBase.truncate, awaited: the same arguments, result and exceptions."""
        return await self._call("truncate", None, size)

    async def flush(self) -> None:
        """io.IOBase.flush, awaited: the same arguments, result and exceptions."""
        await self._call("flush", None)

    async def close(self) -> None:
        """io.IOBase.close, awaited: the same arguments, result and exceptions."""
        pending = self._pending
        if pending is not None and pending.closes_at_once():
            pending.close()
            return
        if self._closes_at_once():
            self._file.close()
            return
        try:
            await self._call("close", None)
        except asyncio.CancelledError:
            _close_now(self._raw)
            raise

    async def isatty(self) -> bool:
        """io.IOBase.isatty, awaited: the same arguments, result and exceptions."""
        return await self._call("isatty", None)

    async def seekable(self) -> bool:
        """io.IOBase.seekable, awaited: the same arguments, result and exceptions."""
        return await self._call("seekable", None)

    async def writable(self) -> bool:
        """io.IOBase.writable, awaited: the same arguments, result and exceptions."""
        return await self._call("writable", None)

    def fileno(self) -> int:
        """As io.IOBase.fileno: the same arguments, result and exceptions."""
        pending = self._pending
        if pending is not None and not pending.closed:
            return pending.fd
        return self._file.fileno()

    @property
    def closed(self) -> bool:
        """Whether the file is closed, as io.IOBase.closed."""
        pending = self._pending
        return pending.closed if pending is not None else self._file.closed

    @property
    def name(self) -> Any:
        """The wrapped file's name, as the stdlib file object's `name`."""
        pending = self._pending
        return pending.name if pending is not None else self._file.name

    @property
    def mode(self) -> str:
        """The mode the file was opened with, as the stdlib file object's `mode`."""
        return "rb" if self._pending is not None else self._file.mode


class AsyncIndirectBase(AsyncBase):
    """An async file whose underlying object is looked up at every call
    (`indirect()`), as aiofiles' stdin/stdout/stderr are: pytest's capture and
    other code replace sys.stdout at any time."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None, executor: Executor | None,
                 indirect: Callable[[], Any]) -> None:
        self._indirect = indirect
        self._name = name
        super().__init__(None, loop, executor)
        self._raw = None

    @property
    def _file(self) -> Any:
        return self._indirect()

    @_file.setter
    def _file(self, value: Any) -> None:
        pass  # the object is always the indirect one


class AiofilesContextManager(Awaitable[_T], AbstractAsyncContextManager[_T], Generic[_T]):
    """What `open` returns: await it for the file, or use `async with` (which
    closes the file on the way out, also when the block was cancelled or
    raised; errors of the close propagate).  Awaiting it again gives the same
    file object."""

    __slots__ = ("_coro", "_obj")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self._coro = coro
        self._obj: Any = None

    def __await__(self) -> Generator[Any, None, _T]:
        if self._obj is None:
            self._obj = yield from self._coro.__await__()
        return self._obj

    async def __aenter__(self) -> _T:
        if self._obj is None:
            self._obj = await self._coro
        return self._obj

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> None:
        obj = self._obj
        pending = getattr(obj, "_pending", None)  # (a temporary directory has none)
        if pending is not None and pending.closes_at_once():  # (_exit's first case, without its coroutine)
            self._obj = None
            pending.close()
            return
        try:
            await obj._exit(exc_type, exc_val, exc_tb)
        finally:
            self._obj = None


def _close_now(raw: RingFileIO | None) -> None:
    """A close was cancelled before it went through the ring: finish it now."""
    if raw is not None:
        raw.finish_close_now()
