#!/usr/bin/env python3
"""Everyday aiofiles workloads: ``import aioring as aiofiles`` against ``import aiofiles``.

The same async code runs twice in one process, with the module passed in as a
parameter: once with aiofiles (every call a hop to the loop's thread pool) and
once with aioring (the I/O on io_uring).  A plain synchronous stdlib loop
(builtin open, os.stat) doing the same work is printed beside them.

Workloads (sizes of the default run; --quick shrinks them):

* read    a 1 GiB file in 1 MiB chunks (``while chunk := await f.read(1 << 20)``), MB/s.
          Page-cache hot: the file is read once, untimed, just before every
          timed run, so this measures CPU and copy cost, not the disk.
* small   10,000 files of 4 KiB: open 'wb', write, close, then open 'rb',
          read(), close and compare the bytes; files/s for the round trip,
          in one task and spread over --tasks (32) tasks with asyncio.gather.
* lines   ``async for line in f`` over a 100 MB UTF-8 text file opened 'r';
          the line count must equal the stdlib's; lines/s and MB/s.
* stat    ``await aiofiles.os.stat(path)`` on 10,000 files, in one task and
          over --tasks tasks; files/s.

aiofiles is slow, so its runs may do less work (AIOFILES_SHARE; by default
only the lines workload, over a shorter text file that is a prefix of the
same text); only rates are compared.  Within each repetition every workload runs aioring,
aiofiles, then stdlib (interleaved); medians of --repeat repetitions are
reported with the ratio aioring/aiofiles and the issue's targets (on
asyncio's loop: >= 3x aiofiles on small files, lines and stats, >= 1.5x on
the big read) as PASS/FAIL.  Every async run gets a fresh event loop, closed
afterwards.  MB = 10^6 bytes.

Run from the repository root:  python benchmarks/aiofiles_ops.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import shutil
import statistics
import string
import sys
import time
import traceback
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchlib import (
    GIB, KIB, MB, MIB, REPO, Meter, ensure_dir, error_text, git_state, log, machine_info, machine_line,
    mem_available, mount_of, open_fds, parse_list, preset_value, require_space, run_in_new_loop, spread_note,
    uvloop, version, warm_file, write_json, write_random,
)

try:
    import aioring
    import aioring.os
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring
    import aioring.os

try:
    import aiofiles
    import aiofiles.os
except ImportError:
    aiofiles = None  # type: ignore[assignment]


CHUNK = MIB  # read size of the big-file workload
SMALL = 4 * KIB  # size of each small file
ASYNC_IMPLS = ("aioring", "aiofiles")
IMPLS = (*ASYNC_IMPLS, "stdlib")
ALL_LOOPS = ("asyncio", "uvloop")
ALL_WORKLOADS = ("read", "small", "lines", "stat")
# Share of each workload's size that one aiofiles run does (its per-line and
# per-file thread hops make it slow); aioring and stdlib always do all of it.
AIOFILES_SHARE = {"read": 1.0, "small": 1.0, "lines": 1 / 32, "stat": 1.0}
# The issue's targets: aioring's rate over aiofiles' on asyncio's loop.
TARGETS = {"read": 1.5, "small": 3.0, "lines": 3.0, "stat": 3.0}
TARGET_LOOP = "asyncio"
DEFAULTS: dict[str, Any] = {"read_size": GIB, "files": 10_000, "text_size": 100 * MB,
                            "stats": 10_000, "repeat": 3}
QUICK: dict[str, Any] = {"read_size": 64 * MIB, "files": 1_000, "text_size": 10 * MB,
                         "stats": 1_000, "repeat": 3}
TEXT_FORMAT = 1  # bump when make_text changes, so old text files are not reused


# ----------------------------------------------------------------- arguments
def parse_size(text: str) -> int:
    """'1G', '1GiB', '64M' -> binary units; '100MB', '10kB' -> decimal; '4096' -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:([kKmMgG])(i?)([bB]?))?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 1G, 64MiB, 100MB)")
    number, prefix, binary, byte = match.groups()
    if not prefix:
        return int(number)
    power = "kmg".index(prefix.lower()) + 1
    decimal = bool(byte) and not binary  # "MB" is 10^6, "M" and "MiB" are 2^20
    return int(number) * ((1000 if decimal else 1024) ** power)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def human(size: int) -> str:
    """Sizes as the workloads are named: powers of two in GiB/MiB, the rest in MB."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    if size >= MB:
        return f"{size / MB:g} MB"
    return f"{size:,} B"


# ---------------------------------------------------------------- test data
@dataclass
class Data:
    """Every file the workloads use, and what they must find in them."""

    data_dir: Path
    fstype: str = "unknown"
    probe: str = ""  # a 4 KiB file for the untimed warm-up of every run
    big: str = ""
    big_size: int = 0
    big_crc: int | None = None  # computed on first need (verification)
    small_dir: str = ""
    small_names: list[str] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    texts: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # impl -> (path, bytes, lines)
    text_size: int = 0  # nominal size of the full text file
    stat_paths: list[str] = field(default_factory=list)
    stat_sizes: list[int] = field(default_factory=list)


def prepare_big(data: Data, size: int) -> None:
    name = f"aiofiles_ops_{size // MIB}MiB.bin" if size % MIB == 0 else f"aiofiles_ops_{size}B.bin"
    path = data.data_dir / name
    available = mem_available()
    if available is not None and size > available // 2:
        log(f"WARNING: the {human(size)} file is large next to MemAvailable ({available // MIB} MiB); "
            "it may not stay in the page cache and the read workload would measure the disk.")
    if not path.exists() or path.stat().st_size != size:
        require_space(data.data_dir, size + 256 * MIB,
                      f"error: not enough free space in {data.data_dir} for a {human(size)} file")
        log(f"creating {path} ({human(size)} of random bytes) ...")
        write_random(path, path.with_name(path.name + ".partial"), size, random.Random(size).randbytes)
    data.big, data.big_size = str(path), size
    log(f"big file {path}: warm read {warm_file(data.big):,.0f} MB/s (page cache)")


def make_text(path: Path, size: int, seed: int) -> int:
    """A UTF-8 text of about `size` bytes (whole lines); returns its line count.

    Lines are 0 to 30 words (about 60 bytes on average, some empty), a few
    words non-ASCII.  The same seed gives the same stream of lines, so a
    smaller file is a prefix of a larger one.
    """
    rng = random.Random(seed)
    letters = string.ascii_letters + string.digits
    words = ["".join(rng.choices(letters, k=rng.randint(1, 10))) for _ in range(3000)]
    words += ["café", "naïve", "Straße", "smörgåsbord", "日本語", "Ελληνικά", "—", "€5", "ok✓"]
    counts = (0, 1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30)
    pool = [(" ".join(rng.choices(words, k=rng.choice(counts))) + "\n").encode() for _ in range(8192)]
    written = lines = 0
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        while written < size:
            batch = rng.choices(pool, k=4096)
            blob = b"".join(batch)
            if written + len(blob) > size:  # the last batch: stop at the first line past `size`
                keep = 0
                for i, line in enumerate(batch):
                    keep += len(line)
                    if written + keep >= size:
                        batch = batch[:i + 1]
                        break
                blob = b"".join(batch)
            out.write(blob)
            written += len(blob)
            lines += len(batch)
    partial.replace(path)
    return lines


def prepare_text(data: Data, size: int, seed: int) -> tuple[str, int, int]:
    """The text file of nominally `size` bytes, reused when its sidecar matches: (path, bytes, lines)."""
    path = data.data_dir / f"aiofiles_ops_lines_{size}B.txt"
    meta_path = path.with_name(path.name + ".json")
    try:
        meta = json.loads(meta_path.read_text())
        if (meta["format"], meta["seed"], meta["size"]) == (TEXT_FORMAT, seed, size) \
                and path.stat().st_size == meta["bytes"]:
            return str(path), meta["bytes"], meta["lines"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log(f"creating {path} ({human(size)} of text) ...")
    lines = make_text(path, size, seed)
    # The reference line count is the stdlib's own iteration, not the generator's bookkeeping.
    with open(path, encoding="utf-8") as f:
        counted = sum(1 for _ in f)
    if counted != lines:
        sys.exit(f"error: {path}: the stdlib counts {counted} lines, the generator wrote {lines}")
    nbytes = path.stat().st_size
    meta_path.write_text(json.dumps({"format": TEXT_FORMAT, "seed": seed, "size": size,
                                     "bytes": nbytes, "lines": lines}))
    return str(path), nbytes, lines


def stat_size(i: int) -> int:
    return (i * 37) % 4096


def prepare_stats(data: Data, n: int) -> None:
    folder = data.data_dir / f"aiofiles_ops_stat_{n}"
    marker = folder / ".complete"
    names = [str(folder / f"f{i:06d}") for i in range(n)]
    try:
        ready = marker.read_text() == str(n)
    except OSError:
        ready = False
    if not ready:
        log(f"creating {n:,} files in {folder} ...")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        filler = bytes(range(256)) * 16
        for i, name in enumerate(names):
            with open(name, "wb") as f:
                f.write(filler[:stat_size(i)])
        marker.write_text(str(n))
    data.stat_paths = names
    data.stat_sizes = [stat_size(i) for i in range(n)]


def prepare_small(data: Data, n: int, seed: int) -> None:
    data.small_dir = str(data.data_dir / "aiofiles_ops_small")
    data.small_names = [os.path.join(data.small_dir, f"s{i:06d}") for i in range(n)]
    rng = random.Random(seed ^ 0x5A11)
    data.payloads = [rng.randbytes(SMALL) for _ in range(n)]  # a different content per file
    reset_small(data)


def reset_small(data: Data) -> None:
    """An empty directory for the small files (each run creates them anew)."""
    if os.path.exists(data.small_dir):
        shutil.rmtree(data.small_dir)
    os.mkdir(data.small_dir)


def remove_small(data: Data) -> None:
    if data.small_dir and os.path.exists(data.small_dir):
        shutil.rmtree(data.small_dir)


# --------------------------------------------------------------- workloads
# The async workloads take the module: aiofiles or aioring, the same code for both.
async def async_read(mod: ModuleType, path: str) -> int:
    total = 0
    async with mod.open(path, "rb") as f:
        while chunk := await f.read(CHUNK):
            total += len(chunk)
    return total


async def async_round_trips(mod: ModuleType, names: Sequence[str], payloads: Sequence[bytes]) -> int:
    for name, payload in zip(names, payloads, strict=True):
        async with mod.open(name, "wb") as f:
            await f.write(payload)
        async with mod.open(name, "rb") as f:
            got = await f.read()
        if got != payload:
            raise RuntimeError(f"{name}: read back {len(got)} bytes that differ from the "
                               f"{len(payload)} written")
    return len(names)


async def async_lines(mod: ModuleType, path: str) -> int:
    count = 0
    async with mod.open(path, "r", encoding="utf-8") as f:
        async for _line in f:
            count += 1
    return count


async def async_stats(mod: ModuleType, paths: Sequence[str]) -> int:
    stat = mod.os.stat
    total = 0
    for path in paths:
        total += (await stat(path)).st_size
    return total


def spans(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) of `parts` contiguous chunks of range(n), sizes differing by at most one."""
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        if end > start:
            out.append((start, end))
        start = end
    return out


async def async_small(mod: ModuleType, names: Sequence[str], payloads: Sequence[bytes], tasks: int) -> int:
    if tasks == 1:
        return await async_round_trips(mod, names, payloads)
    done = await asyncio.gather(*(async_round_trips(mod, names[a:b], payloads[a:b])
                                  for a, b in spans(len(names), tasks)))
    return sum(done)


async def async_stat(mod: ModuleType, paths: Sequence[str], tasks: int) -> int:
    if tasks == 1:
        return await async_stats(mod, paths)
    totals = await asyncio.gather(*(async_stats(mod, paths[a:b]) for a, b in spans(len(paths), tasks)))
    return sum(totals)


# The stdlib baseline: the same work, synchronously, in one thread.
def sync_read(path: str) -> int:
    total = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            total += len(chunk)
    return total


def sync_small(names: Sequence[str], payloads: Sequence[bytes]) -> int:
    for name, payload in zip(names, payloads, strict=True):
        with open(name, "wb") as f:
            f.write(payload)
        with open(name, "rb") as f:
            got = f.read()
        if got != payload:
            raise RuntimeError(f"{name}: read back {len(got)} bytes that differ from the "
                               f"{len(payload)} written")
    return len(names)


def sync_lines(path: str) -> int:
    count = 0
    with open(path, encoding="utf-8") as f:
        for _line in f:
            count += 1
    return count


def sync_stat(paths: Sequence[str]) -> int:
    stat = os.stat
    total = 0
    for path in paths:
        total += stat(path).st_size
    return total


# ---------------------------------------------------------------- the cases
@dataclass(frozen=True)
class Case:
    key: str  # e.g. "small/32"
    workload: str
    tasks: int


@dataclass
class Sample:
    case: str
    impl: str
    loop: str  # "-" for stdlib
    repeat: int
    units: int = 0  # what the rate counts: bytes (read), files (small, stat) or lines
    nbytes: int = 0  # bytes read (read, lines) or written and read back (small)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # this process, all threads (aiofiles' executor threads included)
    other_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile
    rate: float = 0.0  # MB/s for read, files/s for small and stat, lines/s for lines
    mb_per_s: float = 0.0
    fd_delta: int = 0  # open fds after the run (loop closed) minus before it
    error: str | None = None
    traceback: str | None = None


UNITS = {"read": "MB/s", "small": "files/s", "lines": "lines/s", "stat": "files/s"}


def work(data: Data, case: Case, impl: str) -> tuple[int, int]:
    """(units, bytes) one run of `impl` does for `case`."""
    w = case.workload
    if w == "read":
        return data.big_size, data.big_size
    if w == "small":
        n = count_for(len(data.small_names), w, impl)
        return n, 2 * n * SMALL
    if w == "lines":
        _, nbytes, lines = data.texts[impl]
        return lines, nbytes
    n = count_for(len(data.stat_paths), w, impl)
    return n, 0


def count_for(n: int, workload: str, impl: str) -> int:
    if impl != "aiofiles":
        return n
    return max(1, round(n * AIOFILES_SHARE[workload]))


def before_run(data: Data, case: Case) -> None:
    """Untimed preparation, the same for every implementation."""
    if case.workload == "read":
        warm_file(data.big)
    elif case.workload == "lines":
        for path, _, _ in set(data.texts.values()):
            warm_file(path)
    elif case.workload == "small":
        reset_small(data)
    elif case.workload == "stat":
        sync_stat(data.stat_paths)  # inodes and dentries cached


def check(data: Data, case: Case, impl: str, result: int) -> None:
    """Raise if a run's result is not what it must be."""
    units, _ = work(data, case, impl)
    w = case.workload
    if w == "read" and result != data.big_size:
        raise RuntimeError(f"read {result:,} bytes of a {data.big_size:,}-byte file")
    if w == "small" and result != units:
        raise RuntimeError(f"{result} round trips done, {units} expected")
    if w == "lines" and result != units:
        raise RuntimeError(f"counted {result:,} lines in {data.texts[impl][0]}, the stdlib counts {units:,}")
    if w == "stat" and result != sum(data.stat_sizes[:units]):
        raise RuntimeError(f"st_size of the {units} files sums to {result:,}, "
                           f"expected {sum(data.stat_sizes[:units]):,}")


def async_job(mod: ModuleType, data: Data, case: Case, impl: str) -> Callable[[], Awaitable[int]]:
    units, _ = work(data, case, impl)
    w = case.workload
    if w == "read":
        return lambda: async_read(mod, data.big)
    if w == "small":
        names, payloads = data.small_names[:units], data.payloads[:units]
        return lambda: async_small(mod, names, payloads, case.tasks)
    if w == "lines":
        path = data.texts[impl][0]
        return lambda: async_lines(mod, path)
    paths = data.stat_paths[:units]
    return lambda: async_stat(mod, paths, case.tasks)


def sync_job(data: Data, case: Case) -> Callable[[], int]:
    w = case.workload
    if w == "read":
        return lambda: sync_read(data.big)
    if w == "small":
        return lambda: sync_small(data.small_names, data.payloads)
    if w == "lines":
        path = data.texts["stdlib"][0]
        return lambda: sync_lines(path)
    return lambda: sync_stat(data.stat_paths)


async def warm_up(mod: ModuleType, data: Data) -> None:
    """Untimed, at the start of every async run: creates the ring, starts the executor's threads."""
    await asyncio.gather(*(mod.os.stat(data.probe) for _ in range(32)))
    async with mod.open(data.probe, "rb") as f:
        await f.read()


def run_sample(s: Sample, data: Data, case: Case, timeout: float) -> None:
    before_run(data, case)
    s.units, s.nbytes = work(data, case, s.impl)
    fds = open_fds()
    meter = Meter()
    try:
        if s.impl == "stdlib":
            job = sync_job(data, case)
            with meter:
                result = job()
        else:
            mod = aioring if s.impl == "aioring" else aiofiles
            coro_fn = async_job(mod, data, case, s.impl)

            async def measured() -> int:
                await warm_up(mod, data)
                with meter:
                    return await coro_fn()

            result = run_in_new_loop(s.loop, measured, timeout)
    finally:
        if case.workload == "small":
            remove_small(data)
        s.fd_delta = open_fds() - fds
    meter.fill(s)
    check(data, case, s.impl, result)
    scale = MB if case.workload == "read" else 1
    s.rate = s.units / scale / s.wall_s
    s.mb_per_s = s.nbytes / MB / s.wall_s


# ------------------------------------------------------------- correctness
async def verify_aioring(data: Data, workloads: Sequence[str]) -> None:
    """Untimed: aioring must return what the stdlib returns (raises AssertionError if not)."""
    mod = aioring
    if "read" in workloads:
        if data.big_crc is None:
            crc = 0
            with open(data.big, "rb") as f:
                while chunk := f.read(CHUNK):
                    crc = zlib.crc32(chunk, crc)
            data.big_crc = crc
        crc = total = 0
        async with mod.open(data.big, "rb") as f:
            while chunk := await f.read(CHUNK):
                crc, total = zlib.crc32(chunk, crc), total + len(chunk)
        assert (total, crc) == (data.big_size, data.big_crc), \
            f"big file: aioring read {total} bytes, crc32 {crc:#x}; stdlib {data.big_size}, {data.big_crc:#x}"
    if "lines" in workloads:
        path = data.texts["aiofiles"][0]  # the short one: every line compared
        with open(path, encoding="utf-8") as f:
            expected = list(f)
        got = []
        async with mod.open(path, "r", encoding="utf-8") as f:
            async for line in f:
                got.append(line)
        if got != expected:
            pairs = enumerate(zip(got, expected, strict=False))
            bad = next((i for i, (a, b) in pairs if a != b), min(len(got), len(expected)))
            raise AssertionError(f"{path}: aioring's lines differ from the stdlib's at line {bad} "
                                 f"({len(got)} lines vs {len(expected)})")
    if "small" in workloads:
        reset_small(data)
        try:
            sizes = (0, 1, SMALL - 1, SMALL, SMALL + 1, 3 * MIB + 5)
            rng = random.Random(7)
            for i, size in enumerate(sizes):
                name = os.path.join(data.small_dir, f"v{i}")
                payload = rng.randbytes(size)
                async with mod.open(name, "wb") as f:
                    await f.write(payload)
                with open(name, "rb") as f:
                    assert f.read() == payload, f"{size}-byte file written by aioring differs"
                async with mod.open(name, "rb") as f:
                    assert await f.read() == payload, f"{size}-byte file read by aioring differs"
        finally:
            remove_small(data)
    if "stat" in workloads:
        fields = ("st_ino", "st_dev", "st_size", "st_mode", "st_nlink", "st_uid", "st_mtime_ns")
        for path in data.stat_paths[:64]:
            a, b = await mod.os.stat(path), os.stat(path)
            assert [getattr(a, k) for k in fields] == [getattr(b, k) for k in fields], \
                f"aioring.os.stat({path!r}) = {a}, os.stat = {b}"


# --------------------------------------------------------------- reporting
def median_rows(samples: list[Sample]) -> dict[tuple[str, str, str], dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.case, s.impl, s.loop), []).append(s)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (case, impl, loop), group in groups.items():
        ok = [s for s in group if s.error is None]
        row: dict[str, Any] = {"case": case, "impl": impl, "loop": loop, "runs": len(ok),
                               "errors": [s.error for s in group if s.error]}
        if ok:
            rates = [s.rate for s in ok]
            row.update(units=ok[0].units, nbytes=ok[0].nbytes,
                       rate=statistics.median(rates), rate_min=min(rates), rate_max=max(rates),
                       mb_per_s=statistics.median(s.mb_per_s for s in ok),
                       wall_s=statistics.median(s.wall_s for s in ok),
                       cpu_us_per_unit=statistics.median(s.cpu_s / s.units * 1e6 for s in ok),
                       cores=statistics.median(s.cpu_s / s.wall_s for s in ok))
        out[(case, impl, loop)] = row
    return out


def render(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def case_label(case: Case, data: Data) -> str:
    w, t = case.workload, case.tasks
    if w == "read":
        return f"read {human(data.big_size)}, {human(CHUNK)} chunks"
    if w == "small":
        return f"{human(SMALL)} files write+read, {t} task" + ("s" if t > 1 else "")
    if w == "lines":
        return f"lines of a {human(data.text_size)} text"
    return f"stat, {t} task" + ("s" if t > 1 else "")


def report(medians: dict[tuple[str, str, str], dict[str, Any]], cases: list[Case], loops: list[str],
           data: Data, repeat: int) -> tuple[str, list[dict[str, Any]]]:
    """The tables, and the target verdicts (for the JSON)."""

    def get(case: Case, impl: str, loop: str, key: str) -> float | None:
        if impl == "stdlib":  # one synchronous loop: its 1-task figure serves every row
            row = medians.get((f"{case.workload}/1", "stdlib", "-"))
        else:
            row = medians.get((case.key, impl, loop))
        return None if row is None or key not in row else row[key]

    out: list[str] = []
    verdicts: list[dict[str, Any]] = []
    for loop in loops:
        out.append(f"\n== {loop} loop: medians of {repeat} interleaved runs; rates, higher is better ==")
        header = ["workload", "unit", "aioring", "aiofiles", "stdlib", "aioring/aiofiles", "target",
                  "result", "stdlib/aiofiles", "aioring/stdlib"]
        rows = []
        for case in cases:
            metrics = [("rate", UNITS[case.workload], True)]
            if case.workload == "lines":
                metrics.append(("mb_per_s", "MB/s", False))
            for key, unit, targeted in metrics:
                ring, files, std = (get(case, i, loop, key) for i in IMPLS)
                r = ratio(ring, files)
                target = TARGETS[case.workload] if targeted else None
                result = "-"
                if target is not None and r is not None:
                    result = "PASS" if r >= target else "FAIL"
                elif target is not None:
                    result = "ERROR"
                if target is not None and loop != TARGET_LOOP and result in ("PASS", "FAIL"):
                    result = f"({result})"  # the targets are stated for asyncio's loop
                label = case_label(case, data) if targeted else "  (same, in bytes)"
                rows.append([label, unit, fmt_rate(ring), fmt_rate(files), fmt_rate(std),
                             "-" if r is None else f"{r:.2f}x",
                             "-" if target is None else f">= {target:g}x", result,
                             "-" if ratio(std, files) is None else f"{ratio(std, files):.2f}x",
                             "-" if ratio(ring, std) is None else f"{ratio(ring, std):.2f}x"])
                if target is not None:
                    verdicts.append({"case": case.key, "loop": loop, "ratio": r, "target": target,
                                     "result": result.strip("()"), "binding": loop == TARGET_LOOP})
        out.append(render(header, rows))

        cpu_rows = []
        for case in cases:
            per = {"read": "MiB", "small": "file", "lines": "line", "stat": "stat"}[case.workload]
            cells = [case_label(case, data), per]
            for impl in IMPLS:
                us = get(case, impl, loop, "cpu_us_per_unit")
                if us is not None and case.workload == "read":
                    us *= MIB  # per byte -> per MiB
                cells.append("-" if us is None else f"{us:,.1f}" if us < 1000 else f"{us:,.0f}")
            for impl in IMPLS:
                cores = get(case, impl, loop, "cores")
                cells.append("-" if cores is None else f"{cores:.2f}")
            cpu_rows.append(cells)
        out.append(f"\nprocess CPU time ({loop} loop): us per unit, and CPU s per wall s (cores busy)")
        out.append(render(["workload", "per", "aioring us", "aiofiles us", "stdlib us",
                           "aioring cores", "aiofiles cores", "stdlib cores"], cpu_rows))
    out.append("\nstdlib is one synchronous loop in one thread (builtin open / os.stat), independent of "
               "the event loop; its 1-task figure is repeated in the multi-task rows.")
    return "\n".join(out), verdicts


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="aiofiles-style workloads (big read, small files, lines, stat) run with "
                    "`import aioring as aiofiles` and with aiofiles, beside a synchronous stdlib loop. "
                    "Sizes: G/M/k and GiB/MiB/KiB are powers of two, GB/MB/kB powers of ten.")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (64 MiB file, 1,000 files, 10 MB text, 1,000 stats): "
                             "a smoke test that finishes in well under a minute")
    parser.add_argument("--repeat", type=positive, default=None,
                        help="interleaved repetitions; medians are reported (default 3)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw samples and medians here")
    parser.add_argument("--loop", type=parse_list(ALL_LOOPS, canonical=True), default=["asyncio"],
                        help="comma-separated event loops: asyncio (the default), uvloop, or both")
    parser.add_argument("--workloads", type=parse_list(ALL_WORKLOADS, canonical=True),
                        default=list(ALL_WORKLOADS),
                        help="comma-separated subset of " + ",".join(ALL_WORKLOADS) + " (default all)")
    parser.add_argument("--tasks", type=positive, default=32,
                        help="concurrent tasks of the small-file and stat workloads' second row (default 32)")
    parser.add_argument("--read-size", type=parse_size, default=None,
                        help="size of the big file (default 1G, --quick 64M)")
    parser.add_argument("--files", type=positive, default=None,
                        help="small files per run (default 10000, --quick 1000)")
    parser.add_argument("--text-size", type=parse_size, default=None,
                        help="size of the text file (default 100MB, --quick 10MB)")
    parser.add_argument("--stats", type=positive, default=None,
                        help="files to stat per run (default 10000, --quick 1000)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / ".data",
                        help="where the data files live; must be a real disk, not tmpfs "
                             "(default: benchmarks/.data; big, text and stat files are kept for reuse)")
    parser.add_argument("--clean", action="store_true",
                        help="delete this run's data files (big, text, stat files) at the end")
    parser.add_argument("--seed", type=int, default=20240611, help="seed of the generated data")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds before one run is abandoned as hung (default 600)")
    parser.epilog = ("aiofiles does a share of the work per run (rates are compared, not totals): "
                     + ", ".join(f"{w} x{s:g}" for w, s in AIOFILES_SHARE.items()) + ".")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    read_size = preset_value(args, preset, "read_size")
    nfiles = preset_value(args, preset, "files")
    text_size = preset_value(args, preset, "text_size")
    nstats = preset_value(args, preset, "stats")
    repeat = preset_value(args, preset, "repeat")
    if read_size < 1 or text_size < 1:
        parser.error("sizes must be positive")
    if aiofiles is None:
        sys.exit("error: aiofiles is not installed (pip install aiofiles): nothing to compare with")
    loops = list(args.loop)
    if "uvloop" in loops and uvloop is None:
        sys.exit("error: --loop uvloop, but uvloop is not installed")
    workloads = list(args.workloads)
    started = time.perf_counter()

    # ---- data
    data = Data(args.data_dir)
    ensure_dir(args.data_dir)
    point, data.fstype = mount_of(args.data_dir)
    if data.fstype in ("tmpfs", "ramfs"):
        log(f"WARNING: {args.data_dir} is on {data.fstype} ({point}), not a real disk: file creation "
            "and page-cache reads take a different path there. Use --data-dir.")
    probe = args.data_dir / "aiofiles_ops_probe.bin"
    if not probe.exists() or probe.stat().st_size != SMALL:
        probe.write_bytes(b"p" * SMALL)
    data.probe = str(probe)
    if "read" in workloads:
        prepare_big(data, read_size)
    if "lines" in workloads:
        full = prepare_text(data, text_size, args.seed)
        share = max(1, round(text_size * AIOFILES_SHARE["lines"]))
        short = full if share >= text_size else prepare_text(data, share, args.seed)
        data.texts = {"aioring": full, "stdlib": full, "aiofiles": short}
        data.text_size = text_size
    if "small" in workloads:
        prepare_small(data, nfiles, args.seed)
    if "stat" in workloads:
        prepare_stats(data, nstats)

    cases: list[Case] = []
    for w in workloads:
        task_counts = [1] if w in ("read", "lines") else sorted({1, args.tasks})
        cases += [Case(f"{w}/{t}", w, t) for t in task_counts]

    # ---- correctness (untimed), on every loop
    verification: list[dict[str, Any]] = []
    for loop_name in loops:
        entry: dict[str, Any] = {"loop": loop_name, "ok": True}
        try:
            run_in_new_loop(loop_name, lambda: verify_aioring(data, workloads), args.timeout)
        except Exception as exc:
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            log(f"aioring FAILED the correctness check on {loop_name}: {entry['error']}")
        else:
            log(f"verified: aioring returns the stdlib's bytes, lines and stats on {loop_name}")
        verification.append(entry)

    # ---- measuring: per repetition, per case: aioring, aiofiles (per loop), then stdlib
    plan: list[tuple[Case, str, str]] = []
    for case in cases:
        plan += [(case, impl, loop) for loop in loops for impl in ASYNC_IMPLS]
        if case.tasks == 1:
            plan.append((case, "stdlib", "-"))
    total = len(plan) * repeat
    fds_before = open_fds()
    samples: list[Sample] = []
    n = 0
    for r in range(1, repeat + 1):
        for case, impl, loop in plan:
            n += 1
            log(f"[{n}/{total}] repeat {r}/{repeat} {case.key:<9} {impl:<8} loop={loop:<7} ... ", end="")
            s = Sample(case.key, impl, loop, r)
            try:
                run_sample(s, data, case, args.timeout)
            except Exception as exc:
                s.error = error_text(exc)
                s.traceback = traceback.format_exc()
                log(f"FAILED: {s.error}")
            else:
                extra = f", {s.mb_per_s:,.1f} MB/s" if case.workload == "lines" else ""
                leak = f", {s.fd_delta:+d} fds" if s.fd_delta else ""
                log(f"{fmt_rate(s.rate):>10} {UNITS[case.workload]}{extra} ({s.wall_s:.2f} s{leak})")
            samples.append(s)
    gc.collect()
    leftover_fds = open_fds() - fds_before
    remove_small(data)
    if args.clean:
        removed = [data.big, *(p for p, _, _ in set(data.texts.values()))]
        for path in removed:
            if path:
                for p in (path, path + ".json"):
                    if os.path.exists(p):
                        os.unlink(p)
        if data.stat_paths:
            shutil.rmtree(os.path.dirname(data.stat_paths[0]), ignore_errors=True)
        log("removed the data files (--clean)")
    elapsed = time.perf_counter() - started

    # ---- report
    medians = median_rows(samples)
    tables, verdicts = report(medians, cases, loops, data, repeat)
    counts = {w: {impl: count_for({"small": nfiles, "stat": nstats}.get(w, 1), w, impl) for impl in IMPLS}
              for w in workloads}
    meta: dict[str, Any] = {
        **machine_info(),
        "aioring_backend": aioring.backend(),
        "aioring_checkout": git_state(),
        "versions": {d: version(d) for d in ("aioring", "aiofiles", "uvloop")},
        "data_dir": str(args.data_dir),
        "filesystem": data.fstype,
        "quick": args.quick,
        "loops": loops,
        "workloads": workloads,
        "tasks": args.tasks,
        "repeat": repeat,
        "seed": args.seed,
        "read": {"file": data.big, "bytes": data.big_size, "chunk": CHUNK},
        "small": {"files": nfiles, "size": SMALL, "aiofiles_files": counts.get("small", {}).get("aiofiles")},
        "lines": {impl: {"file": p, "bytes": b, "lines": c} for impl, (p, b, c) in data.texts.items()},
        "stat": {"files": nstats, "aiofiles_files": counts.get("stat", {}).get("aiofiles")},
        "aiofiles_share": AIOFILES_SHARE,
        "targets": TARGETS,
        "target_loop": TARGET_LOOP,
        "leftover_fds": leftover_fds,
        "runtime_s": elapsed,
    }
    v = meta["versions"]
    print(f"{machine_line(meta)} | aioring {v['aioring']} "
          f"(backend {meta['aioring_backend']}; git {meta['aioring_checkout']}) | aiofiles {v['aiofiles']} "
          f"| uvloop {v['uvloop']}")
    print(f"data in {args.data_dir} ({data.fstype}){' | --quick sizes' if args.quick else ''}")
    if "read" in workloads:
        print(f"read: {human(data.big_size)} file in {human(CHUNK)} chunks, PAGE-CACHE HOT (read once, "
              "untimed, before every timed run): CPU and copy cost, not the disk")
    if "small" in workloads:
        print(f"small: {nfiles:,} files of {human(SMALL)} per run "
              f"(aiofiles: {counts['small']['aiofiles']:,}), "
              "each: open 'wb', write, close, open 'rb', read(), close, compare; a fresh empty directory "
              "per run")
    if "lines" in workloads:
        t_full, t_short = data.texts["aioring"], data.texts["aiofiles"]
        print(f"lines: `async for line in f` (mode 'r', UTF-8) over {t_full[1]:,} bytes, {t_full[2]:,} lines "
              f"(aiofiles: the first {t_short[1]:,} bytes, {t_short[2]:,} lines); page-cache hot")
    if "stat" in workloads:
        print(f"stat: {nstats:,} files per run (aiofiles: {counts['stat']['aiofiles']:,}), "
              "aiofiles.os.stat / aioring.os.stat; inodes cached")
    print(tables)

    notes: list[str] = []
    binding = [x for x in verdicts if x["binding"]]
    if binding:
        passed = sum(x["result"] == "PASS" for x in binding)
        notes.append(f"targets on {TARGET_LOOP}'s loop: {passed} of {len(binding)} PASS"
                     + (" (quick sizes: indicative only)" if args.quick else ""))
    ok = [s for s in samples if s.error is None]
    if ok:
        wall = sum(s.wall_s for s in ok)
        other = sum(s.other_cpu_s for s in ok) / wall
        note = f"the rest of the machine used {other:.2f} CPUs on average during timed runs"
        if other > 0.1:
            note += " (other processes: results are noisier than on an idle machine)"
        notes.append(note)
    spread = spread_note(medians.items(), "rate", lambda k: f"{k[0]}, {k[1]}, loop {k[2]}")
    if spread:
        notes.append("largest " + spread)
    leaks = [s for s in samples if s.fd_delta]
    if leaks or leftover_fds:
        notes.append(f"FD LEAK: {leftover_fds:+d} fds open after all runs vs before; runs that changed the "
                     "count: " + ", ".join(f"{s.case}/{s.impl}/{s.loop}#{s.repeat} {s.fd_delta:+d}"
                                           for s in leaks))
    else:
        notes.append("file descriptors: every run closed all it opened (checked after each loop closed)")
    for note in notes:
        print(note)
    failed_checks = [e for e in verification if not e["ok"]]
    for e in failed_checks:
        print(f"\naioring FAILED the correctness check on {e['loop']}: {e['error']}\n{e['traceback']}")
    failed = [s for s in samples if s.error]
    if failed:
        print(f"\nFAILED runs: {len(failed)} of {len(samples)}")
        shown: set[tuple[str, str, str, str | None]] = set()
        for s in failed:
            print(f"  {s.case} {s.impl} loop={s.loop} repeat {s.repeat}: {s.error}")
        for s in failed:  # each distinct failure's traceback once
            key = (s.case, s.impl, s.loop, s.error)
            if key not in shown:
                shown.add(key)
                print(f"\ntraceback of {s.case} {s.impl} loop={s.loop}:\n{s.traceback}")
    print(f"total runtime {elapsed:.1f} s")

    write_json(args.json, {"meta": meta, "verification": verification,
                           "samples": [asdict(s) for s in samples],
                           "medians": list(medians.values()), "targets": verdicts})
    return 1 if failed or failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
