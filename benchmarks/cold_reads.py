#!/usr/bin/env python3
"""Data that is not in the page cache: reads from the device, and writes that must reach it.

Every other file benchmark reads page-cached data.  Here the pages of each
file are dropped (``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed)
before every run, so the reads go to the disk.  The files live in
benchmarks/.data (the real disk, never tmpfs).

Workloads, each against aiofile (caio), aiofiles, a thread pool and a
synchronous loop, with fio's figure for the same pattern as the limit of the
device when fio is installed:

* random 4 KiB reads at 1, 16 and 64 tasks, over a 1 GiB file, for a fixed
  time per run (reads/s):
    aioring.read     ``await aioring.read(fd, 4096, off)``
    aioring.read.tryeach  the same, with the page-cache try before every read
                     (CACHE_BACKOFF_MAX = 0), as before the fd learnt to skip it
    aioring.read.handoff  the same, the reads of uncached pages handed to the kernel's
                     workers while others are in flight (COLD_HANDOFF = True)
    aioring.open     ``await f.seek(off); await f.read(4096)``, one
                     ``aioring.open(path, "rb", buffering=0)`` per task (the aiofiles API)
    aioring.direct   ``await aioring.readinto(fd, buf, off)``, the fd opened with
                     O_DIRECT, ``buf = aioring.aligned_buffer(4096)`` per task
    aioring.direct.handoff  the same, the reads handed to the kernel's workers
                     while others are in flight (DIRECT_HANDOFF = True)
    aioring.read.sqpoll, aioring.open.sqpoll, aioring.direct.sqpoll
                     the same three with ``aioring.set_sqpoll(0.05)``: the reads that
                     wait for the device on the loop's polling ring, whose kernel
                     thread submits them and runs their completions' work
    aiofile          ``await afp.read(4096, off)`` on one ``aiofile.AIOFile``
    aiofile.nosqpoll  the same on a caio io_uring context made with ``sqpoll=False``
                     (caio polls its ring with a kernel SQPOLL thread where it may,
                     as here as root): what aiofile reads without that thread
    aiofiles         seek + read, one unbuffered file per task
    threads          ``run_in_executor(pool, os.pread, fd, 4096, off)``, T threads
    sync             an ``os.pread`` loop (no event loop; 1 task only)
    loop.ceiling     no read at all: each task awaits a future that the loop
                     resolves at once (``call_soon``).  What an asyncio library
                     that wakes a task per read cannot pass on this loop
    fio, fio.direct  ``fio --ioengine=io_uring --iodepth=T`` buffered and with O_DIRECT
    fio.wq           fio buffered, every read handed to the kernel's workers (``--force_async=1``)
    fio.sqpoll       fio buffered, its ring polled by a kernel thread (``--sqthread_poll=1``)
* a sequential read of the whole file in 1 MiB chunks (MB/s):
    aioring.read     ``await aioring.readinto(fd, buf, off)`` in a loop
    aioring.open     ``await f.readinto(buf)`` on ``aioring.open(path, "rb", buffering=0)``
    aioring.open.noadvice  the same, the file not advised as read sequentially
                     (SEQUENTIAL_ADVICE = False)
    aiofile          ``await afp.read(1 MiB, off)``
    aiofiles         ``await f.read(1 MiB)``
    threads          ``run_in_executor(None, f.readinto, buf)``
    sync             ``f.readinto(buf)`` on ``open(path, "rb", buffering=0)``
    fio              ``fio --rw=read --bs=1M --iodepth=1``
* small files: the 24 files of small_files.py's experiment (1 KiB to 100
  KiB), their pages dropped before each round, read whole concurrently (one
  task per file: open, read, close); the blocking ``open()`` reads them one
  after the other.  Wall time per round; the rounds of an async variant run
  on one event loop, as a program's reads do (a new loop and ring for each
  round cost some 0.5 ms more, which blocking ``open()`` never pays).
  Variants: aioring (``async with aioring.open(p, "rb") as f: await f.read()``),
  aioring.noretry (the same, no second try from the page cache after a yield
  when the first missed: COLD_RETRY = False), aiofile, aiofiles, open().
* an append log: 256-byte records appended, ``fdatasync`` every 16 records
  (records/s), by one writer:
    aioring          ``await f.write(rec)`` on ``aioring.open(path, "ab", buffering=0)``,
                     ``await aioring.fsync(f, datasync=True)``: a ring write per record
    aioring.buffered the aiofiles variant's own calls on ``aioring.open(path, "ab")``
                     (the line an aiofiles user changes): ``await f.write(rec)``;
                     ``await f.flush()`` and ``await aioring.fsync(f, datasync=True)``
                     every 16
    aiofile          ``await afp.write(rec, off)``, ``await afp.fdsync()``
    aiofiles         ``await f.write(rec)``; ``await f.flush()`` and ``fdatasync``
                     in the executor every 16
    sync             ``os.write`` + ``os.fdatasync``

The random reads' table also gives the CPU time per read: of this process
with all its threads (the kernel's io workers among them), or of fio, over the
reads a run made, and of the event loop's thread alone.  On a loaded machine
the rates follow it.

One untimed read of the big file comes first, so that no variant pays alone
for what a virtual disk's host caches.  The disk here may be a noisy virtual
disk and the machine shared: every
configuration runs --repeat times, the variants interleaved round-robin (the
order rotated each round), and the median is reported with the spread
(max/min) of its runs.  The verdicts compare medians taken in the same run.

Run from the repository root:  python benchmarks/cold_reads.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from statistics import median
from typing import Any

from benchlib import (
    GIB, KIB, MB, MIB, REPO, aioring_backend, ensure_dir, log, machine_line, mount_of, optional, render,
    require_space, run_in_new_loop, run_meta, uvloop, write_json, write_random,
)

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring

aiofile = optional("aiofile")
aiofiles = optional("aiofiles")
caio_uring: Any  # caio's io_uring context, aiofile's default where caio can make one
try:
    from caio import linux_uring_asyncio as caio_uring
except ImportError:
    caio_uring = None
if aiofile is None:
    caio_uring = None

DATA = REPO / "benchmarks" / ".data"
BLOCK = 4096
CHUNK = MIB
RECORD = 256
SYNC_EVERY = 16
SMALL_N = 24
TASKS = (1, 16, 64)
DEFAULTS = {"repeat": 3, "seconds": 2.0, "size": GIB, "rounds": 10, "records": 1024}
QUICK = {"repeat": 2, "seconds": 0.7, "size": 256 * MIB, "rounds": 4, "records": 256}


# --------------------------------------------------------------------- data
def drop(path: str | Path) -> None:
    """Drop the file's clean pages from the page cache (its dirty ones were synced when written)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_bytes(path: str | Path) -> int | None:
    """How much of the file is in the page cache (util-linux's fincore), None without it."""
    if shutil.which("fincore") is None:
        return None
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def make_files(size: int) -> tuple[Path, list[Path]]:
    """The big file (`size` bytes, synced, so that its pages can be dropped) and the small files."""
    ensure_dir(DATA)
    big = DATA / f"cold_{size // MIB}m.bin"
    if not big.exists() or big.stat().st_size != size:
        require_space(DATA, size + 64 * MIB, f"cold_reads: {DATA} needs {size // MIB + 64} MiB free")
        log(f"writing {big} ({size // MIB} MiB) ...")
        write_random(big, big.with_suffix(".partial"), size, random.Random(1).randbytes)
    small_dir = DATA / "cold_small"
    small_dir.mkdir(exist_ok=True)
    rng = random.Random(24)
    small = []
    for i in range(SMALL_N):
        p = small_dir / f"f{i:02d}.bin"
        n = rng.randint(KIB, 100 * KIB)
        if not p.exists() or p.stat().st_size != n:
            p.write_bytes(rng.randbytes(n))
        small.append(p)
    for p in (big, *small):  # dirty pages cannot be dropped
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return big, small


def offsets(seed: int, size: int) -> Callable[[], int]:
    rng = random.Random(seed)
    blocks = size // BLOCK
    return lambda: rng.randrange(blocks) * BLOCK


# ------------------------------------------------------ random 4 KiB reads
async def _timed_tasks(tasks: int, seconds: float, one: Callable[[int], Awaitable[int]]) -> float:
    """Run `tasks` copies of one(i) (each returns its count of reads) for `seconds`; reads/s."""
    start = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(tasks)))
    return sum(counts) / (time.perf_counter() - start)


async def rand_aioring_read(path: Path, size: int, tasks: int, seconds: float) -> float:
    fd = os.open(path, os.O_RDONLY)
    end = time.perf_counter() + seconds

    async def one(i: int) -> int:
        nxt, n = offsets(i, size), 0
        while time.perf_counter() < end:
            if len(await aioring.read(fd, BLOCK, nxt())) != BLOCK:
                raise AssertionError("short read")
            n += 1
        return n
    try:
        return await _timed_tasks(tasks, seconds, one)
    finally:
        os.close(fd)


async def rand_aioring_read_tryeach(path: Path, size: int, tasks: int, seconds: float) -> float:
    from aioring import _ops
    saved, _ops.CACHE_BACKOFF_MAX = _ops.CACHE_BACKOFF_MAX, 0
    _ops._fd_cache.clear()
    _ops._plain.clear()
    try:
        return await rand_aioring_read(path, size, tasks, seconds)
    finally:
        _ops.CACHE_BACKOFF_MAX = saved
        _ops._fd_cache.clear()
        _ops._plain.clear()


async def _with_setting(name: str, value: Any, run: Awaitable[Any], module: str = "_ops") -> Any:
    """Await `run` with aioring.<module>.<name> set to `value` meanwhile."""
    import importlib
    mod = importlib.import_module(f"aioring.{module}")
    saved = getattr(mod, name)
    setattr(mod, name, value)
    try:
        return await run
    finally:
        setattr(mod, name, saved)


async def rand_aioring_read_handoff(path: Path, size: int, tasks: int, seconds: float) -> float:
    return await _with_setting("COLD_HANDOFF", True, rand_aioring_read(path, size, tasks, seconds))


async def _rand_seek_read(opener: Any, path: Path, size: int, tasks: int, seconds: float) -> float:
    """Random reads through an aiofiles-API opener: seek, then read a block."""
    end = time.perf_counter() + seconds

    async def one(i: int) -> int:
        nxt, n = offsets(i, size), 0
        async with opener(path, "rb", buffering=0) as f:
            while time.perf_counter() < end:
                await f.seek(nxt())
                if len(await f.read(BLOCK)) != BLOCK:
                    raise AssertionError("short read")
                n += 1
        return n
    return await _timed_tasks(tasks, seconds, one)


async def rand_aioring_open(path: Path, size: int, tasks: int, seconds: float) -> float:
    return await _rand_seek_read(aioring.open, path, size, tasks, seconds)


async def rand_aioring_direct(path: Path, size: int, tasks: int, seconds: float) -> float:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    end = time.perf_counter() + seconds

    async def one(i: int) -> int:
        nxt, n = offsets(i, size), 0
        buf = aioring.aligned_buffer(BLOCK)
        while time.perf_counter() < end:
            if await aioring.readinto(fd, buf, nxt()) != BLOCK:
                raise AssertionError("short read")
            n += 1
        return n
    try:
        return await _timed_tasks(tasks, seconds, one)
    finally:
        os.close(fd)


async def rand_aioring_direct_handoff(path: Path, size: int, tasks: int, seconds: float) -> float:
    return await _with_setting("DIRECT_HANDOFF", True, rand_aioring_direct(path, size, tasks, seconds))


def _sqpolled(rand: Callable[[Path, int, int, float], Awaitable[float]]
              ) -> Callable[[Path, int, int, float], Awaitable[float]]:
    """`rand` with aioring.set_sqpoll(0.05) on meanwhile (each run's loop is new:
    its polling ring is made at its first read of an uncached page)."""
    async def run(path: Path, size: int, tasks: int, seconds: float) -> float:
        before = aioring.set_sqpoll(0.05)
        try:
            return await rand(path, size, tasks, seconds)
        finally:
            aioring.set_sqpoll(before)
    return run


async def rand_aiofile(path: Path, size: int, tasks: int, seconds: float, context: Any = None) -> float:
    assert aiofile is not None
    end = time.perf_counter() + seconds
    async with aiofile.AIOFile(str(path), "rb", context=context) as afp:
        async def one(i: int) -> int:
            nxt, n = offsets(i, size), 0
            while time.perf_counter() < end:
                if len(await afp.read(BLOCK, nxt())) != BLOCK:
                    raise AssertionError("short read")
                n += 1
            return n
        return await _timed_tasks(tasks, seconds, one)


async def rand_aiofile_nosqpoll(path: Path, size: int, tasks: int, seconds: float) -> float:
    assert caio_uring is not None
    context = caio_uring.AsyncioContext(512, sqpoll=False)
    try:
        if context.context.sqpoll:
            raise AssertionError("caio's context polls with sqpoll=False")
        return await rand_aiofile(path, size, tasks, seconds, context)
    finally:
        context.close()


async def rand_aiofiles(path: Path, size: int, tasks: int, seconds: float) -> float:
    assert aiofiles is not None
    return await _rand_seek_read(aiofiles.open, path, size, tasks, seconds)


async def rand_threads(path: Path, size: int, tasks: int, seconds: float) -> float:
    fd = os.open(path, os.O_RDONLY)
    loop = asyncio.get_running_loop()
    end = time.perf_counter() + seconds
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=tasks)

    async def one(i: int) -> int:
        nxt, n = offsets(i, size), 0
        while time.perf_counter() < end:
            if len(await loop.run_in_executor(pool, os.pread, fd, BLOCK, nxt())) != BLOCK:
                raise AssertionError("short read")
            n += 1
        return n
    try:
        return await _timed_tasks(tasks, seconds, one)
    finally:
        pool.shutdown()
        os.close(fd)


def rand_sync(path: Path, size: int, seconds: float) -> float:
    fd = os.open(path, os.O_RDONLY)
    nxt, n = offsets(0, size), 0
    start = time.perf_counter()
    end = start + seconds
    try:
        while time.perf_counter() < end:
            if len(os.pread(fd, BLOCK, nxt())) != BLOCK:
                raise AssertionError("short read")
            n += 1
    finally:
        os.close(fd)
    return n / (time.perf_counter() - start)


def cpu_seconds() -> float:
    """CPU time so far of this process (all its threads, the kernel's io workers
    among them) and of its waited-for children (fio)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# ------------------------------------------------------------------- fio
def fio(path: Path, size: int, rw: str, bs: int, depth: int, direct: bool, seconds: float,
        workers: bool = False, sqpoll: bool = False) -> float:
    """fio's io_uring figure for the pattern: IOPS for random reads, MB/s for sequential ones.
    fio drops the file's pages itself before it starts (--invalidate=1).  `workers`: every
    read handed to the kernel's workers (IOSQE_ASYNC); `sqpoll`: its ring polled by a
    kernel thread."""
    cmd = ["fio", "--name=cold", f"--filename={path}", f"--rw={rw}", f"--bs={bs}", "--ioengine=io_uring",
           f"--iodepth={depth}", f"--direct={int(direct)}", f"--size={size}", "--invalidate=1",
           "--output-format=json", "--randrepeat=0", f"--force_async={int(workers)}",
           f"--sqthread_poll={int(sqpoll)}"]
    if rw == "randread":
        cmd += ["--time_based", f"--runtime={max(1, round(seconds))}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return float(job["iops"]) if rw == "randread" else job["bw_bytes"] / MB


# ------------------------------------------------------------ sequential
async def seq_aioring_read(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    buf, total = bytearray(CHUNK), 0
    try:
        while n := await aioring.readinto(fd, buf, total):
            total += n
    finally:
        os.close(fd)
    return total


async def seq_aioring_open(path: Path) -> int:
    buf, total = bytearray(CHUNK), 0
    async with aioring.open(path, "rb", buffering=0) as f:
        while n := await f.readinto(buf):
            total += n
    return total


async def seq_aioring_open_noadvice(path: Path) -> int:
    return int(await _with_setting("SEQUENTIAL_ADVICE", False, seq_aioring_open(path), "_file"))


async def seq_aiofile(path: Path) -> int:
    assert aiofile is not None
    total = 0
    async with aiofile.AIOFile(str(path), "rb") as afp:
        while data := await afp.read(CHUNK, total):
            total += len(data)
    return total


async def seq_aiofiles(path: Path) -> int:
    assert aiofiles is not None
    total = 0
    async with aiofiles.open(path, "rb") as f:
        while data := await f.read(CHUNK):
            total += len(data)
    return total


async def seq_threads(path: Path) -> int:
    loop = asyncio.get_running_loop()
    buf, total = bytearray(CHUNK), 0
    with open(path, "rb", buffering=0) as f:
        while n := await loop.run_in_executor(None, f.readinto, buf):
            total += n
    return total


def seq_sync(path: Path) -> int:
    buf, total = bytearray(CHUNK), 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total


# ----------------------------------------------------------- small files
async def small_aioring(paths: list[Path]) -> int:
    async def one(p: Path) -> int:
        async with aioring.open(p, "rb") as f:
            return len(await f.read())
    return sum(await asyncio.gather(*map(one, paths)))


async def small_aioring_noretry(paths: list[Path]) -> int:
    return int(await _with_setting("COLD_RETRY", False, small_aioring(paths), "threadpool.binary"))


async def small_aiofiles(paths: list[Path]) -> int:
    assert aiofiles is not None

    async def one(p: Path) -> int:
        async with aiofiles.open(p, "rb") as f:
            return len(await f.read())
    return sum(await asyncio.gather(*map(one, paths)))


async def small_aiofile(paths: list[Path]) -> int:
    assert aiofile is not None

    async def one(p: Path) -> int:
        async with aiofile.AIOFile(str(p), "rb") as afp:
            return len(await afp.read_bytes())
    return sum(await asyncio.gather(*map(one, paths)))


def small_sync(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        with open(p, "rb") as f:
            total += len(f.read())
    return total


# ------------------------------------------------------------ append log
def _record(i: int) -> bytes:
    return (b"%08d " % i).ljust(RECORD - 1, b"x") + b"\n"


async def log_aioring(path: Path, records: int) -> None:
    async with aioring.open(path, "ab", buffering=0) as f:
        for i in range(records):
            await f.write(_record(i))
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                await aioring.fsync(f, datasync=True)


async def log_aioring_buffered(path: Path, records: int) -> None:
    async with aioring.open(path, "ab") as f:
        for i in range(records):
            await f.write(_record(i))
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                await f.flush()
                await aioring.fsync(f, datasync=True)


async def log_aiofile(path: Path, records: int) -> None:
    assert aiofile is not None
    async with aiofile.AIOFile(str(path), "ab") as afp:
        off = os.path.getsize(path)
        for i in range(records):
            rec = _record(i)
            await afp.write(rec, off)
            off += len(rec)
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                await afp.fdsync()


async def log_aiofiles(path: Path, records: int) -> None:
    assert aiofiles is not None
    loop = asyncio.get_running_loop()
    async with aiofiles.open(path, "ab") as f:
        for i in range(records):
            await f.write(_record(i))
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                await f.flush()
                await loop.run_in_executor(None, os.fdatasync, f.fileno())


def log_sync(path: Path, records: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(records):
            os.write(fd, _record(i))
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                os.fdatasync(fd)
    finally:
        os.close(fd)


async def rand_loop_ceiling(path: Path, size: int, tasks: int, seconds: float) -> float:
    """A task woken per 'read' and nothing else: the loop's own ceiling."""
    loop = asyncio.get_running_loop()
    end = time.perf_counter() + seconds

    async def one(i: int) -> int:
        n = 0
        while time.perf_counter() < end:
            done = loop.create_future()
            loop.call_soon(done.set_result, None)
            await done
            n += 1
        return n
    return await _timed_tasks(tasks, seconds, one)


# --------------------------------------------------------------- running
RAND = {"aioring.read": rand_aioring_read, "aioring.read.tryeach": rand_aioring_read_tryeach,
        "aioring.read.handoff": rand_aioring_read_handoff,
        "aioring.open": rand_aioring_open,
        "aioring.direct": rand_aioring_direct, "aioring.direct.handoff": rand_aioring_direct_handoff,
        "aioring.read.sqpoll": _sqpolled(rand_aioring_read),
        "aioring.open.sqpoll": _sqpolled(rand_aioring_open),
        "aioring.direct.sqpoll": _sqpolled(rand_aioring_direct),
        "aiofile": rand_aiofile, "aiofile.nosqpoll": rand_aiofile_nosqpoll, "aiofiles": rand_aiofiles,
        "threads": rand_threads, "loop.ceiling": rand_loop_ceiling}
SEQ = {"aioring.read": seq_aioring_read, "aioring.open": seq_aioring_open,
       "aioring.open.noadvice": seq_aioring_open_noadvice, "aiofile": seq_aiofile,
       "aiofiles": seq_aiofiles, "threads": seq_threads}
SMALL = {"aioring": small_aioring, "aioring.noretry": small_aioring_noretry, "aiofile": small_aiofile,
         "aiofiles": small_aiofiles}
LOG = {"aioring": log_aioring, "aioring.buffered": log_aioring_buffered, "aiofile": log_aiofile,
       "aiofiles": log_aiofiles}
NEEDS = {"aiofile": aiofile, "aiofiles": aiofiles}


class Bench:
    """Runs the configurations of one workload round-robin and keeps every sample."""

    def __init__(self, args: argparse.Namespace, big: Path, small: list[Path]) -> None:
        self.args, self.big, self.small = args, big, small
        self.size = big.stat().st_size
        self.samples: dict[tuple[str, ...], list[float]] = {}
        # CPU seconds (this process and its threads, the kernel's io workers
        # among them, or the fio child) per sample, for the random reads' cost per read
        self.cpu: dict[tuple[str, ...], list[float]] = {}
        # CPU seconds of this thread alone (the event loop's) per sample
        self.loop_cpu: dict[tuple[str, ...], list[float]] = {}
        self.errors: list[str] = []
        self.fio = shutil.which("fio") is not None

    def available(self, variant: str) -> bool:
        if variant == "aiofile.nosqpoll":
            return caio_uring is not None
        return NEEDS.get(variant.split(".", maxsplit=1)[0], True) is not None

    def run(self, key: tuple[str, ...], fn: Callable[[], float]) -> None:
        before, thread_before = cpu_seconds(), time.thread_time()
        try:
            value = fn()
        except Exception as exc:  # a failed run is reported, the others go on
            self.errors.append(f"{'/'.join(key)}: {type(exc).__name__}: {exc}")
            log(f"  {'/'.join(key)} FAILED: {exc}")
            return
        self.samples.setdefault(key, []).append(value)
        self.cpu.setdefault(key, []).append(cpu_seconds() - before)
        self.loop_cpu.setdefault(key, []).append(time.thread_time() - thread_before)
        log(f"  {'/'.join(key):<34} {value:12,.1f}")

    def rounds(self, configs: list[tuple[tuple[str, ...], Callable[[], float]]]) -> None:
        for r in range(self.args.repeat):
            shift = r % len(configs)
            for key, fn in configs[shift:] + configs[:shift]:
                self.run(key, fn)

    def in_loop(self, loop: str, coro_fn: Callable[[], Awaitable[Any]]) -> Any:
        return run_in_new_loop(loop, coro_fn, self.args.timeout)

    # Each workload: its configurations, each a function returning its figure.
    def random_reads(self) -> None:
        a, size, big = self.args, self.size, self.big
        configs: list[tuple[tuple[str, ...], Callable[[], float]]] = []
        for t in a.tasks:
            for loop in a.loops:
                for name, fn in RAND.items():
                    if self.available(name):
                        configs.append((("rand", str(t), loop, name), self._cold_big(
                            lambda fn=fn, t=t, loop=loop: self.in_loop(
                                loop, lambda: fn(big, size, t, a.seconds)))))
            if t == 1:
                configs.append((("rand", "1", "-", "sync"),
                                self._cold_big(lambda: rand_sync(big, size, a.seconds))))
            if self.fio:
                for name, direct, workers, sqpoll in (
                        ("fio", False, False, False), ("fio.direct", True, False, False),
                        ("fio.wq", False, True, False), ("fio.sqpoll", False, False, True)):
                    configs.append((("rand", str(t), "-", name),
                                    lambda t=t, direct=direct, workers=workers, sqpoll=sqpoll: fio(
                                        big, size, "randread", BLOCK, t, direct, a.seconds, workers, sqpoll)))
        self.rounds(configs)

    def sequential(self) -> None:
        a, big = self.args, self.big
        configs: list[tuple[tuple[str, ...], Callable[[], float]]] = []
        for loop in a.loops:
            for name, fn in SEQ.items():
                if self.available(name):
                    configs.append((("seq", "1", loop, name), self._cold_big(
                        self._rate(lambda fn=fn, loop=loop: self.in_loop(loop, lambda: fn(big))))))
        configs.append((("seq", "1", "-", "sync"), self._cold_big(self._rate(lambda: seq_sync(big)))))
        if self.fio:
            configs.append((("seq", "1", "-", "fio"),
                            lambda: fio(big, self.size, "read", CHUNK, 1, False, 0)))
        self.rounds(configs)

    def small_files(self) -> None:
        a, paths = self.args, self.small
        want = sum(p.stat().st_size for p in paths)
        configs: list[tuple[tuple[str, ...], Callable[[], float]]] = []
        for loop in a.loops:
            for name, fn in SMALL.items():
                if self.available(name):
                    configs.append((("small", str(SMALL_N), loop, name),
                                    lambda fn=fn, loop=loop: self.in_loop(
                                        loop, lambda: self._small_rounds_async(lambda: fn(paths), want))))
        configs.append((("small", str(SMALL_N), "-", "open()"),
                        lambda: self._small_rounds(lambda: small_sync(paths), want)))
        self.rounds(configs)

    def append_log(self) -> None:
        a = self.args
        path = DATA / "cold_log.bin"
        configs: list[tuple[tuple[str, ...], Callable[[], float]]] = []
        for loop in a.loops:
            for name, fn in LOG.items():
                if self.available(name):
                    configs.append((("log", str(SYNC_EVERY), loop, name), self._log_run(
                        path, lambda fn=fn, loop=loop: self.in_loop(loop, lambda: fn(path, a.records)))))
        configs.append((("log", str(SYNC_EVERY), "-", "sync"),
                        self._log_run(path, lambda: log_sync(path, a.records))))
        self.rounds(configs)

    def _cold_big(self, fn: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            drop(self.big)
            return fn()
        return run

    def _rate(self, fn: Callable[[], int]) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            total = fn()
            wall = time.perf_counter() - start
            if total != self.size:
                raise AssertionError(f"read {total} bytes of {self.size}")
            return total / MB / wall
        return run

    def _small_rounds(self, one_round: Callable[[], int], want: int) -> float:
        """Median wall time (ms) of --rounds rounds, the pages dropped before each."""
        times = []
        for _ in range(self.args.rounds):
            for p in self.small:
                drop(p)
            start = time.perf_counter()
            got = one_round()
            times.append((time.perf_counter() - start) * 1000)
            if got != want:
                raise AssertionError(f"read {got} bytes of {want}")
        return median(times)

    async def _small_rounds_async(self, one_round: Callable[[], Awaitable[int]], want: int) -> float:
        """_small_rounds on the running loop."""
        times = []
        for _ in range(self.args.rounds):
            for p in self.small:
                drop(p)
            start = time.perf_counter()
            got = await one_round()
            times.append((time.perf_counter() - start) * 1000)
            if got != want:
                raise AssertionError(f"read {got} bytes of {want}")
        return median(times)

    def _log_run(self, path: Path, fn: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            path.write_bytes(b"")
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            start = time.perf_counter()
            fn()
            rate = self.args.records / (time.perf_counter() - start)
            if path.stat().st_size != self.args.records * RECORD:
                raise AssertionError("the log is not whole")
            return rate
        return run

    # ---------------------------------------------------------- reporting
    def med(self, *key: str) -> float | None:
        values = self.samples.get(key)
        return median(values) if values else None

    def cpu_per_read(self, key: tuple[str, ...], loop_thread: bool = False) -> float:
        """Median CPU microseconds per random read of the configuration (the run's
        reads taken as its rate times --seconds, fio's as its rate times its whole seconds):
        of the process, or (`loop_thread`) of the thread that ran the event loop."""
        seconds = max(1, round(self.args.seconds)) if key[3].startswith("fio") else self.args.seconds
        cpu = (self.loop_cpu if loop_thread else self.cpu)[key]
        return median(c / (v * seconds) * 1e6 for c, v in zip(cpu, self.samples[key], strict=True) if v > 0)

    def table(self, workload: str, unit: str, lower_is_better: bool = False) -> str:
        keys = sorted({k for k in self.samples if k[0] == workload},
                      key=lambda k: (int(k[1]), k[2], k[3]))
        rows = []
        for k in keys:
            v = self.samples[k]
            spread = max(v) / min(v) - 1 if min(v) > 0 else 0.0
            cpu = ([f"{self.cpu_per_read(k):,.1f}",
                    "-" if k[3].startswith("fio") else f"{self.cpu_per_read(k, loop_thread=True):,.1f}"]
                   if workload == "rand" else [])
            rows.append([k[1], k[2], k[3], f"{median(v):,.1f}", *cpu, f"{spread:.0%}", str(len(v))])
        head = {"rand": "tasks", "seq": "tasks", "small": "files", "log": "sync every"}[workload]
        value = f"median {unit}" + (" (lower is better)" if lower_is_better else "")
        cpu_head = ["CPU us/read", "loop thread"] if workload == "rand" else []
        return render([head, "loop", "variant", value, *cpu_head, "max/min-1", "runs"], rows, left=3)

    def verdicts(self) -> list[str]:
        out: list[str] = []

        def check(what: str, value: float | None, ref: float | None, factor: float,
                  at_most: bool = False) -> None:
            if value is None or ref is None:
                out.append(f"SKIP  {what} (not measured)")
                return
            ratio = value / ref
            ok = ratio <= factor if at_most else ratio >= factor
            out.append(f"{'PASS' if ok else 'FAIL'}  {what}: {ratio:.2f}x (goal {'<=' if at_most else '>='} "
                       f"{factor}x)")

        for loop in self.args.loops:
            if "64" in map(str, self.args.tasks):
                r = ("rand", "64", loop)
                fio_b, fio_d = self.med("rand", "64", "-", "fio"), self.med("rand", "64", "-", "fio.direct")
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.read vs fio (buffered)",
                      self.med(*r, "aioring.read"), fio_b, 0.8)
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.read vs aiofile",
                      self.med(*r, "aioring.read"), self.med(*r, "aiofile"), 1.0)
                nosq, mine = self.med(*r, "aiofile.nosqpoll"), self.med(*r, "aioring.read")
                if nosq and mine and self.med(*r, "aiofile"):
                    out.append(f"NOTE  [{loop}] aiofile without its SQPOLL thread: {nosq:,.0f}/s; "
                               f"aioring.read {mine / nosq:.2f}x it. CPU a read (all threads): aiofile "
                               f"{self.cpu_per_read((*r, 'aiofile')):.1f} us, without SQPOLL "
                               f"{self.cpu_per_read((*r, 'aiofile.nosqpoll')):.1f}, aioring.read "
                               f"{self.cpu_per_read((*r, 'aioring.read')):.1f}")
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.open vs fio (buffered)",
                      self.med(*r, "aioring.open"), fio_b, 0.7)
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.open vs aiofile",
                      self.med(*r, "aioring.open"), self.med(*r, "aiofile"), 1.0)
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.direct vs fio O_DIRECT",
                      self.med(*r, "aioring.direct"), fio_d, 0.8)
                ceiling = self.med(*r, "loop.ceiling")
                if ceiling and fio_b and fio_d:
                    out.append(f"NOTE  [{loop}] the loop's ceiling (a task woken per read, no I/O): "
                               f"{ceiling:,.0f}/s = {ceiling / fio_b:.2f}x fio buffered, "
                               f"{ceiling / fio_d:.2f}x fio O_DIRECT: no library that wakes a task "
                               "per read passes it on this loop")
                aiofile_ = self.med(*r, "aiofile")
                check(f"[{loop}] random 4 KiB, 64 tasks, with set_sqpoll: aioring.read vs aiofile",
                      self.med(*r, "aioring.read.sqpoll"), aiofile_, 1.0)
                check(f"[{loop}] random 4 KiB, 64 tasks, with set_sqpoll: aioring.open vs aiofile",
                      self.med(*r, "aioring.open.sqpoll"), aiofile_, 1.0)
                check(f"[{loop}] random 4 KiB, 64 tasks, with set_sqpoll: aioring.direct vs fio O_DIRECT",
                      self.med(*r, "aioring.direct.sqpoll"), fio_d, 0.8)
                fio_sq = self.med("rand", "64", "-", "fio.sqpoll")
                if fio_sq and aiofile_:
                    out.append(f"NOTE  [{loop}] fio with a polling thread: {fio_sq:,.0f}/s; aiofile "
                               f"{aiofile_ / fio_sq:.2f}x it")
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.read vs the try before every read",
                      self.med(*r, "aioring.read"), self.med(*r, "aioring.read.tryeach"), 1.0)
                check(f"[{loop}] random 4 KiB, 64 tasks: aioring.read vs reads handed to workers",
                      self.med(*r, "aioring.read"), self.med(*r, "aioring.read.handoff"), 1.0)
            s = ("seq", "1", loop)
            best = max(self.med(*s, v) or 0.0 for v in ("aioring.read", "aioring.open")) or None
            check(f"[{loop}] sequential 1 MiB chunks: aioring.open vs sync readinto",
                  self.med(*s, "aioring.open"), self.med("seq", "1", "-", "sync"), 1.0)
            check(f"[{loop}] sequential 1 MiB chunks: aioring (best) vs aiofiles",
                  best, self.med(*s, "aiofiles"), 1.5)
            m = ("small", str(SMALL_N), loop)
            check(f"[{loop}] small files x{SMALL_N}: aioring wall time vs blocking open()",
                  self.med(*m, "aioring"), self.med("small", str(SMALL_N), "-", "open()"), 1.2, at_most=True)
            check(f"[{loop}] small files x{SMALL_N}: aioring wall time vs aiofiles",
                  self.med(*m, "aioring"), self.med(*m, "aiofiles"), 0.5, at_most=True)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, help="runs per configuration, interleaved "
                        f"(default {DEFAULTS['repeat']}, --quick {QUICK['repeat']})")
    parser.add_argument("--seconds", type=float, help="seconds per random-read run")
    parser.add_argument("--size", type=int, help="bytes in the big file (default 1 GiB, --quick 256 MiB)")
    parser.add_argument("--rounds", type=int, help="small-file rounds per run")
    parser.add_argument("--records", type=int, help="log records per run")
    parser.add_argument("--tasks", type=lambda s: [int(x) for x in s.split(",")], default=list(TASKS))
    parser.add_argument("--loops", type=lambda s: s.split(","),
                        default=["asyncio", "uvloop"] if uvloop is not None else ["asyncio"])
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=["rand", "seq", "small", "log"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="a shorter run: fewer repeats, a 256 MiB file")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the samples and medians here")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    backend = aioring_backend(aioring)
    big, small = make_files(args.size)
    point, fstype = mount_of(DATA)
    if fstype in ("tmpfs", "ramfs"):
        sys.exit(f"cold_reads: {DATA} is on {fstype}; the data must be on a disk")
    meta = run_meta(backend, ["aiofile", "aiofiles", "uvloop", "caio"])
    # One untimed read first: a virtual disk's host may cache what was read
    # (outside this machine's page cache), and the first run would otherwise
    # pay for that alone.
    drop(big)
    seq_sync(big)
    drop(big)
    left = cached_bytes(big)
    bench = Bench(args, big, small)
    print(f"{machine_line(meta)} | aioring backend {backend} | data on {point} ({fstype})")
    print(f"big file {args.size // MIB} MiB; after dropping its pages "
          + (f"{left // KIB} KiB of it stayed cached (fincore)" if left is not None
             else "(fincore not found)")
          + f"; fio: {'found' if bench.fio else 'not installed, no device limit printed'}")
    steps = {"rand": bench.random_reads, "seq": bench.sequential, "small": bench.small_files,
             "log": bench.append_log}
    for w in args.workloads:
        log(f"== {w}")
        steps[w]()
    units = {"rand": ("Random 4 KiB reads, cold", "reads/s", False),
             "seq": ("Sequential read of the whole file in 1 MiB chunks, cold", "MB/s", False),
             "small": (f"{SMALL_N} small files read whole, cold: wall time per round", "ms", True),
             "log": (f"Append log, {RECORD}-byte records, fdatasync every {SYNC_EVERY}", "records/s", False)}
    for w in args.workloads:
        title, unit, lower = units[w]
        print(f"\n{title}")
        print(bench.table(w, unit, lower))
    print("\nVerdicts (medians of the same run):")
    for line in bench.verdicts():
        print("  " + line)
    spreads = [max(v) / min(v) - 1 for v in bench.samples.values() if len(v) > 1 and min(v) > 0]
    if spreads:
        print(f"Noise: the runs of one configuration differed by {median(spreads):.0%} (median max/min-1) "
              f"and by up to {max(spreads):.0%}.")
    if bench.errors:
        print("FAILED runs:\n  " + "\n  ".join(bench.errors))
    write_json(args.json, {"meta": meta, "args": {k: v for k, v in vars(args).items() if k != "json"},
                           "samples": [{"key": list(k), "values": v, "cpu_seconds": bench.cpu[k]}
                                       for k, v in bench.samples.items()],
                           "errors": bench.errors})
    if bench.errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
