"""Linked steps on the ring (RingBase.start_chain) and the chained splices
aioring.shutil copies large files with, compared with the bytes os reads."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator
from typing import Any

import pytest

import aioring.shutil as ashutil
from aioring import _binding
from aioring._loops import get_ring
from aioring.shutil import _kernel

MOVE = _binding.SPLICE_F_MOVE


def _splice(fd_in: int, off_in: int, fd_out: int, off_out: int, n: int) -> tuple[object, tuple[int, ...]]:
    return _binding.prep_splice, (fd_in, off_in, fd_out, off_out, n, MOVE, 0)


def _outcome(fut: asyncio.Future[int]) -> int:
    exc = fut.exception()
    return -exc.errno if isinstance(exc, OSError) and exc.errno else fut.result()


class _Pieces:
    """A source of 3 pages and 5 bytes, a destination, a pipe, and the
    chain's steps that copy the source a page at a time through the pipe
    (each splice out of the pipe can only take what the one before put in)."""

    def __init__(self, disk_dir: str) -> None:
        src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
        self.data = os.urandom(3 * 4096 + 5)
        with open(src, "wb") as f:
            f.write(self.data)
        self.src_fd = os.open(src, os.O_RDONLY)
        self.dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)
        self.dst = dst
        self.rfd, self.wfd = os.pipe2(os.O_CLOEXEC)
        self.steps: list[Any] = []
        for at in range(0, len(self.data), 4096):
            self.steps += [_splice(self.src_fd, at, self.wfd, -1, 4096),
                           _splice(self.rfd, -1, self.dst_fd, at, 4096)]

    def close(self) -> None:
        for fd in (self.src_fd, self.dst_fd, self.rfd, self.wfd):
            os.close(fd)


@pytest.fixture
def pieces(disk_dir: str) -> Iterator[_Pieces]:
    made = _Pieces(disk_dir)
    try:
        yield made
    finally:
        made.close()


async def test_chain_runs_its_steps_in_order_and_a_short_one_ends_it(
        pieces: _Pieces, aioring_backend: str) -> None:
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    data, src_fd, dst_fd, rfd, wfd = pieces.data, pieces.src_fd, pieces.dst_fd, pieces.rfd, pieces.wfd
    ops = ring.start_chain(loop, pieces.steps)
    if aioring_backend == "threads":
        assert ops is None  # (the steps are made one at a time instead)
        return
    assert ops is not None and all(op.future is not None for op in ops)
    await _kernel.settle(ops)
    results = [_outcome(op.future) for op in ops]  # type: ignore[arg-type]
    # The last chunk is short (5 bytes): the splice out after it never ran.
    assert results == [4096] * 6 + [5, -errno.ECANCELED]
    with open(pieces.dst, "rb") as f:
        assert f.read() == data[:3 * 4096]
    assert os.read(rfd, 100) == data[3 * 4096:]
    # A step at the end of the file moves nothing: the steps after it
    # fail, never run on their own (the pipe holds a byte they would take).
    os.write(wfd, b"x")
    ops = ring.start_chain(loop, [_splice(src_fd, len(data), wfd, -1, 4096),  # type: ignore[list-item]
                                  _splice(rfd, -1, dst_fd, 0, 1)])
    assert ops is not None
    await _kernel.settle(ops)
    assert [_outcome(op.future) for op in ops] == [0, -errno.ECANCELED]  # type: ignore[arg-type]
    assert os.read(rfd, 100) == b"x"


async def test_quiet_chain_completes_once_at_the_step_that_ends_it(
        pieces: _Pieces, aioring_backend: str) -> None:
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    data, src_fd, dst_fd, rfd, wfd = pieces.data, pieces.src_fd, pieces.dst_fd, pieces.rfd, pieces.wfd
    before = ring.statistics()["completions"]
    ops = ring.start_chain(loop, pieces.steps, quiet=True)
    if aioring_backend == "threads" or not ring.features & _binding.FEAT_CQE_SKIP:
        assert ops is None
        return
    assert ops is not None and len({id(op.future) for op in ops}) == 1
    await _kernel.settle(ops)
    # The short splice of the last 5 bytes ended it; only it completed.
    assert ring.end_quiet_chain(ops) == 6 and ops[6].res == 5
    assert ops[0].future.result() == 5  # type: ignore[union-attr]
    stats = ring.statistics()
    assert (stats["completions"] - before, stats["in_flight"]) == (1, 0)
    with open(pieces.dst, "rb") as f:
        assert f.read() == data[:3 * 4096]
    assert os.read(rfd, 100) == data[3 * 4096:]
    # A step that fails (splicing from the write-only destination) ends
    # it with its error; the steps after it never run.
    ops = ring.start_chain(loop, [_splice(src_fd, 0, wfd, -1, 10),  # type: ignore[list-item]
                                  _splice(dst_fd, 0, wfd, -1, 10),
                                  _splice(rfd, -1, dst_fd, 0, 10)], quiet=True)
    assert ops is not None
    await _kernel.settle(ops)
    assert ring.end_quiet_chain(ops) == 1 and ops[1].res == -errno.EBADF
    with pytest.raises(OSError) as info:
        ops[0].future.result()  # type: ignore[union-attr]
    assert info.value.errno == errno.EBADF
    assert os.read(rfd, 100) == data[:10]
    assert ring.statistics()["in_flight"] == 0


@pytest.mark.parametrize("quiet", [False, True])
async def test_a_step_whose_arguments_are_refused_ends_the_chain_before_it(
        pieces: _Pieces, aioring_backend: str, quiet: bool) -> None:
    """The TypeError os.splice raises for an fd that is no int comes out of
    start_chain; the step before it still runs, as a chain of its own, and
    the step after it is never started."""
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    with pytest.raises(TypeError):
        os.splice("3", pieces.dst_fd, 10)  # type: ignore[arg-type]
    steps = [_splice(pieces.src_fd, 0, pieces.wfd, -1, 10), _splice("3", -1, pieces.dst_fd, 0, 10),  # type: ignore[arg-type]
             _splice(pieces.rfd, -1, pieces.dst_fd, 0, 10)]
    if aioring_backend == "threads":
        assert ring.start_chain(loop, steps, quiet=quiet) is None  # (no chains: nothing checked yet)
        return
    before = set(ring._ops)
    with pytest.raises(TypeError):
        ring.start_chain(loop, steps, quiet=quiet)  # type: ignore[arg-type]
    [first] = [op for key, op in ring._ops.items() if key not in before]  # (the step before: queued)
    await asyncio.wait([first.future])  # (its own completion, whenever the kernel's worker gets to it)
    assert ring.statistics()["in_flight"] == 0
    assert os.read(pieces.rfd, 100) == pieces.data[:10]
    assert os.fstat(pieces.dst_fd).st_size == 0


@pytest.mark.parametrize(("chain", "quiet", "lanes"),
                         [(0, False, 1), (3, False, 1), (3, True, 1), (3, True, 2)])
async def test_chained_copy_from_any_offset_matches_the_source(
        disk_dir: str, chain: int, quiet: bool, lanes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chains of 3 chunks, some of them broken by a start off the page
    boundary and by the end of the file, by one lane or two side by side;
    or a splice at a time."""
    monkeypatch.setattr(_kernel, "SPLICE_CHAIN", chain)
    monkeypatch.setattr(_kernel, "QUIET_CHAIN", quiet)
    monkeypatch.setattr(_kernel, "CHAIN_LANES", lanes)
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    data = os.urandom(7 * _kernel.SPLICE_CHUNK + 1234)  # (CHAIN_CHUNK is smaller)
    with open(src, "wb") as f:
        f.write(data)
    src_fd = os.open(src, os.O_RDONLY)
    dst_fd = os.open(dst, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert await _kernel.copy_data(src_fd, dst_fd, len(data) - 1000, 1000, 7) == len(data) - 1000
        assert await _kernel.copy_data(src_fd, dst_fd, len(data), 0, len(data)) == len(data)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    with open(dst, "rb") as f:
        assert f.read() == b"\0" * 7 + data[1000:] + b"\0" * 993 + data
    assert await ashutil.copyfile(src, dst) == dst
    with open(dst, "rb") as f:
        assert f.read() == data


def _source(disk_dir: str, size: int) -> tuple[str, str, bytes]:
    """A source file of `size` random bytes, a destination's name, the bytes."""
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    data = os.urandom(size)
    with open(src, "wb") as f:
        f.write(data)
    return src, dst, data


def _open_fds() -> int:
    get_ring(asyncio.get_running_loop())  # (its own fds made first)
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("quiet", [True, False])
async def test_a_chain_that_ends_short_mid_file_hands_on_to_the_one_started_after_it(
        disk_dir: str, quiet: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second chain's third splice into the pipe asks a byte more than
    the pipe holds, so it comes up short and that chain ends there while
    the third one waits for it in the kernel: the lane
    moves the rest of the second chain's range a splice at a time, then
    lets the third go on.  Every byte lands in its place, and nothing is
    left in the ring or open."""
    monkeypatch.setattr(_kernel, "SPLICE_CHAIN", 3)
    monkeypatch.setattr(_kernel, "QUIET_CHAIN", quiet)
    steps, chains = _kernel._Lane.steps, []

    def shortened(lane: Any, pos: int, end: int) -> tuple[list[Any], list[int]]:
        made, fulls = steps(lane, pos, end)
        chains.append(pos)
        if len(chains) == 2:
            # (the signal's step, then two chunks' in and outs, then this chunk's in)
            at = (lane.signal is not None) + 2 * (1 + len(lane.pieces()))
            prep, args = made[at]
            assert args[2] == lane.wfd
            made[at] = (prep, (*args[:4], args[4] + 1, *args[5:]))
        return made, fulls

    give, given = _kernel._Signal.give, []

    def counted(signal: Any) -> None:
        given.append(1)
        give(signal)

    monkeypatch.setattr(_kernel._Lane, "steps", shortened)
    monkeypatch.setattr(_kernel._Signal, "give", counted)
    src, dst, data = _source(disk_dir, _kernel.SPLICE_MIN + 10 * _kernel.CHAIN_CHUNK + 99)
    fds = _open_fds()
    # (a byte the lane failed to put back would leave the third chain waiting for good)
    assert await asyncio.wait_for(ashutil.copyfile(src, dst), 60) == dst
    with open(dst, "rb") as f:
        assert f.read() == data
    assert _open_fds() == fds
    assert get_ring(asyncio.get_running_loop()).statistics()["in_flight"] == 0
    if get_ring(asyncio.get_running_loop()).fd >= 0:
        assert len(chains) >= 4
        assert len(given) == 2  # (the pipe's first byte, and the one the lane put back)


async def test_chains_started_ahead_of_a_source_that_shrank_are_let_go(
        disk_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """fstat said the source was twice as long as it is when the copy
    began: the chains started ahead of the end, each waiting in the kernel
    for the one before, are stopped and waited for, and the copy returns
    the bytes there were."""
    monkeypatch.setattr(_kernel, "SPLICE_CHAIN", 3)
    abandon, abandoned = _kernel._Lane.abandon, []

    async def counted(lane: Any, chain: Any) -> None:
        abandoned.append(chain.pos)
        await abandon(lane, chain)

    monkeypatch.setattr(_kernel._Lane, "abandon", counted)
    src, dst, data = _source(disk_dir, _kernel.SPLICE_MIN + 4 * _kernel.CHAIN_CHUNK + 5)
    fds = _open_fds()
    src_fd = os.open(src, os.O_RDONLY)
    dst_fd = os.open(dst, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert await _kernel.copy_data(src_fd, dst_fd, 2 * len(data)) == len(data)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    with open(dst, "rb") as f:
        assert f.read() == data
    assert _open_fds() == fds
    ring = get_ring(asyncio.get_running_loop())
    assert ring.statistics()["in_flight"] == 0
    if ring.fd >= 0:
        assert abandoned == [(len(data) // (3 * _kernel.CHAIN_CHUNK) + 1) * 3 * _kernel.CHAIN_CHUNK]


def test_closing_the_loop_with_a_quiet_chain_in_flight_lets_go_of_every_step(
        new_loop: Any, pieces: _Pieces) -> None:
    """The chain waits in its second step (a splice out of an empty pipe)
    when the loop closes: the close cancels it, and its other steps, whose
    completions never come, leave the ring's table with it."""
    loop = new_loop()
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    try:
        async def start() -> tuple[Any, Any]:
            ring = get_ring(asyncio.get_running_loop())
            ops = ring.start_chain(loop, [_splice(pieces.src_fd, 0, pieces.wfd, -1, 10),  # type: ignore[list-item]
                                          _splice(rfd, -1, pieces.dst_fd, 0, 10),
                                          _splice(pieces.rfd, -1, pieces.dst_fd, 0, 10)], quiet=True)
            await asyncio.sleep(0)  # (the flush submits it)
            return ring, ops
        ring, ops = loop.run_until_complete(start())
        if ops is None:
            return  # (no quiet chains on this backend or kernel)
        loop.close()
        assert ring.statistics()["in_flight"] == 0
        assert ops[0].future.cancelled()
        assert os.fstat(pieces.dst_fd).st_size == 0  # (the third step never ran)
    finally:
        os.close(rfd)
        os.close(wfd)
