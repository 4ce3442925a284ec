"""Helpers shared by the benchmark scripts in this folder.

The scripts are run as ``python benchmarks/<script>.py``, which puts this
folder on sys.path, so they import this module as ``benchlib``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import statistics
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

REPO = Path(__file__).resolve().parent.parent
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
MB = 1_000_000


_PR_SET_PDEATHSIG = 1  # (linux/prctl.h)


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


def add_run_options(parser: argparse.ArgumentParser, defaults: dict[str, Any], quick: dict[str, Any], *,
                    quick_help: str, timeout: float, timeout_help: str = "",
                    json_help: str = "write raw samples and medians here") -> None:
    """The options every benchmark has: --repeat (a preset), --timeout, --quick and --json."""
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per configuration, interleaved; the median is reported "
                             f"(default {defaults['repeat']}, --quick {quick['repeat']})")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"seconds before a run is abandoned as hung (default {timeout:g})"
                             + (f"; {timeout_help}" if timeout_help else ""))
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, metavar="PATH", help=json_help)


def presets(args: argparse.Namespace, defaults: dict[str, Any], quick: dict[str, Any]) -> dict[str, Any]:
    """Every preset option: as given on the command line, else from `quick` (with --quick) or `defaults`."""
    preset = quick if args.quick else defaults
    return {name: preset_value(args, preset, name) for name in preset}


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
        "cpus_usable": len(USABLE_CPUS),
    }


def run_meta(backend: str, dists: Iterable[str]) -> dict[str, Any]:
    """The start of a run's metadata: machine_info(), aioring's backend, versions, the checkout."""
    return {**machine_info(), "aioring_backend": backend, "versions": {d: version(d) for d in dists},
            "git": git_state()}


# The CPUs this benchmark may use, read before pin_pair() pins this process.
USABLE_CPUS = sorted(os.sched_getaffinity(0))


def die_with_parent() -> None:
    """In a benchmark's worker process: end it when the process that started
    it ends (Linux's PR_SET_PDEATHSIG), so that a benchmark stopped by a
    signal leaves no worker behind, serving or sending on its own."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # (it ended before the call)
        os._exit(1)


def pin_pair(server_pid: int, client_pid: int) -> str:
    """Put a server process and its client process on two different CPUs of
    those this process may use, and say where ("no" if there are fewer than two).

    Unpinned, a request/response pair on two CPUs runs in one of two modes
    that the scheduler picks: both on their own CPU, or both on one, taking
    turns (each then at half a CPU, half the throughput).  Which one a run gets
    varies from run to run and from variant to variant, more than the
    libraries differ; pinned, every variant runs with a CPU each.  Threads and
    processes started later inherit the CPU."""
    cpus = USABLE_CPUS
    if len(cpus) < 2:
        return "no"
    os.sched_setaffinity(server_pid, {cpus[0]})
    os.sched_setaffinity(client_pid, {cpus[1]})
    return f"server on CPU {cpus[0]}, client on CPU {cpus[1]}"


def pin_together(*pids: int) -> str:
    """Put processes (a server and its client) on one CPU, the first this
    process may use, and say where.  They then take turns: frames per second
    measure what a frame costs both ends together in CPU, without the overlap
    two CPUs give."""
    cpu = USABLE_CPUS[0]
    for pid in pids:
        os.sched_setaffinity(pid, {cpu})
    return f"server and client together on CPU {cpu}"


def machine_line(meta: dict[str, Any]) -> str:
    """The start of the report's first line, from machine_info()'s fields."""
    pinned = meta.get("pinned")
    return (f"python {meta['python']} | kernel {meta['kernel']} ({meta['machine']}, "
            f"{meta['cpus_usable']}/{meta['cpus']} CPUs"
            + (f"; {pinned}" if pinned and pinned != "no" else "") + ")")


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


def aioring_backend(aioring: ModuleType) -> str:
    """aioring.backend(); exits with the reason if io_uring cannot be used at all."""
    try:
        backend: str = aioring.backend()
    except OSError as exc:
        sys.exit(f"error: io_uring is not available here: {exc}")
    return backend


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# ----------------------------------------------------------------- progress
def clock_text(seconds: float) -> str:
    """m:ss"""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


class Progress:
    """A line per run on stderr: '[n/N, m:ss elapsed, ~m:ss left] what ... result'.

    `kinds` has one entry per planned run, in order (a frame size, a variant...).
    The time left is the sum, over the runs not finished, of the mean time the
    finished runs of the same kind took; for a kind none has finished yet, that
    run's entry in `priors`, else the mean of all finished runs.  The elapsed time
    counts from `started` (a time.perf_counter() value; default: now).
    """

    def __init__(self, kinds: Sequence[Hashable], priors: Sequence[float] | None = None,
                 started: float | None = None) -> None:
        self.kinds = list(kinds)
        self.priors = list(priors) if priors is not None else None
        self.times: dict[Hashable, list[float]] = {}
        self.n = 0
        self.run_t0 = time.perf_counter()
        self.t0 = self.run_t0 if started is None else started

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float | None:
        """Estimated seconds until the last run ends, counting the current one from its start."""
        finished = [t for times in self.times.values() for t in times]
        total = 0.0
        for i in range(self.n - 1 if self.n else 0, len(self.kinds)):
            times = self.times.get(self.kinds[i])
            if times:
                total += sum(times) / len(times)
            elif self.priors is not None:
                total += self.priors[i]
            elif finished:
                total += sum(finished) / len(finished)
            else:
                return None
        return total

    def start(self, what: str) -> None:
        """The next run begins: log its position, the time so far and the time left, and `what`."""
        self.n += 1
        self.run_t0 = time.perf_counter()
        left = self.left()
        width = len(str(len(self.kinds)))
        log(f"[{self.n:>{width}}/{len(self.kinds)}, {clock_text(self.elapsed)} elapsed, "
            f"~{clock_text(left) if left is not None else '?'} left] {what} ... ", end="")

    def finish(self, result: str) -> None:
        """The current run ended with `result` (one line)."""
        log(result)
        self.times.setdefault(self.kinds[self.n - 1], []).append(time.perf_counter() - self.run_t0)


# ---------------------------------------------------------------- reporting
class Run(Protocol):
    """A sample of one measured run: what went wrong, if anything."""

    error: str | None


S = TypeVar("S", bound=Run)
K = TypeVar("K", bound=Hashable)


def median_rows(samples: Iterable[S], key: Callable[[S], K], head: Callable[[K, list[S]], dict[str, Any]],
                names: Sequence[str], extra: Callable[[list[S]], dict[str, Any]] | None = None,
                ) -> dict[K, dict[str, Any]]:
    """One row per key(sample): head(key, samples), how many runs succeeded, the errors of
    the others, and for each attribute in `names` its median over the successful runs
    (with `name`_min and `name`_max), plus extra(successful runs) where there are any."""
    groups: dict[K, list[S]] = {}
    for s in samples:
        groups.setdefault(key(s), []).append(s)
    out: dict[K, dict[str, Any]] = {}
    for k, group in groups.items():
        ok = [s for s in group if s.error is None]
        row = {**head(k, group), "runs": len(ok), "errors": [s.error for s in group if s.error]}
        if ok:
            for name in names:
                values = [getattr(s, name) for s in ok]
                row[name] = statistics.median(values)
                row[f"{name}_min"], row[f"{name}_max"] = min(values), max(values)
            if extra is not None:
                row.update(extra(ok))
        out[k] = row
    return out


def render(names: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0,
           groups: Sequence[tuple[str, int]] | None = None) -> str:
    """A plain-text table: the first `left` columns left-aligned, the others right-aligned.

    With `groups` ((title, number of columns), ... in order), a line of centred group
    titles comes first and ' | ' separates the groups.
    """
    widths = [max([len(name), *(len(r[i]) for r in rows)]) for i, name in enumerate(names)]
    spans = list(groups) if groups else [("", len(names))]

    def line(cells: Sequence[str], gap: str = "  ", sep: str = " | ") -> str:
        parts, col = [], 0
        for _, count in spans:
            parts.append(gap.join(c.ljust(w) if col + i < left else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells[col:col + count],
                                                                 widths[col:col + count], strict=True))))
            col += count
        return sep.join(parts).rstrip()

    out = []
    if groups:
        titles, col = [], 0
        for title, count in spans:
            titles.append(title.center(sum(widths[col:col + count]) + 2 * (count - 1)))
            col += count
        out.append(" | ".join(titles).rstrip())
    out.append(line(names))
    out.append(line(["-" * w for w in widths], gap="--", sep="-+-") if groups
               else line(["-" * w for w in widths]))
    out += [line(r) for r in rows]
    return "\n".join(out)


def load_note(samples: Sequence[Any], during: str) -> str | None:
    """How much CPU other processes and the hypervisor took from the machine while
    `samples` (with wall_s, other_cpu_s, steal_s) were timed; None without samples."""
    wall = sum(s.wall_s for s in samples)
    if not wall:
        return None
    other = sum(s.other_cpu_s for s in samples) / wall
    steal = sum(s.steal_s for s in samples) / wall
    line = (f"During {during} the rest of the machine (other processes) used {other:.2f} CPUs on average "
            f"and the hypervisor stole {steal:.2f} CPUs (of {os.cpu_count()}).")
    busy = [s for s in samples if s.wall_s and s.other_cpu_s / s.wall_s > 0.25]
    if busy:
        line += (f" {len(busy)} of {len(samples)} runs shared the machine with more than 0.25 CPUs "
                 "of other work (other_cpu_s in the JSON).")
    if other > 0.1 or steal > 0.05 or busy:
        line += " Results are noisier than on an idle machine."
    return line


def print_failures(samples: Sequence[S], describe: Callable[[S], str]) -> bool:
    """Print the runs that failed, one line each after describe(sample); True if any did."""
    failed = [s for s in samples if s.error]
    if failed:
        print(f"FAILED runs: {len(failed)} of {len(samples)}")
        for s in failed:
            print(f"  {describe(s)}: {s.error}")
    return bool(failed)


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


def noise_notes(samples: Sequence[Any], during: str, rows: Iterable[tuple[Any, dict[str, Any]]], key: str,
                describe: Callable[[Any], str]) -> list[str]:
    """load_note() and spread_note(), the lines that say how far to trust the numbers."""
    out = []
    load = load_note(samples, during)
    if load:
        out.append(load)
    spread = spread_note(rows, key, describe)
    if spread:
        out.append(f"Largest {spread}.")
    return out


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    """Write the results to `path` (if given; '-': nowhere) and say so."""
    if path and str(path) != "-":
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
        print(f"results written to {path}")
