"""Data that is not in the page cache, O_DIRECT, and readahead advice.

Pages are dropped with posix_fadvise(POSIX_FADV_DONTNEED), which needs no
root; the files are on the real disk (disk_dir), whose file system keeps a
page cache and takes O_DIRECT.  Every test runs twice: with the reads that
wait for the device on the loop's ring, and on its polling ring
(aioring.set_sqpoll; tests/test_sqpoll.py has the setting's own tests).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import itertools
import mmap
import os
import pathlib
from typing import Any

import pytest

import aioring
import aioring.os
from aioring import _binding, _ops

SIZE = 1024 * 1024 + 4096 * 3 + 100  # (ends off a block)


@pytest.fixture(autouse=True, params=["loop-ring", "polling-ring"])
def device_ring(request):
    """Where the reads that wait for the device go (see the module docstring)."""
    if request.param == "polling-ring":
        aioring.set_sqpoll(0.01)
    yield request.param
    aioring.set_sqpoll(None)


@pytest.fixture
def cold_file(disk_dir):
    return written_cold(disk_dir)


def written_cold(disk_dir):
    """A file of random bytes, synced, its pages dropped; (path, content)."""
    path = os.path.join(disk_dir, "cold.bin")
    content = os.urandom(SIZE)
    with open(path, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    drop(path)
    return path, content


def device_statistics():
    """statistics() of the ring the running loop's reads that wait for the
    device go to (its polling ring with the device_ring fixture's polling-ring)."""
    return _ops.device_ring_of(asyncio.get_running_loop()).statistics()


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def open_direct(path, flags=os.O_RDONLY):
    try:
        return os.open(path, flags | os.O_DIRECT)
    except OSError as exc:  # (a file system without O_DIRECT)
        pytest.skip(f"O_DIRECT refused here: {exc}")


OFFSETS = [0, 1, 4095, 4096, 65536 + 17, SIZE - 4096, SIZE - 100, SIZE - 1, SIZE, SIZE + 4096]


async def test_cold_reads_equal_pread(cold_file):
    """Reads of dropped pages at offsets, scattered and then again once
    cached, return what os.pread returns (also after the reads of the fd
    have learnt to skip the page-cache try)."""
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(2):  # cold, then cached
            for off in OFFSETS:
                want = os.pread(fd, 4096, off)
                drop(path)
                assert await aioring.read(fd, 4096, off) == want
                buf = bytearray(5000)
                drop(path)
                n = await aioring.readinto(fd, buf, off)
                assert bytes(buf[:n]) == content[off:off + 5000]
            drop(path)
            assert await aioring.read(fd, SIZE + 10, 0) == content
    finally:
        os.close(fd)


@pytest.mark.parametrize("handoff", [True, False], ids=["handed-over", "inline"])
async def test_concurrent_cold_reads_equal_pread(cold_file, handoff, monkeypatch):
    """Many reads of dropped pages at once (all issued in the submitting call,
    or, with COLD_HANDOFF, those after the first misses handed to the kernel's
    workers) each return what os.pread returns."""
    monkeypatch.setattr(_ops, "COLD_HANDOFF", handoff)
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    offsets = [(i * 7919 * 4096 + i * 13) % SIZE for i in range(48)]
    try:
        for _ in range(2):
            drop(path)
            reads = [aioring.read(fd, 4096, off) for off in offsets]
            bufs = [bytearray(3000) for _ in offsets]
            intos = [aioring.readinto(fd, buf, off + 1) for buf, off in zip(bufs, offsets, strict=True)]
            got = await asyncio.gather(*reads, *intos)
            assert got[:len(offsets)] == [content[off:off + 4096] for off in offsets]
            for n, buf, off in zip(got[len(offsets):], bufs, offsets, strict=True):
                assert bytes(buf[:n]) == content[off + 1:off + 3001]
    finally:
        os.close(fd)


async def test_cold_file_api_equals_stdlib(cold_file):
    """aioring.open's reads of a file whose pages were dropped return what
    the stdlib's open() returns: whole, in chunks, at sought offsets."""
    path, content = cold_file
    async with aioring.open(path, "rb") as f:
        assert await f.read() == content
    for buffering in (0, -1):
        drop(path)
        async with aioring.open(path, "rb", buffering=buffering) as f:
            chunks = []
            while chunk := await f.read(100_000):
                chunks.append(chunk)
            assert b"".join(chunks) == content
            for off in OFFSETS:
                drop(path)
                await f.seek(off)
                assert await f.read(3000) == content[off:off + 3000]
            for off in OFFSETS[::-1]:  # (large reads at random after sequential ones)
                drop(path)
                await f.seek(off)
                buf = bytearray(70_000)
                n = await f.readinto(buf)
                assert buf[:n] == content[off:off + 70_000]


async def test_cold_files_read_whole_side_by_side(disk_dir):
    """Files opened "rb" by str and by path object, their pages dropped, read
    whole by tasks side by side (a task whose first try from the page cache
    misses yields and tries again), return their bytes; a path object names
    the file by its str, as builtin open does.  A task cancelled meanwhile
    consumed nothing: the file reads whole again."""
    contents = {}
    for i, size in enumerate((0, 1, 2, 4095, 70_000, 200_001)):
        path = pathlib.Path(disk_dir, f"small{i}.bin")
        contents[path] = os.urandom(size)
        path.write_bytes(contents[path])
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    async def whole(path):
        async with aioring.open(path, "rb") as f:
            assert f.name == str(path)
            return await f.read()
    for kind in (str, pathlib.Path):
        for path in contents:
            drop(path)
        got = await asyncio.gather(*(whole(kind(p)) for p in contents))
        assert got == list(contents.values())
    path = max(contents, key=lambda p: len(contents[p]))
    drop(path)
    async with aioring.open(path, "rb") as f:
        task = asyncio.ensure_future(f.read())
        await asyncio.sleep(0)
        task.cancel()
        try:
            assert await task == contents[path]  # (it ended before the cancel)
        except asyncio.CancelledError:
            assert await f.read() == contents[path]


async def test_direct_round_trip(disk_dir):
    """With O_DIRECT and aligned buffers, aioring.write then aioring.read
    and readinto give back the bytes, as os.pread sees them."""
    path = os.path.join(disk_dir, "direct.bin")
    fd = open_direct(path, os.O_RDWR | os.O_CREAT)
    try:
        block = aioring.aligned_buffer(8192)
        block[:] = os.urandom(8192)
        assert await aioring.write(fd, block, 4096) == 8192
        assert await aioring.write(fd, block, 0) == 8192  # (overlapping)
        expected = bytes(block) + bytes(block)[4096:]
        with open(path, "rb") as f:  # (buffered: os.pread's buffer is not aligned)
            assert f.read() == expected
        assert await aioring.read(fd, 12288, 0) == expected
        assert await aioring.read(fd, 4096, 8192) == expected[8192:]
        into = aioring.aligned_buffer(12288)
        assert await aioring.readinto(fd, into, 0) == 12288
        assert bytes(into) == expected
        assert await aioring.readinto(fd, into, 16384) == 0  # end of file
    finally:
        os.close(fd)


@pytest.mark.parametrize("handoff", [True, False], ids=["handed-over", "inline"])
async def test_concurrent_direct_reads_equal_pread(cold_file, handoff, monkeypatch):
    """Many O_DIRECT reads at once (those while another is in flight handed
    to the kernel's workers, or, without DIRECT_HANDOFF, all issued in the
    submitting call), and misaligned ones among them, each give what a
    buffered read gives, or the alignment's EINVAL."""
    monkeypatch.setattr(_ops, "DIRECT_HANDOFF", handoff)
    path, content = cold_file
    fd = open_direct(path)
    offsets = [(i * 7919 * 4096) % (SIZE - 8192) // 4096 * 4096 for i in range(24)]
    bufs = [aioring.aligned_buffer(8192) for _ in offsets]
    try:
        reads = [aioring.readinto(fd, buf, off) for buf, off in zip(bufs, offsets, strict=True)]
        got = await asyncio.gather(*reads, aioring.readinto(fd, bytearray(100), 4096), return_exceptions=True)
        assert got[:-1] == [8192] * len(offsets)
        for buf, off in zip(bufs, offsets, strict=True):
            assert bytes(buf) == content[off:off + 8192]
        assert isinstance(got[-1], OSError) and got[-1].errno == errno.EINVAL
    finally:
        os.close(fd)


async def test_direct_misaligned_errors(disk_dir):
    """A misaligned buffer, length or offset on an O_DIRECT fd raises OSError
    EINVAL, as os.preadv and os.pwrite do, naming the alignment it needs."""
    path = os.path.join(disk_dir, "direct.bin")
    content = os.urandom(16384)
    with open(path, "wb") as f:
        f.write(content)
    fd = open_direct(path, os.O_RDWR)
    try:
        aligned = aioring.aligned_buffer(8192)
        misaligned = memoryview(aligned)[1:4097]
        cases = [("readinto", misaligned, 0), ("readinto", aligned, 100),
                 ("readinto", memoryview(aligned)[:100], 0), ("write", misaligned, 0),
                 ("write", aligned, 1)]
        for kind, buf, off in cases:
            with pytest.raises(OSError) as stdlib:
                (os.preadv(fd, [buf], off) if kind == "readinto" else os.pwritev(fd, [buf], off))
            with pytest.raises(OSError) as ours:
                await (aioring.readinto(fd, buf, off) if kind == "readinto" else aioring.write(fd, buf, off))
            assert ours.value.errno == stdlib.value.errno == errno.EINVAL
            assert "O_DIRECT" in str(ours.value) and "multiple of" in str(ours.value)
        with pytest.raises(OSError) as ours:
            await aioring.read(fd, 100, 0)
        assert ours.value.errno == errno.EINVAL and "O_DIRECT" in str(ours.value)
        assert await aioring.read(fd, 16384, 0) == content  # nothing was written
        misaligned.release()
    finally:
        os.close(fd)


async def test_fd_reused_after_direct(disk_dir):
    """An fd number that was an O_DIRECT file's and is now a buffered one's
    reads any buffer (what is known of an fd is looked up again on EINVAL)."""
    path = os.path.join(disk_dir, "direct.bin")
    with open(path, "wb") as f:
        f.write(b"x" * 8192)
    fd = open_direct(path)
    await aioring.read(fd, 4096, 0)
    os.close(fd)
    fd2 = os.open(path, os.O_RDONLY)
    try:
        assert fd2 == fd
        buf = bytearray(100)
        assert await aioring.readinto(fd2, buf, 3) == 100 and buf == b"x" * 100
        assert await aioring.read(fd2, 7, 1) == b"x" * 7
    finally:
        os.close(fd2)


async def test_read_of_an_fd_reused_after_direct_is_no_longer_aligned(disk_dir, monkeypatch):
    """read() of an fd number that was an O_DIRECT file's (known as one) and
    is now a buffered file's reads it as a buffered file at once, not into
    an aligned buffer of its own as an O_DIRECT fd's read() must."""
    path = os.path.join(disk_dir, "direct.bin")
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 32)
    fd = open_direct(path)
    try:
        _ops._flags_looked_up(fd)  # (not what an earlier file at this fd number was)
        assert await aioring.read(fd, 4096, 4096) == (bytes(range(256)) * 16)
        assert _ops._fd_cache[fd][2]  # (known as O_DIRECT)
        plain = os.open(path, os.O_RDONLY)
        os.dup2(plain, fd)  # (the same number, a buffered file's now)
        os.close(plain)
        aligned = []
        monkeypatch.setattr(_ops, "aligned_buffer", lambda n: aligned.append(n) or mmap.mmap(-1, n))
        assert await aioring.read(fd, 10, 1) == bytes(range(1, 11))
        assert aligned == [] and not _ops._fd_cache[fd][2]
    finally:
        os.close(fd)


async def test_fd_reused_by_direct_while_reads_back_off(cold_file):
    """An fd number whose tries from the page cache missed (so that its reads
    go to the ring at once while other reads of uncached pages are in
    flight), now an O_DIRECT file's: its reads return what os.pread returns
    (the kernel's EINVAL has the fd's flags looked up again)."""
    path, content = cold_file
    offsets = [(i * 7919) % (SIZE // 4096 - 1) * 4096 for i in range(8)]
    fd = os.open(path, os.O_RDONLY)
    for _ in range(3):
        _ops.cache_missed(fd)
    os.close(fd)
    fd2 = open_direct(path)
    other = os.open(path, os.O_RDONLY)
    try:
        assert fd2 == fd
        drop(path)
        reads = [aioring.read(other, 4096, 0), *(aioring.read(fd2, 4096, off) for off in offsets)]
        got = await asyncio.gather(*reads)
        assert got == [content[:4096]] + [content[off:off + 4096] for off in offsets]
    finally:
        os.close(fd2)
        os.close(other)


@pytest.mark.parametrize("how", ["cancelled", "closed", "dropped"])
@pytest.mark.parametrize("call", ["core", "python"])
@pytest.mark.parametrize("kind", ["read", "readinto_direct"])
async def test_a_read_straight_to_the_ring_cancelled_closed_or_dropped(cold_file, how, call, kind):
    """Reads the core sends straight to the ring, stopped while the disk
    reads: read() of an fd whose tries missed while other reads of uncached
    pages are in flight, and readinto() of an O_DIRECT fd (never tried); the
    core's call of each, or the Python function's.  Cancelled, each ends
    with CancelledError or, when the kernel's read won the race, with what
    os.pread returns; closed or dropped unfinished, the ring keeps the
    buffer until its read completes.  The count of such reads in flight
    comes back each time."""
    path, content = cold_file
    public = aioring.read if kind == "read" else aioring.readinto
    func = public if call == "core" else public.__wrapped__
    offsets = [(i * 7919) % (SIZE // 4096 - 1) * 4096 for i in range(8)]
    buffers = [aioring.aligned_buffer(4096) for _ in offsets]

    def read(off: int, buf: Any) -> Any:
        return func(fd, 4096, off) if kind == "read" else func(fd, buf, off)

    def returned(result: Any, off: int, buf: Any) -> bool:
        if kind == "read":
            return result == content[off:off + 4096]
        return result == 4096 and bytes(buf) == content[off:off + 4096]

    fd = os.open(path, os.O_RDONLY) if kind == "read" else open_direct(path)
    _ops._flags_looked_up(fd)  # (not what an earlier file at this fd number was)
    if kind == "read":
        for _ in range(3):
            _ops.cache_missed(fd)
    _ops._cold_reads[0] += 1  # (as if another read waited for the disk)
    try:
        drop(path)
        if how == "cancelled":
            tasks = [asyncio.ensure_future(read(off, buf)) for off, buf in zip(offsets, buffers, strict=True)]
            await asyncio.sleep(0)  # (each task's first step: its read started, or done at once)
            assert _ops._cold_reads[0] == 1 + sum(not task.done() for task in tasks)
            for task in tasks:
                task.cancel()
            got = await asyncio.gather(*tasks, return_exceptions=True)
            for result, off, buf in zip(got, offsets, buffers, strict=True):
                assert isinstance(result, asyncio.CancelledError) or returned(result, off, buf)
        else:
            futures = []
            for off, buf in zip(offsets, buffers, strict=True):
                coro = read(off, buf)
                try:
                    fut = coro.send(None)  # (its read started: it waits on the op's future)
                except StopIteration as done:  # (read at once: its pages came in by readahead)
                    assert returned(done.value, off, buf)
                    continue
                assert isinstance(fut, asyncio.Future) and not fut.done()
                futures.append(fut)
                if how == "closed":
                    coro.close()
                del coro
                gc.collect()
            assert _ops._cold_reads[0] == 1
            if futures:  # (none when readahead brought every page back first)
                await asyncio.wait(futures)  # (the reads end in the kernel, their outcome swallowed)
        assert _ops._cold_reads[0] == 1
    finally:
        _ops._cold_reads[0] -= 1
        os.close(fd)
        for buf in buffers:
            buf.close()  # (BufferError if the ring still held one)


@pytest.mark.parametrize("call", ["readinto", "read"])
async def test_device_reads_queued_together_go_before_the_flush(cold_file, call):
    """Reads that wait for the device (an O_DIRECT fd's), queued by many tasks
    in one loop iteration, reach the kernel DEVICE_BATCH at a time while the
    iteration's tasks run, not all at its flush; each returns what os.pread
    returns."""
    from aioring import _ring
    path, content = cold_file
    fd = open_direct(path)
    _ops._flags_looked_up(fd)  # (not what an earlier file at this fd number was)
    offsets = [(i * 7919) % (SIZE // 4096 - 1) * 4096 for i in range(_ring.DEVICE_BATCH + 4)]
    buffers = [aioring.aligned_buffer(4096) for _ in offsets]
    if call == "readinto":
        tasks = [asyncio.ensure_future(aioring.readinto(fd, buf, off))
                 for buf, off in zip(buffers, offsets, strict=True)]
    else:
        tasks = [asyncio.ensure_future(aioring.read(fd, 4096, off)) for off in offsets]
    try:
        before = device_statistics()["submit_calls"]
        await asyncio.sleep(0)  # (every task's first step: its read queued; the flush comes after this)
        if aioring.backend() == "io_uring":
            # Without the batch's submit, all but the iteration's first read would wait in the SQ.
            assert device_statistics()["submit_calls"] - before >= 2
            ring = _ops.device_ring_of(asyncio.get_running_loop())
            assert ring._core.sq_pending < _ring.DEVICE_BATCH
        got = await asyncio.gather(*tasks)
        for result, buf, off in zip(got, buffers, offsets, strict=True):
            if call == "readinto":
                assert result == 4096 and bytes(buf) == content[off:off + 4096]
            else:
                assert result == content[off:off + 4096]
    finally:
        await asyncio.gather(*tasks, return_exceptions=True)  # (no read left in flight on the fd)
        for buf in buffers:
            buf.close()
        os.close(fd)


async def test_an_fd_number_reused_for_an_o_direct_file_is_noticed(cold_file, disk_dir):
    """An fd number whose reads aioring tried from the page cache, reused by
    a plain os.open() for an O_DIRECT file (dup2 here), is noticed within a
    few dozen reads: from then on its reads go to the ring, not a synchronous
    device read on the loop's thread.  Every read returns what os.pread does."""
    path, content = cold_file
    plain_path = os.path.join(disk_dir, "plain")
    with open(plain_path, "wb") as f:
        f.write(b"x" * 8192)
    fd = os.open(plain_path, os.O_RDONLY)
    buf = aioring.aligned_buffer(4096)
    try:
        _ops._flags_looked_up(fd)  # (not what an earlier file at this fd number was)
        for _ in range(3):
            assert await aioring.read(fd, 4096, 0) == b"x" * 4096  # (from the page cache)
        direct = open_direct(path)
        os.dup2(direct, fd)  # (the same number, an O_DIRECT file's now)
        os.close(direct)
        for i in range(200):
            off = (i % 16) * 4096
            before = device_statistics()["completions"]
            assert await aioring.readinto(fd, buf, off) == 4096 and bytes(buf) == content[off:off + 4096]
        assert device_statistics()["completions"] - before == 1  # (the last read: the ring's)
    finally:
        buf.close()
        os.close(fd)


async def test_a_direct_read_closed_while_the_disk_reads(cold_file):
    """read() of an O_DIRECT fd (into an aligned buffer of its own) closed
    unfinished: nothing raised, the ring keeps the buffer until its read
    completes."""
    path, content = cold_file
    fd = open_direct(path)
    try:
        coro = aioring.read(fd, 4096, 0)
        try:
            fut = coro.send(None)
        except StopIteration as done:  # (the device answered within the submit)
            assert done.value == content[:4096]
            return
        assert isinstance(fut, asyncio.Future) and not fut.done()
        coro.close()
        await asyncio.wait([fut])
    finally:
        os.close(fd)


async def test_a_file_opened_at_a_missed_fd_number_is_tried_from_the_cache(cold_file, disk_dir, monkeypatch):
    """Once aioring opens a file at an fd number whose tries missed the page
    cache, that was another file's: the new file's reads at an offset are
    tried from the page cache at once again, also while reads of uncached
    pages are in flight (the core's try, without a Python call)."""
    path, _ = cold_file
    fd = os.open(path, os.O_RDONLY)
    for _ in range(3):
        _ops.cache_missed(fd)
    os.close(fd)
    cached = os.path.join(disk_dir, "cached")
    with open(cached, "wb") as f:
        f.write(b"y" * 8192)
    monkeypatch.setattr(_ops, "_cold_reads", [1])  # (as if other reads waited for the disk)
    async with aioring.open(cached, "rb", buffering=0) as f:
        assert f.fileno() == fd
        assert _ops.cache_due(fd) and fd in _ops._plain
        assert await aioring.read(fd, 100, 10) == b"y" * 100


def test_aligned_buffer():
    buf = aioring.aligned_buffer(5000)
    assert isinstance(buf, mmap.mmap) and len(buf) == 5000 and bytes(buf) == bytes(5000)
    with memoryview(buf) as view:
        assert not view.readonly
    assert _binding.buffer_address(buf) % mmap.PAGESIZE == 0
    buf.close()
    with pytest.raises(ValueError):
        aioring.aligned_buffer(0)
    with pytest.raises(TypeError):
        aioring.aligned_buffer(1.5)


FADVICE = [os.POSIX_FADV_NORMAL, os.POSIX_FADV_RANDOM, os.POSIX_FADV_SEQUENTIAL, os.POSIX_FADV_WILLNEED,
           os.POSIX_FADV_DONTNEED, os.POSIX_FADV_NOREUSE]


async def test_posix_fadvise(cold_file):
    """aioring.os.posix_fadvise takes what os.posix_fadvise takes; the reads
    after each advice are right."""
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    try:
        for advice in FADVICE:
            assert await aioring.os.posix_fadvise(fd, 0, 0, advice) is None
            assert await aioring.read(fd, 5000, 4000) == content[4000:9000]
        await aioring.os.posix_fadvise(fd, 4096, 65536, os.POSIX_FADV_WILLNEED)
        assert await aioring.read(fd, 4096, 4096) == content[4096:8192]
    finally:
        os.close(fd)


async def test_posix_fadvise_errors(disk_dir, pipe):
    """Bad arguments raise what os.posix_fadvise raises."""
    path = os.path.join(disk_dir, "f.bin")
    with open(path, "wb") as f:
        f.write(b"abc")
    fd = os.open(path, os.O_RDONLY)
    bad_fd = os.open(path, os.O_RDONLY)
    os.close(bad_fd)
    cases = [(fd, 0, 0, 12345), (fd, 0, -1, os.POSIX_FADV_RANDOM), (fd, 0, -1, os.POSIX_FADV_DONTNEED),
             (bad_fd, 0, 0, os.POSIX_FADV_RANDOM), (bad_fd, 0, 0, os.POSIX_FADV_WILLNEED),
             (pipe[0], 0, 0, os.POSIX_FADV_SEQUENTIAL), ("3", 0, 0, os.POSIX_FADV_RANDOM),
             (fd, 1.5, 0, os.POSIX_FADV_RANDOM), (fd, 0, 0, None), (fd, 0, 2**64, os.POSIX_FADV_RANDOM)]
    try:
        for args in cases:
            with pytest.raises(Exception) as stdlib:
                os.posix_fadvise(*args)
            with pytest.raises(type(stdlib.value)) as ours:
                await aioring.os.posix_fadvise(*args)
            assert getattr(ours.value, "errno", None) == getattr(stdlib.value, "errno", None), args
    finally:
        os.close(fd)


async def test_direct_through_open(disk_dir):
    """aioring.open with an opener that adds O_DIRECT: readinto an aligned
    buffer and writes of aligned buffers work, as with the stdlib's open."""
    path = os.path.join(disk_dir, "direct.bin")
    content = os.urandom(3 * 4096)
    with open(path, "wb") as f:
        f.write(content)
    open_direct(path)  # (skips where O_DIRECT is refused)

    def opener(name, flags):
        return os.open(name, flags | os.O_DIRECT)
    async with aioring.open(path, "r+b", buffering=0, opener=opener) as f:
        buf = aioring.aligned_buffer(8192)
        assert await f.readinto(buf) == 8192 and bytes(buf) == content[:8192]
        assert await f.tell() == 8192
        assert await f.readinto(buf) == 4096 and bytes(buf[:4096]) == content[8192:]
        buf[:4096] = b"z" * 4096
        await f.seek(4096)
        assert await f.write(memoryview(buf)[:4096]) == 4096
    with open(path, "rb") as f:
        assert f.read() == content[:4096] + b"z" * 4096 + content[8192:]


async def test_partly_cached_read_reads_each_byte_once(cold_file, monkeypatch):
    """A readinto at an offset of which only the start is cached returns the
    file's bytes, the cached start taken at once and the rest read after it:
    no byte is read twice (a 1 MiB sequential read was copied twice)."""
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    done = []  # (offset, count) of every try at once that read something
    real = _ops._preadv

    def preadv(fd_, buffers, offset, flags=0):
        got = real(fd_, buffers, offset, flags)
        if got > 0:
            done.append((offset, got))
        return got
    monkeypatch.setattr(_ops, "_preadv", preadv)
    try:
        os.pread(fd, 4096, 0)
        assert await aioring.readinto(fd, bytearray(4096), 0) == 4096  # (a hit: the fd's reads are tried)
        for cached in (4096, 65536):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.pread(fd, cached, 0)
            os.posix_fadvise(fd, cached, 0, os.POSIX_FADV_DONTNEED)  # (its read-ahead goes again)
            done.clear()
            buf = bytearray(512 * 1024)
            assert await aioring.readinto(fd, buf, 0) == len(buf)
            assert buf == content[:len(buf)]
            spans = sorted(done)
            assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans)), spans
    finally:
        os.close(fd)
