#!/usr/bin/env python3
"""Small files read concurrently every millisecond: the linux_aio README's experiment.

The experiment (linux_aio's README, "Evaluation"): N small files, each of a
size between 1 KB and 100 KB, are read at the same time; that is tried 1,000
times at 1 ms intervals, for N = 1, 6, 12 and 24.  Reported per library: the
wall time of the 1,000 rounds, the peak number of threads, the peak physical
and virtual memory, and the CPU utilisation.

Here one round opens each of the N files, reads it whole and closes it (one
task per file, all started together, then awaited), then sleeps 1 ms; 1,000
rounds.  So the wall time can be no less than 1,000 sleeps (about 1.1 s);
what a library adds to that is its cost.  The files (24 of them, sizes drawn
once between 1 KiB and 100 KiB from --seed; round N reads the first N) stay in
the page cache: they are read once before any run, and the experiment reads
the same few hundred KiB a thousand times.

Variants, each on asyncio's default loop and on uvloop:

* aioring   ``async with aioring.open(p, "rb") as f: await f.read()``
* aiofiles  ``async with aiofiles.open(p, "rb") as f: await f.read()``
* aiofile   ``async with aiofile.AIOFile(p, "rb") as f: await f.read_bytes()``
            (its open, its fstat for the size and its close run in the loop's
            executor; the read goes through caio)
* open()    ``with open(p, "rb") as f: f.read()``, blocking, inside the same
            coroutine and loop (the files one after the other), then the same
            ``await asyncio.sleep(0.001)``: the reference
* tasks     the same blocking ``open()``, one task per file, all started
            together and awaited as the libraries' rounds are: the floor of
            any library run that way (a task, its wake-ups and the gather per
            file, and no I/O cost but open()'s own)

Every run is a fresh interpreter that imports only its own library (this
script's child mode imports nothing but the standard library and that
library), so its figures are its own:

* wall time and CPU time (all threads of the process, io_uring's kernel
  workers included) of the 1,000 rounds; CPU % = CPU time / wall time
* peak RSS (VmHWM) and peak virtual memory (VmPeak) of the process, read from
  /proc/self/status at the end of the rounds: interpreter, imports and run
* peak threads, split in two: user-space threads (the main thread plus any
  pool a library starts) and io_uring's kernel threads (``iou-wrk-*`` io-wq
  workers, ``iou-sqp-*`` SQPOLL threads), which the kernel creates inside the
  process that owns the ring and which show up in /proc/<pid>/task.  The
  parent samples /proc/<pid>/task/*/comm of the child every few ms, and the
  child adds its own count at the end.

Fairness: the concurrent variants hold the N files' bytes at once (up to
2.4 MiB at N = 24) and free them together at the end of each round.  In a
fresh interpreter glibc then gives the top of its heap back to the kernel
(its trim threshold is 128 KiB until it has freed one block above its mmap
threshold), and the next round faults the same pages in again: a few hundred
minor page faults per round, about 0.7 ms on this kind of virtual machine,
which the blocking reference never pays because it holds one file at a time.
Any process that has once freed a large block (a read of a file over 128
KiB) has the raised thresholds, so each child allocates and frees one 2 MiB
block before its rounds, whatever its variant (never touched, so it adds
nothing to the peak RSS).  --fresh-heap skips that and
measures the fresh interpreter.

After the rounds each child reads every file once more through its library
and compares the bytes with builtin open()'s, and every round checks the byte
count; an exception reported to the loop's exception handler fails the run.

Run from the repository root:  python benchmarks/small_files.py [--quick] [--json out.json]
"""

from __future__ import annotations

# A child run imports this module: keep its imports to what the child itself
# needs (the standard library's asyncio, json, os, sys, time).  The parent's
# helpers (benchlib, which imports uvloop and importlib.metadata, about 4 MiB
# of RSS) are imported inside the parent's functions only.
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

ALL_VARIANTS = ("aioring", "aiofiles", "aiofile", "open", "tasks")
ALL_LOOPS = ("asyncio", "uvloop")
ALL_FILES = (1, 6, 12, 24)
LABEL = {"aioring": "aioring", "aiofiles": "aiofiles", "aiofile": "aiofile", "open": "open()",
         "tasks": "tasks"}
MIN_SIZE, MAX_SIZE = 1024, 100 * 1024
KIB_ = 1024
# One run of every configuration at 1,000 rounds (the experiment's count) takes
# about two and a half minutes on a 2-core VM: the async libraries need up to
# 10 s per run at N = 24.  --repeat 3 gives medians in three times that;
# --rounds 500 halves it.
DEFAULTS: dict[str, Any] = {"rounds": 1000, "files": list(ALL_FILES), "repeat": 1}
QUICK: dict[str, Any] = {"rounds": 50, "files": [1, 24], "repeat": 1}
TARGET_FILES = 24
SAMPLE_EVERY = 0.004  # seconds between two looks at the child's threads


# ====================================================================== child
def status_fields() -> dict[str, int]:
    """VmPeak, VmSize, VmHWM, VmRSS (KiB) and Threads of this process."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmSize", "VmHWM", "VmRSS", "Threads"):
                out[key] = int(value.split()[0])
    return out


def task_names(pid: int | str = "self") -> list[str]:
    """The comm of every thread of a process (vanished threads are skipped)."""
    names: list[str] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return names
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names


def split_threads(names: Sequence[str]) -> tuple[int, int]:
    """(user-space threads, io_uring kernel threads) among thread names."""
    kernel = sum(1 for name in names if name.startswith("iou-"))
    return len(names) - kernel, kernel


Fetch = Callable[[str], Awaitable[bytes]]


def make_fetch(variant: str) -> Fetch:
    """Import the variant's library; return its "open, read whole, close" coroutine function."""
    import importlib

    if variant == "aioring":
        try:
            aioring: Any = importlib.import_module("aioring")
        except ImportError:  # not installed: use the checkout this script lives in
            sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            aioring = importlib.import_module("aioring")

        async def fetch_aioring(path: str) -> bytes:
            async with aioring.open(path, "rb") as f:
                data: bytes = await f.read()
            return data
        return fetch_aioring
    if variant == "aiofiles":
        aiofiles: Any = importlib.import_module("aiofiles")

        async def fetch_aiofiles(path: str) -> bytes:
            async with aiofiles.open(path, "rb") as f:
                data: bytes = await f.read()
            return data
        return fetch_aiofiles
    if variant == "aiofile":
        aiofile: Any = importlib.import_module("aiofile")

        async def fetch_aiofile(path: str) -> bytes:
            async with aiofile.AIOFile(path, "rb") as f:
                data: bytes = await f.read_bytes()
            return data
        return fetch_aiofile
    if variant in ("open", "tasks"):
        async def fetch_open(path: str) -> bytes:
            with open(path, "rb") as f:
                return f.read()
        return fetch_open
    raise ValueError(f"unknown variant {variant!r}")


def make_round(variant: str, fetch: Fetch) -> Callable[[Sequence[str]], Awaitable[int]]:
    """One round: every file read whole; returns the bytes read."""
    if variant == "open":
        async def round_blocking(paths: Sequence[str]) -> int:
            total = 0
            for path in paths:  # blocking: one after the other, in the loop's thread
                with open(path, "rb") as f:
                    total += len(f.read())
            return total
        return round_blocking
    gather = asyncio.gather

    async def round_concurrent(paths: Sequence[str]) -> int:
        return sum(map(len, await gather(*[fetch(p) for p in paths])))
    return round_concurrent


async def child_rounds(spec: dict[str, Any], paths: list[str], expected: int) -> dict[str, Any]:
    variant, rounds, interval = spec["variant"], spec["rounds"], spec["interval"]
    fetch = make_fetch(variant)  # the import: before the clock, counted in RSS
    one_round = make_round(variant, fetch)
    sleep = asyncio.sleep
    before = status_fields()  # interpreter, imports and the loop, before the first round
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(rounds):
        got = await one_round(paths)
        if got != expected:
            raise RuntimeError(f"round {i}: read {got} bytes, expected {expected}")
        await sleep(interval)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    status = status_fields()
    user, kernel = split_threads(task_names())
    out: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "status": status, "status_before": before,
                           "threads_end": user, "iou_threads_end": kernel}
    # Untimed: the bytes must be builtin open()'s.
    for path in paths:
        with open(path, "rb") as f:
            want = f.read()
        if await fetch(path) != want:
            raise AssertionError(f"{variant} read different bytes from {path} than open() did")
    if variant == "aioring":
        aioring = sys.modules["aioring"]
        out["backend"] = aioring.backend()
        out["ring"] = {k: v for k, v in aioring.statistics().items()
                       if k in ("submit_calls", "wakeups", "completions", "backpressured")}
    if variant == "aiofile":
        import importlib
        out["caio"] = importlib.import_module("caio").AsyncioContext.__module__
    return out


def child_main(spec_text: str) -> int:
    """Run one configuration; print its figures as one JSON line on stdout."""
    spec = json.loads(spec_text)
    if not spec.get("fresh_heap"):
        block = bytes(2 << 20)  # calloc: mmapped, untouched; its free raises glibc's thresholds
        del block
    handled: list[str] = []
    result: dict[str, Any] = {}
    try:
        paths = [os.path.join(spec["data_dir"], f"{i:02d}.bin") for i in range(spec["files"])]
        expected = sum(os.stat(p).st_size for p in paths)
        if spec["loop"] == "uvloop":
            import importlib
            loop: asyncio.AbstractEventLoop = importlib.import_module("uvloop").new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # aiofile looks its context up with get_event_loop()

        def on_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            handled.append(f"{context.get('message')}: {exc!r}" if exc else str(context.get("message")))
        loop.set_exception_handler(on_error)
        try:
            result = loop.run_until_complete(
                asyncio.wait_for(child_rounds(spec, paths, expected), spec["timeout"]))
            # Not loop.shutdown_default_executor(): it starts one more thread (to join
            # the pool), which the sampler would count; close() lets the pool go.
        finally:
            asyncio.set_event_loop(None)
            loop.close()
        if handled:
            result["error"] = f"the loop's exception handler was called: {handled[0]}"
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    result["handled"] = handled
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


# ===================================================================== parent
def make_files(data_dir: Path, count: int, seed: int) -> list[int]:
    """The files 00.bin ... (count-1).bin of seeded sizes, made once and reused; returns the sizes."""
    import random

    from benchlib import ensure_dir, log, mount_of

    ensure_dir(data_dir.parent)
    data_dir.mkdir(exist_ok=True)
    point, fstype = mount_of(data_dir)
    if fstype in ("tmpfs", "ramfs"):
        log(f"WARNING: {data_dir} is on {fstype} ({point}), not a real disk: io_uring hands "
            "tmpfs reads to its worker threads. Use --data-dir on a disk.")
    rng = random.Random(seed)
    sizes = [rng.randint(MIN_SIZE, MAX_SIZE) for _ in range(count)]
    made = 0
    for i, size in enumerate(sizes):
        path = data_dir / f"{i:02d}.bin"
        if path.exists() and path.stat().st_size == size:
            continue
        partial = path.with_suffix(".partial")
        partial.write_bytes(os.urandom(size))
        partial.replace(path)
        made += 1
    for i in range(count):  # into the page cache
        (data_dir / f"{i:02d}.bin").read_bytes()
    if made:
        log(f"created {made} files in {data_dir}")
    return sizes


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Start one child, sample its threads until it exits; its result plus the sampled peaks."""
    import subprocess
    import tempfile

    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        peak_user = peak_kernel = 0
        kernel_names: set[str] = set()
        deadline = time.monotonic() + timeout
        timed_out = False
        while child.poll() is None:
            names = task_names(child.pid)
            user, kernel = split_threads(names)
            peak_user, peak_kernel = max(peak_user, user), max(peak_kernel, kernel)
            kernel_names.update(n.rstrip("0123456789") for n in names if n.startswith("iou-"))
            if time.monotonic() > deadline:
                child.kill()
                timed_out = True
                child.wait()
                break
            time.sleep(SAMPLE_EVERY)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    result: dict[str, Any] = {}
    lines = stdout.strip().splitlines()
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = {"error": f"unreadable output: {lines[-1][:200]!r}"}
    if timed_out:
        result["error"] = f"timed out after {timeout:.0f} s (killed)"
    elif not result:
        result["error"] = f"exited with status {child.returncode} and no result"
    elif child.returncode and "error" not in result:
        result["error"] = f"exited with status {child.returncode}"
    result["stderr"] = stderr.strip()
    result["threads_peak"] = max(peak_user, result.get("threads_end", 0))
    result["iou_threads_peak"] = max(peak_kernel, result.get("iou_threads_end", 0))
    result["iou_thread_kinds"] = sorted(kernel_names)
    return result


class Sample:
    def __init__(self, variant: str, loop: str, files: int, repeat: int) -> None:
        self.variant, self.loop, self.files, self.repeat = variant, loop, files, repeat
        self.wall_s = self.cpu_s = 0.0
        self.rss_peak_kib = self.vm_peak_kib = self.threads_peak = self.iou_threads_peak = 0
        self.rss_before_kib = 0  # VmRSS after the imports, before the first round
        self.iou_thread_kinds: list[str] = []
        self.extra: dict[str, Any] = {}
        self.stderr = ""
        self.error: str | None = None

    @property
    def cpu_pct(self) -> float:
        return 100 * self.cpu_s / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["cpu_pct"] = self.cpu_pct
        return d


def fill(sample: Sample, result: dict[str, Any]) -> None:
    sample.error = result.get("error")
    sample.stderr = result.get("stderr", "")
    sample.threads_peak = result.get("threads_peak", 0)
    sample.iou_threads_peak = result.get("iou_threads_peak", 0)
    sample.iou_thread_kinds = result.get("iou_thread_kinds", [])
    if "wall_s" in result:
        sample.wall_s, sample.cpu_s = result["wall_s"], result["cpu_s"]
        sample.rss_peak_kib = result["status"]["VmHWM"]
        sample.vm_peak_kib = result["status"]["VmPeak"]
        sample.rss_before_kib = result["status_before"]["VmRSS"]
        sample.extra = {k: result[k] for k in ("status", "status_before", "backend", "ring", "caio",
                                               "handled")
                        if k in result}


Key = tuple[str, str, int]
METRICS = ("wall_s", "cpu_pct", "rss_peak_kib", "vm_peak_kib", "threads_peak", "iou_threads_peak",
           "rss_before_kib")


def medians(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    import statistics

    groups: dict[Key, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.variant, s.loop, s.files), []).append(s)
    out: dict[Key, dict[str, Any]] = {}
    for key, group in groups.items():
        ok = [s for s in group if s.error is None]
        row: dict[str, Any] = {"variant": key[0], "loop": key[1], "files": key[2], "runs": len(ok),
                               "errors": [s.error for s in group if s.error]}
        if ok:
            for m in METRICS:
                values = [getattr(s, m) if m != "cpu_pct" else s.cpu_pct for s in ok]
                row[m] = statistics.median(values)
                row[f"{m}_min"], row[f"{m}_max"] = min(values), max(values)
        out[key] = row
    return out


def table(title: str, columns: Sequence[int], rows: list[tuple[str, list[str]]]) -> str:
    heads = [f"N={n}" for n in columns]
    label_w = max(len(title), *(len(label) for label, _ in rows))
    widths = [max(len(h), *(len(cells[i]) for _, cells in rows)) for i, h in enumerate(heads)]
    lines = [title.ljust(label_w) + " | " + "  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True)),
             "-" * label_w + "-+-" + "-" * (sum(widths) + 2 * (len(widths) - 1))]
    for label, cells in rows:
        lines.append(label.ljust(label_w) + " | "
                     + "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
    return "\n".join(lines)


def report(med: dict[Key, dict[str, Any]], configs: list[tuple[str, str]], files: list[int],
           repeat: int) -> str:
    def cell(variant: str, loop: str, n: int, fmt: Callable[[dict[str, Any]], str]) -> str:
        row = med.get((variant, loop, n))
        if row is None:
            return "-"
        return fmt(row) if row["runs"] else "FAILED"

    def rows(fmt: Callable[[dict[str, Any]], str]) -> list[tuple[str, list[str]]]:
        return [(f"{LABEL[v]:<8} {lp}", [cell(v, lp, n, fmt) for n in files]) for v, lp in configs]

    runs = f"median of {repeat}" if repeat > 1 else "one run"
    parts = [
        table(f"wall time, s ({runs})", files, rows(lambda r: f"{r['wall_s']:.3f}")),
        table("CPU % (process CPU / wall)", files, rows(lambda r: f"{r['cpu_pct']:.1f}%")),
        table("peak threads: user (+ iou)", files, rows(
            lambda r: f"{r['threads_peak']:.0f}" + (f" (+{r['iou_threads_peak']:.0f})"
                                                     if r["iou_threads_peak"] else ""))),
        table("peak RSS MiB (peak VM MiB)", files, rows(
            lambda r: f"{r['rss_peak_kib'] / 1024:.1f} ({r['vm_peak_kib'] / 1024:.0f})")),
    ]
    return "\n\n".join(parts)


def targets(med: dict[Key, dict[str, Any]], loops: list[str], variants: list[str]) -> list[str]:
    """The PASS/FAIL lines at N = 24, per loop, and the informative ones."""
    out: list[str] = []
    n = TARGET_FILES
    for loop in loops:
        ring = med.get(("aioring", loop, n), {})
        ref = med.get(("open", loop, n), {})
        peer = med.get(("aiofiles", loop, n), {})
        out.append(f"targets at N = {n}, {loop} (aioring against open() and aiofiles on the same loop):")
        if not ring.get("runs"):
            out.append("  SKIP  aioring did not run (or failed) at N = 24")
            continue

        def line(verdict: bool | None, text: str, informative: bool = False) -> None:
            if informative:
                mark = "info" if verdict is None else ("info: met" if verdict else "info: not met")
            else:
                mark = "SKIP" if verdict is None else ("PASS" if verdict else "FAIL")
            out.append(f"  {mark:<14}{text}")

        user, kern = ring["threads_peak"], ring["iou_threads_peak"]
        line(user <= 1, f"one thread, no pool: aioring's peak user-space threads {user:.0f} "
                        f"(io_uring kernel workers, not a user-space pool: {kern:.0f})")
        if ref.get("runs"):
            d_rss = (ring["rss_peak_kib"] - ref["rss_peak_kib"]) / 1024
            line(d_rss <= 5, f"RSS within 5 MiB of open(): {ring['rss_peak_kib'] / 1024:.1f} vs "
                             f"{ref['rss_peak_kib'] / 1024:.1f} MiB ({d_rss:+.1f} MiB)")
        else:
            line(None, "RSS within 5 MiB of open(): open() did not run")
        if peer.get("runs"):
            ratio = ring["wall_s"] / peer["wall_s"]
            line(ratio <= 0.6, f"wall time at most 0.6x aiofiles: {ring['wall_s']:.3f} vs "
                               f"{peer['wall_s']:.3f} s ({ratio:.2f}x)")
        else:
            why = "not installed" if "aiofiles" not in variants else "did not run"
            line(None, f"wall time at most 0.6x aiofiles: aiofiles {why}")
        if ref.get("runs"):
            ratio = ring["wall_s"] / ref["wall_s"]
            line(ratio <= 1.2, f"wall time at most 1.2x open(): {ratio:.2f}x", informative=True)
            floor = med.get(("tasks", loop, n), {})
            if floor.get("runs"):
                line(None, f"the floor of a task per file (tasks): {floor['wall_s'] / ref['wall_s']:.2f}x "
                           f"open()'s wall time; aioring {ring['wall_s'] / floor['wall_s']:.2f}x the floor",
                     informative=True)
            d_rss = (ring["rss_peak_kib"] - ref["rss_peak_kib"]) / 1024
            line(d_rss <= 3, f"RSS within 3 MiB of open(): {d_rss:+.1f} MiB", informative=True)
        line(user <= 1 and kern == 0,
             f"no thread pool at all (no io-wq workers either): {user:.0f} user thread(s), "
             f"{kern:.0f} io_uring kernel thread(s)", informative=True)
    return out


def notes(samples: list[Sample], med: dict[Key, dict[str, Any]]) -> list[str]:
    from benchlib import spread_note

    out = []
    kinds = sorted({k for s in samples if s.error is None for k in s.iou_thread_kinds})
    if kinds:
        per = sorted({s.variant for s in samples if s.iou_thread_kinds})
        out.append(f"io_uring kernel threads seen ({', '.join(k + '*' for k in kinds)}) in: "
                   f"{', '.join(LABEL[v] for v in per)}. They are the kernel's, made inside the "
                   "process that owns the ring; their CPU time is in the process's CPU %.")
    rings = [s.extra["ring"] for s in samples if s.variant == "aioring" and "ring" in s.extra]
    if rings:
        backends = sorted({s.extra.get("backend", "?") for s in samples if s.variant == "aioring"})
        out.append(f"aioring.backend(): {', '.join(backends)}")
    caio = sorted({s.extra["caio"] for s in samples if "caio" in s.extra})
    if caio:
        out.append("aiofile's caio context: " + ", ".join(caio))
    top = max(k[2] for k in med)
    before = [(k, r) for k, r in med.items() if k[2] == top and r.get("runs")]
    if before:
        order = {v: i for i, v in enumerate(ALL_VARIANTS)}
        before.sort(key=lambda kr: (order[kr[0][0]], kr[0][1]))
        out.append(f"RSS before the first round (interpreter, imports, loop) and what the rounds added "
                   f"up to the peak, MiB, N={top}: "
                   + ", ".join(f"{LABEL[k[0]]} {k[1]} {r['rss_before_kib'] / 1024:.1f} "
                               f"+{(r['rss_peak_kib'] - r['rss_before_kib']) / 1024:.1f}"
                               for k, r in before))
    spread = spread_note(med.items(), "wall_s", lambda k: f"{LABEL[k[0]]}, {k[1]}, N={k[2]}")
    if spread:
        out.append(f"Largest wall-time {spread}.")
    warned = [s for s in samples if s.stderr]
    for s in warned[:5]:
        first = s.stderr.splitlines()[-1][:300]
        out.append(f"stderr of {LABEL[s.variant]} {s.loop} N={s.files} repeat {s.repeat}: {first}")
    if len(warned) > 5:
        out.append(f"... and {len(warned) - 5} more runs wrote to stderr (see the JSON)")
    return out


def parse_files(text: str) -> list[int]:
    import argparse

    try:
        counts = sorted({int(item) for item in text.split(",") if item.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of file counts: {text!r}") from None
    if not counts or counts[0] < 1 or counts[-1] > 99:
        raise argparse.ArgumentTypeError("file counts must be 1 to 99")
    return counts


def cache_bytecode(packages: Sequence[str]) -> None:
    """Compile each library's bytecode where it is missing, as installing a
    package does: a child that compiles a library's source at import (an
    editable install under PYTHONDONTWRITEBYTECODE, say) would count the
    compiler's memory in that library's RSS."""
    import compileall
    import importlib.util

    for name in packages:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(location, quiet=2)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1])

    import argparse
    from pathlib import Path

    from benchlib import (
        REPO, git_state, log, machine_info, machine_line, mount_of, optional, parse_list, preset_value,
        uvloop, version, write_json,
    )

    parser = argparse.ArgumentParser(
        description="linux_aio's experiment: N small files (1-100 KiB) read concurrently, then a 1 ms "
                    "sleep, 1,000 times; wall time, peak threads, peak RSS and VM, CPU % for aioring, "
                    "aiofiles, aiofile and builtin open(), each run in its own process, on asyncio "
                    "and uvloop.")
    parser.add_argument("--files", type=parse_files, default=None,
                        help="comma-separated numbers of files read at once (default 1,6,12,24, "
                             "--quick 1,24)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {DEFAULTS['rounds']}, --quick {QUICK['rounds']})")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="milliseconds of sleep after each round (default 1)")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS, canonical=True),
                        default=list(ALL_VARIANTS),
                        help="comma-separated variants (default " + ",".join(ALL_VARIANTS) + ")")
    parser.add_argument("--loops", type=parse_list(ALL_LOOPS, canonical=True), default=list(ALL_LOOPS),
                        help="comma-separated event loops (default asyncio,uvloop)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per configuration, interleaved (order rotated every repeat); the "
                             f"median is reported (default {DEFAULTS['repeat']}, --quick {QUICK['repeat']})")
    parser.add_argument("--seed", type=int, default=20190131, help="seed of the file sizes")
    parser.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / ".data" / "small_files",
                        help="where the small files live; a real disk, not tmpfs "
                             "(default benchmarks/.data/small_files; they are kept for the next run)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a run is killed as hung (default 120)")
    parser.add_argument("--fresh-heap", action="store_true",
                        help="do not free one large block in each child before its rounds (glibc "
                             "then trims the heap after every round and the next faults it back in)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['rounds']} rounds, N = 1 and 24, one run each: a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw and median results here")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    files = preset_value(args, preset, "files")
    rounds, repeat = preset_value(args, preset, "rounds"), preset_value(args, preset, "repeat")
    if rounds < 1 or repeat < 1 or args.interval < 0:
        parser.error("--rounds and --repeat must be positive, --interval not negative")
    started = time.perf_counter()

    skipped: list[str] = []
    loops = list(args.loops)
    variants = list(args.variants)
    if "uvloop" in loops and uvloop is None:
        loops.remove("uvloop")
        skipped.append("uvloop: not installed, its runs are skipped (pip install uvloop)")
    for peer in ("aiofiles", "aiofile"):
        if peer in variants and optional(peer) is None:
            variants.remove(peer)
            skipped.append(f"{peer}: not installed, skipped (pip install {peer})")
    if not loops:
        sys.exit("error: no event loop left to run on")
    if not variants:
        sys.exit("error: no variant left to run")
    for note in skipped:
        log("note: " + note)
    cache_bytecode([v for v in variants if v not in ("open", "tasks")])

    sizes = make_files(args.data_dir, max(files), args.seed)
    configs = [(v, lp) for v in variants for lp in loops]
    runs = [(v, lp, n) for n in files for v, lp in configs]
    total = len(runs) * repeat
    samples: list[Sample] = []
    k = 0
    for r in range(repeat):
        shift = r * len(runs) // repeat  # rotate the order: no configuration always runs first
        for v, lp, n in runs[shift:] + runs[:shift]:
            k += 1
            log(f"[{k}/{total}] {LABEL[v]:<8} {lp:<7} N={n:<2} repeat {r + 1}/{repeat} ... ", end="")
            spec = {"variant": v, "loop": lp, "files": n, "rounds": rounds,
                    "interval": args.interval / 1000, "data_dir": str(args.data_dir),
                    "timeout": args.timeout, "fresh_heap": args.fresh_heap}
            s = Sample(v, lp, n, r + 1)
            fill(s, run_child(spec, args.timeout + 30))
            if s.error:
                log(f"FAILED: {s.error}")
            else:
                iou = f" (+{s.iou_threads_peak} iou)" if s.iou_threads_peak else ""
                log(f"{s.wall_s:6.3f} s  CPU {s.cpu_pct:5.1f}%  threads {s.threads_peak}{iou}  "
                    f"RSS {s.rss_peak_kib / 1024:.1f} MiB  VM {s.vm_peak_kib / 1024:.0f} MiB")
            samples.append(s)
    med = medians(samples)
    elapsed = time.perf_counter() - started

    meta: dict[str, Any] = {
        **machine_info(),
        "checkout": git_state(),
        "versions": {d: version(d) for d in ("aioring", "uvloop", "aiofiles", "aiofile", "caio")},
        "data_dir": str(args.data_dir),
        "file_sizes": sizes[:max(files)],
        "files": files, "rounds": rounds, "interval_ms": args.interval, "repeat": repeat,
        "variants": variants, "loops": loops, "seed": args.seed, "skipped": skipped,
        "fresh_heap": args.fresh_heap,
        "runtime_s": elapsed,
    }
    ver = meta["versions"]
    point, fstype = mount_of(args.data_dir)
    print(f"{machine_line(meta)} | {meta['checkout']}")
    print(f"aioring {ver['aioring']}, uvloop {ver['uvloop']}, aiofiles {ver['aiofiles']}, "
          f"aiofile {ver['aiofile']} (caio {ver['caio']})")
    print(f"{max(files)} files of {min(sizes) / KIB_:.1f} to {max(sizes) / KIB_:.1f} KiB "
          f"({sum(sizes) / KIB_:.0f} KiB in all) in {args.data_dir} ({fstype} at {point}, page-cached); "
          f"a round reads the first N whole (open, read, close; concurrently for the async "
          f"libraries), then sleeps {args.interval:g} ms; {rounds} rounds per run; "
          f"every run a fresh process"
          + (", its heap as the interpreter left it (--fresh-heap)" if args.fresh_heap else
             ", which first frees one 2 MiB block (glibc's thresholds adapted alike for every variant)"))
    for note in skipped:
        print("skipped: " + note)
    print()
    print(report(med, configs, files, repeat))
    print()
    print("\n".join(targets(med, loops, variants)))
    print()
    print("notes: threads are the process's /proc/<pid>/task entries, sampled every "
          f"{SAMPLE_EVERY * 1000:.0f} ms; '(+ iou)' counts io_uring's kernel threads (iou-wrk, iou-sqp), "
          "which are not a user-space pool. RSS is VmHWM and VM is VmPeak of the whole process "
          "(interpreter and imports included); CPU % counts every thread of the process.")
    for line in notes(samples, med):
        print(line)
    failed = [s for s in samples if s.error]
    if failed:
        print(f"FAILED runs: {len(failed)} of {len(samples)}")
        for s in failed:
            print(f"  {LABEL[s.variant]} {s.loop} N={s.files} repeat {s.repeat}: {s.error}")
    print(f"total runtime {elapsed:.1f} s")
    write_json(args.json, {"meta": meta, "samples": [s.as_dict() for s in samples],
                           "medians": list(med.values())})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
