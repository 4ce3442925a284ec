#!/usr/bin/env python3
"""Random 4 KiB reads from a page-cached file: aioring against its peers.

Every measured run does a fixed number of 4 KiB reads at random, 4 KiB-aligned
offsets (the same seeded list for every variant), spread over T concurrent
tasks, and reports reads per second and process CPU microseconds per read.

Variants (each on asyncio's default loop and on uvloop):

* aioring   ``await aioring.readinto(fd, buf, off)``, one bytearray per task
* aioring_read  ``await aioring.read(fd, 4096, off)``: a new bytes object a read, as os.pread's
* aioring_open  ``await f.seek(off); await f.read(4096)``, one ``aioring.open(path, "rb",
  buffering=0)`` file per task: the aiofiles variant's code with ``import aioring as aiofiles``
* aioring_buffered  the same on ``aioring.open(path, "rb")``: the stdlib's buffered reader
  over the ring's raw file, as most aiofiles code opens its files
* aiofile   ``await afp.read(4096, off)`` on one ``aiofile.AIOFile`` (caio's default backend)
* aiofiles  ``await f.seek(off); await f.read(4096)``, one unbuffered file per task
* executor  ``await loop.run_in_executor(None, os.pread, fd, 4096, off)``
* sync      a plain ``os.pread`` loop in one thread (no event loop): the ceiling

Each configuration runs --repeat times, round-robin over all configurations,
and the median is reported.  Slow variants do fewer reads per run (see
OPS_SCALE); only rates are compared.

Run from the repository root:  python benchmarks/file_reads.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from benchlib import (
    MIB, REPO, Meter, Progress, add_run_options, aioring_backend, ensure_dir, error_text, iou_thread_cpu,
    log, machine_line, median_rows, mem_available, mount_of, new_loop, noise_notes, open_fds, optional,
    parse_list, presets, print_failures, render, require_space, run_in_new_loop, run_meta, uvloop,
    warm_file, write_json, write_random,
)

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring


BLOCK = 4096
TARGET_RATIO = 0.75  # aioring's reads per second over the synchronous loop's, at least
TARGET_TASKS = (1, 64)
ALL_TASKS = (1, 16, 64, 256)
ALL_LOOPS = ("asyncio", "uvloop")
ASYNC_VARIANTS = ("aioring", "aioring_read", "aioring_open", "aioring_buffered", "aiofile", "aiofiles",
                  "executor")
ALL_VARIANTS = (*ASYNC_VARIANTS, "sync")
# Reads per run, as a share of --ops: slow variants do fewer so that every
# run lasts roughly as long (about 0.3-1 s by default on a 2-core VM).
OPS_SCALE = {"aioring": 1.0, "aioring_read": 1.0, "aioring_open": 1.0, "aioring_buffered": 1 / 4,
             "aiofile": 1.0, "executor": 1 / 8, "aiofiles": 1 / 24, "sync": 4.0}
# Ratios printed in the tables: aioring's ops/s over each of these.
RATIO_AGAINST = ("aiofile", "aiofiles", "sync")
DEFAULTS: dict[str, Any] = {"file_size": 256 * MIB, "ops": 60_000, "repeat": 3}
QUICK: dict[str, Any] = {"file_size": 16 * MIB, "ops": 2_000, "repeat": 2}

# A reader does its share of the offsets and returns the bytes it got.
Reader = Callable[[Sequence[int]], Awaitable[int]]


# --------------------------------------------------------------------- setup
def parse_size(text: str) -> int:
    """'256M', '1G', '65536', '64k' -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 256M, 1G)")
    return int(match[1]) * {"": 1, "k": 1 << 10, "m": MIB, "g": 1 << 30}[match[2].lower()]


def parse_tasks(text: str) -> list[int]:
    try:
        tasks = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of task counts: {text!r}") from None
    if not tasks or min(tasks) < 1:
        raise argparse.ArgumentTypeError("task counts must be positive")
    return tasks


def prepare_file(data_dir: Path, size: int) -> tuple[Path, str]:
    """Create the data file once (random bytes), then read it fully to warm the page cache."""
    ensure_dir(data_dir)
    point, fstype = mount_of(data_dir)
    if fstype in ("tmpfs", "ramfs"):
        log(f"WARNING: {data_dir} is on {fstype} ({point}), not a real disk; "
            "page-cache reads from tmpfs take a different kernel path. Use --data-dir.")
    available = mem_available()
    if available is not None and size > available // 2:
        log(f"WARNING: the file ({size / MIB:.0f} MiB) is large next to MemAvailable "
            f"({available / MIB:.0f} MiB); it may not stay in the page cache.")

    path = data_dir / f"file_reads_{size // MIB}MiB.bin" if size % MIB == 0 \
        else data_dir / f"file_reads_{size}B.bin"
    if not path.exists() or path.stat().st_size != size:
        require_space(data_dir, size + 64 * MIB,
                      f"error: not enough free space in {data_dir} for a {size / MIB:.0f} MiB file")
        log(f"creating {path} ({size / MIB:.0f} MiB) ...")
        write_random(path, path.with_suffix(".partial"), size, os.urandom)

    start = time.perf_counter()
    warm_file(path)
    elapsed = time.perf_counter() - start
    log(f"warmed the page cache: {size / MIB:.0f} MiB in {elapsed:.2f} s")
    return path, fstype


# ----------------------------------------------------------------- optional
aiofiles = optional("aiofiles")
aiofile = optional("aiofile")
PEER_MODULES = {"uvloop": uvloop, "aiofiles": aiofiles, "aiofile": aiofile}


def caio_backend() -> str:
    """Which caio implementation aiofile's default context uses, e.g. 'linux_uring'."""
    import caio
    module: str = caio.AsyncioContext.__module__  # e.g. caio.linux_uring_asyncio
    return module.rsplit(".", 1)[-1].removesuffix("_asyncio")


# ------------------------------------------------------------------ readers
@asynccontextmanager
async def open_aioring(path: Path, ntasks: int) -> AsyncIterator[list[Reader]]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def make() -> Reader:
        buf = bytearray(BLOCK)  # preallocated, one per task
        readinto = aioring.readinto

        async def reader(offsets: Sequence[int]) -> int:
            total = 0
            for off in offsets:
                total += await readinto(fd, buf, off)
            return total
        return reader
    try:
        yield [make() for _ in range(ntasks)]
    finally:
        os.close(fd)


@asynccontextmanager
async def open_aioring_read(path: Path, ntasks: int) -> AsyncIterator[list[Reader]]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    read = aioring.read

    async def reader(offsets: Sequence[int]) -> int:
        total = 0
        for off in offsets:
            total += len(await read(fd, BLOCK, off))
        return total
    try:
        yield [reader] * ntasks
    finally:
        os.close(fd)


@asynccontextmanager
async def _seek_readers(opener: Any, path: Path, ntasks: int,
                        buffering: int = 0) -> AsyncIterator[list[Reader]]:
    """One file per task from `opener` (an aiofiles-style open; unbuffered
    unless `buffering` says otherwise), each read at an offset as seek + read."""
    files = [await opener(path, "rb", buffering=buffering) for _ in range(ntasks)]

    def make(f: Any) -> Reader:
        async def reader(offsets: Sequence[int]) -> int:
            total = 0
            for off in offsets:
                await f.seek(off)
                total += len(await f.read(BLOCK))
            return total
        return reader
    try:
        yield [make(f) for f in files]
    finally:
        for f in files:
            await f.close()


def open_aiofiles(path: Path, ntasks: int) -> Any:
    assert aiofiles is not None
    return _seek_readers(aiofiles.open, path, ntasks)


def open_aioring_open(path: Path, ntasks: int) -> Any:
    return _seek_readers(aioring.open, path, ntasks)


def open_aioring_buffered(path: Path, ntasks: int) -> Any:
    return _seek_readers(aioring.open, path, ntasks, buffering=-1)


@asynccontextmanager
async def open_aiofile(path: Path, ntasks: int) -> AsyncIterator[list[Reader]]:
    assert aiofile is not None
    afp = aiofile.AIOFile(str(path), "rb")  # default context: caio's preferred backend
    await afp.open()

    async def reader(offsets: Sequence[int]) -> int:
        total = 0
        for off in offsets:
            total += len(await afp.read(BLOCK, off))
        return total
    try:
        yield [reader] * ntasks
    finally:
        await afp.close()


@asynccontextmanager
async def open_executor(path: Path, ntasks: int) -> AsyncIterator[list[Reader]]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    loop = asyncio.get_running_loop()
    pread = os.pread

    async def reader(offsets: Sequence[int]) -> int:
        total = 0
        for off in offsets:
            total += len(await loop.run_in_executor(None, pread, fd, BLOCK, off))
        return total
    try:
        yield [reader] * ntasks
    finally:
        os.close(fd)


OPENERS: dict[str, Callable[[Path, int], Any]] = {
    "aioring": open_aioring, "aioring_read": open_aioring_read, "aioring_open": open_aioring_open,
    "aioring_buffered": open_aioring_buffered, "aiofiles": open_aiofiles,
    "aiofile": open_aiofile, "executor": open_executor,
}


# -------------------------------------------------------------- measuring
@dataclass
class Sample:
    variant: str
    loop: str
    tasks: int
    repeat: int
    ops: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    iou_cpu_s: float = 0.0  # part of cpu_s spent in io_uring kernel threads (iou-*)
    other_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile (other processes)
    steal_s: float = 0.0  # time the hypervisor gave our vCPUs to someone else
    ops_per_s: float = 0.0
    cpu_us_per_op: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


_COUNTERS = ("submit_calls", "wakeups", "completions", "backpressured", "cancels")


async def measure(sample: Sample, path: Path, offsets: Sequence[int], warm: Sequence[int]) -> None:
    """Read `offsets` with `sample.tasks` tasks of `sample.variant`; fill in `sample`."""
    variant, ntasks, extra = sample.variant, sample.tasks, sample.extra
    async with OPENERS[variant](path, ntasks) as readers:
        # Untimed warm-up: every task reads a little (rings, threads, contexts are made here).
        await asyncio.gather(*(r(warm[i::ntasks]) for i, r in enumerate(readers)))
        if variant == "aiofile":
            context = aiofile.aio.get_default_context()  # type: ignore[union-attr]
            extra["caio_backend"] = caio_backend()
            extra["sqpoll"] = bool(getattr(context.context, "sqpoll", False))
        shares = [offsets[i::ntasks] for i in range(ntasks)]
        coros = [r(share) for r, share in zip(readers, shares, strict=True)]
        ring0 = aioring.statistics() if variant == "aioring" else {}
        with Meter(detail=True) as meter:
            totals = await asyncio.gather(*coros)
        meter.fill(sample)
        if variant == "aioring":
            ring1 = aioring.statistics()
            extra.update({k: ring1[k] - ring0[k] for k in _COUNTERS if k in ring1})
    if sum(totals) != len(offsets) * BLOCK:
        raise RuntimeError(f"short reads: got {sum(totals)} bytes, expected {len(offsets) * BLOCK}")


def run_async(sample: Sample, path: Path, offsets: Sequence[int], warm: Sequence[int],
              timeout: float) -> None:
    """One measurement on a fresh event loop (closed afterwards, with whatever rings it made)."""
    # The timeout covers opening and warm-up too: a hang anywhere becomes a failed run.
    run_in_new_loop(sample.loop, lambda: measure(sample, path, offsets, warm), timeout)


def run_sync(sample: Sample, path: Path, offsets: Sequence[int]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        pread = os.pread
        total = 0
        with Meter(detail=True) as meter:
            for off in offsets:
                total += len(pread(fd, BLOCK, off))
        meter.fill(sample)
    finally:
        os.close(fd)
    if total != len(offsets) * BLOCK:
        raise RuntimeError(f"short reads: got {total} bytes, expected {len(offsets) * BLOCK}")


# ------------------------------------------------------------- correctness
async def verify_aioring(path: Path, size: int, seed: int) -> None:
    """aioring.readinto/read must return what os.pread returns (untimed)."""
    rng = random.Random(seed ^ 0x5EED)
    nblocks = size // BLOCK
    offsets = [0, (nblocks - 1) * BLOCK, BLOCK // 2] + [rng.randrange(nblocks) * BLOCK for _ in range(13)]
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for off in offsets:  # one at a time
            expected = os.pread(fd, BLOCK, off)
            buf = bytearray(BLOCK)
            n = await aioring.readinto(fd, buf, off)
            if n != len(expected) or bytes(buf[:n]) != expected:
                raise AssertionError(f"readinto at offset {off}: {n} bytes, differs from os.pread")
            if await aioring.read(fd, BLOCK, off) != expected:
                raise AssertionError(f"read at offset {off} differs from os.pread")
        bufs = [bytearray(BLOCK) for _ in offsets]  # all at once
        counts = await asyncio.gather(*(aioring.readinto(fd, buf, off)
                                        for buf, off in zip(bufs, offsets, strict=True)))
        for off, n, buf in zip(offsets, counts, bufs, strict=True):
            if bytes(buf[:n]) != os.pread(fd, BLOCK, off):
                raise AssertionError(f"concurrent readinto at offset {off} differs from os.pread")
        if await aioring.readinto(fd, bytearray(BLOCK), size) != 0:
            raise AssertionError("readinto at end of file did not return 0")
    finally:
        os.close(fd)


# --------------------------------------------------------------- reporting
Key = tuple[str, str, int]  # variant, loop, tasks


def summarize(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    def head(key: Key, group: list[Sample]) -> dict[str, Any]:
        return {"variant": key[0], "loop": key[1], "tasks": key[2], "ops": group[0].ops}

    def extra(ok: list[Sample]) -> dict[str, Any]:
        row: dict[str, Any] = {"iou_cpu_us_per_op": median(s.iou_cpu_s / s.ops * 1e6 for s in ok)}
        for name in _COUNTERS:  # aioring.statistics() deltas
            per_op = [s.extra[name] / s.ops for s in ok if name in s.extra]
            if per_op:
                row[f"{name}_per_op"] = median(per_op)
        return row

    return median_rows(samples, lambda s: (s.variant, s.loop, s.tasks), head,
                       ("ops_per_s", "cpu_us_per_op"), extra)


def report(medians: dict[Key, dict[str, Any]], variants: list[str],
           loops: list[str], tasks: list[int], repeat: int) -> str:
    def get(variant: str, loop: str, t: int, key: str) -> float | None:
        row = medians.get((variant, "-", 1) if variant == "sync" else (variant, loop, t))
        return None if row is None or key not in row else row[key]

    def fmt(value: float | None, spec: str, suffix: str = "") -> str:
        return "-" if value is None else format(value, spec) + suffix

    out: list[str] = []
    ratios = [v for v in RATIO_AGAINST if v in variants] if "aioring" in variants else []
    for loop in loops:
        out.append(f"\n== {loop}: median of {repeat}; ops/s = 4 KiB reads per second, "
                   "CPU = process CPU time per read ==")
        groups = [("", 1), ("ops/s", len(variants)), ("CPU us/op", len(variants))]
        names = ["tasks", *variants, *variants]
        if ratios:
            groups.append(("aioring ops/s over", len(ratios)))
            names += ratios
        rows = []
        for t in tasks:
            row = [str(t)]
            row += [fmt(get(v, loop, t, "ops_per_s"), ",.0f") for v in variants]
            row += [fmt(get(v, loop, t, "cpu_us_per_op"), ".1f") for v in variants]
            for v in ratios:
                a, b = get("aioring", loop, t, "ops_per_s"), get(v, loop, t, "ops_per_s")
                row.append(fmt(a / b if a and b else None, ".2f", "x"))
            rows.append(row)
        out.append(render(names, rows, groups=groups))
    if "sync" in variants:
        out.append("(sync is one os.pread loop in one thread, independent of loop and tasks: "
                   "the same value is repeated in every row)")
    return "\n".join(out)


def targets(medians: dict[Key, dict[str, Any]], loops: list[str], tasks: list[int]) -> list[str]:
    """The target's verdicts: aioring's readinto (and read) at least
    TARGET_RATIO x the synchronous os.pread loop's reads per second, with
    each of TARGET_TASKS."""
    limit = medians.get(("sync", "-", 1), {}).get("ops_per_s")
    if not limit:
        return []
    out = [f"target (informative): 4 KiB page-cache reads at least {TARGET_RATIO}x a synchronous "
           "os.pread loop, with " + " and ".join(map(str, TARGET_TASKS)) + " tasks:"]
    for variant in ("aioring", "aioring_read"):
        for loop in loops:
            for t in TARGET_TASKS:
                rate = medians.get((variant, loop, t), {}).get("ops_per_s") if t in tasks else None
                if rate:
                    verdict = "met" if rate / limit >= TARGET_RATIO else "not met"
                    out.append(f"  info: {verdict:<8}{variant:<13}{loop:<8} tasks={t:<3} {rate / limit:.2f}x "
                               f"({rate:,.0f} vs {limit:,.0f} reads/s)")
    return out


def notes(medians: dict[Key, dict[str, Any]], samples: list[Sample],
          loops: list[str], tasks: list[int]) -> str:
    out: list[str] = []
    # Where io_uring kernel threads did part of the work.
    iou = {k: r["iou_cpu_us_per_op"] for k, r in medians.items() if r.get("iou_cpu_us_per_op", 0) > 0.05}
    out.append("CPU is time.process_time(): every thread of this process, including executor threads "
               "and io_uring's kernel threads (SQPOLL iou-sqp-*, io-wq iou-wrk-*), which belong to "
               "the process and are counted.")
    if iou:
        parts = [f"{v}/{lp}/T={t}: {us:.1f}" for (v, lp, t), us in sorted(iou.items())]
        out.append("Of that, us/op spent in io_uring kernel threads (median): " + ", ".join(parts))
    else:
        out.append("No measurable CPU in io_uring kernel threads (iou-*) in any run.")
    ring_rows = []
    for t in tasks:
        row = [str(t)]
        for lp in loops:
            r = medians.get(("aioring", lp, t), {})
            row += [f"{r[k]:.3f}" if k in r else "-"
                    for k in ("submit_calls_per_op", "wakeups_per_op", "backpressured_per_op")]
        ring_rows.append(row)
    if any(c != "-" for row in ring_rows for c in row[1:]):
        out.append("aioring.statistics() per read (median):")
        out.append(render(["tasks", *(["submits", "wakeups", "backpressured"] * len(loops))], ring_rows,
                          groups=[("", 1), *((lp, 3) for lp in loops)]))
    out += noise_notes(samples, "the timed runs", medians.items(), "ops_per_s",
                       lambda k: f"{k[0]}, {k[1]}, T={k[2]}")
    return "\n".join(out)


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="4 KiB random reads from a page-cached file: aioring vs aiofile, aiofiles, "
                    "run_in_executor(os.pread) and plain os.pread, on asyncio and uvloop.")
    parser.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / ".data",
                        help="where the data file lives; must be a real disk, not tmpfs "
                             "(default: benchmarks/.data)")
    parser.add_argument("--file-size", type=parse_size, default=None,
                        help="data file size, e.g. 256M (default 256M, --quick 16M)")
    parser.add_argument("--ops", type=int, default=None,
                        help="reads per run for aioring and aiofile; others scale it: "
                             + ", ".join(f"{v} x{s:.3g}" for v, s in OPS_SCALE.items())
                             + f" (default {DEFAULTS['ops']}, --quick {QUICK['ops']})")
    parser.add_argument("--tasks", type=parse_tasks, default=list(ALL_TASKS),
                        help="comma-separated concurrent task counts (default 1,16,64,256)")
    parser.add_argument("--loops", type=parse_list(ALL_LOOPS), default=list(ALL_LOOPS),
                        help="comma-separated event loops (default asyncio,uvloop)")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS), default=list(ALL_VARIANTS),
                        help="comma-separated variants (default " + ",".join(ALL_VARIANTS) + ")")
    parser.add_argument("--seed", type=int, default=20240521, help="seed of the random offsets")
    add_run_options(parser, DEFAULTS, QUICK, timeout=120.0,
                    quick_help="tiny file and counts: a smoke test that finishes in seconds",
                    json_help="write raw and median results here")
    args = parser.parse_args(argv)
    preset = presets(args, DEFAULTS, QUICK)
    file_size, base_ops, repeat = preset["file_size"], preset["ops"], preset["repeat"]
    if file_size < BLOCK or file_size % BLOCK:
        parser.error("--file-size must be a positive multiple of 4096")
    if base_ops < 1 or repeat < 1:
        parser.error("--ops and --repeat must be positive")
    started = time.perf_counter()

    # Drop what is not installed, with a note.
    skipped: list[str] = []
    loops = list(args.loops)
    variants = [v for v in ALL_VARIANTS if v in args.variants]  # canonical order
    if "uvloop" in loops and uvloop is None:
        loops.remove("uvloop")
        skipped.append("uvloop: not installed, its runs are skipped")
    for peer in ("aiofiles", "aiofile"):
        if peer in variants and PEER_MODULES[peer] is None:
            variants.remove(peer)
            skipped.append(f"{peer}: not installed, skipped (pip install {peer})")
    if not loops and any(v in ASYNC_VARIANTS for v in variants):
        sys.exit("error: no event loop left to run on")
    for note in skipped:
        log("note: " + note)

    path, fstype = prepare_file(args.data_dir, file_size)
    backend = aioring_backend(aioring)
    for loop_name in loops:
        loop = new_loop(loop_name)
        try:
            loop.run_until_complete(verify_aioring(path, file_size, args.seed))
        except AssertionError as exc:
            sys.exit(f"error: aioring returned wrong data on {loop_name}: {exc}")
        except Exception as exc:
            sys.exit(f"error: aioring failed the correctness check on {loop_name}: "
                     f"{type(exc).__name__}: {exc}")
        finally:
            loop.close()
    log("verified: aioring.readinto/read match os.pread on " + ", ".join(loops))

    # The same seeded offsets for every variant: each uses a prefix of this list.
    ops = {v: max(*args.tasks, round(base_ops * OPS_SCALE[v])) for v in variants}
    rng = random.Random(args.seed)
    nblocks = file_size // BLOCK
    offsets = [rng.randrange(nblocks) * BLOCK for _ in range(max(ops.values()))]
    warm = [rng.randrange(nblocks) * BLOCK for _ in range(2 * max(args.tasks))]

    fds_before = open_fds()
    configs: list[tuple[str, str, int]] = []
    for v in variants:
        if v == "sync":
            configs.append(("sync", "-", 1))
        else:
            configs += [(v, lp, t) for lp in loops for t in args.tasks]
    # Round-robin: the repeats of one configuration are spread out.
    runs = [(r, *config) for r in range(1, repeat + 1) for config in configs]
    progress = Progress([(variant, loop_name, t) for _, variant, loop_name, t in runs], started=started)
    samples: list[Sample] = []
    for r, variant, loop_name, t in runs:
        progress.start(f"{variant:<8} loop={loop_name:<7} tasks={t:<3} repeat {r}/{repeat}")
        s = Sample(variant, loop_name, t, r, ops=ops[variant])
        part = offsets[:s.ops]
        try:
            if variant == "sync":
                run_sync(s, path, part)
            else:
                run_async(s, path, part, warm[:2 * t], args.timeout)
        except Exception as exc:
            s.error = error_text(exc)
            progress.finish(f"FAILED: {s.error}")
        else:
            s.ops_per_s = s.ops / s.wall_s
            s.cpu_us_per_op = s.cpu_s / s.ops * 1e6
            progress.finish(f"{s.ops_per_s:>10,.0f} ops/s {s.cpu_us_per_op:7.1f} us/op CPU "
                            f"({s.wall_s:.2f} s)")
        samples.append(s)

    medians = summarize(samples)
    gc.collect()
    # Every loop is closed by now: anything left over is a leak worth mentioning.
    leftovers = {"fds": open_fds() - fds_before,
                 "io_uring_threads": len(iou_thread_cpu())}
    elapsed = progress.elapsed

    # Environment.
    caio_info = "-"
    aiofile_extra = next((s.extra for s in samples if s.variant == "aiofile" and s.extra), None)
    if aiofile is not None:
        impl = aiofile_extra["caio_backend"] if aiofile_extra else caio_backend()
        sq = "" if aiofile_extra is None else (", SQPOLL on" if aiofile_extra["sqpoll"] else ", SQPOLL off")
        caio_info = f"{impl}{sq}"
    meta: dict[str, Any] = {
        **run_meta(backend, ("aioring", "uvloop", "aiofiles", "aiofile", "caio")),
        "aiofile_caio_backend": caio_info,
        "file": str(path),
        "filesystem": fstype,
        "file_size": file_size,
        "block": BLOCK,
        "ops_per_run": ops,
        "tasks": args.tasks,
        "loops": loops,
        "variants": variants,
        "repeat": repeat,
        "seed": args.seed,
        "skipped": skipped,
        "leftovers_after_all_loops_closed": leftovers,
        "runtime_s": elapsed,
    }
    v = meta["versions"]
    print(f"{machine_line(meta)} | aioring.backend() = {backend}")
    print(f"aioring {v['aioring']}, uvloop {v['uvloop']}, aiofiles {v['aiofiles']}, "
          f"aiofile {v['aiofile']} on caio {v['caio']} backend: {caio_info}")
    print(f"file {path} ({file_size / MIB:.0f} MiB on {fstype}, page-cached), 4 KiB reads at random "
          f"aligned offsets (seed {args.seed}); reads per run: "
          + ", ".join(f"{k} {c:,}" for k, c in ops.items()))
    for note in skipped:
        print("skipped: " + note)
    print(report(medians, variants, loops, args.tasks, repeat))
    for line in targets(medians, loops, args.tasks):
        print(line)
    print()
    print(notes(medians, [s for s in samples if s.error is None], loops, args.tasks))
    if leftovers["fds"] or leftovers["io_uring_threads"]:
        print(f"NOTE: after all loops were closed, {leftovers['fds']} more fds are open than "
              f"before the runs, and {leftovers['io_uring_threads']} io_uring kernel threads remain.")
    failed = print_failures(samples, lambda s: f"{s.variant} {s.loop} T={s.tasks} repeat {s.repeat}")
    print(f"total runtime {elapsed:.1f} s")

    write_json(args.json, {"meta": meta, "samples": [asdict(s) for s in samples],
                           "medians": list(medians.values())})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
