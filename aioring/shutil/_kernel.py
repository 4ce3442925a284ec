"""L2: what aioring.shutil starts on the ring.

* **Batches of path operations.**  A tree is removed by starting an
  UNLINKAT for every entry of a directory at once and collecting the
  outcomes afterwards: the ops wait in the ring, not in a task or a future
  each (a Tally counts a directory's down, and its task wakes once, when
  all completed), and the kernel's workers remove the entries while the
  loop lists the next directory.  A batch holds at most `limit` ops in
  flight; a start that finds it full waits until half of them completed.
  While batches are open the ring may have BATCH_WORKERS of those workers
  (rather than the kernel's default, one per CPU): an unlink waits in its
  worker for the device to discard the file's blocks, and more of them
  keep the device busy with more discards at once.
* **File data moved by the kernel.**  A large file goes from the source to
  a pipe and from the pipe to the destination by IORING_OP_SPLICE, the pages
  never passing through Python.  On io_uring one lane (a pipe) hands the
  kernel SPLICE_CHAIN chunks at a time as one chain of linked splices (a
  chunk in, out a piece at a time, the next chunk in, ...:
  Ring.start_chain): the kernel's worker moves them without waiting for
  the loop in between, and the loop sees one round trip per chain instead
  of one per splice (and, the chain quiet, one completion).  The lane's
  next chain is started while one runs, and waits in the kernel until it
  ended (_Signal), so the worker goes from one chain to the next without
  the loop's turn in between.  A short splice ends the chain:
  whatever it left in the pipe is written out, and the lane goes on a
  splice at a time to the end of its range (the end of the file, or a chunk
  off the page boundary).  Where no chain can start (the threads backend, a
  full ring) two lanes take the file's chunks in turn, a splice at a time:
  one fills its pipe from the source while the other's is emptied into the
  destination, one such write at a time (two writers of one file spin on
  its inode lock: measured, twice the CPU time for 1 GiB, the same as
  shutil.copyfile's with one).  A small file is read at once from the page
  cache (aioring.readinto) and written at its offset through the ring.
* **A new file created and written as one operation** (create_with): the
  ring's OPENAT, then at its completion the core starts the WRITE of the
  data itself (NewFile, src/newfile.h), so the caller awaits once and no
  Python runs between the two.  A CopyQueue (copy_queue, drain;
  src/treecopy.h) makes whole copies of small files that way, many at
  once, and wakes its caller once, when all are done.
* **Nothing is let go while the kernel holds it.**  Whatever fails or is
  cancelled, every op that was started is waited for before the caller goes
  on (settle), so that no fd an op refers to (a directory's, a pipe's) is
  closed under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import weakref
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from .. import _binding, _ops
from .._ops import result
from .._core import CopyQueue, NewFile
from .._pathops import _FS_ENCODING, _FS_ERRORS, _encode, _named
from .._loops import get_ring
from .._ringbase import Op, RingBase, os_error

__all__ = ["Batch", "Tally", "copy_data", "finished", "settle", "together"]

T = TypeVar("T")

# Files from this size on are spliced; below it read and written.
SPLICE_MIN = 1 << 20
# Bytes per splice (the pipes are made this large where the kernel lets us),
# and how many splice lanes (pipes) move one file.
SPLICE_CHUNK = 1 << 20
SPLICE_LANES = 2
# Chunks a lane hands the kernel as one chain of linked splices (each chunk
# into the pipe, then out of it a piece at a time, then the next chunk);
# 0: a splice at a time.  The chain is quiet where the kernel can
# (IORING_FEAT_CQE_SKIP): only the step that ends it completes, so the loop
# sees one completion per chain, not one per splice.  Measured on 1 GiB,
# interleaved with shutil.copyfile: quiet, the process's CPU time fell from
# 470 to 350 ms (shutil's: 300 to 570 under the machine's load).  14 chunks
# and their pieces, with the signal's two steps, are 128 SQEs (240 with 64
# KiB pieces), which a ring of 256 takes at once.
SPLICE_CHAIN = 14
# A chained chunk fills the pipe (1 MiB), and leaves it in pieces of 128
# KiB: the destination's page cache is written 128 KiB at a time.  Each
# splice the kernel's worker finishes costs a wake-up of the loop's thread
# (the kernel frees it through the submitting thread's task work, and the
# worker's CPU pays for waking a sleeping thread: 363 against 418 ms a GiB
# while the loop never slept), so fewer, larger splices cost less: a chunk
# of 1 MiB into the pipe rather than 64 KiB saved half of them (5
# alternating rounds twice, 1 GiB with a task waking the loop every
# millisecond: 411 and 388 ms against 428 and 441), and pieces of 128 KiB
# rather than 64 half of the rest (6 alternating rounds, the same way: 305
# ms against 357, the loop's thread 139 ms of CPU against 196; 256 KiB
# pieces 303 ms and 101; shutil 269).  Larger pieces are slower here,
# whoever writes them: each asks the page cache for larger folios, which
# this machine's host backs again only once they are touched (a blocking
# os.splice loop through a 1 MiB pipe, 5 alternating rounds on 1 GiB, each
# copy 3 s after the last: pieces of 64 KiB 330 ms, 256 KiB 263, 512 KiB
# 546, 1 MiB 1,570; shutil 318).  128 KiB keeps a margin below that.
# (Before, 512 KiB chunks in and out were slow in 3 runs of 3 and 256 KiB
# ones in 3 of 9.)
CHAIN_CHUNK = 1 << 20
CHAIN_PIECE = 1 << 17
QUIET_CHAIN = True
# Each chain of a lane started while the one before it runs (see _Signal).
CHAIN_SIGNAL = True
# Lanes of chains moving one file: one.  Two lanes' chains run side by side
# in two kernel workers, the second's steps overlapping the first's gap
# between chains (the loop's turn: 0.36 ms a chain).  Measured on 1 GiB,
# interleaved with shutil.copyfile, 5 rounds: one lane 380 ms of wall time
# and 383 ms of the kernel's CPU, two lanes 361 ms and 591 ms (the writers
# spin on the destination's lock); shutil 347 ms.  A chunk of 128 KiB
# rather than 256: 455 ms, 427 ms.
CHAIN_LANES = 1
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PREP_SPLICE = _binding.prep_splice
_PREP_RW, _OP_READ = _binding.prep_rw, _binding.OP_READ
_SPLICE_F_MOVE = _binding.SPLICE_F_MOVE
# The read/write copy's buffer at most.
RW_CHUNK = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# The kernel's workers that may run a ring's path operations at once while
# a Batch is open.  An UNLINKAT always runs in a worker (the kernel starts
# none inline: IOSQE_ASYNC would change nothing), and on a file system
# mounted with `discard` each waits there for the device to discard the
# file's blocks.  The kernel's default here was 2 workers (on 2 CPUs), so
# that no more than two discards were in flight.  With more, the device
# has more at once and the block layer merges neighbouring ones: traced
# (block:block_rq_*) on 5,000 files of 4 KiB, the default 2 workers took
# 1,729 ms, 4,720 discards, 1.5 in flight; 16 workers 670 ms, 2,264
# discards, 6.9 in flight; 32 633 ms, 2,582 discards; 64 695 ms (under the
# machine's other load).
BATCH_WORKERS = 32
_PREP_UNLINKAT = _binding.prep_unlinkat
_AT_REMOVEDIR = _binding.AT_REMOVEDIR
# What a splice answers for a file system that cannot splice: read and write instead.
_NO_SPLICE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF})


async def finished(fut: asyncio.Future[Any]) -> None:
    """Wait until `fut` is done, leaving its outcome to whoever awaits it."""
    if fut.done():
        return
    waiter = fut.get_loop().create_future()

    def wake(_: Any) -> None:
        if not waiter.done():
            waiter.set_result(None)

    fut.add_done_callback(wake)
    try:
        await waiter
    finally:
        fut.remove_done_callback(wake)


async def settle(ops: Iterable[Op]) -> None:
    """Wait until the kernel let go of every op in `ops`, whatever each
    result; a cancellation meanwhile is raised once all are done."""
    cancelled: asyncio.CancelledError | None = None
    for op in ops:
        fut = op.future
        if fut is None:
            continue
        while not fut.done():
            try:
                await finished(fut)
            except asyncio.CancelledError as exc:
                cancelled = exc
        if not fut.cancelled():
            fut.exception()  # retrieved: nobody else will read it
    if cancelled is not None:
        raise cancelled


async def together(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Run `aws` as tasks side by side; their results in order.  When one
    fails, or the caller is cancelled, the others are cancelled and waited
    for before the error is raised: none is left running."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        raise


class Tally:
    """The ops of one directory that a Batch started, counted down as they
    complete.  It stands in as each op's future: the ring's core calls
    set_result or set_exception on it once per completion, and cancel when
    the ring closes (any object with done(), set_result and set_exception
    is a future to the core: src/core.h), so a completion costs a call, not
    a future and a wakeup of the task."""

    __slots__ = ("batch", "left", "waiter")

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.left = 0
        self.waiter: asyncio.Future[None] | None = None

    def done(self) -> bool:
        return False  # (each op's own outcome is its res)

    def set_result(self, _: Any) -> None:
        self._one()

    def set_exception(self, _: BaseException) -> None:
        self._one()

    def cancel(self, msg: Any = None) -> bool:
        self._one()
        return True

    def _one(self) -> None:
        self.left -= 1
        if not self.left and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        self.batch.completed()

    async def wait(self, settle: bool = False) -> None:
        """Wait until every op counted has completed.  Cancelled meanwhile:
        at once, or with `settle` still until then, the cancellation raised
        after."""
        cancelled: asyncio.CancelledError | None = None
        while self.left:
            self.waiter = self.batch.loop.create_future()
            try:
                await self.waiter
            except asyncio.CancelledError as exc:
                if not settle:
                    raise
                cancelled = exc
        self.waiter = None
        if cancelled is not None:
            raise cancelled


class Batch:
    """Path operations in flight together, none of them a task or a future
    of its own: each counts in the Tally it is started with.  At most
    `limit` are in flight at once: a start when crowded() first waits in
    room() until half of them completed.  While a batch is open (until
    close()) up to `workers` of the kernel's workers run the ring's path
    operations at once (see BATCH_WORKERS)."""

    def __init__(self, limit: int = 256, workers: int = 0) -> None:
        self.loop = asyncio.get_running_loop()
        self.ring = get_ring(self.loop)
        self.limit = limit
        self.open = 0
        self._room: asyncio.Future[None] | None = None
        self._workers = _Workers.hold(self.ring, workers) if workers else None

    def close(self) -> None:
        """The batch is done with: the ring's workers as they were, once no other batch holds them."""
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.release(self.ring)

    def crowded(self) -> bool:
        """Whether a start now must first wait for room (room())."""
        return self.open >= self.limit

    async def room(self) -> None:
        while self.open >= self.limit:
            if self._room is None or self._room.done():
                self._room = self.loop.create_future()
            await asyncio.shield(self._room)  # (shared by every task that waits for room)

    def completed(self) -> None:
        self.open -= 1
        if self._room is not None and self.open <= self.limit // 2 and not self._room.done():
            self._room.set_result(None)

    def unlinkat(self, tally: Tally, dir_fd: int, name: str, rmdir: bool = False) -> Op:
        """Start os.unlink(name, dir_fd=dir_fd) (os.rmdir with `rmdir`), a
        name as os.scandir gives it (no NUL inside), counted in `tally`
        until it completes (error() then says how).  Call room() first when
        crowded()."""
        op = self.ring.start(self.loop, _PREP_UNLINKAT,
                             (dir_fd, name.encode(_FS_ENCODING, _FS_ERRORS), _AT_REMOVEDIR if rmdir else 0),
                             None, None)
        if op.future is not None:  # (None: it completed inside the call)
            op.future = tally  # (before anything else can complete it)
            tally.left += 1
            self.open += 1
        return op

    @staticmethod
    def error(op: Op, filename: Any) -> OSError | None:
        """The error of a completed `op` (None when it succeeded), named `filename`."""
        if op.res >= 0:
            return None
        exc = os_error(op.res)
        exc.filename = filename
        return exc

    def cancel(self, ops: Iterable[Op]) -> None:
        """Ask the kernel to stop the ops not done yet (their Tally's wait(settle=True) waits for them)."""
        for op in ops:
            self.ring.cancel(op)  # (nothing for one already done)


class _Workers:
    """How many of the kernel's workers a ring's open batches let run its
    path operations at once, and how many it had before the first."""

    def __init__(self, before: int) -> None:
        self.before = before
        self.batches = 0

    @classmethod
    def hold(cls, ring: RingBase, most: int) -> _Workers | None:
        held = _held.get(ring)
        if held is None:
            before = ring.bound_workers(0)
            if before >= most or not before:  # (enough already; or no such workers)
                return None
            ring.bound_workers(most)
            held = _held[ring] = cls(before)
        held.batches += 1
        return held

    def release(self, ring: RingBase) -> None:
        self.batches -= 1
        if not self.batches:
            del _held[ring]
            ring.bound_workers(self.before)


# Each ring whose workers open batches hold raised.
_held: weakref.WeakKeyDictionary[RingBase, _Workers] = weakref.WeakKeyDictionary()


async def copy_data(src_fd: int, dst_fd: int, size: int, src_off: int = 0, dst_off: int = 0) -> int:
    """Copy the file open at `src_fd` from `src_off` to its end (`size`
    bytes from there by its fstat, until its end in fact) to `dst_fd` at
    `dst_off`, neither fd's position used or moved; returns the bytes
    copied.  Raises the kernel's OSError."""
    if size >= SPLICE_MIN:
        try:
            return await _splice_file(src_fd, src_off, dst_fd, dst_off - src_off, size)
        except OSError as exc:
            if exc.errno not in _NO_SPLICE:
                raise
    return await _read_write(src_fd, src_off, dst_fd, dst_off - src_off, size)


async def _read_write(src_fd: int, offset: int, dst_fd: int, shift: int, size: int) -> int:
    """Read and write in turn, each byte of the source at `offset` written
    `shift` further on.  The page cache's bytes are read at once
    (read_now), the rest through the ring; a read shorter than asked that
    reaches the size fstat gave is the end of the file (a file that grew
    meanwhile is read on until a read returns nothing), which saves small
    files a read."""
    buf = bytearray(min(size + 1, RW_CHUNK))
    view = memoryview(buf)
    room = len(buf)
    start = offset
    end = offset + size
    while True:
        got = _ops.read_now(src_fd, buf, room, offset)
        if got < 0:
            got = await _ops.readinto(src_fd, buf, offset)
        if not got:
            return offset - start
        done = 0
        while done < got:
            done += await _write_at(dst_fd, view[done:got], offset + shift + done)
        offset += got
        if got < room and offset >= end:
            return offset - start


def copy_queue(meta: int, size_max: int, limit: int, hand_back: Any) -> CopyQueue:
    """A CopyQueue (src/treecopy.h) on the running loop's ring: copy2's
    (meta 2), copy's (1) or copyfile's (0) copies of the jobs it is given,
    up to `limit` at once; hand_back(job, audited) gets each it leaves to
    the caller's own steps."""
    ring = get_ring(asyncio.get_running_loop())
    return CopyQueue(ring._core, _binding.prep_openat, meta, size_max, limit, hand_back)


async def drain(queue: CopyQueue) -> None:
    """Until `queue`, closed here, has no copy in flight or queued.  Cancelled
    meanwhile, it drops the queued jobs, still waits for the copies in
    flight (each ends whole, or handed back), then raises the cancellation;
    as it does when the ring closed under a copy."""
    loop = asyncio.get_running_loop()
    cancelled: asyncio.CancelledError | None = None
    while True:
        waiter = loop.create_future()
        queue.close(waiter)
        try:
            await waiter
            break
        except asyncio.CancelledError as exc:
            queue.cancel()
            cancelled = exc
            if not queue.in_flight:
                break
    if cancelled is not None:
        raise cancelled


async def create_with(path: Any, flags: int, mode: int, data: bytes) -> int:
    """os.open(path, flags, mode) of a file it creates (O_CREAT | O_EXCL in
    `flags`), then all of `data` written at its start: one operation of the
    ring (NewFile), whose result is the new fd.  The open's error is
    os.open's (naming `path`); a write's is os.write's, the fd then closed.
    Cancelled before the data is all written, the fd is closed and the file
    removed."""
    encoded = _encode(path, "open")
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    target = NewFile(encoded, data)
    args = (_binding.AT_FDCWD, encoded, flags | os.O_CLOEXEC, mode)
    op = ring.start(loop, _binding.prep_openat, args, None, target)
    try:
        fd: int = await result(ring, op)
    except OSError as exc:
        if target.opened or exc.errno is None:
            raise
        raise os_error(-exc.errno, _named(path)) from None
    return fd


async def _write_at(fd: int, data: memoryview, offset: int) -> int:
    """os.pwrite of `data` (a C-contiguous byte view) at `offset` (>= 0) of
    `fd` through the ring: _ops.write's, without the checks its callers'
    arguments need."""
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    op = ring.start(loop, None, (_binding.OP_WRITE, fd, 0, min(len(data), _ops.MAX_RW), offset, 0), data,
                    None)
    try:
        return await result(ring, op)
    except OSError as exc:
        if exc.errno == errno.EINVAL and (error := _ops.direct_error(fd, data, offset)) is not None:
            raise error from None
        raise


async def _splice(fd_in: int, off_in: int, fd_out: int, off_out: int, nbytes: int) -> int:
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    args = (fd_in, off_in, fd_out, off_out, nbytes, _SPLICE_F_MOVE, 0)
    op = ring.start(loop, _PREP_SPLICE, args, None, None)
    return await result(ring, op)


def _outcome(op: Op) -> int:
    """A done op's result, or -errno (a cancelled future: -ECANCELED)."""
    fut = op.future
    assert fut is not None and fut.done()
    if fut.cancelled():
        return -errno.ECANCELED
    exc = fut.exception()
    if exc is None:
        res: int = fut.result()
        return res
    if isinstance(exc, OSError) and exc.errno:
        return -exc.errno
    raise exc


async def _chain(ring: RingBase, ops: list[Op], fulls: list[int]) -> list[int]:
    """Wait for the chain `ops` (Ring.start_chain), whose steps move
    `fulls` bytes each: each one's result or -errno (ECANCELED: a step the
    chain did not reach).  Cancelled, it stops the kernel's steps and waits
    until the kernel let go of every one before the cancellation goes on."""
    last = ops[-1].future
    assert last is not None
    try:
        await finished(last)  # (the last step's CQE comes last; a quiet chain's only)
    except asyncio.CancelledError:
        for op in ops:
            ring.cancel(op)  # (nothing for a step already done)
        await settle(ops)
        _ended(ring, ops, fulls)
        raise
    await settle(ops)
    return _ended(ring, ops, fulls)


def _ended(ring: RingBase, ops: list[Op], fulls: list[int]) -> list[int]:
    """The results of the chain `ops`, settled: a quiet one (one future)
    lets go of its steps whose completions never come."""
    if ops[0].future is not ops[-1].future:
        return [_outcome(op) for op in ops]
    end = ring.end_quiet_chain(ops)
    return fulls[:end] + [ops[end].res] + [-errno.ECANCELED] * (len(ops) - end - 1)


async def _splice_file(src_fd: int, offset: int, dst_fd: int, shift: int, size: int) -> int:
    """Lanes splice the file's chunks from `offset` on in turn, each through
    its own pipe; the bytes copied (up to the end the first lane met).
    `size`: the bytes fstat saw from `offset` on."""
    taken = [offset]  # the next chunk's offset
    writing = asyncio.Lock()
    # Chained on io_uring, CHAIN_LANES lanes (one: its chain keeps the kernel busy).
    chained = bool(SPLICE_CHAIN) and get_ring(asyncio.get_running_loop()).fd >= 0
    if chained:
        lanes, chunk, piece = CHAIN_LANES, CHAIN_CHUNK, CHAIN_PIECE
    else:
        lanes, chunk, piece = SPLICE_LANES, SPLICE_CHUNK, SPLICE_CHUNK
    hint = offset + size
    signalled = chained and CHAIN_SIGNAL
    ends = await together([_lane(src_fd, dst_fd, shift, taken, writing, chunk, piece, hint, signalled)
                           for _ in range(lanes)])
    # (each lane closes its pipe only once its splices are done)
    return min(ends) - offset


class _Chain:
    """A chain of splices a lane started: the source's `pos` to `end`."""

    __slots__ = ("end", "fulls", "ops", "pos")

    def __init__(self, pos: int, end: int, ops: list[Op], fulls: list[int]) -> None:
        self.pos, self.end, self.ops, self.fulls = pos, end, ops, fulls


class _Signal:
    """How one chain of a lane starts the next without the loop: every
    chain begins by taking a byte out of this pipe (a READ, which the
    kernel leaves polling the pipe while it is empty) and, once each of its
    chunks was moved in full, ends by putting one in (a byte of the source
    spliced into it).  So the next chain is started while its predecessor
    still runs, and goes on from the kernel once the byte is in: handing
    the kernel each chain only once the one before it had completed left
    its worker idle between chains for the loop's turn (about a quarter of
    a millisecond: traced on 1 GiB, 65-69 ms of its 470-550).  The pipe
    holds a byte while no chain runs and the last one put its byte back; a
    chain that ended short puts none, and the lane puts it in itself once
    it finished that chain's range another way.  (A splice out of the pipe
    instead of the READ waits in a worker of its own, and the chains then
    alternate between two workers, one of them beside the loop's thread on
    a 2-CPU machine: 1 GiB copies with a task waking every millisecond, 5
    rounds, the loop's thread waited for a CPU 140 ms a copy (the task's
    99th percentile 3.2 ms late) against 11 ms (1.4) with the READ.)"""

    __slots__ = ("byte", "rfd", "wfd")

    def __init__(self) -> None:
        self.rfd, self.wfd = os.pipe2(os.O_CLOEXEC)
        self.byte = _binding.new_scratch(1)  # (what each READ takes: held until the lane closed)
        self.give()

    def give(self) -> None:
        os.write(self.wfd, b"\0")

    def close(self) -> None:
        os.close(self.rfd)
        os.close(self.wfd)


class _Lane:
    """One pipe and what a lane moves through it: chunks of the source from
    `taken[0]` on (shared with the other lanes) into the destination,
    `shift` bytes further on.  `hint`: where fstat saw the source end."""

    def __init__(self, src_fd: int, dst_fd: int, shift: int, taken: list[int], writing: asyncio.Lock,
                 rfd: int, wfd: int, chunk: int, piece: int, hint: int, signal: _Signal | None) -> None:
        self.src_fd, self.dst_fd, self.shift = src_fd, dst_fd, shift
        self.taken, self.writing = taken, writing
        self.rfd, self.wfd, self.chunk, self.piece = rfd, wfd, chunk, piece
        self.hint, self.signal = hint, signal
        self.loop = asyncio.get_running_loop()
        self.ring = get_ring(self.loop)

    async def run(self) -> int:
        """Chunks until one meets the end of the file: where it met it.
        While a chain runs, the next one waits for it in the kernel."""
        ahead: _Chain | None = None
        try:
            while True:
                chain, ahead = ahead or self.start_chain(), None
                owed = False  # (the chain took the signal's byte and did not put it back)
                if chain is None:  # (no room for a chain now, or a backend without)
                    pos = self.taken[0]
                    self.taken[0] = end = pos + self.chunk
                else:
                    pos, end = chain.pos, chain.end
                    if end < self.hint and self.signal is not None:
                        ahead = self.start_chain()
                        if ahead is None:  # (no room in the SQ beside this chain)
                            await asyncio.sleep(0)  # (the flush hands the kernel this one)
                            ahead = self.start_chain()
                    pos, owed = await self.chained(chain)
                if pos < end:
                    pos = await self.stepwise(pos, end)
                    if pos < end:
                        return pos
                if owed:
                    assert self.signal is not None
                    self.signal.give()  # (the next chain waits for it)
        finally:
            if ahead is not None:
                await self.abandon(ahead)

    def start_chain(self) -> _Chain | None:
        """The chain of the next SPLICE_CHAIN chunks started, quiet where the
        kernel can (only the step that ends it completes); None when none
        can start now."""
        if not SPLICE_CHAIN:
            return None
        pos, chunk = self.taken[0], self.chunk
        # (to the chunk where fstat saw the end, or one past it: a file that grew)
        end = pos + max(1, min(SPLICE_CHAIN, -(-(self.hint - pos) // chunk))) * chunk
        steps, fulls = self.steps(pos, end)
        ring, loop = self.ring, self.loop
        ops = ring.start_chain(loop, steps, quiet=QUIET_CHAIN) or ring.start_chain(loop, steps)
        if ops is None:
            return None
        self.taken[0] = end
        return _Chain(pos, end, ops, fulls)

    def steps(self, pos: int, end: int) -> tuple[list[tuple[Any, tuple[Any, ...]]], list[int]]:
        """A chain's steps, and the bytes each moves in full: each chunk
        from the source into the pipe, then from the pipe to its place in
        the destination a piece at a time; between the signal's byte taken
        first and put back last."""
        src_fd, dst_fd, rfd, wfd, shift = self.src_fd, self.dst_fd, self.rfd, self.wfd, self.shift
        chunk, signal = self.chunk, self.signal
        pieces = self.pieces()
        steps: list[tuple[Any, tuple[Any, ...]]] = []
        fulls: list[int] = []
        if signal is not None:
            steps.append((_PREP_RW, (_OP_READ, signal.rfd, signal.byte, 1, -1, 0)))
            fulls.append(1)
        for at in range(pos, end, chunk):
            steps.append((_PREP_SPLICE, (src_fd, at, wfd, -1, chunk, _SPLICE_F_MOVE, 0)))
            for off, size in pieces:
                steps.append((_PREP_SPLICE, (rfd, -1, dst_fd, at + off + shift, size, _SPLICE_F_MOVE, 0)))
            fulls.append(chunk)
            fulls += [size for _, size in pieces]
        if signal is not None:
            steps.append((_PREP_SPLICE, (src_fd, pos, signal.wfd, -1, 1, 0, 0)))
            fulls.append(1)
        return steps, fulls

    def pieces(self) -> list[tuple[int, int]]:
        """Where in a chunk each splice out of the pipe starts, and its size."""
        chunk, piece = self.chunk, self.piece
        return [(off, min(piece, chunk - off)) for off in range(0, chunk, piece)]

    async def chained(self, chain: _Chain) -> tuple[int, bool]:
        """Where `chain` stopped, whatever it left in the pipe written out
        first (its end when every step was whole), and whether it took the
        signal's byte without putting it back.  Raises the first step's
        error (an ECANCELED is a step the chain did not reach)."""
        results = await _chain(self.ring, chain.ops, chain.fulls)
        pos, chunk = chain.pos, self.chunk
        owed = False
        if self.signal is not None:
            if results[0] <= 0:  # (the signal's byte not taken: nothing ran)
                if results[0] != -errno.ECANCELED:
                    raise os_error(results[0] or -errno.EPIPE)
                return pos, False
            owed = results[-1] != 1
            results = results[1:-1]
        fulls = [chunk] + [size for _, size in self.pieces()]
        group = len(fulls)
        for i in range(0, len(results), group):
            done = results[i:i + group]
            for res in done:
                if res < 0 and res != -errno.ECANCELED:
                    raise os_error(res)
            if done == fulls:
                pos += chunk
                continue
            got, put = max(done[0], 0), sum(max(res, 0) for res in done[1:])
            await self.empty(pos + put, got - put)
            return pos + got, owed
        return pos, owed

    async def abandon(self, chain: _Chain) -> None:
        """Stop `chain`, started ahead and not needed, and wait until the
        kernel let go of it (its first step may wait for the signal)."""
        for op in chain.ops:
            self.ring.cancel(op)
        try:
            await settle(chain.ops)
        finally:
            _ended(self.ring, chain.ops, chain.fulls)

    async def empty(self, pos: int, left: int) -> None:
        """The `left` bytes in the pipe to the destination, the source's
        `pos` on."""
        async with self.writing:
            while left:
                moved = await _splice(self.rfd, -1, self.dst_fd, pos + self.shift, min(left, self.piece))
                left -= moved
                pos += moved

    async def stepwise(self, pos: int, end: int) -> int:
        """Splice `pos` to `end` a step at a time: where the file ended, or `end`."""
        while pos < end:
            got = await _splice(self.src_fd, pos, self.wfd, -1, min(end - pos, self.chunk))
            if not got:
                return pos  # the end of the file
            await self.empty(pos, got)
            pos += got
        return pos


async def _lane(src_fd: int, dst_fd: int, shift: int, taken: list[int], writing: asyncio.Lock,
                size: int, piece: int, hint: int, signalled: bool) -> int:
    """Splice chunks until one meets the end of the file: where it met it.
    A lane writes into the destination step by step holding `writing`;
    `signalled`: its chains start one another (_Signal)."""
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    signal = None
    try:
        try:
            chunk = min(fcntl.fcntl(wfd, _F_SETPIPE_SZ, size), size)
        except OSError:
            chunk = 1 << 16  # a pipe's default size
        if taken[0] % _PAGE and chunk > _PAGE:
            chunk -= _PAGE  # (a chunk off the page boundary spans a page more of the pipe)
        if signalled:
            signal = _Signal()
        lane = _Lane(src_fd, dst_fd, shift, taken, writing, rfd, wfd, chunk, min(piece, chunk), hint, signal)
        return await lane.run()
    finally:
        if signal is not None:
            signal.close()
        os.close(rfd)
        os.close(wfd)
