"""Pipe streams on the ring: open_pipe_reader and open_pipe_writer, on
subprocess pipes (file objects) and os.pipe() fds."""

from __future__ import annotations

import array
import asyncio
import contextlib
import gc
import os
import random
import subprocess
import sys
import threading
import weakref

import pytest

import aioring
from aioring import statistics

MiB = 1 << 20


def _payload(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


def _fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def _write_in_pieces(writer, payload: bytes, seed: int) -> None:
    rng = random.Random(seed)
    view = memoryview(payload)
    pos = 0
    while pos < len(payload):
        n = rng.choice([1, 100, 4096, 65536, 300_000])
        writer.write(view[pos:pos + n])
        pos += n
        if rng.random() < 0.5:
            await writer.drain()
    await writer.drain()
    writer.write_eof()


@pytest.fixture
def cat():
    proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    yield proc
    for f in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            f.close()
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("how", ["readexactly", "readinto_exactly", "read"])
@pytest.mark.parametrize("size", [1, 65537, 4 * MiB + 1])
async def test_through_cat_byte_for_byte(cat, size, how):
    payload = _payload(size)
    writer = await aioring.open_pipe_writer(cat.stdin)
    reader = await aioring.open_pipe_reader(cat.stdout)
    assert writer.can_write_eof()
    sender = asyncio.ensure_future(_write_in_pieces(writer, payload, size))
    if how == "readexactly":
        got = await reader.readexactly(size)
    elif how == "read":
        got = await reader.read()
    else:
        buf = bytearray(size)
        assert await reader.readinto_exactly(buf) == size
        got = bytes(buf)
    await sender
    assert await reader.read() == b""
    assert reader.at_eof()
    assert got == payload
    assert await asyncio.to_thread(cat.wait) == 0
    await writer.wait_closed()
    await reader.wait_closed()
    assert cat.stdin.closed  # write_eof closed the pipe: that is how cat saw EOF
    assert cat.stdout.closed  # EOF released the read end


async def test_lines_from_a_subprocess():
    code = "import sys\nfor i in range(2000):\n    sys.stdout.write('line %d\\n' % i)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        reader = await aioring.open_pipe_reader(proc.stdout, limit=64)
        lines = [line async for line in reader]
        assert lines == [b"line %d\n" % i for i in range(2000)]
        assert await asyncio.to_thread(proc.wait) == 0
    finally:
        proc.stdout.close()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
async def test_os_pipe_fds(blocking):
    statistics()  # the ring and its eventfd exist
    fds = _open_fds()
    r, w = os.pipe()
    os.set_blocking(r, blocking)
    os.set_blocking(w, blocking)
    writer = await aioring.open_pipe_writer(w)
    reader = await aioring.open_pipe_reader(r)
    writer.write(b"first line\nsecond")
    writer.writelines([b" line\n", b"x" * MiB])
    assert await reader.readline() == b"first line\n"
    assert await reader.readuntil(b"line\n") == b"second line\n"
    buf = bytearray(MiB)
    assert await reader.readinto_exactly(buf) == MiB
    assert buf == b"x" * MiB
    writer.write_eof()
    with pytest.raises(RuntimeError):
        writer.write(b"after eof")
    assert await reader.read() == b""
    await writer.wait_closed()
    await reader.wait_closed()
    assert not _fd_is_open(r) and not _fd_is_open(w)
    assert _open_fds() == fds


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
async def test_closing_a_reader_ends_its_read_in_flight(blocking, loop_errors):
    statistics()
    fds = _open_fds()
    r, w = os.pipe()
    os.set_blocking(r, blocking)
    reader = await aioring.open_pipe_reader(r)
    pending = asyncio.ensure_future(reader.read(100))
    await asyncio.sleep(0)
    assert not pending.done()
    reader.close()
    assert await pending == b""
    await reader.wait_closed()
    assert not _fd_is_open(r)
    with pytest.raises(BrokenPipeError):  # the read end is really gone
        os.write(w, b"nobody reads this")
    os.close(w)
    assert _open_fds() == fds
    assert loop_errors == []


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
async def test_writing_to_a_pipe_without_reader(blocking, loop_errors):
    r, w = os.pipe()
    os.set_blocking(w, blocking)
    writer = await aioring.open_pipe_writer(w)
    os.close(r)
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(100):
            writer.write(b"x" * 1000)
            await writer.drain()
            await asyncio.sleep(0)  # a yield, so that the write completes
    writer.close()
    with pytest.raises(BrokenPipeError):  # the error that ended it, as asyncio's subprocess stdin
        await writer.wait_closed()
    assert not _fd_is_open(w)
    gc.collect()
    assert loop_errors == []


async def test_a_write_with_room_in_the_pipe_goes_out_at_once():
    r, w = os.pipe()
    writer = await aioring.open_pipe_writer(w)
    try:
        os.set_blocking(r, False)
        before = statistics()["in_flight"], statistics()["completions"]
        writer.write(b"small")
        await writer.drain()
        await asyncio.sleep(0)  # the iteration's writes leave at its end (one step of the loop)
        assert os.read(r, 100) == b"small"
        assert (statistics()["in_flight"], statistics()["completions"]) == before  # no ring op for it
    finally:
        writer.close()
        await writer.wait_closed()
        os.close(r)


async def test_a_kernel_without_nowait_pipe_writes_sends_through_the_ring(monkeypatch):
    from aioring import _channel
    # An unknown flag: pwritev2 answers EOPNOTSUPP, as a kernel whose pipes lack RWF_NOWAIT does.
    monkeypatch.setattr(_channel, "_RWF_NOWAIT", 1 << 30)
    r, w = os.pipe()
    writer = await aioring.open_pipe_writer(w)
    reader = await aioring.open_pipe_reader(r)
    payload = _payload(3 * MiB)
    writer.write(b"header")
    writer.write(payload)
    got = asyncio.ensure_future(reader.readexactly(6 + len(payload)))
    await writer.drain()
    assert await got == b"header" + payload
    assert not writer.transport._tx._direct
    writer.close()
    await writer.wait_closed()
    reader.close()
    await reader.wait_closed()


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
async def test_a_read_of_what_is_already_in_the_pipe_takes_it_at_once(blocking):
    r, w = os.pipe()
    os.set_blocking(r, blocking)
    reader = await aioring.open_pipe_reader(r)
    try:
        statistics()
        os.write(w, b"already here")
        before = statistics()["submit_calls"], statistics()["completions"]
        assert await reader.readexactly(7) == b"already"
        buf = bytearray(5)
        assert await reader.readinto_exactly(buf) == 5 and buf == b" here"
        os.close(w)
        assert await reader.read() == b""  # end of file, found the same way
        assert (statistics()["submit_calls"], statistics()["completions"]) == before  # no ring op
    finally:
        reader.close()
        await reader.wait_closed()
    assert not _fd_is_open(r)


async def test_reads_that_find_nothing_go_to_the_ring_and_still_get_everything():
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    writer = await aioring.open_pipe_writer(w)
    try:
        statistics()
        completions = statistics()["completions"]
        got = []
        for i in range(200):
            read = asyncio.ensure_future(reader.readexactly(4))
            await asyncio.sleep(0)  # the read starts on the empty pipe
            writer.write(i.to_bytes(4, "big"))
            got.append(await read)
        assert got == [i.to_bytes(4, "big") for i in range(200)]
        assert statistics()["completions"] > completions  # (the ring waited for them)
    finally:
        writer.close()
        reader.close()
        await writer.wait_closed()
        await reader.wait_closed()


async def test_a_reader_that_always_finds_data_still_lets_the_loop_run():
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1
    task = asyncio.ensure_future(other())
    try:
        await asyncio.sleep(0)
        turns = 0
        for i in range(300):  # every read finds its byte in the pipe
            os.write(w, bytes([i % 256]))
            assert await reader.read(10) == bytes([i % 256])
        assert turns > 0
    finally:
        task.cancel()
        os.close(w)
        reader.close()
        await reader.wait_closed()


@pytest.mark.parametrize("reading", ["read", "readinto_exactly"])
async def test_a_reader_closed_while_it_lets_the_loop_run_ends_at_eof(reading, loop_errors):
    from aioring import _ops
    statistics()
    fds = _open_fds()
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    _ops._unyielded[0] = _ops.YIELD_EVERY - 1  # the read's first step is to let the loop run
    if reading == "read":
        pending = asyncio.ensure_future(reader.read(100))
    else:
        pending = asyncio.ensure_future(reader.readinto_exactly(bytearray(4)))
    await asyncio.sleep(0)
    assert not pending.done()
    reader.close()  # meanwhile: the fd is closed at once (nothing is in flight)
    if reading == "read":
        assert await pending == b""
    else:
        with pytest.raises(asyncio.IncompleteReadError):
            await pending
    await reader.wait_closed()
    assert not _fd_is_open(r)
    os.close(w)
    assert _open_fds() == fds
    assert loop_errors == []


async def test_a_kernel_without_nowait_pipe_reads_reads_through_the_ring(monkeypatch):
    from aioring import _channel
    # An unknown flag: preadv2 answers EOPNOTSUPP, as a kernel whose pipes lack RWF_NOWAIT does.
    monkeypatch.setattr(_channel, "_RWF_NOWAIT", 1 << 30)
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    try:
        os.write(w, b"already here")
        assert await reader.read(100) == b"already here"
        assert reader._rx._pull_skip >= _channel._RING_ONLY  # refused once, then the ring only
        os.write(w, b"more")
        assert await reader.read(100) == b"more"
    finally:
        os.close(w)
        reader.close()
        await reader.wait_closed()


@pytest.mark.parametrize("room", [0, 100, 4096 + 100])
async def test_small_writes_into_a_nearly_full_pipe_arrive_whole_and_in_order(room):
    """A write the pipe has no room for (EAGAIN), room for a part of (a short
    write above PIPE_BUF), or just enough for: what the kernel did not take
    waits in the ring for the reader, and the stream stays in order."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    filler = b"f" * (1 << 20)
    prefilled = 0
    while True:  # fill the pipe to the brim, whatever its size
        try:
            prefilled += os.write(w, filler)
        except BlockingIOError:
            break
    os.set_blocking(w, True)
    freed = b""
    while len(freed) < room:  # make `room` bytes of room (whole pages of it)
        freed += os.read(r, room - len(freed))
    writer = await aioring.open_pipe_writer(w)
    reader = await aioring.open_pipe_reader(r)
    messages = [_payload(n) for n in (1000, 9000, 1, 16 * 1024)]
    for m in messages:
        writer.write(m)
        await writer.drain()
        await asyncio.sleep(0)  # each write leaves alone, at the end of its own iteration
    writer.write(b"end")
    got = asyncio.ensure_future(reader.readexactly(prefilled - len(freed) + sum(map(len, messages)) + 3))
    await writer.drain()
    assert await got == filler[:1] * (prefilled - len(freed)) + b"".join(messages) + b"end"
    writer.close()
    await writer.wait_closed()
    assert await reader.read() == b""
    reader.close()
    await reader.wait_closed()


async def test_pipe_writer_drain_waits_for_the_reader():
    r, w = os.pipe()
    writer = await aioring.open_pipe_writer(w)
    writer.transport.set_write_buffer_limits(high=1000, low=100)
    payload = _payload(2 * MiB)  # far more than a pipe holds
    writer.write(payload)
    drain = asyncio.ensure_future(writer.drain())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not drain.done()
    reader = await aioring.open_pipe_reader(r)
    got = asyncio.ensure_future(reader.readexactly(len(payload)))
    await drain
    assert writer.transport.get_write_buffer_size() <= 100
    assert await got == payload
    writer.close()
    assert await reader.read() == b""
    await writer.wait_closed()


async def test_a_character_device_reads_as_a_pipe():
    with open("/dev/zero", "rb", buffering=0) as f:
        reader = await aioring.open_pipe_reader(f)
        assert await reader.readexactly(300_000) == bytes(300_000)
        buf = bytearray(b"\xff" * 70_000)
        assert await reader.readinto(buf) > 0
        reader.close()
        await reader.wait_closed()
        assert f.closed


async def test_bad_pipes(disk_dir):
    path = os.path.join(disk_dir, "regular")
    with open(path, "wb") as f:
        f.write(b"not a pipe")
    loop = asyncio.get_running_loop()
    with open(path, "rb") as f:
        if isinstance(loop, asyncio.BaseEventLoop):  # (uvloop aborts the process on this one)
            with pytest.raises(ValueError):  # asyncio's connect_read_pipe says ValueError too
                await loop.connect_read_pipe(asyncio.Protocol, f)
        with pytest.raises(ValueError):
            await aioring.open_pipe_reader(f)
        with pytest.raises(ValueError):
            await aioring.open_pipe_writer(f.fileno())
    for bad in ("pipe", 1.5, None):
        with pytest.raises(TypeError):
            await aioring.open_pipe_reader(bad)
        with pytest.raises(TypeError):
            await aioring.open_pipe_writer(bad)
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        await aioring.open_pipe_reader(r)


async def test_incomplete_read_on_a_pipe():
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)
    os.write(w, b"abc")
    os.close(w)
    with pytest.raises(asyncio.IncompleteReadError) as info:
        await reader.readexactly(10)
    assert (info.value.partial, info.value.expected) == (b"abc", 10)
    assert await reader.readinto(bytearray(3)) == 0
    await reader.wait_closed()
    r2, w2 = os.pipe()
    reader = await aioring.open_pipe_reader(r2)
    os.write(w2, b"x" * 20_000)
    os.close(w2)
    with pytest.raises(asyncio.IncompleteReadError) as info:
        await reader.readinto_exactly(bytearray(100_000))
    assert (info.value.partial, info.value.expected) == (b"x" * 20_000, 100_000)
    await reader.wait_closed()


@pytest.mark.parametrize("how", ["call_soon", "wait_for"])
async def test_cancelled_pipe_reads_reassemble_the_stream_exactly(how):
    loop = asyncio.get_running_loop()
    pattern = array.array("I", range(MiB)).tobytes()  # 4 MiB
    r, w = os.pipe()
    reader = await aioring.open_pipe_reader(r)

    def peer():
        rng = random.Random(3)
        view = memoryview(pattern)
        pos = 0
        try:
            while pos < len(pattern):
                n = rng.choice([1, 13, 1000, 65536, 200_000])
                pos += os.write(w, view[pos:pos + n])
        finally:
            os.close(w)

    thread = threading.Thread(target=peer)
    thread.start()
    rng = random.Random(4)
    parts = []
    cancelled = 0
    try:
        at_eof = False
        while not at_eof:
            op = rng.choice(["readexactly", "read", "readinto", "readinto_exactly"])
            n = rng.choice([1, 7, 100, 4096, 65536, 100_000, 300_000])
            coro = _one_read(reader, op, n)
            if how == "call_soon":
                task = asyncio.ensure_future(coro)
                _cancel_after(loop, task, rng.randrange(0, 6))
                try:
                    data, at_eof = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    continue
            else:
                try:
                    data, at_eof = await asyncio.wait_for(coro, rng.choice([0, 1e-6, 1e-5, 1e-4]))
                except asyncio.TimeoutError:
                    cancelled += 1
                    continue
            parts.append(data)
    finally:
        thread.join()
    assert b"".join(parts) == pattern
    assert cancelled
    await reader.wait_closed()


async def _one_read(reader, op, n):
    try:
        if op == "readexactly":
            return await reader.readexactly(n), False
        if op == "read":
            data = await reader.read(n)
            return data, not data
        buf = bytearray(n)
        if op == "readinto":
            k = await reader.readinto(buf)
            return bytes(buf[:k]), k == 0
        await reader.readinto_exactly(buf)
        return bytes(buf), False
    except asyncio.IncompleteReadError as exc:
        return exc.partial, True


def _cancel_after(loop, task, iterations):
    if iterations == 0:
        task.cancel()
    else:
        loop.call_soon(_cancel_after, loop, task, iterations - 1)


async def test_a_dropped_pipe_reader_releases_its_fd():
    """open_pipe_reader's docstring: the pipe is closed "when the reader is garbage"."""
    statistics()
    r, w = os.pipe()
    try:
        reader = await aioring.open_pipe_reader(r)
        collected = weakref.ref(reader)
        del reader
        gc.collect()
        assert collected() is None
        assert not _fd_is_open(r)
    finally:
        with contextlib.suppress(OSError):
            os.close(w)
        if _fd_is_open(r):
            os.close(r)
