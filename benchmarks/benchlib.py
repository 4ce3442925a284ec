"""Helpers shared by the benchmark scripts in this folder.

The scripts are run as ``python benchmarks/<script>.py``, which puts this
folder on sys.path, so they import this module as ``benchlib``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
MB = 1_000_000


def log(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)


def optional(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except ImportError:
        return None


uvloop = optional("uvloop")


# ----------------------------------------------------------------- arguments
def parse_list(choices: Sequence[str], canonical: bool = False) -> Callable[[str], list[str]]:
    """An argparse type for a comma-separated subset of `choices`.

    With `canonical`, the result is in the order of `choices`, without duplicates;
    otherwise as given.
    """
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}, not {text!r}")
        return [c for c in choices if c in items] if canonical else items
    return parse


def preset_value(args: argparse.Namespace, preset: dict[str, Any], name: str) -> Any:
    """The option `name` if it was given, else the preset's value."""
    value = getattr(args, name)
    return value if value is not None else preset[name]


# --------------------------------------------------------------- environment
def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) that holds `path`, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("", "unknown")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                # Mount points escape blanks as octal (\040).
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):  # later (over)mounts win ties
                    best = (point, fields[2])
    except OSError:
        pass
    return best


def mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def git_state() -> str:
    """The checkout's commit, and whether aioring/ has uncommitted changes (the numbers are of those)."""
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--", "aioring").splitlines()
    return f"{commit}, aioring/ " + (f"with {len(dirty)} uncommitted changed files" if dirty else "clean")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """The interpreter, kernel and CPUs, for the results' metadata."""
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
    }


def machine_line(meta: dict[str, Any]) -> str:
    """The start of the report's first line, from machine_info()'s fields."""
    return (f"python {meta['python']} | kernel {meta['kernel']} ({meta['machine']}, "
            f"{meta['cpus_usable']}/{meta['cpus']} CPUs)")


# --------------------------------------------------------------------- data
def ensure_dir(data_dir: Path) -> None:
    if not data_dir.exists():
        data_dir.mkdir(parents=True)
        if data_dir.resolve().is_relative_to(REPO):
            (data_dir / ".gitignore").write_text("*\n")  # keep the data out of git


def require_space(folder: Path, needed: int, message: str) -> None:
    """Exit with `message` unless `folder`'s filesystem has `needed` bytes free."""
    vfs = os.statvfs(folder)
    if vfs.f_bavail * vfs.f_frsize < needed:
        sys.exit(message)


def write_random(path: Path, partial: Path, size: int, randbytes: Callable[[int], bytes]) -> None:
    """Write `size` bytes of randbytes(n) to `partial` in 4 MiB chunks, then rename it to `path`."""
    with open(partial, "wb") as out:
        left = size
        while left:
            n = min(left, 4 * MIB)
            out.write(randbytes(n))
            left -= n
    partial.replace(path)


def warm_file(path: str | Path) -> float:
    """Read the whole file (untimed) so it is in the page cache; returns MB/s of that read."""
    buf = bytearray(4 * MIB)
    start = time.perf_counter()
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total / MB / max(time.perf_counter() - start, 1e-9)


# ---------------------------------------------------------------- measuring
_TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


def iou_thread_cpu() -> dict[int, int]:
    """CPU ns of this process's io_uring kernel threads (SQPOLL iou-sqp-*, io-wq iou-wrk-*).

    They belong to the process, so time.process_time() includes them too;
    this only tells how much of it they account for.
    """
    out: dict[int, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not f.read().startswith("iou-"):
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def iou_delta(before: dict[int, int], after: dict[int, int]) -> float:
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


class Meter:
    """Wall time, this process's CPU (all its threads) and the rest of the machine's CPU
    over one timed section (garbage is collected first, untimed).

    With `detail`, also the CPU of io_uring's kernel threads (part of the process's)
    and the time the hypervisor stole.
    """

    def __init__(self, detail: bool = False) -> None:
        self.detail = detail

    def __enter__(self) -> Meter:
        gc.collect()
        if self.detail:
            self.iou0 = iou_thread_cpu()
        self.busy0, self.steal0 = machine_cpu()
        self.cpu0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.cpu0
        busy, steal = machine_cpu()
        if self.detail:
            self.iou = iou_delta(self.iou0, iou_thread_cpu())
        self.other = max(0.0, busy - self.busy0 - self.cpu)  # tick resolution: approximate
        self.steal = steal - self.steal0

    def fill(self, sample: Any) -> None:
        """Copy the figures into a sample's wall_s, cpu_s, other_cpu_s (and iou_cpu_s, steal_s)."""
        sample.wall_s, sample.cpu_s, sample.other_cpu_s = self.wall, self.cpu, self.other
        if self.detail:
            sample.iou_cpu_s, sample.steal_s = self.iou, self.steal


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        assert uvloop is not None
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()  # asyncio's default (selector) loop


def run_in_new_loop(loop_name: str, coro_fn: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    """Run one coroutine on a fresh event loop, closed afterwards (with its ring or threads).

    The loop is also the current one meanwhile (aiofile looks its context up with
    get_event_loop()); the timeout turns a hang anywhere into an exception.
    """
    loop = new_loop(loop_name)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(asyncio.wait_for(coro_fn(), timeout))
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# ---------------------------------------------------------------- reporting
def spread_note(rows: Iterable[tuple[Any, dict[str, Any]]], key: str,
                describe: Callable[[Any], str]) -> str | None:
    """'max/min spread between repeats: 12% (<describe(row key)>)' of the row whose `key`
    varied most between repeats, or None if no row was repeated."""
    spread = [(row[f"{key}_max"] / row[f"{key}_min"] - 1, k) for k, row in rows
              if row.get("runs", 0) > 1 and row.get(f"{key}_min")]
    if not spread:
        return None
    worst, k = max(spread)
    return f"max/min spread between repeats: {worst:.0%} ({describe(k)})"


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    """Write the results to `path` (if given) and say so."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
        print(f"results written to {path}")
