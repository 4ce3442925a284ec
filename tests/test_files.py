"""aioring.open and the async file objects: what aiofiles users rely on,
compared with builtin open, plus what the ring adds (no blocking reads, no
lost writes, no leaked fds)."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import aioring
import aioring.os
from aioring import _file, _rawfile, tempfile, threadpool
from aioring.threadpool.binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO
from aioring.threadpool.text import AsyncTextIOWrapper


def _fds() -> set[str]:
    """The process's open fds (with the running loop's ring already made)."""
    aioring.statistics()
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def sample(disk_dir: str) -> str:
    path = os.path.join(disk_dir, "sample.txt")
    Path(path).write_bytes(b"first line\nsecond line\r\nthird\rfourth\n" * 100)
    return path


@pytest.mark.parametrize(("mode", "buffering", "cls", "stdlib_mode"), [
    ("r", -1, AsyncTextIOWrapper, "r"), ("r+", -1, AsyncTextIOWrapper, "r+"),
    ("a+", 1, AsyncTextIOWrapper, "a+"),
    ("rb", -1, AsyncBufferedReader, "rb"), ("rb+", -1, AsyncBufferedReader, "rb+"),
    ("wb+", -1, AsyncBufferedReader, "rb+"), ("ab+", 4096, AsyncBufferedReader, "ab+"),
    ("wb", -1, AsyncBufferedIOBase, "wb"), ("ab", -1, AsyncBufferedIOBase, "ab"),
    ("rb", 0, AsyncFileIO, "rb"), ("wb+", 0, AsyncFileIO, "rb+"),
])
async def test_class_mode_and_name_by_mode(sample: str, mode: str, buffering: int, cls: type,
                                           stdlib_mode: str) -> None:
    here = os.path.dirname(sample)
    name = os.path.join(here, "..", os.path.basename(here), "sample.txt")  # kept as given
    async with aioring.open(name, mode, buffering) as f:
        assert type(f) is cls
        assert f.mode == stdlib_mode
        assert f.name == name
        with open(name, mode, buffering) as g:
            assert f.mode == g.mode
        assert f._raw is not None  # on the ring


async def test_name_keeps_bytes_pathlike_and_fd(sample: str) -> None:
    async with aioring.open(os.fsencode(sample), "rb") as f:
        assert f.name == os.fsencode(sample)
    async with aioring.open(Path(sample), "rb") as f:
        assert f.name == sample
    fd = os.open(sample, os.O_RDONLY)
    async with aioring.open(fd, "rb") as f:
        assert f.name == fd
        assert await f.read(5) == b"first"
    with pytest.raises(OSError):
        os.fstat(fd)  # closefd=True closed it


async def test_name_that_does_not_decode(disk_dir: str) -> None:
    # A name with a byte the file system encoding cannot decode: as a str it
    # carries a surrogate (os.fsdecode), and opens the same file as builtin open.
    raw_name = os.path.join(os.fsencode(disk_dir), b"caf\xe9-\xff")
    Path(os.fsdecode(raw_name)).write_bytes(b"bytes of an odd name")
    name = os.fsdecode(raw_name)
    assert "\udcff" in name
    with open(name, "rb") as g:
        want = g.read()
    async with aioring.open(name, "rb") as f:
        assert f.name == name
        assert await f.read() == want
    assert (await aioring.os.stat(name)).st_size == os.stat(name).st_size
    with pytest.raises(FileNotFoundError) as info:
        await aioring.open(name + "\udcfe", "rb")
    assert info.value.filename == name + "\udcfe"


async def test_open_does_nothing_until_awaited(disk_dir: str) -> None:
    path = os.path.join(disk_dir, "new")
    cm = aioring.open(path, "w")
    assert not os.path.exists(path)
    f = await cm
    assert os.path.exists(path)
    assert await cm is f
    async with cm as g:
        assert g is f
    assert f.closed and cm._obj is None


def _error(exc: BaseException) -> tuple[type, Any, str]:
    return type(exc), getattr(exc, "errno", None), str(exc)


@pytest.mark.parametrize(("args", "kwargs"), [
    (("missing",), {}),
    ((".",), {}),
    ((".", "w"), {}),
    (("sample.txt", "rz"), {}),
    (("sample.txt", "rw"), {}),
    (("sample.txt", "rb"), {"encoding": "utf-8"}),
    (("sample.txt", "r"), {"encoding": "no-such-codec"}),
    (("sample.txt", "r"), {"newline": "x"}),
    (("sample.txt", "r", 0), {}),
    (("sample.txt", "x"), {}),
    (("sample.txt",), {"closefd": False}),
    ((3.5,), {}),
    (("sample.txt", "r"), {"opener": lambda path, flags: -1}),
])
async def test_errors_are_builtin_opens(sample: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(os.path.dirname(sample))
    before = _fds()
    with pytest.raises(Exception) as expected:
        open(*args, **kwargs)
    with pytest.raises(Exception) as actual:
        await aioring.open(*args, **kwargs)
    assert _error(actual.value) == _error(expected.value)
    assert _fds() == before


async def test_buffered_write_reaches_the_disk_at_flush(disk_dir: str) -> None:
    path = Path(disk_dir, "f")
    for mode in ("w", "wb"):
        async with aioring.open(path, mode) as f:
            await f.write("0" if mode == "w" else b"0")
            assert path.read_bytes() == b""
            await f.flush()
            assert path.read_bytes() == b"0"
    async with aioring.open(path, "wb", buffering=0) as f:
        await f.write(b"1")
        assert path.read_bytes() == b"1"


async def test_text_round_trip_with_newlines_and_tell(sample: str) -> None:
    with open(sample, newline=None) as g:
        expected = [(line, g.tell()) for line in iter(g.readline, "")]
        newlines = g.newlines
    async with aioring.open(sample) as f:
        actual = []
        while line := await f.readline():
            actual.append((line, await f.tell()))
        assert f.newlines == newlines
    assert actual == expected
    async with aioring.open(sample) as f:
        assert [line async for line in f] == [line for line, _ in expected]
    assert _rawfile.SYNC_READS[0] == 0


async def test_large_reads_go_straight_into_the_result(disk_dir: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = Path(disk_dir, "big")
    path.write_bytes(data)
    for buffering in (-1, 0):
        async with aioring.open(path, "rb", buffering) as f:
            assert await f.read(10) == data[:10]
            chunks = [data[:10]]
            while chunk := await f.read(1 << 20):
                chunks.append(chunk)
            assert b"".join(chunks) == data
            assert await f.tell() == len(data)
    async with aioring.open(path, "rb") as f:
        buf = bytearray(2 << 20)
        assert await f.readinto(buf) == len(buf)
        assert buf == data[:len(buf)]
        assert await f.read() == data[len(buf):]


async def test_cancelled_block_closes_the_file(sample: str) -> None:
    before = _fds()
    started = asyncio.Event()
    opened: list[Any] = []

    async def reader() -> None:
        async with aioring.open(sample) as f:
            opened.append(f)
            started.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(reader())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert opened[0].closed
    assert _fds() == before


async def test_close_error_propagates_from_aexit(sample: str) -> None:
    with pytest.raises(ValueError, match="detached"):
        async with aioring.open(sample, "rb") as f:
            raw = f.detach()
    raw.close()


async def test_cancelled_flush_loses_no_data(disk_dir: str) -> None:
    path = Path(disk_dir, "f")
    data = os.urandom(1 << 20)
    f = await aioring.open(path, "wb")
    for _ in range(8):
        task = asyncio.ensure_future(f.write(data))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            continue
    await f.close()
    written = path.read_bytes()
    assert len(written) % len(data) == 0
    assert written == data * (len(written) // len(data))


async def test_concurrent_appends_from_many_tasks(disk_dir: str) -> None:
    path = Path(disk_dir, "log")
    async with aioring.open(path, "a") as f:
        async def log(i: int) -> None:
            for j in range(20):
                await f.write(f"{i}:{j}\n")
                if j % 5 == 0:
                    await f.flush()
        await asyncio.gather(*(log(i) for i in range(50)))
    lines = path.read_text().splitlines()
    assert sorted(lines) == sorted(f"{i}:{j}" for i in range(50) for j in range(20))


async def test_unclosed_file_warns_and_closes_its_fd(sample: str) -> None:
    before = _fds()
    f = await aioring.open(sample, "rb")
    await f.read(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del f
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert _fds() == before


async def test_fifo_works_through_the_executor(disk_dir: str) -> None:
    path = os.path.join(disk_dir, "fifo")
    os.mkfifo(path)
    loop = asyncio.get_running_loop()

    def feed() -> None:
        with open(path, "wb") as w:
            w.write(b"through a fifo\n")

    writer = loop.run_in_executor(None, feed)
    async with aioring.open(path, "rb") as f:
        assert f._raw is None
        assert await f.readline() == b"through a fifo\n"
    await writer


async def test_fifo_read_end_opens_once_a_writer_is_there(disk_dir: str) -> None:
    # As builtin open: the open waits for a writer, so a read never sees an
    # end of file that only says that no writer had come yet.
    path = os.path.join(disk_dir, "fifo")
    os.mkfifo(path)
    loop = asyncio.get_running_loop()
    opening = asyncio.ensure_future(aioring.open(path, "rb"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not opening.done()

    def feed() -> None:
        with open(path, "wb") as w:
            w.write(b"after the open\n")

    await loop.run_in_executor(None, feed)
    f = await opening
    try:
        assert await f.readline() == b"after the open\n"
        assert await f.read() == b""
    finally:
        await f.close()


async def test_wrap_dispatches_like_aiofiles(sample: str) -> None:
    assert type(threadpool.wrap(io.BytesIO(b"x"))) is AsyncBufferedIOBase
    with pytest.raises(TypeError, match="Unsupported io type"):
        threadpool.wrap(io.FileIO)
    with open(sample, "rb") as g:
        f = threadpool.wrap(g)
        assert type(f) is AsyncBufferedReader and f._raw is None
        assert await f.read(5) == b"first"


async def test_temporary_files_on_the_ring(disk_dir: str) -> None:
    async with tempfile.TemporaryFile(dir=disk_dir) as f:
        assert isinstance(f.name, int) and f._raw is not None
        await f.write(b"abc")
        await f.seek(0)
        assert await f.read() == b"abc"
    async with tempfile.NamedTemporaryFile("w+", dir=disk_dir, suffix=".x") as f:
        assert f._raw is not None and os.path.exists(f.name) and f.name.endswith(".x")
        await f.write("text")
        await f.seek(0)
        assert await f.read() == "text"
        name = f.name
    assert not os.path.exists(name)


async def test_spooled_file_rolls_over_onto_the_ring(disk_dir: str) -> None:
    async with tempfile.SpooledTemporaryFile(max_size=10, mode="w+", dir=disk_dir) as f:
        await f.write("12345")
        assert f._file._rolled is False and f.name is None
        await f.write("6789012345\r\n")
        assert f._file._rolled is True
        assert f._disk._raw is not None
        await f.seek(0)
        assert await f.read() == "123456789012345\n"
        assert f.newlines == "\r\n"
        assert isinstance(await f.fileno(), int)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="delete_on_close is 3.12+")
async def test_named_temporary_file_delete_on_close_false(disk_dir: str) -> None:
    async with tempfile.NamedTemporaryFile(dir=disk_dir, delete_on_close=False) as f:
        await f.close()
        assert os.path.exists(f.name)
    assert not os.path.exists(f.name)


async def test_every_read_and_write_goes_through_the_ring(sample: str, disk_dir: str,
                                                          ring_reads: None) -> None:
    # (Page-cache hits are read at once, outside the ring, unless ring_reads
    # says otherwise; nothing else reads outside it.)
    ring_stats = aioring.statistics
    before = ring_stats()["completions"]
    async with aioring.open(sample) as f:
        text = await f.read()
    async with aioring.open(os.path.join(disk_dir, "copy"), "w") as f:
        await f.write(text)
    # read to EOF; open (creating), write, close: at least 4 completions.  (The
    # first open and close need no ring op: see the test below.)
    assert ring_stats()["completions"] - before >= 4
    assert _rawfile.SYNC_READS[0] == 0


async def test_opening_and_closing_a_cached_file_for_reading_take_no_ring_op(sample: str) -> None:
    aioring.statistics()
    with open(sample, "rb") as f:
        expected = f.read()
    fds = _fds()
    before = aioring.statistics()["completions"], aioring.statistics()["submit_calls"]
    f = await aioring.open(sample, "rb")
    if not f._raw._close_now:
        await f.close()
        pytest.skip("the scratch directory's file system flushes at close (NFS, FUSE, overlayfs)")
    await f.close()
    assert _fds() == fds
    assert (aioring.statistics()["completions"], aioring.statistics()["submit_calls"]) == before
    async with aioring.open(sample, "rb") as f:  # and what it reads is the file's
        assert await f.read() == expected


@pytest.mark.parametrize("mode", ["rb", "r", "r+b", "ab"])
async def test_opens_that_must_wait_go_to_the_ring(sample: str, mode: str, monkeypatch) -> None:
    from aioring import _pathops
    monkeypatch.setattr(_pathops, "_open_now", [False])  # as where a path is not in the cache
    monkeypatch.setattr(_rawfile, "_NO_FLUSH_FS", frozenset())  # as on NFS or FUSE: the close too
    monkeypatch.setattr(_rawfile, "_FS_CLOSES_AT_ONCE", {})
    fds = _fds()
    with open(sample, mode) as f:
        expected = f.read() if f.readable() else None
    before = aioring.statistics()["completions"]
    async with aioring.open(sample, mode) as f:
        if expected is not None:
            assert await f.read() == expected
        assert not f._raw._close_now
    assert aioring.statistics()["completions"] >= before + 2  # the open and the close
    assert _fds() == fds


@pytest.mark.parametrize("mode", ["rb", "r", "wb", "a+"])
async def test_raw_layer_answers_seekable_and_isatty_as_fileio(disk_dir: str, mode: str) -> None:
    """A regular file is seekable and no terminal; the raw layer says so
    without asking the kernel, and raises FileIO's error once closed."""
    path = os.path.join(disk_dir, "f")
    with open(path, "wb") as f:
        f.write(b"x\ny\n")
    with open(path, mode) as theirs:
        async with aioring.open(path, mode) as f:
            ours_raw, their_raw = _file.ring_raw(f._file), getattr(theirs, "buffer", theirs).raw
            assert (ours_raw.seekable(), ours_raw.isatty()) == (their_raw.seekable(), their_raw.isatty())
            assert (await f.seekable(), await f.isatty()) == (theirs.seekable(), theirs.isatty())
            assert getattr(f._file, "line_buffering", False) == getattr(theirs, "line_buffering", False)
    for raw in (ours_raw, their_raw):
        with pytest.raises(ValueError) as caught:
            raw.seekable()
        assert str(caught.value) == "I/O operation on closed file"
