"""fd-level operations compared with os.read / os.pread / os.write / os.pwrite."""

from __future__ import annotations

import array
import concurrent.futures
import asyncio
import errno
import gc
import os
import socket
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioring

HYPOTHESIS = settings(max_examples=60, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def data_file(disk_dir):
    path = os.path.join(disk_dir, "data.bin")
    content = os.urandom(256 * 1024 + 123)
    with open(path, "wb") as f:
        f.write(content)
    fd = os.open(path, os.O_RDWR)
    yield fd, content
    os.close(fd)


@HYPOTHESIS
@given(offset=st.integers(0, 300 * 1024), size=st.integers(0, 70 * 1024))
async def test_read_equals_pread(data_file, offset, size):
    fd, _ = data_file
    assert await aioring.read(fd, size, offset) == os.pread(fd, size, offset)


@HYPOTHESIS
@given(offset=st.integers(0, 300 * 1024), size=st.integers(0, 70 * 1024))
async def test_readinto_equals_pread(data_file, offset, size):
    fd, _ = data_file
    buf = bytearray(b"\xaa" * size)
    n = await aioring.readinto(fd, buf, offset)
    expected = os.pread(fd, size, offset)
    assert n == len(expected)
    assert bytes(buf[:n]) == expected
    assert buf[n:] == b"\xaa" * (size - n)  # nothing past the count is touched


async def test_a_page_cache_read_at_an_offset_skips_the_ring(data_file):
    fd, content = data_file
    os.pread(fd, len(content), 0)  # (cached)
    before = aioring.statistics()["completions"]
    buf = bytearray(5000)
    assert await aioring.readinto(fd, buf, 1000) == 5000
    assert bytes(buf) == content[1000:6000]
    assert await aioring.readinto(fd, buf, len(content) - 10) == 10
    assert await aioring.readinto(fd, buf, len(content) + 10) == 0
    assert await aioring.read(fd, 7000, 99) == content[99:7099]
    assert await aioring.read(fd, 7000, len(content) - 5) == content[-5:]
    assert aioring.statistics()["completions"] == before


async def test_the_core_serves_just_the_page_cache_reads_policy_tries(data_file):
    """The core's page-cache reads serve a read at an offset of an fd whose
    reads are tried, counted as a call served without a yield, and hand every
    other call back to aioring._ops untouched: its checks and its yield."""
    from aioring import _core, _ops, _redelivery
    fd, content = data_file
    assert await aioring.read(fd, 4096, 0) == content[:4096]  # (a hit: fd's reads are tried)
    count = _ops._unyielded[0]
    buf = bytearray(50)
    assert _core.read_cached(fd, 100, 5) == content[5:105]
    assert _core.read_cached(fd, 100, len(content) - 10) == content[-10:]
    assert _core.readinto_cached(fd, buf, 7) == 50 and buf == content[7:57]
    assert _ops._unyielded[0] == count + 3
    for size, offset in ((100, -1), (_ops.UNZEROED_MIN, 0), (True, 0), (100, 1 << 63), (-1, 0)):
        assert _core.read_cached(fd, size, offset) is None
    for target in (bytes(10), memoryview(buf)[::2], memoryview(buf).toreadonly()):
        assert _core.readinto_cached(fd, target, 0) == -1
    _ops._unyielded[0] = _ops.YIELD_EVERY - 1  # (a yield is due: policy's call)
    assert _core.read_cached(fd, 100, 0) is None
    _ops._unyielded[0] = count + 3
    _redelivery.owed[asyncio.current_task()] = ("owed", None)
    try:
        assert _core.read_cached(fd, 100, 0) is None and _core.readinto_cached(fd, buf, 0) == -1
    finally:
        del _redelivery.owed[asyncio.current_task()]
    _ops._plain.discard(fd)
    assert _core.read_cached(fd, 100, 0) is None and _core.readinto_cached(fd, buf, 0) == -1
    assert _ops._unyielded[0] == count + 3 and buf == content[7:57]


async def test_the_core_sends_a_read_of_a_missing_fd_straight_to_the_ring(data_file):
    """read_cached answers Ellipsis for a read policy sends straight to the
    ring (src/fileops.h): while reads of uncached pages are in flight, a
    read at an offset of an fd whose recent tries missed, counting its
    backoff down; None for any other (an O_DIRECT fd, a size of 0 or 1 or of
    UNZEROED_MIN, a negative offset, something owed, no cold read in
    flight, no backoff left).  read() then returns the file's bytes."""
    from aioring import _core, _ops, _redelivery
    fd, content = data_file
    _ops._plain.discard(fd)
    state = _ops._fd_cache[fd] = [2, 4, 0, 0]
    _ops._cold_reads[0] += 1
    try:
        for size, offset in ((1, 0), (_ops.UNZEROED_MIN, 0), (100, -1), (True, 0), (100, 1 << 63)):
            assert _core.read_cached(fd, size, offset) is None
        assert _core.read_cached(fd, 100, 5) is ...
        assert state[0] == 1
        state[2] = 512
        assert _core.read_cached(fd, 100, 5) is None
        state[2] = 0
        _redelivery.owed[asyncio.current_task()] = ("owed", None)
        try:
            assert _core.read_cached(fd, 100, 0) is None
        finally:
            del _redelivery.owed[asyncio.current_task()]
        assert state[0] == 1
        assert await aioring.read(fd, 100, 5) == content[5:105]
        assert state[0] == 0
        assert _core.read_cached(fd, 100, 5) is None  # (no backoff left: policy's try)
        state[0] = 1
    finally:
        _ops._cold_reads[0] -= 1
    assert _core.read_cached(fd, 100, 5) is None  # (no cold read in flight)
    assert state[0] == 1


def assert_stands_in(public: Any) -> Any:
    """`public`, a C callable of the core that stands in for a Python
    coroutine function or method (its __wrapped__, returned), looks as that
    does: name, qualified name, docstring, module, signature and repr, and a
    coroutine function to asyncio."""
    import inspect
    python = public.__wrapped__
    assert (public.__name__, public.__qualname__, public.__doc__, public.__module__) == \
        (python.__name__, python.__qualname__, python.__doc__, python.__module__)
    assert inspect.signature(public) == inspect.signature(python)
    assert asyncio.iscoroutinefunction(public) and asyncio.iscoroutinefunction(python)
    assert repr(public) == repr(python)
    return python


@pytest.mark.parametrize("name", ["read", "readinto"])
async def test_read_and_readinto_are_coroutine_functions_like_their_python_ones(data_file, pipe, name):
    """aioring.read and readinto (the core's, which try the page cache before
    any Python frame) look and behave as the coroutine functions they stand
    for: name, docstring, signature, keyword calls, binding errors, a
    coroutine that asyncio takes (named as the function's), that nothing runs before it is awaited,
    that cannot be awaited twice and that warns when never awaited."""
    import warnings
    fd, content = data_file
    public = getattr(aioring, name)
    python = assert_stands_in(public)
    second = bytearray(4096) if name == "readinto" else 4096
    want = 4096 if name == "readinto" else content[4096:8192]
    assert await public(fd, second, 4096) == want
    assert await public(fd=fd, offset=4096, **{"buffer" if name == "readinto" else "size": second}) == want
    assert await asyncio.create_task(public(fd, second, 4096)) == want
    for bad in ((fd,), (fd, second, 0, 0)):
        errors = []
        for function in (public, python):
            with pytest.raises(TypeError) as info:
                function(*bad)
            errors.append(str(info.value))
        assert errors[0] == errors[1]
    for function in (public, python):
        coro = function(fd, second, 0)
        assert asyncio.iscoroutine(coro)
        assert (coro.__name__, coro.__qualname__) == (name, name)
        with pytest.raises(StopIteration) as stop:
            coro.send(None)
        assert stop.value.value == (4096 if name == "readinto" else content[:4096])
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            coro.send(None)
        coro = function(fd, second, 0)
        with pytest.raises(KeyError):
            coro.throw(KeyError("thrown"))  # (before its first step: nothing runs)
        coro.close()
        function(fd, second, 0).close()  # (closed unstarted: no warning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        public(fd, second, 0)
        python(fd, second, 0)
        gc.collect()
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == \
        [f"coroutine '{name}' was never awaited"] * 2
    # A pipe's read goes on in the Python coroutine after the try: cancelled
    # there, it is cancelled, and the pipe's bytes come to the next read.
    r, w = pipe
    size = bytearray(10) if name == "readinto" else 10
    waiting = asyncio.ensure_future(public(r, size))
    await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    await asyncio.wait([waiting])
    assert waiting.cancelled()
    os.write(w, b"ping")
    assert await public(r, size) == (4 if name == "readinto" else b"ping")


async def test_page_cache_reads_into_memoryviews_match_preadv(data_file):
    """A writable contiguous memoryview is read into at once, as a bytearray
    is; counts are in bytes whatever the view's format, as os.preadv's.  The
    views FileIO.readinto refuses get its TypeError."""
    fd, content = data_file
    os.pread(fd, len(content), 0)  # (cached)
    before = aioring.statistics()["completions"]
    for offset in (0, 777, len(content) - 100, len(content) + 5):
        for make in (lambda: memoryview(bytearray(b"\xaa" * 9000))[1000:5000],
                     lambda: memoryview(bytearray(b"\xaa" * 4096)).cast("i"),
                     lambda: memoryview(array.array("d", [1.5] * 300)),
                     lambda: memoryview(bytearray(b"\xaa" * 4096)).cast("B", (64, 64))):
            mine, theirs = make(), make()
            n = await aioring.readinto(fd, mine, offset)
            assert n == os.preadv(fd, [theirs], offset)
            assert mine.tobytes() == theirs.tobytes()
    assert aioring.statistics()["completions"] == before
    released = memoryview(bytearray(10))
    released.release()
    for bad in (memoryview(bytearray(100))[::2], memoryview(b"read-only"), released):
        with open(__file__, "rb", buffering=0) as f, pytest.raises(TypeError):
            f.readinto(bad)  # what FileIO.readinto raises
        with pytest.raises(TypeError):
            await aioring.readinto(fd, bad, 0)


@pytest.mark.parametrize("how", ["readinto", "read"])
async def test_a_task_reading_the_page_cache_yields_and_can_be_cancelled(data_file, how):
    """Reads served at once never suspend, so they yield to the loop every so
    often (after reading: the bytes are the caller's).  A cancellation that
    lands there is not lost: the task's next read raises it."""
    fd, content = data_file
    buf = bytearray(4096)
    reads = [0]

    async def reader() -> None:
        while True:
            if how == "readinto":
                assert await aioring.readinto(fd, buf, 4096) == 4096
            else:
                assert await aioring.read(fd, 4096, 4096) == content[4096:8192]
            reads[0] += 1

    task = asyncio.ensure_future(reader())
    while reads[0] < 3:
        await asyncio.sleep(0)  # the reader yields now and then
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert bytes(buf) == (content[4096:8192] if how == "readinto" else bytes(4096))


async def test_a_read_partly_cached_returns_all_of_it(data_file, monkeypatch, python_tries):
    from aioring import _ops
    fd, content = data_file

    def half_cached(fd: int, buffers, offset: int, flags: int) -> int:
        with memoryview(buffers[0]) as view:
            return os.preadv(fd, [view[:len(view) // 2]], offset)
    monkeypatch.setattr(_ops, "_preadv", half_cached)
    assert await aioring.read(fd, 10_000, 5) == content[5:10_005]
    assert await aioring.read(fd, 10_000, len(content) - 3000) == content[-3000:]


@pytest.mark.parametrize("how", ["direct", "partly cached", "ring"])
@pytest.mark.parametrize("size", [100_000, 128 * 1024, 200_000, 1 << 20])
async def test_large_reads_return_just_what_the_kernel_read(data_file, monkeypatch, request, how, size):
    """A large read's result is the bytes object the kernel filled (not
    zeroed first): cut short by the end of the file, it holds just the file's
    bytes, whether the page cache, the ring or both served it."""
    from aioring import _ops
    fd, content = data_file
    if how == "ring":
        request.getfixturevalue("ring_reads")
    elif how == "partly cached":
        request.getfixturevalue("python_tries")

        def half_cached(fd: int, buffers, offset: int, flags: int) -> int:
            with memoryview(buffers[0]) as view:
                return os.preadv(fd, [view[:len(view) // 2]], offset)
        monkeypatch.setattr(_ops, "_preadv", half_cached)
    for offset in (0, 7, max(0, len(content) - size // 2), len(content) - 1, len(content)):
        assert await aioring.read(fd, size, offset) == os.pread(fd, size, offset)
    os.lseek(fd, 5, os.SEEK_SET)
    assert await aioring.read(fd, size) == content[5:5 + size]


async def test_a_large_read_of_a_pipe_returns_what_it_holds(pipe):
    r, w = pipe
    os.write(w, b"0123456789")
    assert await aioring.read(r, 1 << 20) == b"0123456789"
    os.write(w, b"x" * 60_000)  # (less than the pipe holds: the write does not block)
    got = b""
    while len(got) < 60_000:
        got += await aioring.read(r, 1 << 20)
    assert got == b"x" * 60_000


@pytest.mark.parametrize("cancel", [False, True])
async def test_a_read_partly_served_directly_ends_whole(data_file, monkeypatch, python_tries, cancel):
    """Where only part of the range is cached, the direct read delivers that
    part and the ring the rest.  A cancellation meanwhile does not cut it
    short: the buffer is no longer untouched, so the read ends whole, and the
    cancellation comes at the caller's next await."""
    from aioring import _ops
    fd, content = data_file

    def half_cached(fd: int, buffers, offset: int, flags: int) -> int:
        if cancel:  # now, with part of the buffer filled: at the next await
            asyncio.current_task().cancel()
        with memoryview(buffers[0]) as view:
            return os.preadv(fd, [view[:len(view) // 2]], offset)
    monkeypatch.setattr(_ops, "_preadv", half_cached)
    buf = bytearray(10_000)
    got = []

    async def read_then_go_on() -> None:
        got.append(await aioring.readinto(fd, buf, 3))
        await asyncio.sleep(0)  # an owed cancellation comes here

    reading = asyncio.ensure_future(read_then_go_on())
    await asyncio.wait([reading])
    assert reading.cancelled() == cancel
    assert got == [10_000]
    assert bytes(buf) == content[3:10_003]


@HYPOTHESIS
@given(writes=st.lists(st.tuples(st.integers(0, 64 * 1024), st.binary(max_size=8192)), max_size=8))
async def test_write_equals_pwrite(disk_dir, writes):
    a = os.open(os.path.join(disk_dir, "a"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    b = os.open(os.path.join(disk_dir, "b"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        for offset, data in writes:
            assert await aioring.write(a, data, offset) == os.pwrite(b, data, offset)
        assert os.fstat(a).st_size == os.fstat(b).st_size
        assert os.pread(a, 1 << 20, 0) == os.pread(b, 1 << 20, 0)
    finally:
        os.close(a)
        os.close(b)


async def test_current_position_like_os_read(data_file, disk_dir):
    fd, content = data_file
    twin = os.open(os.path.join(disk_dir, "twin"), os.O_RDWR | os.O_CREAT)
    os.write(twin, content)
    os.lseek(fd, 0, os.SEEK_SET)
    os.lseek(twin, 0, os.SEEK_SET)
    for size in (0, 1, 4096, 100_000, 200_000, 10):
        assert await aioring.read(fd, size) == os.read(twin, size)
        assert os.lseek(fd, 0, os.SEEK_CUR) == os.lseek(twin, 0, os.SEEK_CUR)
    os.close(twin)


async def test_write_at_current_position_and_append(disk_dir):
    path = os.path.join(disk_dir, "pos")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    assert await aioring.write(fd, b"hello ") == 6
    assert await aioring.write(fd, memoryview(b"world")) == 5
    assert os.lseek(fd, 0, os.SEEK_CUR) == 11
    os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    assert await aioring.write(fd, bytearray(b"!")) == 1
    os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == b"hello world!"


async def test_readinto_accepts_any_writable_buffer(data_file):
    fd, content = data_file
    arr = array.array("i", [0] * 16)
    assert await aioring.readinto(fd, arr, 0) == 64
    assert arr.tobytes() == content[:64]
    mv = memoryview(bytearray(100))[10:30]
    assert await aioring.readinto(fd, mv, 5) == 20
    assert mv.tobytes() == content[5:25]


async def test_a_buffer_read_into_through_the_ring_is_let_go_before_the_call_returns(data_file, ring_reads):
    """Whoever made the read (the kernel, or a worker thread of the threads
    backend) lets go of the caller's buffer before readinto returns: a
    memoryview can be released at once and a bytearray resized, as after
    os.preadv."""
    fd, content = data_file
    buf = bytearray(8192)
    for i in range(20):
        with memoryview(buf) as view:  # (release() raises BufferError while exported)
            assert await aioring.readinto(fd, view, 100 + i) == 8192
        buf.append(0)
        del buf[-1]
        assert buf == content[100 + i:8292 + i]


def test_reads_of_loops_in_two_threads_never_see_each_others_bytes(new_loop, data_file):
    """read() tries the page cache into a buffer of its thread's own: loops
    in two threads reading at once each get the bytes os.pread gives."""
    fd, content = data_file

    async def reads(first: int) -> None:
        for i in range(400):
            off = (first + i * 4099) % (len(content) - 4096)
            assert await aioring.read(fd, 4096, off) == content[off:off + 4096]

    loops = [new_loop(), new_loop()]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(loop.run_until_complete, reads(k * 777)) for k, loop in enumerate(loops)]
        for run in runs:
            run.result()


async def test_short_reads_at_end_of_file(data_file):
    fd, content = data_file
    end = len(content)
    assert await aioring.read(fd, 1000, end - 10) == content[-10:]
    assert await aioring.read(fd, 1000, end) == b""
    assert await aioring.readinto(fd, bytearray(10), end + 5) == 0


async def test_fsync(data_file):
    fd, _ = data_file
    await aioring.write(fd, b"x", 0)
    assert await aioring.fsync(fd) is None
    assert await aioring.fsync(fd, datasync=True) is None


async def test_pipe_read_waits_for_data(pipe):
    r, w = pipe
    reader = asyncio.ensure_future(aioring.read(r, 100))
    await asyncio.sleep(0)
    assert not reader.done()
    assert await aioring.write(w, b"ping") == 4
    assert await reader == b"ping"


@pytest.mark.parametrize("blocking", [True, False])
async def test_pipe_round_trip(pipe, blocking):
    r, w = pipe
    os.set_blocking(r, blocking)
    os.set_blocking(w, blocking)
    payload = os.urandom(300_000)  # larger than the pipe: the writer must wait for the reader

    async def writer():
        view = memoryview(payload)
        while view:
            view = view[await aioring.write(w, view):]
        os.close(w)

    async def reader():
        chunks = []
        while chunk := await aioring.read(r, 65536):
            chunks.append(chunk)
        return b"".join(chunks)

    _, received = await asyncio.gather(writer(), reader())
    assert received == payload


async def test_socket_fd_round_trip():
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.setblocking(False)
        reader = asyncio.ensure_future(aioring.read(b.fileno(), 100))
        assert await aioring.write(a.fileno(), b"over a socket") == 13
        assert await reader == b"over a socket"
        a.shutdown(socket.SHUT_WR)
        assert await aioring.read(b.fileno(), 100) == b""


async def test_closed_fd_is_ebadf(disk_dir):
    fd = os.open(os.path.join(disk_dir, "f"), os.O_RDWR | os.O_CREAT)
    await aioring.fsync(fd)  # the ring and its eventfd exist before fd's number is freed
    os.close(fd)
    calls = [aioring.read(fd, 1), aioring.readinto(fd, bytearray(1)), aioring.write(fd, b"x"),
             aioring.fsync(fd)]
    for offset in (-1, 0):  # also of nothing, as os.pread and os.preadv check the fd first
        calls += [aioring.read(fd, 0, offset), aioring.readinto(fd, bytearray(0), offset),
                  aioring.read(fd, 1, offset), aioring.readinto(fd, bytearray(1), offset),
                  aioring.readinto(fd, memoryview(bytearray(10))[2:5], offset)]
    for call in calls:
        with pytest.raises(OSError) as info:
            await call
        assert info.value.errno == errno.EBADF
    assert _stdlib_error(os.pread, fd, 0, 0).errno == errno.EBADF


def _stdlib_error(fn, *args):
    try:
        fn(*args)
    except OSError as exc:
        return exc
    raise AssertionError("the stdlib call did not fail")


async def test_kernel_errors_match_the_stdlib(disk_dir, pipe):
    r, w = pipe
    cases = []
    dirfd = os.open(disk_dir, os.O_RDONLY | os.O_DIRECTORY)
    cases.append((aioring.read(dirfd, 10), _stdlib_error(os.read, dirfd, 10)))  # EISDIR
    ro = os.open(os.path.join(disk_dir, "ro"), os.O_RDONLY | os.O_CREAT)
    cases.append((aioring.write(ro, b"x"), _stdlib_error(os.write, ro, b"x")))  # EBADF
    os.close(r)
    cases.append((aioring.write(w, b"x"), _stdlib_error(os.write, w, b"x")))  # EPIPE
    try:
        for coro, expected in cases:
            with pytest.raises(OSError) as info:
                await coro
            got = info.value
            assert type(got) is type(expected)
            assert (got.errno, got.strerror) == (expected.errno, expected.strerror)
        assert isinstance(expected, BrokenPipeError)
    finally:
        os.close(dirfd)
        os.close(ro)


def test_backend_says_which_backend_serves(aioring_backend):
    assert aioring.backend() == aioring_backend


# ------------------------------------------------- at the fd's own position, at once
@pytest.mark.parametrize("blocking", [True, False])
async def test_pipe_data_already_there_moves_at_once(pipe, blocking):
    """A read of what the pipe holds and a write it has room for need no ring
    op; what they return is what os.read and os.write return (a read returns
    what is there, short of the size asked)."""
    r, w = pipe
    os.set_blocking(r, blocking)
    os.set_blocking(w, blocking)
    aioring.statistics()
    before = aioring.statistics()["submit_calls"], aioring.statistics()["completions"]
    assert await aioring.write(w, b"0123456789") == 10
    assert await aioring.read(r, 4) == b"0123"
    buf = bytearray(100)
    assert await aioring.readinto(r, buf) == 6 and buf[:6] == b"456789"
    assert (aioring.statistics()["submit_calls"], aioring.statistics()["completions"]) == before
    os.write(w, b"x")
    assert os.read(r, 100) == b"x"  # nothing was left behind or read twice


async def test_a_file_read_at_its_position_partly_cached_returns_all_of_it(disk_dir, monkeypatch):
    """Where the page cache holds only the start of what a read at the fd's
    position asks, the ring reads the rest: the result and the position are
    os.read's (a short read still means end of file)."""
    from aioring import _ops
    answers = []

    def spy(*args):
        res = rw_now(*args)
        answers.append(res)
        return res
    rw_now = _ops._rw_now
    monkeypatch.setattr(_ops, "_rw_now", spy)
    path = os.path.join(disk_dir, "half")
    content = os.urandom(1024 * 1024)
    with open(path, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    twin = os.open(path, os.O_RDONLY)

    def cache_only_the_first(n: int) -> None:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.pread(fd, n, 0)  # (its read-ahead may cache more ...)
        os.posix_fadvise(fd, n, 0, os.POSIX_FADV_DONTNEED)  # (... which goes again)
    try:
        for size, cached in ((600_000, 256 * 1024), (2_000_000, 512 * 1024)):
            os.lseek(fd, 0, os.SEEK_SET)
            cache_only_the_first(cached)
            got = await aioring.read(fd, size)
            os.lseek(twin, 0, os.SEEK_SET)
            assert got == os.read(twin, size)
            assert os.lseek(fd, 0, os.SEEK_CUR) == os.lseek(twin, 0, os.SEEK_CUR)
            os.lseek(fd, 0, os.SEEK_SET)
            cache_only_the_first(cached)
            buf = bytearray(size)
            n = await aioring.readinto(fd, buf)
            assert buf[:n] == content[:size] and n == min(size, len(content))
            assert os.lseek(fd, 0, os.SEEK_CUR) == n
    finally:
        os.close(fd)
        os.close(twin)
    if not any(res > 0 for res in answers):  # (a count done so far: the ring did the rest)
        pytest.skip("this file system kept the pages: no read was only partly cached")


async def test_errors_found_at_once_are_the_stdlibs(pipe):
    """A reset socket read through its fd and a pipe without a reader: the
    try at once raises what os.read and os.write raise (a reset is reported
    once; the ring would not see it again)."""
    r, w = pipe
    expected = {}
    for name in ("ours", "theirs"):
        listener = socket.create_server(("127.0.0.1", 0))
        with listener:
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        with client, server:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            try:
                if name == "ours":
                    await aioring.read(server.fileno(), 10)
                else:
                    os.read(server.fileno(), 10)
            except OSError as exc:
                expected[name] = (type(exc), exc.errno, exc.strerror)
    assert expected["ours"] == expected["theirs"] and expected["ours"][0] is ConnectionResetError
    os.close(r)
    with pytest.raises(BrokenPipeError) as caught:
        await aioring.write(w, b"x")
    assert (caught.value.errno, caught.value.strerror) == (errno.EPIPE, os.strerror(errno.EPIPE))


async def test_a_task_that_always_finds_its_pipe_ready_lets_the_loop_run(pipe):
    r, w = pipe
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
        for i in range(300):  # every write has room, every read finds its byte
            assert await aioring.write(w, bytes([i % 256])) == 1
            assert await aioring.read(r, 10) == bytes([i % 256])
        assert turns > 0
    finally:
        task.cancel()
