"""Soak: many mixed operations (files, paths, pipes, sockets, streams,
cancellations) must leave memory and fds where they were.

`make soak` runs the long version (a million operations, marked slow); the
short one runs with every `make test`.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import socket

import pytest

import aioring
import aioring.os


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _mixed(n: int, disk_dir: str, seed: int) -> int:
    """About n operations of every kind; returns how many were made."""
    rng = random.Random(seed)
    path = os.path.join(disk_dir, "soak")
    block = rng.randbytes(4096)
    with open(path, "wb") as f:
        f.write(block * 16)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    reader, writer = await aioring.open_connection(sock=a)
    buf = bytearray(4096)
    done = 0
    try:
        while done < n:
            kind = rng.randrange(8)
            if kind == 0:  # 16 concurrent cached reads
                offsets = [rng.randrange(16) * 4096 for _ in range(16)]
                got = await asyncio.gather(*(aioring.read(fd, 4096, off) for off in offsets))
                assert all(g == block for g in got)
                done += 16
            elif kind == 1:
                assert await aioring.readinto(fd, buf, 4096) == 4096
                done += 1
            elif kind == 2:  # a file object: open, write, read back, close
                async with aioring.open(os.path.join(disk_dir, "small"), "wb") as f:
                    await f.write(block[:512])
                async with aioring.open(os.path.join(disk_dir, "small"), "rb") as f:
                    assert await f.read() == block[:512]
                done += 6
            elif kind == 3:
                assert (await aioring.os.stat(path)).st_size == 16 * 4096
                done += 1
            elif kind == 4:  # pipe round trip
                await aioring.write(w, block[:100])
                assert await aioring.read(r, 100) == block[:100]
                done += 2
            elif kind == 5:  # stream echo through a plain socket
                writer.write(block[:1000])
                await writer.drain()
                assert await aioring.sock_recv(b, 4096) == block[:1000]
                await aioring.sock_sendall(b, block[:1000])
                assert await reader.readexactly(1000) == block[:1000]
                done += 4
            elif kind == 6:  # a read cancelled while it waits: nothing lost
                task = asyncio.ensure_future(reader.readexactly(10))
                await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await aioring.sock_sendall(b, b"0123456789")
                assert await reader.readexactly(10) == b"0123456789"
                done += 3
            else:  # a connection made and closed
                _r2, w2 = await aioring.open_unix_connection(sock=socket.socketpair()[0])
                w2.close()
                await w2.wait_closed()
                done += 2
    finally:
        writer.close()
        await writer.wait_closed()
        b.close()
        os.close(fd)
        os.close(r)
        os.close(w)
    return done


# Under AddressSanitizer (make asan) freed memory waits in its quarantine, so
# RSS says nothing about leaks there: the live Python objects are counted instead.
_SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")


async def _soak(n: int, disk_dir: str) -> None:
    await _mixed(2000, disk_dir, 1)  # warm-up: caches, pools, the ring
    gc.collect()
    rss0, fds0, objects0 = _rss(), _fds(), len(gc.get_objects())
    made = await _mixed(n, disk_dir, 2)
    gc.collect()
    grown = _rss() - rss0
    objects = len(gc.get_objects()) - objects0
    print(f"\nsoak: {made} operations, RSS {rss0 / 2**20:.1f} MiB -> {(rss0 + grown) / 2**20:.1f} MiB "
          f"({grown / 2**20:+.2f}), fds {fds0} -> {_fds()}, live objects {objects:+d}")
    assert made >= n
    assert _fds() == fds0, "fds leaked"
    if _SANITIZED:
        assert objects < 2000, f"{objects} more live objects after {made} operations"
    else:
        assert grown < 5 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over {made} operations"


async def test_soak_short(disk_dir):
    await _soak(20_000, disk_dir)


@pytest.mark.slow
async def test_soak_a_million_operations(disk_dir):
    await _soak(1_000_000, disk_dir)
