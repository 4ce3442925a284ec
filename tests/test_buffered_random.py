"""A buffered binary file's (aioring.open(path, "rb")) seeks, and its small
reads at random: a read that neither the window holds nor continues is
made at its position alone, without the window's read-ahead, and a seek to
a position is made at once.  Each test compares with the stdlib's
io.BufferedReader over the same file."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import pytest

import aioring
from aioring import _ops

SIZE = 256 * 1024
CONTENT = random.Random(7).randbytes(SIZE)


@pytest.fixture
def path(disk_dir: str) -> Path:
    p = Path(disk_dir, "f")
    p.write_bytes(CONTENT)
    return p


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (size, offset) of every aioring._ops.read call."""
    seen: list[tuple[int, int]] = []
    real = _ops.read

    async def spied(fd: int, size: int, offset: int = -1) -> bytes:
        seen.append((size, offset))
        return await real(fd, size, offset)
    monkeypatch.setattr(_ops, "read", spied)
    return seen


def _outcome(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except Exception as exc:
        return type(exc)


async def _aoutcome(coro: Any) -> Any:
    try:
        return await coro
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("source", ["page cache", "ring"])
async def test_seeks_and_reads_at_random_match_bufferedreader(path: Path, source: str,
                                                               request: pytest.FixtureRequest) -> None:
    """Seeks anywhere (past the end too), reads of 0 to 64 KiB after them,
    and what follows a read (the next read, peek, read1, readline, tell):
    the bytes and positions of io.BufferedReader."""
    if source == "ring":
        request.getfixturevalue("ring_reads")
    rnd = random.Random(11)
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as actual:
            for _ in range(300):
                where = rnd.choice([rnd.randrange(SIZE), rnd.randrange(SIZE - 100, SIZE + 100), 0])
                assert await actual.seek(where) == expected.seek(where)
                n = rnd.choice([0, 1, 100, 4096, 5000, rnd.randrange(1, 64 * 1024)])
                assert await actual.read(n) == expected.read(n)
                then = rnd.choice(["read", "peek", "read1", "readline", "tell", "seek_cur"])
                if then == "read":
                    assert await actual.read(300) == expected.read(300)
                elif then == "peek":
                    # (peek returns what its buffer holds: at least the next byte, as many as it may)
                    assert (await actual.peek(1))[:1] == expected.peek(1)[:1]
                elif then == "read1":
                    assert await actual.read1(50) == expected.read1(50)
                elif then == "readline":
                    assert await actual.readline() == expected.readline()
                elif then == "seek_cur":
                    back = _outcome(expected.seek, -3, os.SEEK_CUR)
                    assert await _aoutcome(actual.seek(-3, os.SEEK_CUR)) == back
                assert await actual.tell() == expected.tell()


async def test_a_read_at_random_reads_what_was_asked(path: Path, reads: list[tuple[int, int]]) -> None:
    """A read after a seek elsewhere reads its own bytes at their position;
    the read that continues it fills the window, as reading on does."""
    async with aioring.open(path, "rb") as f:
        await f.seek(100_000)
        assert await f.read(4096) == CONTENT[100_000:104_096]
        assert reads == [(4096, 100_000)]
        assert await f.read(4096) == CONTENT[104_096:108_192]
        assert await f.read(4096) == CONTENT[108_192:112_288]
        assert await f.tell() == 112_288


async def test_seek_arguments_match_bufferedreader(path: Path) -> None:
    """Offsets of every kind and sign, and each whence: the results and
    exceptions of io.BufferedReader."""
    offsets: list[Any] = [0, 5, SIZE, SIZE + 7, -1, 2**63, -(2**63) - 1, True, 3.0, "1", None]
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as actual:
            for whence in (os.SEEK_SET, os.SEEK_CUR, os.SEEK_END, 7):
                for offset in offsets:
                    want = _outcome(expected.seek, offset, whence)
                    assert await _aoutcome(actual.seek(offset, whence)) == want
                    assert await actual.tell() == expected.tell()
    async with aioring.open(path, "rb") as closed:
        pass
    assert await _aoutcome(closed.seek(0)) is ValueError


async def test_a_read_at_random_cancelled_while_it_waits_leaves_the_position(
        path: Path, gated_reads: list[asyncio.Future[None]]) -> None:
    """CancelledError; the position where it was, and the file free: the
    next read returns the bytes there."""
    async with aioring.open(path, "rb") as f:
        await f.seek(50_000)
        reading = asyncio.ensure_future(f.read(100))
        await asyncio.sleep(0)
        assert len(gated_reads) == 1 and not reading.done()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert await f.tell() == 50_000
        next_read = asyncio.ensure_future(f.read(100))
        await asyncio.sleep(0)
        gated_reads[1].set_result(None)
        assert await next_read == CONTENT[50_000:50_100]
        assert await f.tell() == 50_100


async def test_calls_made_while_a_read_at_random_waits_run_after_it_in_order(
        path: Path, gated_reads: list[asyncio.Future[None]]) -> None:
    """A seek and a read started while a read at random waits: each runs
    after the calls started before it, as on a synchronous file."""
    async with aioring.open(path, "rb") as f:
        await f.seek(70_000)
        first = asyncio.ensure_future(f.read(10))
        await asyncio.sleep(0)
        seek = asyncio.ensure_future(f.seek(5))
        second = asyncio.ensure_future(f.read(20))
        await asyncio.sleep(0)
        assert not seek.done()
        gated_reads[0].set_result(None)
        assert await asyncio.gather(first, seek, second) == [CONTENT[70_000:70_010], 5, CONTENT[5:25]]


async def test_seeks_alone_let_other_tasks_run(path: Path) -> None:
    """A seek to a position is made at once, paced: a task that only seeks
    lets the others run."""
    ran = []

    async def other() -> None:
        ran.append(True)
    async with aioring.open(path, "rb") as f:
        task = asyncio.ensure_future(other())
        for i in range(_ops.YIELD_EVERY + 1):
            assert await f.seek(i * 10) == i * 10
            if ran:
                break
        assert ran
        await task


async def test_a_file_that_shrank_reads_what_is_left(path: Path) -> None:
    """Truncated by another handle after the open: a read at random past
    the new end returns what io.BufferedReader returns."""
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as actual:
            os.truncate(path, 100_000)
            for where, n in ((99_000, 4096), (150_000, 100), (10_000, 50)):
                assert await actual.seek(where) == expected.seek(where)
                assert await actual.read(n) == expected.read(n)
                assert await actual.tell() == expected.tell()


async def test_a_callers_fd_follows_its_own_offset(path: Path) -> None:
    """A file over an fd the caller gave: after seeks and reads the fd's
    offset is where io.BufferedReader leaves it."""
    fd = os.open(path, os.O_RDONLY)
    fd2 = os.open(path, os.O_RDONLY)
    try:
        with open(fd2, "rb", closefd=False) as expected:
            async with aioring.open(fd, "rb", closefd=False) as actual:
                for where, n in ((123_456, 4096), (7, 10), (200_000, 100)):
                    assert await actual.seek(where) == expected.seek(where)
                    assert await actual.read(n) == expected.read(n)
                    assert os.lseek(fd, 0, os.SEEK_CUR) == os.lseek(fd2, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
        os.close(fd2)
