"""A file opened "rb" and read whole, the commonest use of aioring.open:
everything else asked of it before, between and after gives what builtin
open's file gives."""

from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path

import pytest

import aioring


def _fds() -> set[str]:
    aioring.statistics()  # (the running loop's ring made first)
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(params=[0, 1, 2, 5000, 300_000])
def whole(request: pytest.FixtureRequest, disk_dir: str) -> tuple[str, bytes]:
    path = os.path.join(disk_dir, "whole.bin")
    data = os.urandom(request.param)
    Path(path).write_bytes(data)
    return path, data


async def test_read_whole_then_everything_else_as_open(whole: tuple[str, bytes]) -> None:
    path, data = whole
    with open(path, "rb") as g:
        async with aioring.open(path, "rb") as f:
            assert (f.name, f.mode, f.closed, f.readable()) == (g.name, g.mode, g.closed, g.readable())
            assert await f.read() == g.read() == data
            assert (await f.read(), await f.tell()) == (g.read(), g.tell())
            assert await f.seek(1) == g.seek(1)
            assert await f.read() == g.read()
            assert os.path.sameopenfile(f.fileno(), g.fileno())
    g.close()
    assert (f.closed, f.name, f.mode) == (g.closed, g.name, g.mode)
    for call, args in (("read", ()), ("tell", ()), ("seek", (0,)), ("readline", ())):
        with pytest.raises(ValueError) as theirs:
            getattr(g, call)(*args)
        with pytest.raises(ValueError) as ours:
            await getattr(f, call)(*args)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError):
        f.fileno()
    await f.close()  # (again: nothing)


async def test_read_whole_after_close_raises_as_open(whole: tuple[str, bytes]) -> None:
    path, _ = whole
    f = await aioring.open(path, "rb")
    await f.close()
    g = open(path, "rb")
    g.close()
    with pytest.raises(ValueError) as theirs:
        g.read()
    with pytest.raises(ValueError) as ours:
        await f.read()
    assert str(ours.value) == str(theirs.value)


async def test_read_whole_sees_what_was_written_after_the_open(whole: tuple[str, bytes]) -> None:
    path, data = whole
    async with aioring.open(path, "rb") as f:
        with open(path, "ab") as w:
            w.write(b"more")
        with open(path, "rb") as g:
            assert await f.read() == g.read() == data + b"more"
    async with aioring.open(path, "rb") as f:
        os.truncate(path, len(data) // 2)
        assert await f.read() == data[:len(data) // 2]


async def test_unread_or_read_whole_unclosed_file_warns_and_closes_its_fd(whole: tuple[str, bytes]) -> None:
    path, data = whole
    for read in (False, True):
        before = _fds()
        f = await aioring.open(path, "rb")
        if read:
            assert await f.read() == data
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del f
            gc.collect()
        assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == [
            f"unclosed file <_io.BufferedReader name={path!r}>"]
        assert _fds() == before
