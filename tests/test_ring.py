"""The ring: backpressure, cancellation, closing, fork and threads."""

from __future__ import annotations

import asyncio
import contextvars
import errno
import gc
import os
import random
import socket
import threading

import pytest
import uvloop

import aioring
from aioring import _binding, _loops, _ops, _ring


async def _until(condition, iterations: int = 1000) -> None:
    """Let the loop run until condition() holds (bounded: fails instead of hanging)."""
    for _ in range(iterations):
        if condition():
            return
        await asyncio.sleep(0)
    assert condition()


@pytest.fixture
def data_file(disk_dir):
    path = os.path.join(disk_dir, "data.bin")
    content = os.urandom(1 << 20)
    with open(path, "wb") as f:
        f.write(content)
    fd = os.open(path, os.O_RDONLY)
    yield fd, content
    os.close(fd)


@pytest.fixture
def pipes():
    made = []

    def make(n):
        pairs = [os.pipe() for _ in range(n)]
        made.extend(pairs)
        return pairs

    yield make
    for pair in made:
        for fd in pair:
            try:
                os.close(fd)
            except OSError:
                pass


async def test_10000_concurrent_reads_through_a_ring_of_8(data_file, ring_reads):
    fd, content = data_file
    ring = _loops.get_ring(entries=8)
    assert (ring.sq_entries, ring.cq_entries) == (8, 16)
    rng = random.Random(7)
    offsets = [rng.randrange(0, len(content)) for _ in range(10_000)]
    bufs = [bytearray(rng.randrange(1, 300)) for _ in offsets]
    counts = await asyncio.gather(*(aioring.readinto(fd, b, o) for b, o in zip(bufs, offsets, strict=True)))
    for buf, off, n in zip(bufs, offsets, counts, strict=True):
        assert n == min(len(buf), len(content) - off)
        assert buf[:n] == content[off:off + n]
    stats = aioring.statistics()
    assert stats["backpressured"] > 0
    assert stats["completions"] >= 10_000
    assert (stats["in_flight"], stats["waiting"]) == (0, 0)


async def test_reads_beyond_the_completion_queue_wait_and_none_is_lost(pipes):
    ring = _loops.get_ring(entries=4)
    pairs = pipes(300)
    # (At an offset: reads at the fd's position may wait for a peer, and are
    # exempt from backpressure; the kernel ignores a pipe's offset.)
    reads = [asyncio.ensure_future(aioring.read(r, 100, 0)) for r, _ in pairs]
    await asyncio.sleep(0)
    stats = aioring.statistics()
    assert stats["in_flight"] <= ring.cq_entries
    assert stats["waiting"] == 300 - stats["in_flight"]
    for i, (_, w) in enumerate(pairs):
        os.write(w, b"pipe %d" % i)
    assert await asyncio.gather(*reads) == [b"pipe %d" % i for i in range(300)]


async def test_idle_stream_receives_never_hold_back_other_operations(data_file):
    """Receives that wait for a peer are exempt from backpressure: with far more
    idle connections than the completion queue holds, a file read still runs,
    and every receive still gets its data afterwards."""
    fd, content = data_file
    ring = _loops.get_ring(entries=4)
    pairs = [socket.socketpair() for _ in range(3 * ring.cq_entries)]
    try:
        streams = [await aioring.open_connection(sock=a) for a, _ in pairs]
        reads = [asyncio.ensure_future(r.read(10)) for r, _ in streams]
        await _until(lambda: aioring.statistics()["in_flight"] >= len(pairs))
        assert len(pairs) > ring.cq_entries
        assert await aioring.read(fd, 100, 5) == content[5:105]
        for i, (_, b) in enumerate(pairs):
            b.send(b"conn %d" % i)
        assert await asyncio.gather(*reads) == [b"conn %d" % i for i in range(len(pairs))]
        for _, w in streams:
            w.close()
            await w.wait_closed()
    finally:
        for a, b in pairs:
            a.close()
            b.close()


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])
async def test_cancelled_read_never_touches_the_buffer_and_loses_nothing(pipe, blocking):
    r, w = pipe
    os.set_blocking(r, blocking)
    buf = bytearray(16)
    task = asyncio.ensure_future(aioring.readinto(r, buf))
    await _until(lambda: aioring.statistics()["in_flight"] == 1)  # the read was submitted
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    buf.extend(b"x")  # the kernel let go: the export is released, resizing works
    del buf[16:]
    os.write(w, b"data for the next read")
    assert await aioring.read(r, 100) == b"data for the next read"
    assert buf == bytearray(16)


async def test_cancellation_racing_a_completion_loses_nothing(pipe):
    r, w = pipe
    task = asyncio.ensure_future(aioring.read(r, 100))
    await asyncio.sleep(0)
    os.write(w, b"raced")  # the read completes in the kernel, not yet harvested
    task.cancel()
    try:
        got = await task  # the cancellation came too late: the data is returned
    except asyncio.CancelledError:
        got = await aioring.read(r, 100)  # or it came in time: the data is still in the pipe
    assert got == b"raced"


async def test_cancelled_twice_still_waits_for_the_kernel(pipe):
    r, w = pipe
    buf = bytearray(8)
    task = asyncio.ensure_future(aioring.readinto(r, buf))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)  # now waiting for the original completion
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert aioring.statistics()["in_flight"] == 0 or buf == bytearray(8)
    os.write(w, b"12345678")
    assert await aioring.read(r, 8) == b"12345678"
    assert buf == bytearray(8)


async def test_cancelling_a_backpressured_operation_never_submits_it(pipes):
    _loops.get_ring(entries=1)  # a completion queue of 2
    (r1, w1), (r2, w2), (r3, w3) = pipes(3)
    first = asyncio.ensure_future(aioring.read(r1, 10, 0))  # at an offset: bounded
    second = asyncio.ensure_future(aioring.read(r2, 10, 0))
    third = asyncio.ensure_future(aioring.read(r3, 10, 0))
    await asyncio.sleep(0)
    assert aioring.statistics()["waiting"] == 1
    third.cancel()
    with pytest.raises(asyncio.CancelledError):
        await third
    assert aioring.statistics()["cancels"] == 0  # nothing reached the kernel
    os.write(w3, b"kept")
    os.write(w1, b"one")
    os.write(w2, b"two")
    assert await asyncio.gather(first, second) == [b"one", b"two"]
    assert await aioring.read(r3, 10) == b"kept"


async def test_wait_for_timeout_on_a_read(pipe):
    r, w = pipe
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(aioring.read(r, 10), 0.01)
    os.write(w, b"later")
    assert await aioring.read(r, 10) == b"later"


def test_closing_the_loop_with_reads_in_flight(new_loop, pipe, loop_errors):
    r, w = pipe
    loop = new_loop()
    bufs = [bytearray(10) for _ in range(5)]
    tasks = [loop.create_task(aioring.readinto(r, b)) for b in bufs]
    loop.run_until_complete(asyncio.sleep(0))
    ring = _loops.get_ring(loop)
    assert ring.statistics()["in_flight"] == 5
    loop.close()
    assert ring.closed
    os.write(w, b"after close")
    assert os.read(r, 100) == b"after close"  # the cancelled reads consumed nothing
    assert all(b == bytearray(10) for b in bufs)
    del tasks
    gc.collect()
    # asyncio reports the tasks the test abandoned on a closed loop, nothing else
    assert all("destroyed but it is pending" in ctx["message"] for ctx in loop_errors)
    loop_errors.clear()


def test_closing_asks_again_for_a_cancellation_that_found_nothing(new_loop, pipe, monkeypatch, loop_errors):
    """A step of a chain that starts only after the close's cancellation
    looked for it is out of that cancellation's reach: when nothing
    completes, the close asks again (here the first request for each op is
    lost), and lets go of the read once the kernel did, intact."""
    r, w = pipe
    loop = new_loop()
    buf = bytearray(10)
    task = loop.create_task(aioring.readinto(r, buf))
    loop.run_until_complete(asyncio.sleep(0))
    ring = _loops.get_ring(loop)
    if not isinstance(ring, _ring.Ring):
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        return  # (the threads backend interrupts its workers instead)
    asked = []
    real = ring._prep_cancel

    def first_lost(key):
        asked.append(key)
        return True if asked.count(key) == 1 else real(key)

    monkeypatch.setattr(ring, "_prep_cancel", first_lost)
    loop.close()
    assert len(asked) >= 2 and len(set(asked)) == 1
    assert ring.statistics()["in_flight"] == 0
    os.write(w, b"after close")
    assert os.read(r, 100) == b"after close" and buf == bytearray(10)
    del task
    gc.collect()
    assert all("destroyed but it is pending" in ctx["message"] for ctx in loop_errors)
    loop_errors.clear()


def test_run_ends_with_reads_in_flight(new_loop, pipe):
    r, w = pipe

    async def main():
        background = [asyncio.ensure_future(aioring.read(r, 10)) for _ in range(3)]
        await _until(lambda: aioring.statistics()["in_flight"] == 3)
        assert not any(t.done() for t in background)
        return _loops.get_ring()

    with asyncio.Runner(loop_factory=new_loop) if hasattr(asyncio, "Runner") else _Runner(new_loop) as runner:
        ring = runner.run(main())
    assert ring.closed
    os.write(w, b"intact")
    assert os.read(r, 100) == b"intact"


class _Runner:
    """asyncio.Runner for Python 3.10."""

    def __init__(self, factory):
        self.loop = factory()

    def __enter__(self):
        return self

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def __exit__(self, *exc):
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()


def test_ring_closes_with_its_loop_and_a_new_loop_gets_a_new_ring(new_loop):
    loop = new_loop()
    ring = loop.run_until_complete(_current_ring())
    assert not ring.closed
    loop.close()
    assert ring.closed
    other = new_loop()
    assert other.run_until_complete(_current_ring()) is not ring
    other.close()


async def _current_ring():
    await aioring.fsync(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return _loops.get_ring()


# (3.12+ warns that fork() in a process with threads may deadlock: the
# threads backend's workers are such threads, and the child never uses them.)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
async def test_forked_child_gets_its_own_ring(pipe, data_file, forked):
    r, w = pipe
    fd, content = data_file
    parent_ring = _loops.get_ring()
    in_flight = asyncio.ensure_future(aioring.read(r, 100))
    await asyncio.sleep(0)

    async def child():
        ring = _loops.get_ring()
        ok = ring is not parent_ring and parent_ring.closed is True
        return ok and await aioring.read(fd, 64, 100) == content[100:164]

    assert forked(child) == 0
    assert not parent_ring.closed
    os.write(w, b"parent still reads")
    assert await in_flight == b"parent still reads"


def test_loops_in_two_threads_get_their_own_rings(data_file):
    fd, content = data_file
    barrier = threading.Barrier(2, timeout=30)
    results = {}

    def run(name, runner):
        async def main():
            ring = _loops.get_ring()
            barrier.wait()  # both rings exist at once
            data = await aioring.read(fd, 1000, 5)
            barrier.wait()
            return ring, data

        results[name] = runner(main())

    threads = [threading.Thread(target=run, args=("asyncio", asyncio.run)),
               threading.Thread(target=run, args=("uvloop", uvloop.run))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (ring_a, data_a), (ring_b, data_b) = results["asyncio"], results["uvloop"]
    assert ring_a is not ring_b
    assert data_a == data_b == content[5:1005]
    assert ring_a.closed and ring_b.closed


@pytest.mark.parametrize("path", ["direct", "ring"])
async def test_other_tasks_run_while_one_task_reads_from_the_page_cache(data_file, request, path):
    from aioring import _ops
    if path == "ring":
        request.getfixturevalue("ring_reads")
    fd, _ = data_file
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    buf = bytearray(4096)
    reads = 4000
    before = ticks
    for i in range(reads):
        await aioring.readinto(fd, buf, (i * 4096) % (1 << 20))
    # the reading task yields at least once every EAGER_RUN + 1 operations
    # on the ring, and every YIELD_EVERY reads served directly
    every = _ring.EAGER_RUN + 1 if path == "ring" else _ops.YIELD_EVERY
    assert ticks - before >= reads // every - 1
    stop = True
    await other


async def test_a_cancelled_read_loop_ends_and_keeps_every_byte(pipe):
    r, w = pipe
    got = []

    async def reader():
        while True:
            got.append(await aioring.read(r, 100))

    task = asyncio.ensure_future(reader())
    await asyncio.sleep(0)
    os.write(w, b"raced")  # the read completes in the kernel, not yet harvested
    task.cancel()
    await asyncio.wait({task}, timeout=10)  # a swallowed cancellation would leave it running
    assert task.cancelled()  # whichever side won the race, the cancellation is not lost
    os.set_blocking(r, False)
    try:
        rest = os.read(r, 100)
    except BlockingIOError:
        rest = b""
    assert b"".join(got) + rest == b"raced"


# On the threads backend a worker may not have started the read when the
# cancellation comes: it is then cancelled in time, and no late result exists.
@pytest.mark.backends("io_uring")
async def test_a_late_result_whose_cancellation_was_taken_back_is_not_cancelled_again(pipe):
    if not hasattr(asyncio.Task, "uncancel"):
        pytest.skip("Task.uncancel is 3.11+")
    r, w = pipe
    task = asyncio.current_task()

    def data_then_cancel():
        os.write(w, b"late")  # completes the read in the kernel, not yet harvested
        task.cancel()  # what a timeout does when it expires

    asyncio.get_running_loop().call_soon(data_then_cancel)
    data = await aioring.read(r, 100)
    assert data == b"late"
    assert task.cancelling() == 1  # it was cancelled, and completed anyway
    task.uncancel()  # what a timeout block does when the task leaves it
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # a cancellation delivered again would land here
    assert task.cancelling() == 0


@pytest.mark.backends("io_uring")
async def test_a_late_result_is_returned_and_the_cancellation_still_arrives(pipe):
    r, w = pipe
    task = asyncio.current_task()

    def data_then_cancel():
        os.write(w, b"late")
        task.cancel()

    asyncio.get_running_loop().call_soon(data_then_cancel)
    data = await aioring.read(r, 100)
    assert data == b"late"
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(0.5)
    if hasattr(task, "uncancel"):
        task.uncancel()


async def test_room_freed_inside_a_submit_releases_waiting_operations(pipes):
    ring = _loops.get_ring(entries=2)  # a completion queue of 4
    (r1, w1), (r2, w2), (r3, w3) = pipes(3)
    reads = [asyncio.ensure_future(aioring.read(r, 10, 0)) for r in (r1, r2, r3)]  # at an offset: bounded
    first_write = asyncio.ensure_future(aioring.write(w1, b"a", 0))  # completes a read inside a submit
    second_write = asyncio.ensure_future(aioring.write(w2, b"b", 0))  # held back: the CQ is full
    await asyncio.sleep(0)
    assert ring.statistics()["waiting"] >= 1
    # No other completion will come: the freed room alone must let the second write go.
    done = await asyncio.wait_for(asyncio.gather(reads[0], first_write, second_write, reads[1]), 10)
    assert done == [b"a", 1, 1, b"b"]
    os.write(w3, b"c")
    assert await reads[2] == b"c"


# (3.12+ warns that fork() in a process with threads may deadlock: the
# threads backend's workers are such threads, and the child never uses them.)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_while_the_registry_lock_is_held(data_file):
    fd, content = data_file
    with _loops._lock:  # as if another thread were making a ring at the fork
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                import signal

                signal.alarm(20)  # a deadlocked child dies instead of hanging the suite
                status = 0 if asyncio.run(aioring.read(fd, 10, 0)) == content[:10] else 3
            finally:
                os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


async def test_a_closed_ring_refuses_new_operations():
    ring = _loops.get_ring()
    _loops.close_ring()
    assert ring.closed
    with pytest.raises(RuntimeError):
        ring.start(asyncio.get_running_loop(), _binding.prep_rw,
                   (_binding.opcodes()["NOP"], -1, _binding.NULL, 0, 0, 0), None, None)
    assert await aioring.read(os.open("/dev/zero", os.O_RDONLY | os.O_CLOEXEC), 3) == b"\0\0\0"


@pytest.mark.backends("io_uring")
async def test_ring_takes_the_first_setup_flags_the_kernel_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = _loops.get_ring()
    assert ring.setup_flags & _binding.SETUP_COOP_TASKRUN  # Linux 5.19+
    _loops.close_ring()
    monkeypatch.setattr(_ring, "_SETUP_FLAGS", [1 << 30, 0])  # a flag no kernel has: EINVAL, then 0
    ring = _loops.get_ring()
    assert ring.setup_flags == 0
    fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        assert await aioring.write(fd, b"x") == 1
    finally:
        os.close(fd)


@pytest.mark.backends("io_uring")
def test_the_binding_unmaps_a_ring_once_and_refuses_it_afterwards():
    """The binding's IoUring owns the ring's memory: exit() unmaps it and
    closes its fd once; afterwards nothing reaches the unmapped queues
    (no crash: an error, or nothing to withdraw)."""
    fds = set(os.listdir("/proc/self/fd"))
    mem = _binding.IoUring(4, [1 << 30, 0])  # a flag no kernel has: EINVAL, then 0
    assert mem.setup_flags == 0 and mem.sq_entries >= 4
    assert {_binding.OP_READ, _binding.OP_ASYNC_CANCEL} <= mem.probe()
    assert os.readlink(f"/proc/self/fd/{mem.fd}") == "anon_inode:[io_uring]"
    mem.exit()
    mem.exit()
    assert set(os.listdir("/proc/self/fd")) == fds
    for call in (lambda: mem.fd, mem.probe, lambda: mem.wait(0), lambda: mem.register_eventfd(0)):
        with pytest.raises(ValueError):
            call()
    assert not mem.withdraw(1)
    with pytest.raises(OSError) as err:
        _binding.IoUring(0)  # io_uring_setup refuses 0 entries
    assert err.value.errno == errno.EINVAL


async def test_reads_waiting_for_their_writes_never_hold_the_writes_back(pipes):
    """Reads at the fd's position wait for a peer, so they are exempt from
    backpressure: 64 pipe reads gathered with their writes on a ring whose CQ
    holds 4 (on the threads backend: more than its workers) all complete."""
    _loops.get_ring(entries=2)
    pairs = pipes(64)
    reads = [aioring.read(r, 100) for r, _ in pairs]
    writes = [aioring.write(w, b"pipe %d" % i) for i, (_, w) in enumerate(pairs)]
    got = await asyncio.wait_for(asyncio.gather(*reads, *writes), 30)
    assert got[:64] == [b"pipe %d" % i for i in range(64)]
    assert got[64:] == [len(b"pipe %d" % i) for i in range(64)]


# ------------------------------------------------- KeyboardInterrupt anywhere
# Python's default SIGINT handler raises KeyboardInterrupt at whatever line
# the main thread runs, inside the Python code the core's dispatch calls (an
# op's finish function, a target) too.  The interrupt must leave every other
# completion of the batch, and the one it landed in, to be delivered when
# the loop runs again.
@pytest.mark.parametrize("nth", [1, 2, 8])
def test_a_keyboard_interrupt_in_the_completion_loop_loses_no_completion(new_loop, nth):
    import sys

    from aioring import _ops

    code = _ops._finish_read.__code__
    hits = 0

    def local(frame, event, arg):
        nonlocal hits
        if event == "line":
            hits += 1
            if hits == nth:  # in the nth completion handled
                sys.settrace(None)
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code else None

    # (Receives: their finish function is called from the dispatch.)
    pairs = [socket.socketpair() for _ in range(8)]
    for a, _ in pairs:
        a.setblocking(False)
    loop = new_loop()
    try:
        async def start():
            reads = asyncio.gather(*(aioring.sock_recv(a, 5) for a, _ in pairs))
            await asyncio.sleep(0)  # the receives are in flight
            return reads

        reads = loop.run_until_complete(start())
        for i, (_, b) in enumerate(pairs):
            b.send(b"%05d" % i)
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(reads)
        finally:
            sys.settrace(None)
        assert hits == nth
        got = loop.run_until_complete(asyncio.wait_for(reads, 10))  # (a hang detector)
        assert got == [b"%05d" % i for i in range(8)]
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()


_SETUP_LINES = {
    "Ring.__init__": ("self._init_table(loop, self.cq_entries, mem)",
                      "add_reader(efd, self._on_wakeup)"),
    "get_ring": ("_rings[loop] = weakref.ref(ring)", "_wrap_loop_close(loop)"),
}


@pytest.mark.backends("io_uring")
@pytest.mark.parametrize("func, index", [(f, i) for f in _SETUP_LINES for i in range(2)])
def test_a_keyboard_interrupt_while_a_ring_is_made_leaves_no_fd(new_loop, func, index):
    import inspect
    import sys

    target_func = _ring.Ring.__init__ if func == "Ring.__init__" else _loops.get_ring
    source, first = inspect.getsourcelines(target_func)
    target = first + next(i for i, line in enumerate(source) if _SETUP_LINES[func][index] in line)
    code = target_func.__code__

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == target:
            sys.settrace(None)
            raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code else None

    loop = new_loop()
    fds = set(os.listdir("/proc/self/fd"))
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            _loops.get_ring(loop)
    finally:
        sys.settrace(None)
    assert set(os.listdir("/proc/self/fd")) == fds
    ring = _loops.get_ring(loop)  # a second try makes the ring
    assert not ring.closed
    loop.close()
    assert set(os.listdir("/proc/self/fd")) <= fds  # (the loop's own fds went too)


def test_an_op_pins_what_os_write_takes_and_refuses_what_it_refuses(pipe):
    """The core's pin (Op.pin) takes a buffer as os.write takes one: the same
    error for what os.write refuses, and a pinned bytearray is not resized
    until the op lets go of it."""
    op = _ring.Op(None, None, (), None, None, 0)
    for bad in ("text", object(), memoryview(bytearray(8))[::2]):
        with pytest.raises((TypeError, BufferError)) as stdlib:
            os.write(pipe[1], bad)
        with pytest.raises(type(stdlib.value)):
            op.pin(bad)
    with pytest.raises(BufferError):
        op.pin(b"read-only", True)
    ba = bytearray(8)
    assert op.pin(ba, True) == 8
    with pytest.raises(BufferError):
        ba.append(0)
    op.unpin()
    ba.append(0)


async def _cancelled_before_the_flush(ring, start):
    """Run the coroutine start() in a task that is cancelled after its first
    step (which queues its op for the flush of `ring`), before that flush;
    CancelledError is asserted.  Returns ring.statistics() before and after."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)  # (a flush scheduled before this ran)
    assert ring._core.flush_handle is None
    task = asyncio.ensure_future(start())
    loop.call_soon(task.cancel)  # after the task's first step
    ring._schedule_flush(loop)  # and the flush after both
    before = ring.statistics()
    with pytest.raises(asyncio.CancelledError):
        await task
    return before, ring.statistics()


@pytest.mark.backends("io_uring")
async def test_a_write_cancelled_before_the_flush_never_reaches_the_file(tmp_path):
    """A write queued for the iteration's flush, whose task is cancelled
    before the flush: the flush withdraws its SQE, so the file is left as if
    os.pwrite had never been called, and the task sees CancelledError."""
    ring = _loops.get_ring()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        before, after = await _cancelled_before_the_flush(ring, lambda: aioring.write(fd, b"never", 0))
        assert after["withdrawn"] == before["withdrawn"] + 1
        assert after["cancels"] == before["cancels"]  # never in the kernel: nothing to cancel
        assert os.fstat(fd).st_size == 0
        assert after["in_flight"] == 0
    finally:
        os.close(fd)


@pytest.mark.backends("io_uring")
async def test_a_read_cancelled_before_the_flush_is_taken_back_from_a_polling_ring(data_file):
    """The same on a polling ring (aioring.set_sqpoll), whose kernel thread
    reads the SQ at any time: the flush turns the SQE into a NOP before it
    publishes the SQ's tail, so the read never happens and no cancellation
    goes to the kernel.  (A read of uncached pages is published as soon as
    it is queued, test_sqpoll.py: this op is queued without that.)"""
    fd, content = data_file
    loop = asyncio.get_running_loop()
    polling = _ring.Ring(loop, 8, sq_thread_idle=10)
    buf = bytearray(4096)
    queued = []

    async def read():
        op = polling.start(loop, None, (_binding.OP_READ, fd, 0, 4096, 8192, 0), buf, None, 0)
        queued.append(polling._core.sq_pending)
        return await _ops.result(polling, op)

    try:
        before, after = await _cancelled_before_the_flush(polling, read)
        assert after["withdrawn"] == before["withdrawn"] + 1
        assert after["cancels"] == before["cancels"]
        assert queued == [1] and polling._core.sq_pending == 0
        assert buf == bytes(4096)
        op = polling.start(loop, None, (_binding.OP_READ, fd, 0, 4096, 8192, 0), buf, None, 0)
        assert await _ops.result(polling, op) == 4096 and buf == content[8192:12288]
        assert polling.statistics()["in_flight"] == 0  # (the NOP's completion came before the read's)
    finally:
        polling.close()


async def test_only_the_eager_runs_own_task_leaves_its_reads_to_policy(data_file):
    """While one task's eager run goes on (its first operation of the
    iteration went to the kernel at once: core.eager_task, eager_left), the
    core still starts another task's reads itself, queued for the flush as
    policy's start queues them; the eager task's own it leaves to policy,
    which submits them at once.  The read returns what os.pread returns."""
    if aioring.backend() != "io_uring":
        pytest.skip("the core's launch is the io_uring ring's")
    fd, content = data_file
    loop = asyncio.get_running_loop()
    core = _loops.get_ring(loop)._core
    other = loop.create_task(asyncio.sleep(0))
    buf = bytearray(4096)
    core.schedule_flush(loop)
    try:
        core.eager_task, core.eager_left = other, 3
        op = core.launch(loop, None, (_binding.OP_READ, fd, 0, 4096, 8192, 0), buf, None, 0, True)
        assert op is not None and op.future is not None  # (queued by the core)
        core.eager_task = asyncio.current_task()
        assert core.launch(loop, None, (_binding.OP_READ, fd, 0, 4096, 0, 0), bytearray(4096), None, 0,
                           True) is None
        assert core.eager_left == 3  # (policy's to count down)
    finally:
        core.eager_left = 0
    assert await op.future == 4096 and buf == content[8192:12288] == os.pread(fd, 4096, 8192)
    await other


async def test_an_op_its_target_continued_is_never_withdrawn():
    """An op whose target started it again for a later step (op.continued:
    a NewFile's write after its create) holds what the earlier step made:
    withdraw() never takes it back, waiting or not, while it takes back an
    op that is not continued."""
    ring = _loops.get_ring(asyncio.get_running_loop())
    for continued in (False, True):
        op = _ring.Op(None, None, (_binding.OP_WRITE, -1, 0, 0, 0, 0), None, None, 0)
        op.continued = continued
        assert op.state == 0  # (waiting)
        assert ring.withdraw(op) is not continued
        assert op.state == (0 if continued else 2)


async def test_an_error_in_the_flush_reaches_the_loops_handler_and_the_rest_still_run(loop_errors):
    """A callback deferred to the iteration's flush (ring.defer: a stream's
    sends of the iteration) that raises: the loop's exception handler gets
    the error, as for any callback of the loop, and the callbacks deferred
    after it run at the next flush, before those deferred since."""
    loop = asyncio.get_running_loop()
    ring = _loops.get_ring(loop)
    ran: list[str] = []

    def bad() -> None:
        ran.append("bad")
        raise ValueError("boom")

    ring.defer(bad)
    ring.defer(lambda: ran.append("after"))
    await _until(lambda: loop_errors)
    assert ran == ["bad"]
    [context] = loop_errors
    loop_errors.clear()
    assert isinstance(context["exception"], ValueError)
    assert context["message"].startswith("Exception in callback")
    ring.defer(lambda: ran.append("later"))
    await _until(lambda: len(ran) == 3)
    assert ran == ["bad", "after", "later"]


@pytest.mark.backends("io_uring")  # (the threads backend's requests leave at once: no flush)
@pytest.mark.parametrize("debug", [False, True])
def test_a_loop_that_changes_call_soon_gets_the_flush_through_it(debug, tmp_path):
    """A loop class of asyncio's whose call_soon is its own, or a loop whose
    call_soon is replaced on the loop itself (as instrumentation does), sees
    the flush scheduled through it (in debug mode too), and operations
    complete."""
    scheduled: list[object] = []

    class Watched(asyncio.SelectorEventLoop):
        def call_soon(self, callback, *args, context=None):  # type: ignore[no-untyped-def]
            scheduled.append(callback)
            return super().call_soon(callback, *args, context=context)

    def replaced() -> asyncio.AbstractEventLoop:
        loop = asyncio.SelectorEventLoop()
        plain = loop.call_soon
        loop.call_soon = lambda callback, *args, context=None: (  # type: ignore[method-assign]
            scheduled.append(callback) or plain(callback, *args, context=context))
        return loop

    async def main() -> bytes:
        fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await asyncio.gather(*(aioring.write(fd, bytes([65 + i]) * 4, 4 * i) for i in range(3)))
            return await aioring.read(fd, 12, 0)
        finally:
            os.close(fd)

    for make in (Watched, replaced):
        scheduled.clear()
        loop = make()
        loop.set_debug(debug)
        try:
            assert loop.run_until_complete(main()) == b"AAAABBBBCCCC"
            core = _loops.get_ring(loop)._core
        finally:
            loop.close()
        assert [cb for cb in scheduled if getattr(cb, "__self__", None) is core], make


@pytest.mark.parametrize("debug", [False, True])
async def test_an_operations_done_callbacks_run_as_call_soon_runs_them(pipe, loop_errors, debug):
    """The done callbacks of an operation's future, which the core puts in
    asyncio's ready queue itself when it may (not in debug mode): each runs
    once, after the result is set, in the order they were added and in its
    own context; one that raises reaches the loop's exception handler, and
    the others still run."""
    loop = asyncio.get_running_loop()
    was = loop.get_debug()
    loop.set_debug(debug)
    try:
        ring = _loops.get_ring(loop)
        var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
        seen: list[tuple[str, str, int]] = []

        def note(tag: str):  # type: ignore[no-untyped-def]
            def callback(fut: asyncio.Future[int]) -> None:
                seen.append((tag, var.get(), fut.result()))
            return callback

        def bad(fut: asyncio.Future[int]) -> None:
            seen.append(("bad", var.get(), fut.result()))
            raise ValueError("boom")

        buf = bytearray(3)
        op = ring.start(loop, None, (_binding.OP_READ, pipe[0], 0, 3, -1, 0), buf, None, writable=True)
        assert op.future is not None and not op.future.done()  # (the pipe is empty)
        for tag in ("a", "b"):
            context = contextvars.copy_context()
            context.run(var.set, tag)
            op.future.add_done_callback(note(tag), context=context)
        op.future.add_done_callback(bad)
        op.future.add_done_callback(note("c"))
        os.write(pipe[1], b"xyz")
        assert await op.future == 3
        await asyncio.sleep(0)
        assert seen == [("a", "a", 3), ("b", "b", 3), ("bad", "outside", 3), ("c", "outside", 3)]
        assert buf == b"xyz"
        [context] = loop_errors
        loop_errors.clear()
        assert isinstance(context["exception"], ValueError)
        assert context["message"].startswith("Exception in callback")
        # (both backends' completions go through the core; uvloop gets call_soon)
        direct = not debug and not isinstance(loop, uvloop.Loop)
        assert (type(context["handle"]).__name__ == "ReadyCall") is direct
    finally:
        loop.set_debug(was)
