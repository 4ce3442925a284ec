"""The backend choice: io_uring where the kernel allows it, the thread-pool
fallback where it refuses (seccomp, io_uring_disabled, old kernels) or where
AIORING_BACKEND says so, and single opcodes made as system calls when the
kernel lacks them."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import aioring
import aioring.os
from aioring import _binding, _loops, _pathops, _ring
from aioring._binding import opcode_of

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# A child process in which io_uring_setup fails with `errno` (seccomp
# filter, as Docker's default profile does with EPERM), then `body` runs.
SECCOMP_CHILD = textwrap.dedent("""
    import ctypes, errno, os, platform, struct, sys

    def refuse_io_uring(code):
        arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]
        allow, fail = 0x7FFF0000, 0x00050000 | code
        prog = [  # struct sock_filter: code, jt, jf, k
            (0x20, 0, 0, 4),      # A = seccomp_data.arch
            (0x15, 1, 0, arch),   # native arch: go on
            (0x06, 0, 0, allow),
            (0x20, 0, 0, 0),      # A = seccomp_data.nr
            (0x15, 0, 1, 425),    # io_uring_setup: fail
            (0x06, 0, 0, fail),
            (0x06, 0, 0, allow),
        ]
        filt = b"".join(struct.pack("HBBI", *ins) for ins in prog)
        buf = ctypes.create_string_buffer(filt)

        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        fprog = Prog(len(prog), ctypes.addressof(buf))
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")

    refuse_io_uring(getattr(errno, sys.argv[1]))
""")


def _child(code: str, body: str, env: dict[str, str] | None = None, timeout: float = 300):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AIORING_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", SECCOMP_CHILD + textwrap.dedent(body), code],
                          capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=timeout)


@pytest.mark.backends("io_uring")
@pytest.mark.parametrize("code", ["EPERM", "ENOSYS"])
def test_the_suites_core_passes_where_seccomp_refuses_io_uring(code):
    """Every public API works through the fallback where io_uring_setup fails,
    a single RuntimeWarning says so and why, and backend() says "threads"."""
    body = """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import aioring
            assert aioring.backend() == "threads", aioring.backend()
            assert aioring.backend() == "threads"
        warned = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(warned) == 1, [str(w.message) for w in caught]
        assert sys.argv[1] in str(warned[0].message), str(warned[0].message)
        import pytest
        sys.exit(pytest.main(["-q", "-x", "-p", "no:cacheprovider", "-W", "error::RuntimeWarning",
                              "tests/test_files.py", "tests/test_ops.py", "tests/test_os.py",
                              "tests/test_pathops.py", "tests/test_pipes.py", "tests/test_sockets.py",
                              "tests/test_streams.py::test_echo_checked_byte_for_byte",
                              "tests/test_streams.py::test_half_close_then_the_peer_answers",
                              "tests/test_streams.py::test_cancelled_reads_reassemble_the_stream_exactly"]))
    """
    done = _child(code, body, {"AIORING_TEST_BACKEND": "auto"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout


@pytest.mark.backends("io_uring")
def test_aioring_backend_io_uring_makes_a_refused_io_uring_an_error():
    done = _child("EPERM", """
        import asyncio, aioring
        try:
            aioring.backend()
        except PermissionError as exc:
            print("raised", exc.errno)
        try:
            asyncio.run(aioring.read(0, 1))
        except PermissionError:
            print("read raised")
    """, {"AIORING_BACKEND": "io_uring"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"raised {errno.EPERM}", "read raised"]


@pytest.mark.backends("io_uring")
def test_aioring_backend_threads_forces_the_fallback_without_a_warning():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIORING_")}
    env["AIORING_BACKEND"] = "threads"
    done = subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent("""
        import asyncio, os, aioring
        async def main():
            r, w = os.pipe()
            await aioring.write(w, b"x")
            return await aioring.read(r, 1)
        assert asyncio.run(main()) == b"x"
        print(aioring.backend())
    """)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "threads\n"


@pytest.mark.backends("io_uring")
def test_a_bad_aioring_backend_value_is_a_value_error():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIORING_")}
    env["AIORING_BACKEND"] = "epoll"
    done = subprocess.run([sys.executable, "-c", "import aioring; aioring.backend()"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert "ValueError: AIORING_BACKEND must be 'io_uring' or 'threads', not 'epoll'" in done.stderr


@pytest.mark.backends("io_uring")
async def test_opcodes_the_kernel_lacks_fall_back_one_by_one(disk_dir, socks, monkeypatch):
    """A ring whose kernel lacks opcodes makes just those requests as system
    calls (in workers); the rest still go through the kernel."""
    ring = _loops.get_ring()
    lacking = {_binding.OP_OPENAT, _binding.OP_STATX, _binding.OP_RECV, _binding.OP_SEND, _binding.OP_WRITE}
    ring._set_lacking(frozenset(lacking))
    assert lacking <= _binding.SYNC_OPCODES
    emulated = []
    real_run = _ring.run_in_worker
    monkeypatch.setattr(_ring, "run_in_worker", lambda op, done: emulated.append(opcode_of(op.prep, op.args))
                        or real_run(op, done))
    path = os.path.join(disk_dir, "f")
    async with aioring.open(path, "wb") as f:  # OPENAT and WRITE emulated
        await f.write(b"hello world")
    async with aioring.open(path, "rb") as f:  # READ on the ring
        assert await f.read() == b"hello world"
    assert (await aioring.os.stat(path)).st_size == 11
    # Started while the loop's flush is due (as when other requests went first):
    loop = asyncio.get_running_loop()
    names = [os.path.join(disk_dir, f"g{i}") for i in range(4)]
    opens = asyncio.gather(*(_pathops.open(name, os.O_RDWR | os.O_CREAT, 0o600) for name in names))
    ring._schedule_flush(loop)  # (after the tasks' first steps)
    fds = await opens
    try:
        writes = asyncio.gather(*(aioring.write(fd, b"abc", 1) for fd in fds))
        ring._schedule_flush(loop)
        assert await writes == [3] * 4
        assert [os.pread(fd, 5, 0) for fd in fds] == [b"\0abc"] * 4
    finally:
        for fd in fds:
            os.close(fd)
    assert emulated.count(_binding.OP_OPENAT) == emulated.count(_binding.OP_WRITE) == 5
    a, b = socket.socketpair()
    socks(a, b)
    a.setblocking(False)
    b.setblocking(False)
    reader, writer = await aioring.open_connection(sock=a)
    await aioring.sock_sendall(b, b"ping")  # SEND emulated
    assert await reader.readexactly(4) == b"ping"  # RECV emulated
    writer.write(b"pong")
    await writer.drain()
    assert await aioring.sock_recv(b, 4) == b"pong"
    # A receive in a worker that waits for a peer is cancelled by a signal.
    task = asyncio.ensure_future(aioring.sock_recv(b, 10))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    writer.write(b"after")
    await writer.drain()
    assert await aioring.sock_recv(b, 10) == b"after"  # nothing was taken by the cancelled receive
    writer.close()
    await writer.wait_closed()
    assert ring.statistics()["in_flight"] == 0
    # (The stat and the send were done at once: no request for the ring.)
    assert {_binding.OP_OPENAT, _binding.OP_WRITE, _binding.OP_RECV} <= set(emulated) <= lacking
    assert aioring.backend() == "io_uring"


@pytest.mark.backends("threads")
async def test_a_blocked_worker_read_is_cancelled_and_loses_nothing(pipe):
    """A read of a blocking pipe blocks a worker; cancelling it interrupts the
    worker (as the kernel interrupts io_uring's), the buffer is the caller's
    again at once, and the next read gets the data."""
    r, w = pipe
    buf = bytearray(8)
    task = asyncio.ensure_future(aioring.readinto(r, buf))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    buf.extend(b"x")  # resizable: nobody holds it
    del buf[8:]
    os.write(w, b"12345678")
    assert await aioring.read(r, 8) == b"12345678"
    assert buf == bytearray(8)


@pytest.mark.backends("threads")
def test_closing_the_loop_interrupts_a_blocked_worker_call_and_waits_for_it(new_loop, pipe, loop_errors):
    """As Ring.close waits until the kernel let go of every buffer, closing a
    threads ring interrupts each call its workers make and waits until it
    returned: after loop.close() no worker touches the caller's buffer, which
    is released (resizable), and the interrupted read took nothing."""
    from aioring._workers import workers

    r, w = pipe
    buf = bytearray(8)
    loop = new_loop()

    async def start() -> asyncio.Future[int]:
        task = asyncio.ensure_future(aioring.readinto(r, buf, 0))  # at an offset: a worker's pread
        while not workers()._running:  # until a worker is inside the call
            await asyncio.sleep(0)
        return task

    task = loop.run_until_complete(start())
    loop.close()
    assert not workers()._running
    buf.extend(b"x")  # resizable: nothing holds it any more
    del buf[8:]
    os.write(w, b"12345678")
    assert os.read(r, 8) == b"12345678"
    assert buf == bytearray(8)
    del task
    gc.collect()
    assert [ctx["message"] for ctx in loop_errors] == ["Task was destroyed but it is pending!"]
    loop_errors.clear()
