#!/usr/bin/env python3
"""Sequential reads and writes of a large file in 1 MiB chunks: aioring against its peers.

Every measured run moves one file's worth of data (1 GiB by default, --size)
in 1 MiB chunks (--chunk), from the start of the file to its end, and reports
MB/s (MB = 10^6 bytes) and the process CPU time of the run, also as ratios to
a plain synchronous loop in one thread (the limit: nothing but the system
calls and the copies).  A run's timing covers opening, every chunk and
closing.

Reads are from the page cache: the file is read once, untimed, before every
round of runs, and there is memory to spare (the report says how much).

Writes are not fsynced: they measure moving the data into the page cache, not
the disk.  By default (--write-mode overwrite) they go over an existing file of
the same size whose pages are in the page cache, opened without truncating it
("r+b", O_WRONLY): the kernel copies into pages it already has.  With
--write-mode new every run writes a new file (deleted right after it, before
the kernel writes it back), so the kernel also allocates every page of it.  On
a VM that hands freed pages back to its host (virtio-balloon free page
reporting) that allocation dominates: a new 1 GiB file was measured at 250 to
3,000 MB/s for the same synchronous loop depending only on how long ago the
pages had been freed, which says nothing about the library that wrote them.

Variants (the async ones on asyncio's default loop and on uvloop):

  read
    sync               ``open(p, "rb", buffering=0)``, ``f.readinto(buf)``: the limit
    aioring            ``aioring.open(p, "rb")``, ``await f.read(chunk)`` (a new bytes per chunk)
    aioring-readinto   ``aioring.open(p, "rb")``, ``await f.readinto(buf)``
    aioring-fd         ``await aioring.readinto(fd, buf, offset)`` on an ``os.open`` fd
    aiofiles           ``aiofiles.open(p, "rb")``, ``await f.read(chunk)``
    aiofiles-readinto  ``aiofiles.open(p, "rb")``, ``await f.readinto(buf)``
    aiofile            ``aiofile.AIOFile(p, "rb")``, ``await afp.read_bytes(chunk, offset)``
  write
  write (MODE is "r+b", or "wb" with --write-mode new)
    sync               ``open(p, MODE, buffering=0)``, ``f.write(chunk)``: the limit
    aioring            ``aioring.open(p, MODE)``, ``await f.write(chunk)``
    aioring-fd         ``await aioring.write(fd, chunk, offset)`` on an ``os.open`` fd
    aiofiles           ``aiofiles.open(p, MODE)``, ``await f.write(chunk)``
    aiofile            ``await afp.write(chunk, offset)`` on ``aiofile.AIOFile.from_fp(open(p, MODE))``:
                       AIOFile's own close() would fdatasync a file it opened for writing,
                       and these runs leave the data in the page cache for every variant

The chunks written are 7 different 1 MiB bytes objects in turn (bytes, as
aiofile requires), starting at a different one in every run.  Before anything
is timed, every variant reads a small file with an odd-sized tail and writes a
small file, and the bytes are compared; every timed run checks the byte count
(reads), or the file's size and 8 of its chunks against what that run wrote
(writes).

Each configuration runs --repeat times, round-robin over all configurations
(the order rotated every round), and the median is reported.

Run from the repository root:  python benchmarks/sequential.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import hashlib
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    GIB, MB, MIB, REPO, Meter, ensure_dir, error_text, git_state, iou_thread_cpu, log, machine_info,
    machine_line, mem_available, mount_of, open_fds, optional, parse_list, preset_value, require_space,
    run_in_new_loop, spread_note, uvloop, version, warm_file, write_json, write_random,
)

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring

aiofiles = optional("aiofiles")
aiofile = optional("aiofile")

ALL_OPS = ("read", "write")
ALL_LOOPS = ("asyncio", "uvloop")
READ_VARIANTS = ("sync", "aioring", "aioring-readinto", "aioring-fd", "aiofiles", "aiofiles-readinto",
                 "aiofile")
WRITE_VARIANTS = ("sync", "aioring", "aioring-fd", "aiofiles", "aiofile")
ALL_VARIANTS = READ_VARIANTS
PEER_OF = {"aiofiles": "aiofiles", "aiofiles-readinto": "aiofiles", "aiofile": "aiofile"}
PATTERNS = 7  # distinct chunks written in turn
DEFAULTS: dict[str, Any] = {"size": GIB, "repeat": 7}
QUICK: dict[str, Any] = {"size": 64 * MIB, "repeat": 1}
TARGET_RATIO = 0.9  # reads: at least this much of the synchronous loop's MB/s

Sink = Callable[[Any], None] | None  # receives every chunk read (verification only)
Reader = Callable[[Path, int, Sink], Awaitable[int]]
Writer = Callable[[Path, Sequence[bytes], int, str], Awaitable[int]]


# --------------------------------------------------------------------- setup
def parse_size(text: str) -> int:
    """'1G', '64M', '1048576', '512k' -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 1G, 64M)")
    return int(match[1]) * {"": 1, "k": 1 << 10, "m": MIB, "g": GIB}[match[2].lower()]


def size_name(size: int) -> str:
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def raise_mmap_threshold(chunk: int) -> None:
    """Allocate and free one block larger than a chunk, once, before anything is timed.

    glibc serves allocations above its mmap threshold (128 KiB at first) with
    mmap and returns them with munmap, until it first frees such a block; then
    it raises the threshold to that block's size.  Without this, the variants
    that make a new 1 MiB bytes object per chunk would pay two system calls per
    chunk or not, depending on what ran before them.
    """
    block = bytearray(2 * chunk)
    del block


def prepare_read_file(data_dir: Path, size: int) -> Path:
    path = data_dir / f"sequential_{size_name(size).replace(' ', '')}.bin"
    if not path.exists() or path.stat().st_size != size:
        log(f"creating {path} ({size_name(size)}) ...")
        write_random(path, path.with_suffix(".partial"), size, random.Random(size).randbytes)
    return path


def writeback_note(size: int) -> str:
    """Whether `size` dirty bytes cross the kernel's background writeback threshold."""
    try:
        with open("/proc/sys/vm/dirty_background_bytes") as f:
            limit = int(f.read())
        if not limit:
            with open("/proc/sys/vm/dirty_background_ratio") as f:
                ratio = int(f.read())
            avail = mem_available() or 0
            limit = avail * ratio // 100
            how = f"{ratio}% of available memory, about {limit / MIB:,.0f} MiB"
        else:
            how = f"{limit / MIB:,.0f} MiB"
    except (OSError, ValueError):
        return "the kernel's background writeback threshold is unknown"
    if size < limit:
        return (f"the kernel's background writeback threshold ({how}) is above the file's size: "
                "no writeback starts during a run")
    return (f"the kernel's background writeback threshold ({how}) is below the file's size: "
            "writeback to the disk can start during a run and take CPU")


def dirty_expire() -> float | None:
    """Seconds after which the kernel writes dirty pages back (vm.dirty_expire_centisecs)."""
    try:
        with open("/proc/sys/vm/dirty_expire_centisecs") as f:
            return int(f.read()) / 100
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------- readers
def read_sync(path: Path, chunk: int, sink: Sink) -> int:
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
            if sink is not None:
                sink(view[:n])
    return total


async def read_aioring(path: Path, chunk: int, sink: Sink) -> int:
    total = 0
    async with aioring.open(path, "rb") as f:
        while data := await f.read(chunk):
            total += len(data)
            if sink is not None:
                sink(data)
    return total


async def read_aioring_readinto(path: Path, chunk: int, sink: Sink) -> int:
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    async with aioring.open(path, "rb") as f:
        while n := await f.readinto(buf):
            total += n
            if sink is not None:
                sink(view[:n])
    return total


async def read_aioring_fd(path: Path, chunk: int, sink: Sink) -> int:
    buf = bytearray(chunk)
    view = memoryview(buf)
    readinto = aioring.readinto
    total = 0
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while n := await readinto(fd, buf, total):
            total += n
            if sink is not None:
                sink(view[:n])
    finally:
        os.close(fd)
    return total


async def read_aiofiles(path: Path, chunk: int, sink: Sink) -> int:
    assert aiofiles is not None
    total = 0
    async with aiofiles.open(path, "rb") as f:
        while data := await f.read(chunk):
            total += len(data)
            if sink is not None:
                sink(data)
    return total


async def read_aiofiles_readinto(path: Path, chunk: int, sink: Sink) -> int:
    assert aiofiles is not None
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    async with aiofiles.open(path, "rb") as f:
        while n := await f.readinto(buf):
            total += n
            if sink is not None:
                sink(view[:n])
    return total


async def read_aiofile(path: Path, chunk: int, sink: Sink) -> int:
    assert aiofile is not None
    total = 0
    async with aiofile.AIOFile(str(path), "rb") as afp:
        while data := await afp.read_bytes(chunk, total):
            total += len(data)
            if sink is not None:
                sink(data)
    return total


ASYNC_READERS: dict[str, Reader] = {
    "aioring": read_aioring, "aioring-readinto": read_aioring_readinto, "aioring-fd": read_aioring_fd,
    "aiofiles": read_aiofiles, "aiofiles-readinto": read_aiofiles_readinto, "aiofile": read_aiofile,
}


# ------------------------------------------------------------------- writers
def write_sync(path: Path, chunks: Sequence[bytes], count: int, mode: str) -> int:
    k = len(chunks)
    total = 0
    with open(path, mode, buffering=0) as f:
        for i in range(count):
            data = chunks[i % k]
            done = f.write(data) or 0
            while done < len(data):  # a raw write may be short
                done += f.write(memoryview(data)[done:]) or 0
            total += done
    return total


async def write_aioring(path: Path, chunks: Sequence[bytes], count: int, mode: str) -> int:
    k = len(chunks)
    total = 0
    async with aioring.open(path, mode) as f:
        for i in range(count):
            total += await f.write(chunks[i % k])
    return total


async def write_aioring_fd(path: Path, chunks: Sequence[bytes], count: int, mode: str) -> int:
    k = len(chunks)
    write = aioring.write
    total = 0
    flags = os.O_WRONLY | os.O_CLOEXEC | (os.O_CREAT | os.O_TRUNC if mode == "wb" else 0)
    fd = os.open(path, flags, 0o644)
    try:
        for i in range(count):
            data = chunks[i % k]
            done = await write(fd, data, total)
            while done < len(data):  # short write: the rest, as os.write callers do
                done += await write(fd, memoryview(data)[done:], total + done)
            total += done
    finally:
        os.close(fd)
    return total


async def write_aiofiles(path: Path, chunks: Sequence[bytes], count: int, mode: str) -> int:
    assert aiofiles is not None
    k = len(chunks)
    total = 0
    async with aiofiles.open(path, mode) as f:
        for i in range(count):
            total += await f.write(chunks[i % k])
    return total


async def write_aiofile(path: Path, chunks: Sequence[bytes], count: int, mode: str) -> int:
    assert aiofile is not None
    k = len(chunks)
    total = 0
    with open(path, mode) as fp:  # closed here, without the fdatasync of AIOFile.close()
        afp = aiofile.AIOFile.from_fp(fp)
        for i in range(count):
            total += await afp.write(chunks[i % k], total)
    return total


ASYNC_WRITERS: dict[str, Writer] = {
    "aioring": write_aioring, "aioring-fd": write_aioring_fd, "aiofiles": write_aiofiles,
    "aiofile": write_aiofile,
}


def run_checked(loop_name: str, coro_fn: Callable[[], Awaitable[int]], timeout: float) -> int:
    """run_in_new_loop, failing if anything reached the loop's exception handler
    (until the loop was closed)."""
    handled: list[str] = []

    def on_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        handled.append(f"{context.get('message')}: {exc!r}" if exc else str(context.get("message")))

    async def wrapped() -> int:
        asyncio.get_running_loop().set_exception_handler(on_error)
        return await coro_fn()
    result: int = run_in_new_loop(loop_name, wrapped, timeout)
    if handled:
        raise RuntimeError(f"the loop's exception handler was called: {handled[0]}")
    return result


# ------------------------------------------------------------- correctness
def verify_all(configs: list[tuple[str, str, str]], data_dir: Path, chunk: int,
               patterns: Sequence[bytes], timeout: float) -> list[str]:
    """Every configuration reads a small file and writes one; the bytes must be right.
    Returns the failures."""
    read_path = data_dir / "sequential_verify.bin"
    content = random.Random(7).randbytes(3 * chunk + 12345)  # an odd tail after whole chunks
    read_path.write_bytes(content)
    want_digest = hashlib.sha256(content).hexdigest()
    write_path = data_dir / "sequential_verify_write.bin"
    count = PATTERNS + 2  # wraps around the patterns
    want_written = b"".join(patterns[i % len(patterns)] for i in range(count))
    failures: list[str] = []
    for op, variant, loop in configs:
        name = f"{op} {variant} {loop}"
        try:
            if op == "read":
                h = hashlib.sha256()
                if variant == "sync":
                    n = read_sync(read_path, chunk, h.update)
                else:
                    read_it = functools.partial(ASYNC_READERS[variant], read_path, chunk, h.update)
                    n = run_checked(loop, read_it, timeout)
                if n != len(content) or h.hexdigest() != want_digest:
                    failures.append(f"{name}: read {n} bytes, expected {len(content)}"
                                    + ("" if n != len(content) else ", and different bytes"))
            else:
                write_path.unlink(missing_ok=True)
                if variant == "sync":
                    n = write_sync(write_path, patterns, count, "wb")
                else:
                    write_it = functools.partial(ASYNC_WRITERS[variant], write_path, patterns, count, "wb")
                    n = run_checked(loop, write_it, timeout)
                got = write_path.read_bytes()
                if n != len(want_written) or got != want_written:
                    failures.append(f"{name}: returned {n}, file has {len(got)} bytes"
                                    + (", different from what was written" if len(got) == n else ""))
        except Exception as exc:
            failures.append(f"{name}: {error_text(exc)}")
    read_path.unlink(missing_ok=True)
    write_path.unlink(missing_ok=True)
    return failures


# -------------------------------------------------------------- measuring
@dataclass
class Sample:
    op: str
    variant: str
    loop: str
    repeat: int
    bytes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    iou_cpu_s: float = 0.0  # part of cpu_s spent in io_uring kernel threads (iou-*)
    other_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile (other processes)
    steal_s: float = 0.0
    mb_per_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


_COUNTERS = ("submit_calls", "wakeups", "completions")


def measure_read(s: Sample, path: Path, size: int, chunk: int, timeout: float) -> None:
    if s.variant == "sync":
        with Meter(detail=True) as meter:
            n = read_sync(path, chunk, None)
        meter.fill(s)
    else:
        reader = ASYNC_READERS[s.variant]

        async def timed() -> int:
            ring0 = aioring.statistics() if s.variant.startswith("aioring") else {}
            with Meter(detail=True) as meter:
                got = await reader(path, chunk, None)
            meter.fill(s)
            if ring0:
                ring1 = aioring.statistics()
                s.extra.update({k: ring1[k] - ring0[k] for k in _COUNTERS if k in ring1})
            return got
        n = run_checked(s.loop, timed, timeout)
    if n != size:
        raise RuntimeError(f"read {n} bytes of a {size}-byte file")
    s.bytes = n


def rotated(patterns: Sequence[bytes], run: int) -> list[bytes]:
    """The patterns as run `run` writes them: chunk i is patterns[(i + run) % len(patterns)],
    so that each run leaves different bytes at every offset than the run before."""
    k = run % len(patterns)
    return [*patterns[k:], *patterns[:k]]


def check_written(path: Path, size: int, chunk: int, chunks: Sequence[bytes]) -> None:
    """The file's size, and a sample of its chunks (first, last, 6 more), against what was written."""
    on_disk = path.stat().st_size
    if on_disk != size:
        raise RuntimeError(f"the written file has {on_disk} bytes, expected {size}")
    count = size // chunk
    rng = random.Random(count)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for i in sorted({0, count - 1, *(rng.randrange(count) for _ in range(6))}):
            if os.pread(fd, chunk, i * chunk) != chunks[i % len(chunks)]:
                raise RuntimeError(f"chunk {i} of the written file is not what was written")
    finally:
        os.close(fd)


def prepare_write_file(path: Path, size: int, chunk: int, patterns: Sequence[bytes]) -> None:
    """For --write-mode overwrite: the file the runs write over, made once (untimed, synced so
    that its blocks are allocated) and kept; read whole so that its pages are in the page cache."""
    if not path.exists() or path.stat().st_size != size:
        log(f"creating {path} ({size_name(size)}) ...")
        path.unlink(missing_ok=True)
        write_sync(path, patterns, size // chunk, "wb")
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    warm_file(path)


def measure_write(s: Sample, path: Path, size: int, chunk: int, chunks: Sequence[bytes],
                  overwrite: bool, timeout: float) -> None:
    count = size // chunk
    mode = "r+b" if overwrite else "wb"
    if not overwrite:
        path.unlink(missing_ok=True)
    try:
        if s.variant == "sync":
            with Meter(detail=True) as meter:
                n = write_sync(path, chunks, count, mode)
            meter.fill(s)
        else:
            writer = ASYNC_WRITERS[s.variant]

            async def timed() -> int:
                ring0 = aioring.statistics() if s.variant.startswith("aioring") else {}
                with Meter(detail=True) as meter:
                    got = await writer(path, chunks, count, mode)
                meter.fill(s)
                if ring0:
                    ring1 = aioring.statistics()
                    s.extra.update({k: ring1[k] - ring0[k] for k in _COUNTERS if k in ring1})
                return got
            n = run_checked(s.loop, timed, timeout)
        if n != size:
            raise RuntimeError(f"wrote {n} bytes, expected {size}")
        check_written(path, size, chunk, chunks)
        s.bytes = n
    finally:
        if not overwrite:
            path.unlink(missing_ok=True)  # before writeback: its dirty pages are dropped


# --------------------------------------------------------------- reporting
Key = tuple[str, str, str]


def median_rows(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    groups: dict[Key, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.op, s.variant, s.loop), []).append(s)
    out: dict[Key, dict[str, Any]] = {}
    for key, group in groups.items():
        ok = [s for s in group if s.error is None]
        row: dict[str, Any] = {"op": key[0], "variant": key[1], "loop": key[2], "runs": len(ok),
                               "errors": [s.error for s in group if s.error]}
        if ok:
            rates = [s.mb_per_s for s in ok]
            row.update(mb_per_s=statistics.median(rates), mb_per_s_min=min(rates),
                       mb_per_s_max=max(rates),
                       cpu_s=statistics.median(s.cpu_s for s in ok),
                       iou_cpu_s=statistics.median(s.iou_cpu_s for s in ok),
                       wall_s=statistics.median(s.wall_s for s in ok))
            for name in _COUNTERS:
                per_chunk = [s.extra[name] for s in ok if name in s.extra]
                if per_chunk:
                    row[name] = statistics.median(per_chunk)
        out[key] = row
    return out


def render(headers: list[str], rows: list[list[str]], left: int) -> str:
    """A plain table: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(headers), "-" * len(line(headers)), *(line(r) for r in rows)])


def report(med: dict[Key, dict[str, Any]], configs: list[Key], ops: list[str], size: int,
           chunk: int, repeat: int, overwrite: bool) -> str:
    out: list[str] = []
    runs = f"median of {repeat}" if repeat > 1 else "one run"
    for op in ops:
        what = ("from the page cache" if op == "read"
                else "over a page-cached file, no fsync" if overwrite
                else "into a new file, no fsync")
        out.append(f"\n== {op}: {size_name(size)} in {size_name(chunk)} chunks, {what} ({runs}) ==")
        limit = med.get((op, "sync", "-"), {})
        rows = []
        for o, variant, loop in configs:
            if o != op:
                continue
            r = med.get((o, variant, loop), {})
            if not r.get("runs"):
                rows.append([variant, loop, "FAILED", "", "", "", ""])
                continue
            ratio = cpu_ratio = "-"
            if limit.get("runs"):
                ratio = f"{r['mb_per_s'] / limit['mb_per_s']:.2f}x"
                cpu_ratio = f"{r['cpu_s'] / limit['cpu_s']:.2f}x" if limit["cpu_s"] else "-"
            rows.append([variant, loop, f"{r['mb_per_s']:,.0f}", f"{r['cpu_s']:.3f}",
                         f"{r['iou_cpu_s']:.3f}", ratio, cpu_ratio])
        out.append(render(["variant", "loop", "MB/s", "CPU s", "of it iou", "MB/s / sync",
                           "CPU / sync"], rows, left=2))
    return "\n".join(out)


def targets(med: dict[Key, dict[str, Any]], loops: list[str], size: int) -> list[str]:
    limit = med.get(("read", "sync", "-"), {})
    if not limit.get("runs"):
        return []
    at = "" if size == GIB else f" (this run: {size_name(size)}, not 1 GiB)"
    out = [f"target (informative): sequential 1 GiB reads at least {TARGET_RATIO}x a synchronous "
           f"readinto loop{at}:"]
    for variant in ("aioring", "aioring-readinto", "aioring-fd"):
        for loop in loops:
            r = med.get(("read", variant, loop), {})
            if not r.get("runs"):
                continue
            ratio = r["mb_per_s"] / limit["mb_per_s"]
            verdict = "met" if ratio >= TARGET_RATIO else "not met"
            out.append(f"  info: {verdict:<8}{variant:<17} {loop:<8} {ratio:.2f}x "
                       f"({r['mb_per_s']:,.0f} vs {limit['mb_per_s']:,.0f} MB/s)")
    return out


def notes(med: dict[Key, dict[str, Any]], samples: list[Sample], size: int, chunk: int,
          warm_rates: list[float]) -> list[str]:
    out = ["CPU s is time.process_time() of the run: every thread of the process, including the "
           "executor's threads and io_uring's kernel threads (io-wq iou-wrk-*, SQPOLL iou-sqp-*); "
           "'of it iou' is the part in io_uring's kernel threads."]
    count = size // chunk
    ring = [(k, r) for k, r in sorted(med.items()) if "submit_calls" in r]
    if ring:
        out.append("aioring.statistics() per chunk (median): " + ", ".join(
            f"{op} {v} {lp}: {r['submit_calls'] / count:.2f} submits, {r['wakeups'] / count:.2f} wakeups"
            for (op, v, lp), r in ring))
    if warm_rates:
        out.append(f"Page-cache warm-up reads (untimed, before each round): "
                   f"{statistics.median(warm_rates):,.0f} MB/s median.")
    if samples:
        wall = sum(s.wall_s for s in samples)
        other, steal = sum(s.other_cpu_s for s in samples) / wall, sum(s.steal_s for s in samples) / wall
        line = (f"Meanwhile the rest of the machine used {other:.2f} CPUs on average during timed runs, "
                f"and the hypervisor stole {steal:.2f} CPUs.")
        if other > 0.1 or steal > 0.05:
            line += " Results are noisier than on an idle machine."
        out.append(line)
    spread = spread_note(med.items(), "mb_per_s", lambda k: f"{k[0]} {k[1]} {k[2]}")
    if spread:
        out.append(f"Largest {spread}.")
    return out


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Sequential reads (page-cached) and writes (no fsync) of a 1 GiB file in 1 MiB "
                    "chunks: aioring (aiofiles-style open and fd functions) vs aiofiles, aiofile and "
                    "a synchronous loop, on asyncio and uvloop.")
    parser.add_argument("--size", type=parse_size, default=None,
                        help="bytes per run, e.g. 1G, 256M (default 1G, --quick 64M)")
    parser.add_argument("--chunk", type=parse_size, default=MIB, help="chunk size (default 1M)")
    parser.add_argument("--ops", type=parse_list(ALL_OPS, canonical=True), default=list(ALL_OPS),
                        help="comma-separated: read,write (default both)")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS, canonical=True),
                        default=list(ALL_VARIANTS),
                        help="comma-separated variants (default all: " + ",".join(ALL_VARIANTS)
                             + "; the -readinto ones read only)")
    parser.add_argument("--loops", type=parse_list(ALL_LOOPS, canonical=True), default=list(ALL_LOOPS),
                        help="comma-separated event loops (default asyncio,uvloop)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per configuration, interleaved (order rotated every round); the "
                             f"median is reported (default {DEFAULTS['repeat']}, --quick {QUICK['repeat']})")
    parser.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / ".data",
                        help="where the files live; a real disk, not tmpfs (default benchmarks/.data; "
                             "the read file is kept for the next run, the written one deleted)")
    parser.add_argument("--write-mode", choices=("overwrite", "new"), default="overwrite",
                        help="overwrite: the writes go over an existing file whose pages are in the "
                             "page cache (default); new: into a new file each run, which makes the "
                             "kernel allocate every page (see the notes in the report)")
    parser.add_argument("--clean", action="store_true",
                        help="delete the data files at the end (by default they are kept for the "
                             "next run)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a run is abandoned as hung (default 120)")
    parser.add_argument("--quick", action="store_true", help="64 MiB, one run each: a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw and median results here")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    overwrite = args.write_mode == "overwrite"
    size, repeat, chunk = preset_value(args, preset, "size"), preset_value(args, preset, "repeat"), args.chunk
    if chunk < 1 or size < chunk or size % chunk:
        parser.error("--size must be a positive multiple of --chunk")
    if repeat < 1:
        parser.error("--repeat must be positive")
    started = time.perf_counter()

    skipped: list[str] = []
    loops = list(args.loops)
    if "uvloop" in loops and uvloop is None:
        loops.remove("uvloop")
        skipped.append("uvloop: not installed, its runs are skipped (pip install uvloop)")
    variants = list(args.variants)
    for peer, module in (("aiofiles", aiofiles), ("aiofile", aiofile)):
        if module is None and any(PEER_OF.get(v) == peer for v in variants):
            variants = [v for v in variants if PEER_OF.get(v) != peer]
            skipped.append(f"{peer}: not installed, skipped (pip install {peer})")
    for note in skipped:
        log("note: " + note)
    configs: list[Key] = []
    for op in args.ops:
        for v in READ_VARIANTS if op == "read" else WRITE_VARIANTS:
            if v in variants:
                configs += [(op, v, "-")] if v == "sync" else [(op, v, lp) for lp in loops]
    if not configs:
        sys.exit("error: nothing to run (no variant of these ops is installed and selected)")

    ensure_dir(args.data_dir)
    point, fstype = mount_of(args.data_dir)
    if fstype in ("tmpfs", "ramfs"):
        log(f"WARNING: {args.data_dir} is on {fstype} ({point}), not a real disk: io_uring hands "
            "tmpfs I/O to its worker threads. Use --data-dir on a disk.")
    tag = size_name(size).replace(" ", "")
    read_path = args.data_dir / f"sequential_{tag}.bin"
    write_path = args.data_dir / (f"sequential_write_{tag}.bin" if overwrite else "sequential_write.bin")

    def missing(path: Path) -> bool:
        return not (path.exists() and path.stat().st_size == size)
    need = 64 * MIB
    if "read" in args.ops and missing(read_path):
        need += size
    if "write" in args.ops and (not overwrite or missing(write_path)):
        need += size
    require_space(args.data_dir, need, f"error: {args.data_dir} needs {need / MIB:,.0f} MiB free "
                                       f"for {size_name(size)} runs (use --size or --data-dir)")
    available = mem_available()
    if available is not None and size * 3 > available:
        log(f"WARNING: {size_name(size)} is large next to MemAvailable ({available / MIB:,.0f} MiB): "
            "the read file may not stay in the page cache.")
    raise_mmap_threshold(chunk)
    rng = random.Random(20240607)
    patterns = [rng.randbytes(chunk) for _ in range(PATTERNS)]
    if "read" in args.ops:
        read_path = prepare_read_file(args.data_dir, size)
    if "write" in args.ops and overwrite:
        prepare_write_file(write_path, size, chunk, patterns)
    try:
        backend = aioring.backend()
    except OSError as exc:
        sys.exit(f"error: io_uring is not available here: {exc}")
    failures = verify_all(configs, args.data_dir, chunk, patterns, args.timeout)
    if failures:
        print("error: wrong bytes or errors before any timing:")
        for failure in failures:
            print("  " + failure)
        return 1
    log(f"verified: every variant reads and writes the right bytes ({len(configs)} configurations)")

    fds_before = open_fds()
    samples: list[Sample] = []
    warm_rates: list[float] = []
    total = len(configs) * repeat
    n = 0
    for r in range(repeat):
        if "read" in args.ops:
            warm_rates.append(warm_file(read_path))
        if "write" in args.ops and overwrite:
            warm_file(write_path)  # its pages stay cached: a no-op unless something evicted them
        shift = r * len(configs) // repeat
        for op, variant, loop in configs[shift:] + configs[:shift]:
            n += 1
            log(f"[{n}/{total}] {op:<5} {variant:<17} {loop:<7} repeat {r + 1}/{repeat} ... ", end="")
            s = Sample(op, variant, loop, r + 1)
            try:
                if op == "read":
                    measure_read(s, read_path, size, chunk, args.timeout)
                else:
                    measure_write(s, write_path, size, chunk, rotated(patterns, n), overwrite,
                                  args.timeout)
            except Exception as exc:
                s.error = error_text(exc)
                log(f"FAILED: {s.error}")
            else:
                s.mb_per_s = s.bytes / MB / s.wall_s
                log(f"{s.mb_per_s:8,.0f} MB/s  CPU {s.cpu_s:.3f} s (iou {s.iou_cpu_s:.3f})  "
                    f"wall {s.wall_s:.3f} s")
            samples.append(s)
    gc.collect()
    # Every loop is closed by now: anything left over is a leak worth mentioning.  The
    # kernel ends a closed ring's io-wq workers asynchronously: give them 3 s to go.
    deadline = time.monotonic() + 3
    while iou_thread_cpu() and time.monotonic() < deadline:
        time.sleep(0.05)
    leftovers = {"fds": open_fds() - fds_before, "io_uring_threads": len(iou_thread_cpu())}
    med = median_rows(samples)
    elapsed = time.perf_counter() - started

    caio_impl = "-"
    if aiofile is not None:
        import caio
        caio_impl = caio.AsyncioContext.__module__.rsplit(".", 1)[-1]
    meta: dict[str, Any] = {
        **machine_info(),
        "checkout": git_state(),
        "aioring_backend": backend,
        "versions": {d: version(d) for d in ("aioring", "uvloop", "aiofiles", "aiofile", "caio")},
        "caio_backend": caio_impl,
        "read_file": str(read_path), "filesystem": fstype, "size": size, "chunk": chunk,
        "ops": args.ops, "loops": loops, "variants": variants, "repeat": repeat,
        "write_mode": args.write_mode, "write_file": str(write_path), "fsync": False,
        "writeback": writeback_note(size), "dirty_expire_s": dirty_expire(), "skipped": skipped,
        "leftovers_after_all_loops_closed": leftovers,
        "runtime_s": elapsed,
    }
    ver = meta["versions"]
    print(f"{machine_line(meta)} | aioring.backend() = {backend} | {meta['checkout']}")
    print(f"aioring {ver['aioring']}, uvloop {ver['uvloop']}, aiofiles {ver['aiofiles']}, "
          f"aiofile {ver['aiofile']} (caio {ver['caio']}, {caio_impl})")
    print(f"files in {args.data_dir} ({fstype} at {point}); MB = 10^6 bytes; a run's time covers "
          "open, every chunk and close")
    for note in skipped:
        print("skipped: " + note)
    print(report(med, configs, args.ops, size, chunk, repeat, overwrite))
    if "read" in args.ops:
        print()
        print("\n".join(targets(med, loops, size)))
    print()
    if "write" in args.ops:
        if overwrite:
            expire = meta["dirty_expire_s"]
            print(f"Writes: over {write_path.name}, which exists and whose pages stay in the page cache "
                  "(the kernel allocates no page); no fsync, neither timed nor after a run. "
                  f"{meta['writeback'][0].upper()}{meta['writeback'][1:]}, but pages left dirty for more "
                  f"than {expire if expire is not None else '?'} s are written back in the background, "
                  "which can overlap later runs.")
        else:
            print(f"Writes: into a new file each run, deleted right after it; no fsync, neither timed "
                  f"nor after a run; {meta['writeback']}. Every run makes the kernel allocate the "
                  "file's pages: on a VM that returns freed pages to its host this costs far more, "
                  "and varies far more, than the copy (--write-mode overwrite avoids it).")
    if "read" in args.ops:
        print(f"Reads: {read_path.name} is read whole before every round of runs, so every timed "
              f"read is a page-cache hit (MemAvailable at start "
              + (f"{available / MIB:,.0f} MiB" if available else "unknown") + ").")
    for line in notes(med, [s for s in samples if s.error is None], size, chunk, warm_rates):
        print(line)
    if leftovers["fds"] or leftovers["io_uring_threads"]:
        print(f"NOTE: after all loops were closed, {leftovers['fds']} more fds are open than before "
              f"the runs, and {leftovers['io_uring_threads']} io_uring kernel threads remain 3 s later.")
    if args.clean:
        for path in (read_path, write_path):
            path.unlink(missing_ok=True)
        print(f"removed {read_path.name} and {write_path.name} (--clean)")
    failed = [s for s in samples if s.error]
    if failed:
        print(f"FAILED runs: {len(failed)} of {len(samples)}")
        for s in failed:
            print(f"  {s.op} {s.variant} {s.loop} repeat {s.repeat}: {s.error}")
    print(f"total runtime {elapsed:.1f} s")
    write_json(args.json, {"meta": meta, "samples": [asdict(s) for s in samples],
                           "medians": list(med.values())})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
