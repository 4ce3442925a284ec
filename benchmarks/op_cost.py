#!/usr/bin/env python3
"""Instructions per operation: what aioring's own code costs, counted by callgrind.

Timings are disturbed by whatever else runs on the machine; instruction
counts are not.  Each workload runs in one process on one event loop:

* echo        1 KiB frames echoed over one loopback TCP connection, server
              and client both aioring streams in the same loop (one op = one
              round trip: a frame written, read, echoed and read back)
* tls_echo    the same over TLS (ssl= on both ends; a certificate made by
              trustme)
* echo64k     the same with 64 KiB frames: the payloads are received
              straight into the caller's buffer (readinto_exactly's large path)
* echo_into   echo_rps's aioring-readinto server: 512-byte requests read
              with ``readinto`` into a 64 KiB buffer and echoed, against a
              client writing each and reading it back with readinto_exactly
* echo_read   echo_rps's aioring-read server: 512-byte requests read with
              ``read(65536)`` and echoed, against echo_into's client
* small_files ``async with aioring.open(p, "rb") as f: await f.read()`` of a
              1 KiB file (one op = open, read, close)
* pread4k     ``aioring.read(fd, 4096, offset)`` from a file in the page cache
              (one op = one read)
* preadinto4k ``aioring.readinto(fd, buf, offset)`` the same, into one 4 KiB
              bytearray
* cold4k      ``aioring.read(fd, 4096, offset)`` by 64 tasks at random offsets
              of a 256 MiB file whose pages are dropped first (one op = one
              read from the disk; see cold_reads.py).  Under callgrind the
              disk answers sooner for the program's slower pace, so more
              completions share a wakeup than in a timed run
* direct4k    ``aioring.readinto(fd, buf, offset)`` the same, the file opened
              with O_DIRECT, each task reading into an aligned_buffer of its
              own
* open4k      ``await f.seek(offset); await f.read(4096)`` the same, each task
              on a file of its own opened with ``aioring.open(path, "rb",
              buffering=0)`` (the aiofiles API)

``--callgrind`` runs each workload twice under ``valgrind --tool=callgrind``,
with --ops and with 2 x --ops operations, and prints the difference of the two
instruction totals divided by --ops: the instructions of one operation in the
steady state, start-up and warm-up cancelling out.  ``--annotate`` adds the C
functions where the larger run spent its instructions (inclusive, top 25).
Without ``--callgrind`` it runs a workload once and prints operations per
second (a quick check that the script works).

Under valgrind (3.19 here) the openat2 system call is unknown (ENOSYS), so
small_files' opens there go through the ring's OPENAT, as on a kernel
without openat2; run natively, an open that needs nothing but the kernel's
caches is done at once (openat2 with RESOLVE_CACHED) and costs fewer
instructions than counted here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
WORKLOADS = ("echo", "tls_echo", "echo64k", "echo_into", "echo_read", "small_files", "pread4k", "preadinto4k",
             "cold4k", "direct4k", "open4k")
FRAME = 1024
HDR = struct.Struct(">Q")


async def echo(ops: int, tls: tuple[Any, Any] = (None, None), frame: int = FRAME) -> None:
    import aioring

    async def handle(reader: aioring.StreamReader, writer: aioring.StreamWriter) -> None:
        buf = bytearray(8 + frame)
        view = memoryview(buf)
        try:
            while True:
                try:
                    await reader.readinto_exactly(view[:8])
                except asyncio.IncompleteReadError:
                    return
                n = HDR.unpack_from(buf)[0]
                await reader.readinto_exactly(view[8:8 + n])
                writer.write(view[:8 + n])
                await writer.drain()
        finally:
            writer.close()

    server_ssl, client_ssl = tls
    server = await aioring.start_server(handle, "127.0.0.1", 0, ssl=server_ssl)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await aioring.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                   server_hostname="127.0.0.1" if client_ssl else None)
    hdr, payload = HDR.pack(frame), os.urandom(frame)
    rhdr, rbuf = bytearray(8), bytearray(frame)
    for _ in range(ops):
        writer.write(hdr)
        writer.write(payload)
        await writer.drain()
        await reader.readinto_exactly(rhdr)
        await reader.readinto_exactly(rbuf)
    if rbuf != payload:
        raise AssertionError("echo mismatch")
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def echo64k(ops: int) -> None:
    await echo(ops, frame=64 * 1024)


async def _requests(handle: Callable[[Any, Any], Awaitable[None]], ops: int) -> None:
    """`ops` 512-byte requests to a server whose connections `handle` serves,
    each written, then read back with readinto_exactly (one connection)."""
    import aioring

    server = await aioring.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await aioring.open_connection("127.0.0.1", port)
    request, rbuf = os.urandom(512), bytearray(512)
    for _ in range(ops):
        writer.write(request)
        await writer.drain()
        await reader.readinto_exactly(rbuf)
    if rbuf != request:
        raise AssertionError("echo mismatch")
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


async def echo_into(ops: int) -> None:
    async def handle(reader: Any, writer: Any) -> None:
        buf = bytearray(64 * 1024)
        view = memoryview(buf)
        try:
            while n := await reader.readinto(buf):
                writer.write(view[:n])
                await writer.drain()
        finally:
            writer.close()

    await _requests(handle, ops)


async def echo_read(ops: int) -> None:
    async def handle(reader: Any, writer: Any) -> None:
        try:
            while data := await reader.read(64 * 1024):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    await _requests(handle, ops)


def _data_file(name: str, size: int) -> str:
    DATA.mkdir(exist_ok=True)
    path = DATA / name
    if not path.exists() or path.stat().st_size != size:
        path.write_bytes(os.urandom(size))
    with open(path, "rb") as f:
        f.read()  # in the page cache
    return str(path)


async def small_files(ops: int) -> None:
    import aioring

    path = _data_file("op_cost_1k", 1024)
    for _ in range(ops):
        async with aioring.open(path, "rb") as f:
            data = await f.read()
        if len(data) != 1024:
            raise AssertionError("short read")


async def pread4k(ops: int) -> None:
    import aioring

    path = _data_file("op_cost_1m", 1 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(ops):
            data = await aioring.read(fd, 4096, (i & 255) * 4096)
            if len(data) != 4096:
                raise AssertionError("short read")
    finally:
        os.close(fd)


async def preadinto4k(ops: int) -> None:
    import aioring

    path = _data_file("op_cost_1m", 1 << 20)
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(4096)
    try:
        for i in range(ops):
            if await aioring.readinto(fd, buf, (i & 255) * 4096) != 4096:
                raise AssertionError("short read")
    finally:
        os.close(fd)


COLD_SIZE = 256 << 20
COLD_TASKS = 64


def _cold_file(flags: int = 0) -> int:
    """The cold workloads' 256 MiB file, opened with `flags`, its pages dropped."""
    path = DATA / "op_cost_cold"
    if not path.exists() or path.stat().st_size != COLD_SIZE:
        DATA.mkdir(exist_ok=True)
        with open(path, "wb") as f:
            for _ in range(COLD_SIZE >> 20):
                f.write(os.urandom(1 << 20))
            os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY | flags)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return fd


async def _cold_tasks(ops: int, fd: int, read_one: Callable[[int, int], Awaitable[int]]) -> None:
    """64 tasks calling read_one(task, offset) at random 4 KiB offsets of fd, ops in all."""
    import random

    blocks = COLD_SIZE // 4096

    async def one(task: int, n: int) -> None:
        rng = random.Random(ops * COLD_TASKS + task)
        for _ in range(n):
            if await read_one(task, rng.randrange(blocks) * 4096) != 4096:
                raise AssertionError("short read")
    try:
        await asyncio.gather(*(one(i, ops // COLD_TASKS) for i in range(COLD_TASKS)))
    finally:
        os.close(fd)


async def cold4k(ops: int) -> None:
    import aioring

    fd = _cold_file()

    async def read_one(_: int, offset: int) -> int:
        return len(await aioring.read(fd, 4096, offset))
    await _cold_tasks(ops, fd, read_one)


async def direct4k(ops: int) -> None:
    import aioring

    fd = _cold_file(os.O_DIRECT)
    bufs = [aioring.aligned_buffer(4096) for _ in range(COLD_TASKS)]

    async def read_one(task: int, offset: int) -> int:
        return await aioring.readinto(fd, bufs[task], offset)
    try:
        await _cold_tasks(ops, fd, read_one)
    finally:
        for buf in bufs:
            buf.close()


async def open4k(ops: int) -> None:
    import aioring

    fd = _cold_file()
    files = [await aioring.open(DATA / "op_cost_cold", "rb", buffering=0) for _ in range(COLD_TASKS)]

    async def read_one(task: int, offset: int) -> int:
        f = files[task]
        await f.seek(offset)
        return len(await f.read(4096))
    try:
        await _cold_tasks(ops, fd, read_one)
    finally:
        for f in files:
            await f.close()


async def tls_echo(ops: int) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ssl)
    client_ssl = ssl.create_default_context()
    ca.configure_trust(client_ssl)
    await echo(ops, (server_ssl, client_ssl))


RUNS: dict[str, Callable[[int], Awaitable[None]]] = {"echo": echo, "tls_echo": tls_echo, "echo64k": echo64k,
                                                        "echo_into": echo_into, "echo_read": echo_read,
                                                        "small_files": small_files,
                                                        "pread4k": pread4k, "preadinto4k": preadinto4k,
                                                        "cold4k": cold4k, "direct4k": direct4k,
                                                        "open4k": open4k}


def run_once(workload: str, ops: int, loop: str) -> float:
    # A warm-up of the same length as the callgrind step's unit, so that
    # caches, free lists and the ring are in their steady state.
    run = RUNS[workload]

    async def main() -> float:
        await run(min(ops, 200))
        start = time.perf_counter()
        await run(ops)
        return time.perf_counter() - start

    if loop == "uvloop":
        import uvloop
        return uvloop.run(main())
    return asyncio.run(main())


def callgrind(workload: str, ops: int, loop: str, annotate: bool) -> tuple[float, str]:
    totals = []
    out = ""
    with tempfile.TemporaryDirectory() as tmp:
        for n in (ops, 2 * ops):
            outfile = os.path.join(tmp, f"cg.{n}")
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outfile}",
                   sys.executable, __file__, workload, "--ops", str(n), "--loop", loop]
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONHASHSEED="0"))
            if proc.returncode != 0:
                raise SystemExit(f"{workload}: callgrind run failed:\n{proc.stderr[-2000:]}")
            m = re.search(r"Collected : (\d+)", proc.stderr)
            if m is None:
                raise SystemExit(f"{workload}: no instruction total in callgrind's output")
            totals.append(int(m.group(1)))
        if annotate:
            ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", outfile],
                                 check=False, capture_output=True, text=True)
            out = "\n".join(ann.stdout.splitlines()[:60])
    return (totals[1] - totals[0]) / ops, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="workload",
                        help=f"{', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--ops", type=int, default=1000, help="operations per run (default 1000)")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--callgrind", action="store_true", help="instructions per op under callgrind")
    parser.add_argument("--annotate", action="store_true", help="with --callgrind: where they went")
    args = parser.parse_args(argv)
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"no workload {name!r} (choose from {', '.join(WORKLOADS)})")
    for workload in args.workloads or WORKLOADS:
        if args.callgrind:
            per_op, text = callgrind(workload, args.ops, args.loop, args.annotate)
            print(f"{workload:12} {args.loop:8} {per_op:10.0f} instructions/op", flush=True)
            if text:
                print(text)
        else:
            elapsed = run_once(workload, args.ops, args.loop)
            print(f"{workload:12} {args.loop:8} {args.ops / elapsed:10.0f} ops/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
