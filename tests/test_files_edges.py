"""Edge cases of the file objects, each against builtin open: other handles
and processes changing the file, fds given by the caller, concurrency,
cancellation under backpressure, failed writes, argument checking, large
and huge requests, "\r" line ends.  Each docstring tells what could go wrong."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import resource
import signal
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import aioring
from aioring import _file, _ops, _rawfile


def _fds() -> set[str]:
    """The process's open fds (with the running loop's ring already made)."""
    aioring.statistics()
    return set(os.listdir("/proc/self/fd"))


def _pattern(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


# -- stale window -------------------------------------------------------------

async def test_read_after_seek_sees_another_handles_write(disk_dir: str) -> None:
    """The window (128 KiB read ahead) outlives the call that filled it, and a
    later call that finds its range in the window never asks the kernel again.
    A write made meanwhile through another handle (here a second aioring
    file, flushed) is invisible: the reader gets the old bytes.  Builtin open
    re-reads after a seek outside its 4-8 KiB buffer and sees the new bytes
    (the module docstring promises "Reads always see the file's latest
    contents")."""
    path = Path(disk_dir, "f")
    path.write_bytes(bytes(300_000))
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as reader, aioring.open(path, "rb+") as writer:
            assert await reader.read(10) == expected.read(10)
            await writer.seek(100_000)
            await writer.write(b"NEW!")
            await writer.flush()
            expected.seek(100_000)
            await reader.seek(100_000)
            assert expected.read(4) == b"NEW!"
            assert await reader.read(4) == b"NEW!"


async def test_read_after_external_truncate_returns_eof(disk_dir: str) -> None:
    """Same root cause: after another process truncated the file, reads
    inside the old window still return the removed bytes instead of b""."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"x" * 300_000)
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as f:
            assert await f.read(10) == expected.read(10)
            os.truncate(path, 50_000)
            expected.seek(60_000)
            await f.seek(60_000)
            assert expected.read(4) == b""
            assert await f.read(4) == b""


# -- concurrency ---------------------------------------------------------------

@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_concurrent_readlines_keep_their_order(disk_dir: str, mode: str) -> None:
    """Many tasks calling readline() on one file get its lines in the order
    of their calls, as calls waiting their turn do: also the calls that the
    read-ahead serves at once, and those that let the loop run first."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(3 * _file.YIELD_EVERY)))
    with open(path, mode) as g:
        expected = g.readlines()
    async with aioring.open(path, mode) as f:
        got = await asyncio.gather(*(f.readline() for _ in expected))
        assert got == expected
        assert await f.readline() == expected[0][:0]


@pytest.mark.parametrize("mode", ["rb", "r"])
async def test_concurrent_reads_never_read_synchronously(disk_dir: str, mode: str) -> None:
    """Several tasks reading one file: each call's prefetch plan is computed
    from the position when the call is made (`self._plan(...)` is an argument
    of `_call`), not when it gets the file after the calls queued before it.
    The window then misses the bytes the stdlib reads and RingFileIO falls
    back to blocking preadv in the event loop (SYNC_READS grows by ~100)."""
    path = Path(disk_dir, "f")
    data = _pattern(1_000_000)
    path.write_bytes(data)
    kwargs: dict[str, Any] = {} if mode == "rb" else {"encoding": "latin-1", "newline": ""}
    before = _rawfile.SYNC_READS[0]
    async with aioring.open(path, mode, **kwargs) as f:
        parts = await asyncio.gather(*(f.read(10_000) for _ in range(101)))
    joined = b"".join(parts) if mode == "rb" else "".join(parts).encode("latin-1")
    assert joined == data
    assert _rawfile.SYNC_READS[0] == before


# -- files opened by fd ----------------------------------------------------------

async def test_fd_opened_file_reads_at_the_fd_offset(disk_dir: str) -> None:
    """open(fd) uses the fd's current file offset (FileIO reads/writes with
    read(2)/write(2)); RingFileIO starts its own position at 0 (or the size
    in append mode) and uses pread/pwrite, so it reads the wrong bytes and
    tell() is wrong."""
    path = Path(disk_dir, "f")
    path.write_bytes(bytes(range(100)))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 50, os.SEEK_SET)
        with open(fd, "rb", closefd=False) as g:
            expected = (g.read(5), g.tell())
        os.lseek(fd, 50, os.SEEK_SET)
        async with aioring.open(fd, "rb", closefd=False) as f:
            actual = (await f.read(5), await f.tell())
        assert expected == (bytes(range(50, 55)), 55)
        assert actual == expected
    finally:
        os.close(fd)


async def test_fd_opened_file_advances_the_fd_offset(disk_dir: str) -> None:
    """Data corruption: a header written through open(fd, closefd=False)
    leaves the fd's offset after it, so the caller's next os.write appends.
    aioring's pwrite leaves the offset at 0 and the next os.write overwrites
    the header (file becomes b"body\\nr\\n")."""
    path = Path(disk_dir, "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        async with aioring.open(fd, "wb", closefd=False) as f:
            await f.write(b"header\n")
        os.write(fd, b"body\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"header\nbody\n"


# -- read() to end of file: the kernel fills the result ---------------------------

@pytest.mark.parametrize("reads", ["direct first", "ring"])
@pytest.mark.parametrize("change", ["none", "grew a little", "grew a lot", "shrank", "emptied"])
@pytest.mark.parametrize("size", [4096, 100_000, 300_000])
async def test_read_to_the_end_sees_the_file_as_it_is_now(disk_dir: str, change: str, size: int, reads: str,
                                                           request: pytest.FixtureRequest) -> None:
    """read() with nothing buffered reads what the file's size said, and a
    little more to see where it ends.  A file another handle changed since
    must read as builtin open reads it then, whether the page cache served
    the read at once or the ring did."""
    if reads == "ring":
        request.getfixturevalue("ring_reads")
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(size))
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as f:
            if change == "grew a little":
                with open(path, "ab") as other:
                    other.write(b"+" * 100)
            elif change == "grew a lot":
                with open(path, "ab") as other:
                    other.write(_pattern(50_000))
            elif change == "shrank":
                os.truncate(path, size // 2)
            elif change == "emptied":
                os.truncate(path, 0)
            want = expected.read()
            assert await f.read() == want
            assert await f.tell() == expected.tell() == len(want)
            assert await f.read() == expected.read() == b""
            await f.seek(0)
            assert await f.read(-1) == want


@pytest.mark.parametrize("reads", ["direct first", "ring"])
@pytest.mark.parametrize("buffering", [-1, 0])
@pytest.mark.parametrize("chunk", [4096, _ops.UNZEROED_MIN, 150_000, 1 << 20])
async def test_large_reads_return_just_what_the_kernel_read(
        disk_dir: str, chunk: int, buffering: int, reads: str, request: pytest.FixtureRequest) -> None:
    """read(n) with nothing buffered lets the kernel fill a new bytes object
    (not zeroed first when large): a read cut short by the end of the file,
    and the empty one after it, give just the file's bytes, as builtin open's."""
    if reads == "ring":
        request.getfixturevalue("ring_reads")
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(2 * chunk + chunk // 3))
    with open(path, "rb", buffering=buffering) as expected:
        async with aioring.open(path, "rb", buffering=buffering) as f:
            while True:
                want = expected.read(chunk)
                assert await f.read(chunk) == want
                if not want:
                    break


@pytest.mark.parametrize("n", [2, 4096, _ops.UNZEROED_MIN - 1, _ops.UNZEROED_MIN, 1 << 20])
def test_new_bytes_are_new_objects_of_the_length_asked(n: int) -> None:
    a, b = _ops.new_bytes(n), _ops.new_bytes(n)
    assert type(a) is bytes and len(a) == len(b) == n
    assert a is not b  # never a shared object, which filling would corrupt


async def test_read_to_the_end_after_a_partial_read_and_a_seek(disk_dir: str) -> None:
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(70_000))
    with open(path, "rb") as expected:
        async with aioring.open(path, "rb") as f:
            assert await f.read(10) == expected.read(10)  # buffered: the rest comes after it
            assert await f.read(None) == expected.read(None)
            for pos in (5, 69_999, 70_000, 80_000):
                expected.seek(pos)
                await f.seek(pos)
                assert await f.read() == expected.read()
                assert await f.tell() == expected.tell()


async def test_read_to_the_end_after_writes_in_a_read_write_file(disk_dir: str) -> None:
    a, b = Path(disk_dir, "a"), Path(disk_dir, "b")
    a.write_bytes(_pattern(50_000))
    b.write_bytes(_pattern(50_000))
    with open(a, "rb+") as expected:
        async with aioring.open(b, "rb+") as f:
            for pos, data in ((0, b"head"), (49_990, b"x" * 30), (10_000, b"mid")):
                expected.seek(pos)
                await f.seek(pos)
                expected.write(data)
                await f.write(data)
                assert await f.read() == expected.read()
                expected.seek(0)
                await f.seek(0)
                assert await f.read() == expected.read()


async def test_a_cancelled_read_to_the_end_consumes_nothing(disk_dir: str) -> None:
    path = Path(disk_dir, "f")
    data = _pattern(200_000)
    path.write_bytes(data)
    async with aioring.open(path, "rb") as f:
        reading = asyncio.ensure_future(f.read())
        await asyncio.sleep(0)  # submitted
        reading.cancel()
        try:
            got = await reading
        except asyncio.CancelledError:  # cancelled in time: nothing read
            assert await f.tell() == 0
            assert await f.read() == data
        else:  # the kernel had finished: the bytes are the caller's
            assert got == data
            assert await f.tell() == len(data)


# -- close under backpressure ---------------------------------------------------

async def test_cancelled_close_under_backpressure_closes_the_fd(disk_dir: str) -> None:
    """drain() pops the queued close *before* awaiting IORING_OP_CLOSE.  When
    the ring is full the close op waits in the ring's queue; if the task is
    cancelled then, Ring.settle drops the op (it never reached the kernel) and
    the close is gone: f.closed is True, the queue is empty, the fd stays open
    for the life of the process (not even the finalizer closes it)."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"x")
    before = _fds()
    f = await aioring.open(path, "rb")
    fd = f.fileno()
    r, w = os.pipe()
    blockers = [asyncio.ensure_future(_ops.read(r, 1)) for _ in range(aioring.statistics()["cq_entries"])]
    try:
        await asyncio.sleep(0)  # every pipe read is in flight: the ring is full
        closing = asyncio.ensure_future(f.close())
        await asyncio.sleep(0)
        closing.cancel()
        try:
            await closing
        except asyncio.CancelledError:
            pass
    finally:
        for b in blockers:
            b.cancel()
        await asyncio.gather(*blockers, return_exceptions=True)
        os.close(r)
        os.close(w)
    del f
    gc.collect()
    still_open = os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}") == str(path)
    if still_open:
        os.close(fd)  # do not leak it into later tests
    assert not still_open, "the file's fd is still open after close() and gc"
    assert _fds() == before


@pytest.mark.parametrize("how", ["close", "async with"])
async def test_a_close_cancelled_at_its_first_step_still_closes_the_fd(disk_dir: str, how: str) -> None:
    """A file call yields to the loop now and then (fairness).  A close must
    not: cancelled there, it would not have begun, and the fd would stay
    open while the file object lives."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"x")
    before = _fds()
    opening = aioring.open(path, "ab")
    f = await opening.__aenter__()
    await f.write(b"y")
    fd = f.fileno()
    _file._unyielded[0] = _file.YIELD_EVERY - 1  # the next call is the one that would yield
    closing = asyncio.ensure_future(f.close() if how == "close" else opening.__aexit__(None, None, None))
    await asyncio.sleep(0)
    closing.cancel()
    try:
        await closing
    except asyncio.CancelledError:
        pass
    still_open = os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}") == str(path)
    if still_open:
        os.close(fd)
    assert not still_open
    assert f.closed
    assert path.read_bytes() == b"xy"
    assert _fds() == before


# -- cancellation ----------------------------------------------------------------

@pytest.mark.parametrize("buffering", [0, -1])
async def test_cancelled_reader_is_cancelled(disk_dir: str, buffering: int) -> None:
    """A task reading a file in 64 KiB chunks is cancelled: it goes on to EOF
    and *returns normally*; the cancellation is lost (asyncio.timeout() does
    not fire either).  Ring.settle (via _ops.result) swallows the
    CancelledError when the op completed anyway and re-cancels the task on
    the next iteration (_redeliver); but the task's next suspension is again
    an awaited ring op whose settle swallows it again, and so on until the
    task finishes, when _redeliver drops it (task.done()).  A loop that never
    reaches EOF (read, seek(0), read, ...) can never be cancelled:
    asyncio.wait_for on it hangs forever."""
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(1 << 20) * 16)
    chunks = [0]

    async def copy() -> str:
        async with aioring.open(path, "rb", buffering=buffering) as f:
            while await f.read(65536):
                chunks[0] += 1
        return "completed normally"

    task = asyncio.ensure_future(copy())
    while chunks[0] < 2:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        result = await task
        pytest.fail(f"the cancelled task returned {result!r} after {chunks[0]} of 256 chunks")


async def test_a_write_does_not_vouch_for_a_window_another_writer_changed(disk_dir: str) -> None:
    """The window read ahead by an earlier call, the file then changed by
    another writer, then a write through this file: the write must not mark
    the old window current (it is patched, not read again), or the reads
    after it return bytes the file no longer holds."""
    results = []
    for side in ("stdlib", "aioring"):
        path = Path(disk_dir, side)
        path.write_bytes(b"a" * 200_000)
        f: Any = open(path, "r+b") if side == "stdlib" else await aioring.open(path, "r+b")
        if side == "stdlib":
            f.read(10)
        else:
            await f.read(10)
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, b"NEW!", 50_000)
        os.ftruncate(fd, 100_000)
        os.close(fd)
        if side == "stdlib":
            f.write(b"x")
            f.flush()
            f.seek(49_998)
            results.append((f.read(8), f.seek(0, os.SEEK_END)))
            f.close()
        else:
            await f.write(b"x")
            await f.flush()
            await f.seek(49_998)
            results.append((await f.read(8), await f.seek(0, os.SEEK_END)))
            await f.close()
    assert results[1] == results[0] == (b"aaNEW!aa", 100_000)


@pytest.mark.parametrize("yields_at", range(1, 4))
async def test_a_large_read_cancelled_midway_consumes_nothing(disk_dir: str, yields_at: int) -> None:
    """read(n) of a BufferedReader with nothing buffered reads its whole
    blocks straight from the ring, then the rest through the buffer.  A
    cancellation that comes before the rest must not leave the whole blocks
    consumed: nobody got them.  (The task lets the loop run at its
    `yields_at`-th step, where the test cancels it.)"""
    content = _pattern(300_000)
    path = Path(disk_dir, "f")
    path.write_bytes(content)
    f = await aioring.open(path, "rb", buffering=4096)
    _ops._unyielded[0] = _ops.YIELD_EVERY - yields_at
    task = asyncio.ensure_future(f.read(299_000 + 100))
    await asyncio.sleep(0)
    task.cancel()
    try:
        data = await task
    except asyncio.CancelledError:
        assert await f.tell() == 0
        assert await f.read() == content
    else:
        assert data == content[:299_100]
        assert await f.tell() == 299_100
    await f.close()


async def test_a_large_readinto_reads_as_buffered_readinto(disk_dir: str) -> None:
    """BufferedReader.readinto of more than the buffer holds reads it all
    from the raw file, leaving the buffer empty: what peek() and read1()
    return next shows it."""
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(300_000))
    results = []
    for side in ("stdlib", "aioring"):
        if side == "stdlib":
            with open(path, "rb", buffering=4096) as g:
                results.append((g.readinto(bytearray(70_000)), len(g.peek()), len(g.read1(-1)), g.tell()))
        else:
            async with aioring.open(path, "rb", buffering=4096) as f:
                results.append((await f.readinto(bytearray(70_000)), len(await f.peek()),
                                len(await f.read1(-1)), await f.tell()))
    assert results[1] == results[0]


# -- failed flush ------------------------------------------------------------------

async def test_failed_flush_keeps_the_unwritten_data(disk_dir: str) -> None:
    """When a write fails (EFBIG here, ENOSPC/EDQUOT in real life) after a
    partial write, BufferedWriter keeps what was not written and writes it at
    the next flush/close.  RingFileIO.drain clears its whole queue on any
    OSError: the rest of the data is silently lost (file has 50 bytes, not
    100)."""
    results = {}
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        for side in ("stdlib", "aioring"):
            path = Path(disk_dir, side)
            f: Any = open(path, "wb") if side == "stdlib" else await aioring.open(path, "wb")
            if side == "stdlib":
                f.write(b"a" * 100)
            else:
                await f.write(b"a" * 100)
            resource.setrlimit(resource.RLIMIT_FSIZE, (50, limits[1]))
            try:
                with pytest.raises(OSError):
                    if side == "stdlib":
                        f.flush()
                    else:
                        await f.flush()
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, limits)
            if side == "stdlib":
                f.close()
            else:
                await f.close()
            results[side] = path.stat().st_size
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert results == {"stdlib": 100, "aioring": 100}


@pytest.mark.parametrize("closing", ["close", "async with"])
async def test_a_write_that_keeps_failing_still_lets_the_file_close(disk_dir: str, closing: str) -> None:
    """A write that fails again at every try (EFBIG here, a full disk in real
    life): close() and leaving `async with` raise its error, as builtin open's
    close does, and close the file and its fd all the same."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    path = Path(disk_dir, "f")
    fds = _fds()
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, limits[1]))
        with open(path, "wb") as g:
            g.write(b"x" * 150)
            with pytest.raises(OSError) as stdlib:
                g.flush()
            with pytest.raises(OSError):
                g.__exit__(None, None, None)
        assert g.closed
        if closing == "close":
            f = await aioring.open(path, "wb")
            await f.write(b"x" * 150)
            with pytest.raises(OSError) as ours:
                await f.flush()
            with pytest.raises(OSError):
                await f.close()
        else:
            with pytest.raises(OSError) as ours:
                async with aioring.open(path, "wb") as f:
                    await f.write(b"x" * 150)
                    with pytest.raises(OSError):
                        await f.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert ours.value.errno == stdlib.value.errno == errno.EFBIG
    assert f.closed
    assert _fds() == fds
    assert path.stat().st_size == 100


# -- argument checking in RingFileIO ---------------------------------------------

@pytest.mark.parametrize("buffering", [0, -1])
async def test_truncate_overflow_does_not_poison_the_file(disk_dir: str, buffering: int) -> None:
    """truncate(2**63): builtin open raises OverflowError and the file stays
    usable.  RingFileIO.truncate only rejects size < 0 and queues the
    truncate; drain() then raises OverflowError (not OSError, so the entry is
    never dropped) on this and *every* later call: writes are lost, close()
    raises and never closes (with buffering=0 the fd leaks), and the
    finalizer prints 'Exception ignored'."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"0123456789")
    before = _fds()
    f = await aioring.open(path, "rb+", buffering=buffering)
    with pytest.raises(OverflowError):
        await f.truncate(2**63)
    try:
        assert await f.write(b"X") == 1
        await f.close()
    finally:
        if not f.closed:  # leave nothing behind for later tests
            f._raw.queue.clear()
            f._raw.defer = False
            f._raw.close()
    assert path.read_bytes() == b"X123456789"
    assert _fds() == before


async def test_unbuffered_seeks_between_reads_keep_their_order(disk_dir: str) -> None:
    """buffering=0: seeks and reads started together run in the order they
    were started (the reads wait for the disk), as the same calls on
    io.FileIO one after another."""
    path = Path(disk_dir, "f")
    path.write_bytes(bytes(range(256)) * 64)
    calls = [("read", 4), ("seek", 100), ("read", 3), ("seek", 0), ("seek", 7), ("read", 2), ("seek", 5000),
             ("read", 1)]
    with open(path, "rb", buffering=0) as g:
        expected = [getattr(g, name)(arg) for name, arg in calls]
        end = g.tell()
        os.fsync(g.fileno())
        os.posix_fadvise(g.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    async with aioring.open(path, "rb", buffering=0) as f:
        assert await asyncio.gather(*(getattr(f, name)(arg) for name, arg in calls)) == expected
        assert await f.tell() == end


async def test_unbuffered_seek_range_is_checked(disk_dir: str) -> None:
    """FileIO.seek(2**63) raises OverflowError (off_t); RingFileIO.seek
    accepts any int, so the position becomes 2**63 and the error surfaces
    later, as a different exception, in an unrelated write."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"0123456789")
    with open(path, "rb+", buffering=0) as g, pytest.raises(OverflowError):
        g.seek(2**63)
    async with aioring.open(path, "rb+", buffering=0) as f:
        with pytest.raises(OverflowError):
            await f.seek(2**63)


@pytest.mark.parametrize(("name", "arg"), [("seek", 1.5), ("truncate", 1.5), ("read", 1.5)])
async def test_unbuffered_bad_argument_type_is_type_error(disk_dir: str, name: str, arg: Any) -> None:
    """buffering=0: FileIO raises TypeError for a float position/size;
    RingFileIO calls `x.__index__()` directly and raises AttributeError
    ("'float' object has no attribute '__index__'"), which `except
    TypeError` does not catch."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"0123456789")
    with open(path, "rb+", buffering=0) as g, pytest.raises(TypeError):
        getattr(g, name)(arg)
    async with aioring.open(path, "rb+", buffering=0) as f:
        with pytest.raises(TypeError):
            await getattr(f, name)(arg)


async def test_unbuffered_readall_on_write_only_file(disk_dir: str) -> None:
    """FileIO.readall() on a write-only file raises OSError(EBADF) ('[Errno 9]
    Bad file descriptor'); RingFileIO.readall raises UnsupportedOperation
    with errno None (a different type, errno and message)."""
    path = Path(disk_dir, "f")
    with open(path, "wb", buffering=0) as g, pytest.raises(OSError) as expected:
        g.readall()
    async with aioring.open(path, "wb", buffering=0) as f:
        with pytest.raises(OSError) as actual:
            await f.readall()
    assert (type(actual.value), actual.value.errno, str(actual.value)) == \
        (type(expected.value), expected.value.errno, str(expected.value))


# -- large direct reads -----------------------------------------------------------

async def test_large_read_leaves_the_buffer_as_builtin_open(disk_dir: str) -> None:
    """BufferedReader.read(90660) with a 4096-byte buffer reads whole blocks
    and keeps the tail of the last block buffered, so a following read1() or
    peek() returns those 3548 bytes.  The direct path (_read_direct, reads of
    64 KiB or more) leaves the buffer empty: read1()/peek() then return a
    different amount (the differential tests require equality, but
    only use files below 64 KiB)."""
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(368_442))
    with open(path, "rb", buffering=4096) as g:
        expected = (g.read(90_660), g.read1(-1), g.peek(10)[:10])
    async with aioring.open(path, "rb", buffering=4096) as f:
        actual = (await f.read(90_660), await f.read1(-1), (await f.peek(10))[:10])
    assert [len(x) for x in actual] == [len(x) for x in expected]
    assert actual == expected


# -- prefetch sized by the request, not by the file ----------------------------------

@pytest.mark.parametrize(("mode", "call"), [("r", "read"), ("r", "readlines"), ("rb", "readlines")])
async def test_huge_size_argument_allocates_nothing_big(disk_dir: str, mode: str, call: str) -> None:
    """The prefetch allocates (and zeroes) a window as large as the request:
    text read(n) plans n*4 bytes, readlines(hint) hint bytes, whatever the
    file's size.  On a 12-byte file, text read(2**31) takes ~40 s (8 GiB
    zeroed), read(2**33) raises MemoryError; builtin open returns the 12
    characters at once.  Here: 2**24 and a memory bound."""
    path = Path(disk_dir, "f")
    path.write_text("hello\nworld\n")
    with open(path, mode) as g:
        tracemalloc.start()
        try:
            expected = getattr(g, call)(2**24)
            stdlib_peak = tracemalloc.get_traced_memory()[1]  # text read(n) itself reserves n bytes
        finally:
            tracemalloc.stop()
    async with aioring.open(path, mode) as f:
        tracemalloc.start()
        try:
            actual = await getattr(f, call)(2**24)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert actual == expected
    assert peak < stdlib_peak + (1 << 20), f"{peak} bytes allocated to read a 12-byte file"


# -- quadratic line prefetch -----------------------------------------------------

async def test_universal_newlines_cr_file_iterates_in_linear_time(disk_dir: str) -> None:
    """newline=None (the default) ends lines at "\\r" too, but the line
    prefetch (line_terminator) searches only for the encoded "\\n".  In a file
    whose lines end with "\\r", every readline misses, refills the window
    (copying the whole rest of the file) and reads past EOF again: O(n^2).
    20 000 lines of 20 bytes take ~1.3 s, 25x the same file with "\\n" line
    ends (~0.05 s); builtin open takes 4 ms.  The event loop is blocked all
    that time (every ring read completes inline), so asyncio.wait_for cannot
    even time it out."""
    timings = {}
    for term in (b"\n", b"\r"):
        path = Path(disk_dir, f"f{len(timings)}")
        path.write_bytes((b"0123456789abcdefghi" + term) * 20_000)
        with open(path) as g:
            expected = g.readlines()
        start = time.perf_counter()
        async with aioring.open(path) as f:
            actual = [line async for line in f]
        timings[term] = time.perf_counter() - start
        assert actual == expected
    assert timings[b"\r"] < 5 * timings[b"\n"] + 0.1, timings


def _first_end(buf: bytes, terms: tuple[bytes, ...], start: int) -> int:
    """find_line_end's answer, the slow way: the end of the earliest match."""
    hits = [(i, i + len(t)) for t in terms for i in range(start, len(buf)) if buf.startswith(t, i)]
    return min(hits)[1] if hits else -1


@pytest.mark.parametrize("terms", [(b"\n", b"\r"), (b"\r", b"\n"), (b"\n\x00", b"\r\x00"), (b"\n",)])
def test_find_line_end_near_and_far(terms: tuple[bytes, ...]) -> None:
    """Where the first line end is: near the start, straddling the edge of
    the first, near search, past it, or nowhere; \r\n counts from its \r."""
    near = _rawfile._NEAR
    for start in (0, 3):
        for at in (0, 5, near - 3, near - 2, near - 1, near, near + 1, 3 * near, None):
            for term in (*terms, b"\r\n"):
                buf = bytearray(b"a" * (start + 4 * near))
                if at is not None:
                    buf[start + at:start + at + len(term)] = term
                    del buf[start + 4 * near:]
                assert _rawfile.find_line_end(buf, terms, start) == _first_end(bytes(buf), terms, start), \
                    (start, at, term)


async def test_endless_reader_can_be_timed_out(disk_dir: str) -> None:
    """read, seek(0), read, ...: never at end of file; wait_for still ends it."""
    path = Path(disk_dir, "f")
    path.write_bytes(_pattern(1 << 18))

    async def forever() -> None:
        async with aioring.open(path, "rb", buffering=0) as f:
            while True:
                await f.read(1 << 17)
                await f.seek(0)

    task = asyncio.ensure_future(forever())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("buffering", [-1, 16, 4096])
@pytest.mark.parametrize("mode", ["r", "rb"])
async def test_iterating_lines_of_every_length(disk_dir: str, mode: str, buffering: int) -> None:
    """Lines shorter and longer than the buffer, and a last line without an
    end, as builtin open's iteration gives them, with every raw read served
    from what was read ahead through the ring (none made synchronously)."""
    path = Path(disk_dir, "f")
    lengths = [0, 1, 15, 16, 17, 100, 4095, 4096, 4097, 70_000, 3, 0, 9000, 1]
    path.write_bytes(b"".join(b"x" * n + b"\n" for n in lengths) + b"tail")
    with open(path, mode, buffering) as g:
        expected = list(g)
    sync_reads = _rawfile.SYNC_READS[0]
    async with aioring.open(path, mode, buffering) as f:
        assert [line async for line in f] == expected
        assert await f.readline() == expected[0][:0]
    async with aioring.open(path, mode, buffering) as f:
        got = []
        while line := await f.readline():
            got.append(line)
        assert got == expected
    assert _rawfile.SYNC_READS[0] == sync_reads


@pytest.mark.parametrize("mode", ["r", "rb"])
async def test_iterating_a_file_lets_other_tasks_run(disk_dir: str, mode: str) -> None:
    """Lines served from the window complete without suspending: the file
    object still yields to the loop every so often, as aiofiles' thread
    hops do on every line."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"a line of text\n" * 20_000)
    ticks = [0]
    done = [False]

    async def ticker() -> None:
        while not done[0]:
            ticks[0] += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(ticker())
    async with aioring.open(path, mode) as f:
        count = 0
        async for _ in f:
            count += 1
    done[0] = True
    await other
    assert count == 20_000
    assert ticks[0] >= count // _file.YIELD_EVERY // 2


async def test_an_unbuffered_append_lands_after_another_writers_append(disk_dir: str, monkeypatch) -> None:
    """FileIO in append mode: the kernel writes at the end of file as it is
    then; another writer that appended meanwhile moves where that is.  The
    position after the write (and the read-ahead window) must follow the
    kernel, not a size fetched before."""
    path = Path(disk_dir, "f")
    path.write_bytes(b"start")
    other = os.open(path, os.O_WRONLY | os.O_APPEND)
    real = _ops.write

    async def write_after_another(fd: int, data: Any, offset: int = -1) -> int:
        os.write(other, b"OTHER")
        return await real(fd, data, offset)
    try:
        f = await aioring.open(path, "ab+", buffering=0)
        monkeypatch.setattr(_ops, "write", write_after_another)
        assert await f.write(b"mine") == 4
        monkeypatch.undo()
        assert await f.tell() == len(b"startOTHERmine") == os.path.getsize(path)
        await f.seek(0)
        assert await f.read() == b"startOTHERmine"
        await f.close()
    finally:
        os.close(other)
