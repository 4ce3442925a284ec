#!/usr/bin/env python3
"""File-tree operations: aioring.shutil beside shutil and aioshutil, in one run.

Workloads (the data lives in benchmarks/.data/tree_ops, on the real disk):

* copytree  a tree of 5,000 files of 4 KiB in 50 directories, copied whole
            (copy2: data, times, permissions), each run into a destination
            of its own, in block groups of its own on ext4; nothing is
            removed between the copies of a run (see FS_TOPDIR_FL)
* rmtree    once every copy is made, each variant removes the copies it made
* copyfile  one file of 1 GiB copied (from the page cache to a new file); a
            probe task on the same loop sleeps 1 ms again and again, and how
            late it wakes up is its latency (the loop's responsiveness); on
            a virtual machine that hands free memory back to its host, each
            copy begins 3 s after the previous copy's file was removed
* copyfileobj  64 MiB between two files open as async file objects
            (aioring.open); shutil and aioshutil get plain file objects, since
            aioshutil's copyfileobj cannot take async ones

Variants, interleaved within each repeat (medians reported):

* shutil    the stdlib's own, called synchronously (the reference)
* aioshutil its coroutines, each a whole shutil call in the loop's executor
* aioring   aioring.shutil on asyncio's loop (and on uvloop with --loops)
* cp/rm     informative: coreutils' cp -a / rm -rf (a C program, no Python):
            how fast the kernel does the same work here, process start included
* floor     informative, copytree and copyfile: benchmarks/copytree_floor.c
            and copyfile_floor.c, the same steps as aioring's through io_uring
            in C (no Python), built here with cc and liburing (left out where
            that fails): what the design itself reaches on this machine,
            process start included
* probe     the probe alone on an idle loop for a second, each round: the
            machine's own wake-up latency, against which the copy's is judged;
            the loop thread's run-queue delay (schedstat) is printed beside it

Targets (PASS/FAIL): copytree and rmtree at least 3x aioshutil and 1.3x
shutil; copyfile at least 0.9x shutil.copyfile with the probe's
wake-up latency (99th percentile) less than 5 ms above the same probe's
on an idle loop in the same run; one (user-space) thread in the process while
aioring works, on the io_uring backend.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import fcntl
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchlib import (GIB, KIB, MIB, REPO, Meter, add_run_options, ensure_dir, log, machine_line, new_loop,
                      presets, require_space, run_meta, write_random)

DEFAULTS = {"repeat": 3, "files": 5000, "dirs": 50, "big": GIB, "objsize": 64 * MIB}
QUICK = {"repeat": 1, "files": 1000, "dirs": 10, "big": 128 * MIB, "objsize": 16 * MIB}
FILE_SIZE = 4 * KIB
PROBE_EVERY = 0.001
THREADS_EVERY = 0.05
IDLE_PROBE = 1.0  # seconds the probe runs alone
# On a machine that hands free memory back to its host (page_reporting), each
# copyfile begins this long after the previous copy's file was removed: by
# then that memory went back too, so every variant writes into memory in the
# same state.  (Started at once, a copy made by the thread that removed the
# file gets its freed pages back from that CPU's lists, still backed, and one
# made by a kernel worker on the other CPU mostly does not: 386-501 ms for
# shutil against 1,054-1,225 ms for aioring in one run.)
SETTLE = 3.0
# ext4 without a journal (as this machine's root file system is) does not
# reuse an inode for a minute after its deletion, or six while its inode
# table block is dirty (as it is again once a new inode is written to it):
# each inode it allocates skips every such inode of the group, with a buffer
# cache lookup each (`recently_deleted`).  A copy made in the groups of a
# tree removed minutes before spends most of its CPU there: under perf, 60%
# of all samples, and the same code's copy took 737-1,939 ms against 198-278
# ms elsewhere; which variant it hits depends on the order of the runs.  So
# the copies are made where nothing was removed: their parent directory has
# ext4's TOPDIR flag (chattr +T), which spreads each copy to block groups of
# its own (the Orlov allocator), and nothing is removed between the copies.
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000
WORKLOADS = ("copytree", "rmtree", "copyfile", "copyfileobj")
CPUS = len(os.sched_getaffinity(0))


def kernel_cpu() -> float:
    """CPU seconds this process spent in the kernel so far (all its threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def children_cpu() -> tuple[float, float]:
    """User and kernel CPU seconds of the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def device_stat(path: Path) -> tuple[int, int, int] | None:
    """(discards completed, ms spent on them summed over requests, ms the
    device had any request in flight) so far, of the block device holding
    `path` (/sys/dev/block/M:m/stat); None where the kernel does not say."""
    dev = os.stat(path).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
            fields = f.read().split()
        return int(fields[11]), int(fields[14]), int(fields[9])
    except (OSError, ValueError, IndexError):
        return None


PF_IO_WORKER = 0x10  # a kernel thread of io_uring (include/linux/sched.h)


def threads_now() -> int:
    """User-space threads of this process: io_uring's kernel workers are not
    counted (by their flags: a new one still has its parent's name)."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                flags = int(f.read().rpartition(")")[2].split()[6])
        except (OSError, ValueError, IndexError):
            continue
        count += not flags & PF_IO_WORKER
    return count


def run_delay() -> float:
    """Seconds the calling thread spent runnable but waiting for a CPU so far
    (the scheduler's run-queue delay, /proc/thread-self/schedstat)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class Probe:
    """A task sleeping PROBE_EVERY again and again: how late each wake-up
    was, the loop thread's run-queue delay meanwhile (the part of the
    lateness that was the machine's other work, not the loop's), and the most
    user-space threads seen (counted every THREADS_EVERY seconds, so that the
    counting, which reads /proc per thread, does not load the loop itself)."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.threads = 0
        self.queued = 0.0
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        counted = 0.0
        while True:
            t = time.perf_counter()
            await asyncio.sleep(PROBE_EVERY)
            now = time.perf_counter()
            self.late.append(now - t - PROBE_EVERY)
            if now - counted >= THREADS_EVERY:
                self.threads = max(self.threads, threads_now())
                counted = now

    def __enter__(self) -> Probe:
        self.threads = threads_now()
        self.queued = -run_delay()
        self.task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        self.queued += run_delay()
        self.threads = max(self.threads, threads_now())

    def summary(self) -> dict[str, float]:
        late = sorted(self.late or [0.0])
        return {"probe_max_ms": late[-1] * 1e3, "probe_median_ms": statistics.median(late) * 1e3,
                "probe_p99_ms": late[min(len(late) - 1, int(len(late) * 0.99))] * 1e3,
                "probe_queued_ms": self.queued * 1e3, "threads": self.threads}


def make_tree(root: Path, files: int, dirs: int) -> None:
    if root.exists() and sum(len(f) for _, _, f in os.walk(root)) == files:
        return
    shutil.rmtree(root, ignore_errors=True)
    data = os.urandom(FILE_SIZE)
    for d in range(dirs):
        (root / f"d{d:03d}").mkdir(parents=True)
        for i in range(files // dirs):
            (root / f"d{d:03d}" / f"f{i:04d}").write_bytes(data)
    log(f"made {files} files in {dirs} directories under {root}")


def make_file(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    write_random(path, path.with_suffix(".partial"), size, os.urandom)
    log(f"made {path} ({size // MIB} MiB)")


def warm(root: Path) -> None:
    """Everything under root read once: the runs copy from the page cache."""
    buf = bytearray(4 * MIB)
    for dirpath, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(dirpath, name), "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass


def top_directory(path: Path) -> bool:
    """Give the directory `path` ext4's TOPDIR flag (chattr +T): its
    subdirectories are spread over the block groups; False where the file
    system has no such flag."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] |= FS_TOPDIR_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def unjournaled_ext4(path: Path) -> bool:
    """Whether `path` is on ext4 mounted without a journal (no jbd2 entry
    for its device under /proc/fs/jbd2)."""
    dev = os.stat(path).st_dev
    try:
        name = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name
        with open("/proc/self/mountinfo") as f:
            ext4 = any(line.split()[2] == f"{os.major(dev)}:{os.minor(dev)}"
                       and line.split(" - ")[1].split()[0] == "ext4" for line in f)
    except (OSError, IndexError):
        return False
    return ext4 and not any(Path("/proc/fs/jbd2").glob(f"{name}-*"))


FLOORS = ("copytree", "copyfile")  # (the workloads with a floor: benchmarks/<workload>_floor.c)


def build_floor(data: Path, workload: str) -> Path | None:
    """benchmarks/<workload>_floor.c built into `data` (again when the
    source is newer), or None, logged, where the C compiler or liburing is
    missing."""
    source = REPO / "benchmarks" / f"{workload}_floor.c"
    program = data / f"{workload}_floor"
    if program.exists() and program.stat().st_mtime >= source.stat().st_mtime:
        return program
    cc = os.environ.get("CC", "cc")
    try:
        subprocess.run([cc, "-O2", "-o", str(program), str(source), "-luring"], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        log(f"{workload}'s floor left out: {cc} could not build {source.name}: "
            f"{getattr(exc, 'stderr', '') or exc}")
        return None
    return program


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def run_async(loop_name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    loop = new_loop(loop_name)
    try:
        return loop.run_until_complete(fn())
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


class Bench:
    def __init__(self, data: Path, opts: dict[str, Any], loops: list[str]) -> None:
        import aioring.shutil
        import aioshutil
        self.ash, self.aio = aioring.shutil, aioshutil
        self.data, self.opts, self.loops = data, opts, loops
        self.src, self.big, self.obj = data / "tree", data / "big.bin", data / "obj.bin"
        self.dst = data / "out"
        self.copies = data / "copies"  # copytree's destinations, removed by rmtree's runs
        self.settled = ""
        self.floors = {w: build_floor(data, w) for w in FLOORS if w in opts["workloads"]}
        self.reporting = page_reporting()
        self.samples: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def variants(self, workload: str = "") -> list[str]:
        """The variants of `workload` (of every workload: the table's columns)."""
        built = [w for w, program in self.floors.items() if program is not None]
        floor = ["floor"] if built and (workload in built or not workload) else []
        return ["shutil", "aioshutil", *(f"aioring/{loop}" for loop in self.loops), "cp/rm", *floor]

    def timed(self, workload: str, variant: str, fn: Callable[[], Any], is_async: bool,
              loop_name: str = "asyncio") -> None:
        probe_box: list[Probe] = []

        async def with_probe() -> None:
            with Probe() as probe:
                probe_box.append(probe)
                await asyncio.sleep(0)
                t0 = kernel_cpu()
                with Meter() as m:
                    await fn()
                kernel.append(kernel_cpu() - t0)
            meters.append(m)

        meters: list[Meter] = []
        kernel: list[float] = []
        os.sync()  # what the previous run left dirty is written out first, untimed
        if workload == "copyfile" and self.reporting is not None:
            time.sleep(SETTLE)
        for thread in threading.enumerate():  # (a previous variant's executor, still exiting)
            if thread is not threading.main_thread():
                thread.join(5)
        disk0 = device_stat(self.data)
        if is_async:
            run_async(loop_name, with_probe)
            m = meters[0]
        else:
            t0, c0 = kernel_cpu(), children_cpu()
            with Meter() as m:
                fn()
            kernel.append(kernel_cpu() - t0)
            children = [b - a for a, b in zip(c0, children_cpu(), strict=True)]  # (cp/rm)
            kernel[0] += children[1]
            m.cpu += sum(children)
        disk1 = device_stat(self.data)
        sample: dict[str, Any] = {"wall_s": m.wall, "cpu_s": m.cpu, "sys_s": kernel[0], "other_s": m.other}
        if disk0 is not None and disk1 is not None:
            sample.update(zip(("discards", "discard_ms", "busy_ms"),
                              (b - a for a, b in zip(disk0, disk1, strict=True)), strict=True))
        if probe_box:
            sample.update(probe_box[0].summary())
        self.samples.setdefault((workload, variant), []).append(sample)

    def job(self, workload: str, variant: str, where: Path | None = None) -> tuple[Callable[[], Any], bool]:
        """What `variant` runs for `workload` (copytree into, or rmtree of,
        `where`), and whether it is a coroutine function."""
        src, dst, big = str(self.src), str(where or self.dst), str(self.big)
        if workload == "copyfileobj":
            return self.copyfileobj(variant), variant != "shutil"
        if variant == "floor":
            program = self.floors[workload]
            assert program is not None
            argv = [str(program), *({"copytree": (src, dst), "copyfile": (big, dst)}[workload])]
            return lambda: subprocess.run(argv, check=True), False
        if variant == "cp/rm":
            argv = {"copytree": ["cp", "-a", src, dst], "rmtree": ["rm", "-rf", dst],
                    "copyfile": ["cp", big, dst]}[workload]
            return lambda: subprocess.run(argv, check=True), False
        args = {"copytree": (src, dst), "rmtree": (dst,), "copyfile": (big, dst)}[workload]
        module: Any = {"shutil": shutil, "aioshutil": self.aio}.get(variant, self.ash)
        func = getattr(module, workload)
        return lambda: func(*args), variant != "shutil"

    def order(self, turn: int, workload: str) -> list[str]:
        """Every variant of `workload`, starting with the turn's: none always
        comes first or last."""
        names = self.variants(workload)
        return names[turn % len(names):] + names[:turn % len(names)]

    def fresh_copies(self) -> None:
        """The parent of copytree's destinations, new, with ext4's TOPDIR flag
        where the file system has it (see FS_TOPDIR_FL)."""
        remove(self.copies)
        self.copies.mkdir()
        if top_directory(self.copies) and unjournaled_ext4(self.data):
            self.settled = ("each copy was made in block groups of its own (TOPDIR): this file system "
                            "(ext4 without a journal) skips the inodes removed in the last minutes, one "
                            "lookup each, where earlier copies were removed")

    def tree_rounds(self, rounds: int) -> None:
        """copytree by every variant, `rounds` times, each into a new
        destination with nothing removed in between; then rmtree by each
        variant of the copies it made, in the same order."""
        self.fresh_copies()
        for turn in range(rounds):
            log(f"copytree round {turn + 1}/{rounds}")
            for variant in self.order(turn, "copytree"):
                dst = self.copies / f"{turn}-{variant.replace('/', '-')}"
                self.timed("copytree", variant, *self.job("copytree", variant, dst), self.loop_of(variant))
        for turn in range(rounds):
            log(f"rmtree round {turn + 1}/{rounds}")
            for variant in self.order(turn, "rmtree"):
                dst = self.copies / f"{turn}-{variant.replace('/', '-')}"
                self.timed("rmtree", variant, *self.job("rmtree", variant, dst), self.loop_of(variant))
                assert not dst.exists()
        remove(self.copies)

    def one_round(self, turn: int) -> None:
        """copyfile and copyfileobj by every variant once."""
        order = self.order(turn, "copyfile")
        chosen = self.opts["workloads"]
        if "copyfile" in chosen:
            # The probe alone, on a loop with nothing else to do: the machine's own wake-up latency.
            self.timed("idle", "probe", lambda: asyncio.sleep(IDLE_PROBE), True)
        sizes = {"copyfile": self.big.stat().st_size, "copyfileobj": self.obj.stat().st_size}
        for workload, size in sizes.items():
            if workload not in chosen:
                continue
            for variant in order:
                if workload == "copyfileobj" and variant in ("cp/rm", "floor"):
                    continue
                self.timed(workload, variant, *self.job(workload, variant), self.loop_of(variant))
                assert self.dst.stat().st_size == size
                remove(self.dst)

    @staticmethod
    def loop_of(variant: str) -> str:
        return variant.partition("/")[2] or "asyncio"

    def copyfileobj(self, variant: str) -> Callable[[], Any]:
        obj, out = str(self.obj), str(self.dst)
        if variant == "shutil":
            def sync() -> None:
                with open(obj, "rb") as fsrc, open(out, "wb") as fdst:
                    shutil.copyfileobj(fsrc, fdst)
            return sync
        if variant == "aioshutil":
            async def threads() -> None:
                with open(obj, "rb") as fsrc, open(out, "wb") as fdst:
                    await self.aio.copyfileobj(fsrc, fdst)
            return threads

        async def ring() -> None:
            import aioring
            async with aioring.open(obj, "rb") as fsrc, aioring.open(out, "wb") as fdst:
                await self.ash.copyfileobj(fsrc, fdst)
        return ring

    def medians(self) -> dict[tuple[str, str], dict[str, float]]:
        out = {}
        for key, samples in self.samples.items():
            out[key] = {name: statistics.median(s[name] for s in samples) for name in samples[0]}
            out[key]["wall_min_s"] = min(s["wall_s"] for s in samples)
            out[key]["wall_max_s"] = max(s["wall_s"] for s in samples)
            if "probe_max_ms" in samples[0]:
                out[key]["probe_max_ms"] = max(s["probe_max_ms"] for s in samples)
                out[key]["threads"] = max(s["threads"] for s in samples)
        return out


def report(med: dict[tuple[str, str], dict[str, float]], variants: list[str], opts: dict[str, Any]) -> str:
    sizes = {"copytree": f"{opts['files']} x 4 KiB", "rmtree": f"{opts['files']} files",
             "copyfile": f"{opts['big'] // MIB} MiB", "copyfileobj": f"{opts['objsize'] // MIB} MiB"}
    head = f"{'workload':<24} | " + "  ".join(f"{v:>22}" for v in variants)
    lines = [head, "-" * len(head)]
    for w in WORKLOADS:
        cells = []
        for v in variants:
            m = med.get((w, v))
            cells.append("-" if m is None else
                         f"{m['wall_s'] * 1e3:.0f} ({m['cpu_s'] * 1e3:.0f}/{m['sys_s'] * 1e3:.0f}) ms")
        lines.append(f"{w + ' (' + sizes[w] + ')':<24} | " + "  ".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def probe_line(med: dict[tuple[str, str], dict[str, float]], variants: list[str]) -> str:
    cells = []
    for v in variants:
        m = med.get(("copyfile", v))
        if m is None or "probe_max_ms" not in m:
            cells.append("-")
        else:
            cells.append(f"{m['probe_p99_ms']:.2f}/{m['probe_max_ms']:.2f} ms")
    return f"{'copyfile probe p99/max':<24} | " + "  ".join(f"{c:>22}" for c in cells)


def verdicts(med: dict[tuple[str, str], dict[str, float]], loops: list[str], backend: str) -> list[str]:
    out = []

    def line(ok: bool, text: str) -> None:
        out.append(f"{'PASS' if ok else 'FAIL'}  {text}")

    def wall(w: str, v: str) -> float:
        return med[(w, v)]["wall_s"]

    for loop in loops:
        ring = f"aioring/{loop}"
        for w in ("copytree", "rmtree") if ("copytree", ring) in med else ():
            vs_aio = wall(w, "aioshutil") / wall(w, ring)
            vs_sync = wall(w, "shutil") / wall(w, ring)
            line(vs_aio >= 3, f"{w} {ring}: {vs_aio:.2f}x aioshutil (target >= 3x)")
            line(vs_sync >= 1.3, f"{w} {ring}: {vs_sync:.2f}x shutil (target >= 1.3x)")
            floor = wall(w, "shutil") / wall(w, "cp/rm")
            out.append(f"info  {w}: coreutils ({'cp -a' if w == 'copytree' else 'rm -rf'}) is "
                       f"{floor:.2f}x shutil here")
            if (w, "floor") in med:
                least = wall(w, "floor")
                out.append(f"info  {w}: the floor (aioring's steps in C, no Python) took "
                           f"{least * 1e3:.0f} ms, {wall(w, 'aioshutil') / least:.2f}x aioshutil; "
                           f"{ring} took {wall(w, ring) / least:.2f}x the floor's time")
            # The kernel's work on the CPUs, at the least any variant here needed: an
            # implementation that needs no less is not faster than that work spread
            # over every CPU (the rest of shutil's time is waiting).
            fewest = min((v for v in ("shutil", "aioshutil", ring, "cp/rm") if (w, v) in med),
                         key=lambda v: med[(w, v)]["sys_s"])
            kernel = med[(w, fewest)]["sys_s"]
            least = max(kernel / CPUS, 1e-6)
            out.append(f"info  {w}: the least time in the kernel on the CPU was {fewest}'s, "
                       f"{kernel * 1e3:.0f} ms (shutil's {med[(w, 'shutil')]['sys_s'] * 1e3:.0f} ms of its "
                       f"{wall(w, 'shutil') * 1e3:.0f}); spread over {CPUS} CPUs that is "
                       f"{least * 1e3:.0f} ms, so an implementation that asks the kernel for no less is at "
                       f"most {wall(w, 'aioshutil') / least:.1f}x aioshutil and "
                       f"{wall(w, 'shutil') / least:.1f}x shutil")
        if ("rmtree", ring) in med:
            out.extend(discard_lines(med, ("shutil", "aioshutil", ring, "cp/rm")))
            out.extend(discard_bound(med, ring, ("shutil", "aioshutil", ring, "cp/rm")))
        if ("copyfile", ring) in med:
            copyfile_verdicts(med, ring, line, out)
        if backend == "io_uring":
            threads = max(med[(w, ring)]["threads"] for w in WORKLOADS if (w, ring) in med)
            line(threads == 1, f"{ring}: {threads} user-space thread(s) at most while it worked (target 1)")
        if ("copyfileobj", ring) in med:
            obj = wall("copyfileobj", "shutil") / wall("copyfileobj", ring)
            out.append(f"info  copyfileobj {ring} (async files): {obj:.2f}x shutil.copyfileobj, "
                       f"{wall('copyfileobj', 'aioshutil') / wall('copyfileobj', ring):.2f}x aioshutil")
    if ("copyfile", "shutil") in med:
        out.extend(copy_spread(med, ["shutil", "aioshutil", *(f"aioring/{loop}" for loop in loops), "cp/rm",
                                     "floor"]))
    return out


def discard_lines(med: dict[tuple[str, str], dict[str, float]], variants: tuple[str, ...]) -> list[str]:
    """What the device did for each variant's rmtree: on a file system
    mounted with `discard` (ext4) each unlink waits for the device to
    discard the file's blocks, and the device's pace at that bounds every
    implementation, however many unlinks it has in flight."""
    out = []
    for v in variants:
        m = med.get(("rmtree", v))
        if m is None or not m.get("discards"):
            continue
        each = m["discard_ms"] / m["discards"] * 1e3
        out.append(f"info  rmtree {v}: {m['discards']:.0f} discards, {each:.0f} us each "
                   f"({m['discard_ms'] / max(m['busy_ms'], 1):.1f} in flight on average); the device "
                   f"busy {m['busy_ms']:.0f} ms of the {m['wall_s'] * 1e3:.0f} ms")
    return out


def discard_bound(med: dict[tuple[str, str], dict[str, float]], ring: str,
                  variants: tuple[str, ...]) -> list[str]:
    """The least time the device needs for the discards of the ring's rmtree,
    at the best pace any variant got from it in this run (whatever the
    number in flight), against what 3x aioshutil asks.  Every variant makes
    the file system issue the same discards (one per file), so no
    implementation removes the tree sooner than the device discards them."""
    paces = {}
    for v in variants:
        m = med.get(("rmtree", v))
        if m and m.get("discards") and m.get("busy_ms"):
            paces[v] = m["discards"] / m["busy_ms"]
    mine = med[("rmtree", ring)]
    if not paces or not mine.get("discards") or ("rmtree", "aioshutil") not in med:
        return []
    best = max(paces, key=paces.__getitem__)
    least = mine["discards"] / paces[best]
    asked = med[("rmtree", "aioshutil")]["wall_s"] * 1e3 / 3
    verdict = ("beyond this device" if least > asked else "within the device's pace")
    counts = sorted({round(med[("rmtree", v)]["discards"]) for v in paces})
    return [f"info  rmtree: the device discarded at most {paces[best] * 1e3:,.0f} per second ({best}); "
            f"at that pace {ring}'s {mine['discards']:.0f} discards take at least {least:.0f} ms, and "
            f"3x aioshutil asks for {asked:.0f} ms: {verdict} (discards per variant: "
            + ", ".join(f"{c:,}" for c in counts) + ")"]


def page_reporting() -> int | None:
    """The order of the free memory blocks this (virtual) machine reports to
    its host, which takes them back (virtio-balloon's free page reporting),
    or None where it does not."""
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if int((dev / "device").read_text(), 16) == 5 and (dev / "features").read_text()[5:6] == "1":
                return int(Path("/sys/module/page_reporting/parameters/page_reporting_order").read_text())
        except (OSError, ValueError):
            continue
    return None


def copy_spread(med: dict[tuple[str, str], dict[str, float]], variants: list[str]) -> list[str]:
    """Each variant's fastest and slowest copyfile, and why they may differ."""
    seen = [med[("copyfile", v)] | {"v": v} for v in variants if ("copyfile", v) in med]
    runs = ", ".join(f"{m['v']} {m['wall_min_s'] * 1e3:.0f}-{m['wall_max_s'] * 1e3:.0f}" for m in seen)
    out = [f"info  copyfile runs (fastest-slowest ms): {runs}"]
    order = page_reporting()
    if order is not None:
        out.append(f"info  this machine hands free memory back to its host in blocks of {4 << order} KiB "
                   "(virtio-balloon free page reporting): a copy whose new page cache lands in such "
                   "memory waits for the host to back it again, and runs up to three times slower, "
                   f"whichever variant it is; so each copy began {SETTLE:.0f} s after the previous "
                   "copy's file was removed, when its memory had gone back too")
    return out


def copyfile_verdicts(med: dict[tuple[str, str], dict[str, float]], ring: str,
                      line: Callable[[bool, str], None], out: list[str]) -> None:
    def wall(w: str, v: str) -> float:
        return med[(w, v)]["wall_s"]

    speed = wall("copyfile", "shutil") / wall("copyfile", ring)
    line(speed >= 0.9, f"copyfile {ring}: {speed:.2f}x shutil.copyfile (target >= 0.9x)")
    if ("copyfile", "floor") in med:
        least = wall("copyfile", "floor")
        out.append(f"info  copyfile: the floor (aioring's steps in C, no Python) took {least * 1e3:.0f} ms, "
                   f"{wall('copyfile', 'shutil') / least:.2f}x shutil.copyfile; {ring} took "
                   f"{wall('copyfile', ring) / least:.2f}x the floor's time")
    # The machine's other work makes any loop wake up late (a loop thread
    # waiting for a CPU); what the copy adds is judged against the probe
    # alone on an idle loop in the same run, at the 99th percentile.
    busy, idle = med[("copyfile", ring)], med[("idle", "probe")]
    added = busy["probe_p99_ms"] - idle["probe_p99_ms"]
    line(added < 5, f"copyfile {ring}: the probe wakes up {busy['probe_p99_ms']:.2f} ms late at the 99th "
                    f"percentile, {added:+.2f} ms against an idle loop (target < 5 ms more)")
    out.append(f"info  the probe's worst wake-up: {busy['probe_max_ms']:.2f} ms during {ring}'s copy, "
               f"{idle['probe_max_ms']:.2f} ms on an idle loop (medians {busy['probe_median_ms']:.2f} "
               f"and {idle['probe_median_ms']:.2f} ms); the loop's thread waited for a CPU "
               f"{busy['probe_queued_ms']:.0f} ms of the copy's {busy['wall_s'] * 1e3:.0f} ms and "
               f"{idle['probe_queued_ms']:.0f} ms of the idle {IDLE_PROBE * 1e3:.0f} ms "
               "(the machine's other work)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_options(parser, DEFAULTS, QUICK, quick_help="a smaller tree and file, one repeat (seconds)",
                    timeout=1800)
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--dirs", type=int, default=None)
    parser.add_argument("--big", type=int, default=None, help="copyfile's size in bytes")
    parser.add_argument("--objsize", type=int, default=None, help="copyfileobj's size in bytes")
    parser.add_argument("--loops", default="asyncio", help="aioring's loops: asyncio,uvloop")
    parser.add_argument("--data-dir", type=Path, default=REPO / "benchmarks" / ".data" / "tree_ops")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="which to run, of " + ",".join(WORKLOADS) + " (copytree and rmtree go together)")
    args = parser.parse_args()
    opts = presets(args, DEFAULTS, QUICK)
    opts["workloads"] = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = set(opts["workloads"]) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    loops = [name.strip() for name in args.loops.split(",") if name.strip()]
    import aioring
    backend = aioring.backend()
    ensure_dir(args.data_dir.parent)
    args.data_dir.mkdir(exist_ok=True)
    copies = opts["repeat"] * (len(loops) + 4) * opts["files"] * FILE_SIZE * 2
    require_space(args.data_dir, 2 * opts["big"] + opts["objsize"] * 2 + copies + 64 * MIB,
                  f"not enough room in {args.data_dir} for the files")
    bench = Bench(args.data_dir, opts, loops)
    remove(bench.dst)
    make_tree(bench.src, opts["files"], opts["dirs"])
    make_file(bench.big, opts["big"])
    make_file(bench.obj, opts["objsize"])
    warm(args.data_dir)
    meta = run_meta(backend, ["aioring", "aioshutil", "uvloop"])
    if {"copytree", "rmtree"} & set(opts["workloads"]):
        bench.tree_rounds(opts["repeat"])
    if {"copyfile", "copyfileobj"} & set(opts["workloads"]):
        for i in range(opts["repeat"]):
            log(f"round {i + 1}/{opts['repeat']}")
            bench.one_round(i)
    med = bench.medians()
    variants = bench.variants()
    print(machine_line(meta) + f" | aioring backend {backend} | {opts['repeat']} rounds, medians")
    print("wall time (CPU time of the process / of it in the kernel, io_uring's kernel workers included)")
    print(report(med, variants, opts))
    print(probe_line(med, variants))
    print()
    lines = verdicts(med, loops, backend)
    if bench.settled:
        lines.insert(0, f"info  copytree: {bench.settled}")
    print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "options": opts, "verdicts": lines,
                                         "samples": {f"{w}|{v}": s for (w, v), s in bench.samples.items()}},
                                        indent=1))
    return 0 if not any(line.startswith("FAIL") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
