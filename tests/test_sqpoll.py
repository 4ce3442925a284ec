"""aioring.set_sqpoll: reads that wait for the device on a polling ring.

tests/test_cold.py runs each of its tests with the setting on as well
(this module takes its cold file from there); here are the setting itself,
where the reads go, the polling ring's life with its loop's ring (close,
fork, a kernel that refuses it) and when its reads are published.
(tests/test_ring.py: its SQEs taken back before its thread can read them.)
"""

from __future__ import annotations

import asyncio
import decimal
import errno
import fractions
import os
import warnings

import pytest

import aioring
from aioring import _binding, _loops, _ops
from aioring._ring import Ring
from test_cold import SIZE, drop, written_cold


@pytest.fixture
def sqpoll():
    """set_sqpoll on for the test (a short idle: the test's thread sleeps soon)."""
    aioring.set_sqpoll(0.01)
    yield
    aioring.set_sqpoll(None)


@pytest.fixture
def cold_file(disk_dir):
    return written_cold(disk_dir)


def missed(fd):
    """fd known as a file whose recent page-cache tries missed: its reads at
    an offset go to the ring as reads that wait for the device."""
    _ops._flags_looked_up(fd)  # (not what an earlier file at this fd number was)
    for _ in range(3):
        _ops.cache_missed(fd)


def test_set_sqpoll_returns_the_setting_before():
    try:
        assert aioring.set_sqpoll() is None  # (the default: off)
        assert aioring.set_sqpoll(2) == 0.05
        assert aioring.set_sqpoll(0.0001) == 2.0  # (rounded up to a millisecond)
        assert aioring.set_sqpoll(fractions.Fraction(1, 4)) == 0.001
        assert aioring.set_sqpoll(decimal.Decimal("0.5")) == 0.25
        assert aioring.set_sqpoll(None) == 0.5
        assert aioring.set_sqpoll(None) is None
    finally:
        aioring.set_sqpoll(None)


@pytest.mark.parametrize("idle, error", [
    ("1", TypeError), (b"1", TypeError), (object(), TypeError), ([1], TypeError), (1j, TypeError),
    (0, ValueError), (0.0, ValueError), (-1, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (2 ** 32 / 1000, ValueError), (10 ** 400, OverflowError),
])
def test_set_sqpoll_rejects_bad_idle(idle, error):
    """A bad idle raises and leaves the setting as it was."""
    aioring.set_sqpoll(0.02)
    try:
        with pytest.raises(error):
            aioring.set_sqpoll(idle)
        assert aioring.set_sqpoll(None) == 0.02
    finally:
        aioring.set_sqpoll(None)


async def test_reads_that_wait_for_the_device_go_to_the_polling_ring(cold_file, sqpoll):
    """With the setting on, read(), readinto() (O_DIRECT too) and the file
    API's reads of dropped pages return what os.pread returns, and those
    that wait for the device complete on the loop's polling ring, a ring
    whose kernel thread polls its SQ; reads from the page cache and other
    operations stay on the loop's ring."""
    path, content = cold_file
    loop = asyncio.get_running_loop()
    ring = _loops.get_ring(loop)
    fd = os.open(path, os.O_RDONLY)
    try:
        offsets = [(i * 7919 * 4096 + i) % (SIZE - 4096) for i in range(32)]
        missed(fd)
        got = await asyncio.gather(*(aioring.read(fd, 4096, off) for off in offsets))
        assert got == [content[off:off + 4096] for off in offsets]
        bufs = [bytearray(3000) for _ in offsets]
        drop(path)
        counts = await asyncio.gather(*(aioring.readinto(fd, buf, off)
                                        for buf, off in zip(bufs, offsets, strict=True)))
        assert [bytes(buf[:n]) for buf, n in zip(bufs, counts, strict=True)] == \
            [content[off:off + 3000] for off in offsets]
        drop(path)
        async with aioring.open(path, "rb", buffering=0) as f:
            for off in offsets[:8]:
                await f.seek(off)
                assert await f.read(5000) == content[off:off + 5000]
        try:
            direct = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            direct = -1  # (a file system without O_DIRECT: the rest still counts)
        if direct >= 0:
            buf = aioring.aligned_buffer(8192)
            try:
                assert await aioring.readinto(direct, buf, 8192) == 8192
                assert bytes(buf) == content[8192:16384]
            finally:
                buf.close()
                os.close(direct)
        if aioring.backend() != "io_uring":
            assert ring.polling is None  # (the threads backend has none)
            return
        polling = ring.polling
        assert isinstance(polling, Ring) and polling is not ring
        assert polling.setup_flags & _binding.SETUP_SQPOLL
        assert not ring.setup_flags & _binding.SETUP_SQPOLL
        assert polling.statistics()["completions"] >= len(offsets)
        assert polling.statistics()["in_flight"] == 0
        stats = aioring.statistics()  # (the loop's ring's, and its polling ring's as polling_*)
        assert stats["completions"] == ring.statistics()["completions"]
        assert {name: stats[f"polling_{name}"] for name in ("submit_calls", "wakeups", "completions",
                                                            "in_flight")} == \
            {name: polling.statistics()[name] for name in ("submit_calls", "wakeups", "completions",
                                                           "in_flight")}
        before = polling.statistics()["completions"]
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            assert await aioring.write(null, b"x" * 100, 0) == 100  # (not a read: the loop's ring)
        finally:
            os.close(null)
        assert await aioring.read(fd, 10, 0) == content[:10]  # (cached by now: the try serves it)
        assert polling.statistics()["completions"] == before
    finally:
        os.close(fd)


async def test_off_again_the_reads_go_to_the_loops_ring(cold_file, sqpoll):
    path, content = cold_file
    if aioring.backend() != "io_uring":
        pytest.skip("the threads backend has no polling ring")
    ring = _loops.get_ring(asyncio.get_running_loop())
    fd = os.open(path, os.O_RDONLY)
    try:
        missed(fd)
        for off in range(4096, SIZE - 4096, 128 * 1024):
            # (until a read finds its page not cached: POSIX_FADV_DONTNEED
            # leaves a page another CPU still holds in its LRU batch)
            drop(path)
            assert await aioring.read(fd, 4096, off) == content[off:off + 4096]
            if ring.polling is not None:
                break
        polling = ring.polling
        assert polling is not None
        before = polling.statistics()["completions"]
        aioring.set_sqpoll(None)
        completions = ring.statistics()["completions"]
        for off in range(65536, SIZE - 4096, 128 * 1024):  # (as above)
            drop(path)
            assert await aioring.read(fd, 4096, off) == content[off:off + 4096]
            if ring.statistics()["completions"] != completions:
                break
        assert ring.statistics()["completions"] == completions + 1
        assert polling.statistics()["completions"] == before and not polling.closed
    finally:
        os.close(fd)


@pytest.mark.backends("io_uring")
def test_the_polling_ring_closes_with_the_loops_ring(cold_file, sqpoll, new_loop):
    """Closing the loop's ring closes its polling ring first, which lets go
    of its reads in flight (each ends cancelled, or with what os.pread
    returns); the next read makes new rings.  loop.close() closes both."""
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    offsets = range(0, SIZE, 8192)

    async def close_while_reading():
        missed(fd)
        reading = [asyncio.ensure_future(aioring.read(fd, 4096, off)) for off in offsets]
        await asyncio.sleep(0)  # (the reads started)
        ring = _loops.get_ring()
        polling = ring.polling
        assert polling is not None and polling is not ring and not polling.closed
        _loops.close_ring()
        assert ring.closed and polling.closed
        for result, off in zip(await asyncio.gather(*reading, return_exceptions=True), offsets,
                               strict=True):
            assert isinstance(result, asyncio.CancelledError) or result == content[off:off + 4096]
        drop(path)
        assert await aioring.read(fd, 4096, 4096) == content[4096:8192]
        again = _loops.get_ring()
        assert again is not ring and again.polling not in (None, again, polling)
        return again, again.polling

    try:
        loop = new_loop()
        ring, polling = loop.run_until_complete(close_while_reading())
        loop.close()
        assert ring.closed and polling.closed
    finally:
        os.close(fd)


@pytest.mark.backends("io_uring")
async def test_device_reads_are_published_at_once(cold_file, sqpoll):
    """On the polling ring each read of uncached pages is published to the
    kernel's thread as soon as it is queued, not at the iteration's flush;
    each returns what os.pread returns."""
    path, content = cold_file
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_RDONLY)
    try:
        missed(fd)
        assert await aioring.read(fd, 4096, 0) == content[:4096]  # (the polling ring made)
        polling = _loops.get_ring(loop).polling
        drop(path)
        missed(fd)
        offsets = [(i * 7919 * 4096) % (SIZE - 4096) for i in range(8)]
        tasks = [asyncio.ensure_future(aioring.read(fd, 4096, off)) for off in offsets]
        before = polling.statistics()["submit_calls"]
        await asyncio.sleep(0)  # (every task's first step: its read queued; the flush comes after)
        assert polling.statistics()["submit_calls"] - before >= len(offsets) - 1
        assert await asyncio.gather(*tasks) == [content[off:off + 4096] for off in offsets]
    finally:
        os.close(fd)


@pytest.mark.backends("io_uring")
async def test_a_kernel_that_refuses_the_polling_ring(cold_file, sqpoll, monkeypatch):
    """Where the kernel refuses a polling ring (EPERM, say), a RuntimeWarning
    says so once, and the reads go on through the loop's ring."""
    path, content = cold_file

    class Refused(Ring):
        def __init__(self, loop, entries=256, sq_thread_idle=None):
            if sq_thread_idle is not None:
                raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
            super().__init__(loop, entries)

    monkeypatch.setattr(_loops, "Ring", Refused)
    monkeypatch.setattr(_loops, "_sqpoll_refused", False)
    ring = _loops.get_ring(asyncio.get_running_loop())
    fd = os.open(path, os.O_RDONLY)
    try:
        missed(fd)
        with pytest.warns(RuntimeWarning, match="refused a ring with a polling thread"):
            assert await aioring.read(fd, 4096, 4096) == content[4096:8192]
        assert ring.polling is ring
        assert not [name for name in aioring.statistics() if name.startswith("polling_")]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            drop(path)
            assert await aioring.read(fd, 4096, 65536) == content[65536:65536 + 4096]
    finally:
        os.close(fd)


# (3.12+: the polling ring's kernel thread is one of the process's threads,
# so fork() warns of a multi-threaded process)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.backends("io_uring")
async def test_a_forked_child_leaves_the_parents_polling_ring(cold_file, sqpoll, forked):
    """A child forked while the parent's polling ring exists drops its copy
    of it without touching the parent's, and makes its own; the parent's
    reads go on."""
    path, content = cold_file
    fd = os.open(path, os.O_RDONLY)
    try:
        missed(fd)
        assert await aioring.read(fd, 4096, 0) == content[:4096]
        parent = _loops.get_ring()
        polling = parent.polling

        async def child():
            ring = _loops.get_ring()
            missed(fd)
            drop(path)
            ok = await aioring.read(fd, 4096, 16384) == content[16384:20480]
            return ok and polling.closed and ring.polling not in (None, ring, polling)

        assert forked(child) == 0
        assert not polling.closed and parent.polling is polling
        drop(path)
        assert await aioring.read(fd, 4096, 32768) == content[32768:36864]
    finally:
        os.close(fd)
