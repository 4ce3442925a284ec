"""AsyncFileIO's read(size) and seek(offset) (files opened with buffering=0):
the core's FileMethod (src/filemethod.h) takes them without a coroutine
frame where no other call has the file, and hands every other call to the
Python methods they stand for.  Each test compares with io.FileIO, or with
what a native coroutine does."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

import aioring
from aioring import _ops
from aioring.threadpool.binary import AsyncFileIO

from test_cold import drop
from test_ops import assert_stands_in

CONTENT = bytes(range(256)) * 64


@pytest.fixture
def path(disk_dir: str) -> Path:
    p = Path(disk_dir, "f")
    with open(p, "wb") as g:
        g.write(CONTENT)
        g.flush()
        os.fsync(g.fileno())  # (so that drop() drops its pages)
    return p


@pytest.mark.parametrize("name", ["read", "seek"])
async def test_read_and_seek_are_coroutine_methods_like_their_python_ones(path: Path, name: str) -> None:
    """Name, docstring, signature and repr are the Python method's, and so
    are a coroutine that asyncio takes (named as the method's), that nothing
    runs before it is awaited, that cannot be awaited twice and that warns when never awaited."""
    python = assert_stands_in(getattr(AsyncFileIO, name))
    arg, want = (5, CONTENT[:5]) if name == "read" else (7, 7)
    async with aioring.open(path, "rb", buffering=0) as f:
        for method in (getattr(f, name), python.__get__(f)):
            await f.seek(0, os.SEEK_SET)
            coro = method(arg)
            assert asyncio.iscoroutine(coro)
            assert (coro.__name__, coro.__qualname__) == (name, f"AsyncFileIO.{name}")
            with pytest.raises(StopIteration) as stop:
                coro.send(None)
            assert stop.value.value == want
            with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
                coro.send(None)
            await f.seek(0, os.SEEK_SET)
            coro = method(arg)
            with pytest.raises(KeyError):
                coro.throw(KeyError("thrown"))  # (before its first step: nothing runs)
            coro.close()
            method(arg).close()  # (closed unstarted: no warning)
            assert await f.tell() == 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(f, name)(arg)
            python(f, arg)
            gc.collect()
        assert [str(w.message) for w in caught if w.category is RuntimeWarning] == \
            [f"coroutine 'AsyncFileIO.{name}' was never awaited"] * 2
        assert await f.tell() == 0
        assert await asyncio.create_task(getattr(f, name)(arg)) == want


async def test_reads_and_seeks_match_fileio(path: Path) -> None:
    """Every form of the two calls, those the core takes and those it hands
    on (whence given, a size of 0 or below, an int subclass, an offset past
    the end, a bad type or value), answers as io.FileIO's, and leaves the
    position where FileIO's does."""
    calls = [("read", (10,)), ("seek", (3,)), ("read", (4,)), ("seek", (2, os.SEEK_CUR)), ("read", (1,)),
             ("seek", (0, 0)), ("read", (0,)), ("seek", (True,)), ("read", (True,)),
             ("seek", (-3, os.SEEK_END)), ("read", (100,)), ("read", (100,)), ("seek", (len(CONTENT) + 50,)),
             ("read", (5,)), ("seek", (-1,)), ("seek", (1.5,)), ("read", (2.5,)), ("seek", (5, 7)),
             ("seek", (2**63,)), ("read", (-1,)), ("seek", (100,)), ("read", (None,))]

    def outcome(method: Any, args: tuple[Any, ...]) -> Any:
        try:
            return method(*args)
        except Exception as exc:  # (the outcome compared, whatever it is)
            return type(exc), getattr(exc, "errno", None)
    with open(path, "rb", buffering=0) as g:
        expected = [(outcome(getattr(g, name), args), g.tell()) for name, args in calls]
    async with aioring.open(path, "rb", buffering=0) as f:
        got = []
        for name, args in calls:
            try:
                result = await getattr(f, name)(*args)
            except Exception as exc:
                result = type(exc), getattr(exc, "errno", None)
            got.append((result, await f.tell()))
    assert got == expected


async def test_a_write_only_file_seeks_and_refuses_reads_as_fileio(path: Path) -> None:
    """A seek needs no read access (the core sets the position); a read of a
    file not open for reading raises FileIO's error and moves nothing."""
    with open(path, "ab", buffering=0) as g:
        assert g.seek(5) == 5
        with pytest.raises(io.UnsupportedOperation) as expected:
            g.read(3)
    async with aioring.open(path, "ab", buffering=0) as f:
        assert await f.seek(5) == 5
        with pytest.raises(io.UnsupportedOperation) as actual:
            await f.read(3)
        assert str(actual.value) == str(expected.value)
        assert await f.tell() == 5


async def test_a_closed_file_raises_as_fileio(path: Path) -> None:
    g = open(path, "rb", buffering=0)
    g.close()
    f = await aioring.open(path, "rb", buffering=0)
    await f.close()
    for name, arg in (("read", 3), ("seek", 3)):
        with pytest.raises(ValueError) as expected:
            getattr(g, name)(arg)
        with pytest.raises(ValueError) as actual:
            await getattr(f, name)(arg)
        assert str(actual.value) == str(expected.value)


async def test_a_read_completes_after_its_wait(path: Path, gated_reads: list[asyncio.Future[None]]) -> None:
    async with aioring.open(path, "rb", buffering=0) as f:
        await f.seek(10)
        reading = asyncio.ensure_future(f.read(20))
        await asyncio.sleep(0)
        assert f._raw.busy is True and f._raw.pos == 10
        gated_reads[0].set_result(None)
        assert await reading == CONTENT[10:30]
        assert await f.tell() == 30 and f._raw.busy is False


async def test_a_read_cancelled_while_it_waits_leaves_the_position(
        path: Path, gated_reads: list[asyncio.Future[None]]) -> None:
    """A read cancelled while it waits: CancelledError, the position where it
    was, and the file free: the next read returns the bytes a read there
    returns."""
    async with aioring.open(path, "rb", buffering=0) as f:
        await f.seek(4096)
        reading = asyncio.ensure_future(f.read(100))
        await asyncio.sleep(0)
        assert gated_reads and not reading.done()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert f._raw.busy is False
        next_read = asyncio.ensure_future(f.read(100))
        await asyncio.sleep(0)
        gated_reads[1].set_result(None)
        assert await next_read == CONTENT[4096:4196]
        assert await f.tell() == 4196


@pytest.mark.parametrize("end", ["close", "drop"])
async def test_a_read_closed_while_it_waits_gives_the_file_up(
        path: Path, gated_reads: list[asyncio.Future[None]], end: str) -> None:
    """A read's coroutine closed, or dropped, while it waits: the read it
    waits on is closed, the position stays, and the file is free for the
    next call."""
    async with aioring.open(path, "rb", buffering=0) as f:
        coro = f.read(50)
        assert coro.send(None) is gated_reads[0]
        if end == "close":
            coro.close()
        else:
            del coro
            gc.collect()
        assert f._raw.busy is False
        assert await f.tell() == 0
        next_read = asyncio.ensure_future(f.read(50))
        await asyncio.sleep(0)
        gated_reads[1].set_result(None)
        assert await next_read == CONTENT[:50]


async def test_a_call_waiting_for_the_file_gets_it_after_a_read(path: Path) -> None:
    """A read the core takes, then calls that find the file taken (they
    wait for it): each runs in the order it was started, as on FileIO."""
    drop(path)
    async with aioring.open(path, "rb", buffering=0) as f:
        results = await asyncio.gather(f.read(3), f.read(4), f.seek(1, os.SEEK_CUR), f.read(2))
        assert results == [CONTENT[:3], CONTENT[3:7], 8, CONTENT[8:10]]
        raw = f._raw
        assert raw.busy is False and not raw._waiters


async def test_seeks_alone_let_other_tasks_run(path: Path) -> None:
    """Seeks need no I/O and are served at once; like every call served at
    once they are paced: a task that only seeks lets the others run."""
    ran = []

    async def other() -> None:
        ran.append(True)
    async with aioring.open(path, "rb", buffering=0) as f:
        task = asyncio.ensure_future(other())
        for i in range(_ops.YIELD_EVERY + 1):
            await f.seek(i)
            if ran:
                break
        assert ran
        await task


async def test_a_subclass_raw_file_goes_through_the_python_methods(path: Path) -> None:
    """A raw file of another class (FileMethod reads RingFileIO's slots by
    their offsets) goes through the Python methods, which answer as
    FileIO's."""
    from aioring._file import RingFileIO
    calls = []

    class Traced(RingFileIO):
        __slots__ = ()

        def begin_call(self) -> None:
            calls.append("begin_call")
            super().begin_call()
    async with aioring.open(path, "rb", buffering=0) as f:
        f._raw.__class__ = Traced
        assert await f.seek(10) == 10
        assert await f.read(5) == CONTENT[10:15]
        assert calls
        f._raw.__class__ = RingFileIO
