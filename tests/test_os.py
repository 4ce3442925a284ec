"""aioring.os and aioring.ospath against aiofiles.os's names and os's results."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import aiofiles.os
import aiofiles.ospath
import pytest

import aioring.os
import aioring.ospath


def test_every_aiofiles_os_name_exists():
    assert set(aiofiles.os.__all__) <= set(aioring.os.__all__)
    assert set(aiofiles.ospath.__all__) <= set(aioring.ospath.__all__)
    for name in aioring.os.__all__:
        assert hasattr(aioring.os, name), name
    assert aioring.os.path is aioring.ospath
    assert aioring.os.stat.__name__ == "stat" and aioring.os.listdir.__name__ == "listdir"


async def test_results_equal_os(disk_dir):
    f = os.path.join(disk_dir, "f")
    with open(f, "wb") as fh:
        fh.write(b"12345")
    os.symlink("f", os.path.join(disk_dir, "l"))
    assert (await aioring.os.stat(f)).st_size == os.stat(f).st_size == 5
    assert (await aioring.os.lstat(os.path.join(disk_dir, "l"))).st_ino == os.lstat(
        os.path.join(disk_dir, "l")).st_ino
    assert sorted(await aioring.os.listdir(disk_dir)) == sorted(os.listdir(disk_dir))
    assert await aioring.os.readlink(os.path.join(disk_dir, "l")) == "f"
    assert await aioring.os.access(f, os.R_OK) is True
    assert await aioring.os.getcwd() == os.getcwd()
    assert (await aioring.os.statvfs(disk_dir)).f_bsize == os.statvfs(disk_dir).f_bsize
    with await aioring.os.scandir(disk_dir) as it:
        assert sorted(e.name for e in it) == sorted(os.listdir(disk_dir))
    assert await aioring.ospath.getsize(f) == 5
    assert await aioring.ospath.exists(os.path.join(disk_dir, "nope")) is False
    assert await aioring.ospath.isfile(f) and await aioring.ospath.islink(os.path.join(disk_dir, "l"))
    await aioring.os.makedirs(os.path.join(disk_dir, "a", "b"), exist_ok=True)
    await aioring.os.renames(os.path.join(disk_dir, "a", "b"), os.path.join(disk_dir, "c", "d"))
    assert os.path.isdir(os.path.join(disk_dir, "c", "d"))
    await aioring.os.removedirs(os.path.join(disk_dir, "c", "d"))
    assert not os.path.exists(os.path.join(disk_dir, "c"))
    await aioring.os.chmod(f, 0o600)
    assert os.stat(f).st_mode & 0o777 == 0o600
    fd = os.open(f, os.O_RDWR)
    await aioring.os.fsync(fd)
    os.close(fd)
    await aioring.os.remove(f)
    assert not os.path.exists(f)


async def test_loop_and_executor_keywords_are_accepted(disk_dir):
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool:
        assert await aioring.os.listdir(disk_dir, loop=loop, executor=pool) == []
        assert (await aioring.os.stat(disk_dir, loop=loop, executor=pool)).st_ino == os.stat(
            disk_dir).st_ino


async def test_errors_equal_os(disk_dir):
    missing = os.path.join(disk_dir, "missing")
    for ours, theirs in ((aioring.os.listdir, os.listdir), (aioring.os.stat, os.stat),
                         (aioring.os.remove, os.remove), (aioring.os.readlink, os.readlink)):
        with pytest.raises(FileNotFoundError) as got:
            await ours(missing)
        with pytest.raises(FileNotFoundError) as expected:
            theirs(missing)
        assert str(got.value) == str(expected.value)


def _tree(root):
    for path in ("a/b/c", "a/d", "e", "f/g/h/i"):
        os.makedirs(os.path.join(root, path))
    for path in ("x", "a/y", "a/b/z", "f/g/w"):
        with open(os.path.join(root, path), "w") as fh:
            fh.write(path)
    os.symlink(os.path.join(root, "a"), os.path.join(root, "link_to_a"))


@pytest.mark.parametrize("topdown", [True, False])
@pytest.mark.parametrize("followlinks", [False, True])
async def test_walk_equals_os_walk(disk_dir, topdown, followlinks):
    _tree(disk_dir)

    def norm(rows):
        return [(p, sorted(d), sorted(f)) for p, d, f in rows]

    ours = [row async for row in aioring.os.walk(disk_dir, topdown=topdown, followlinks=followlinks)]
    theirs = list(os.walk(disk_dir, topdown=topdown, followlinks=followlinks))
    assert sorted(norm(ours)) == sorted(norm(theirs))
    if not topdown:  # every directory comes after everything below it
        seen = [p for p, _, _ in ours]
        for i, p in enumerate(seen):
            assert all(not q.startswith(p + os.sep) for q in seen[i + 1:])


async def test_walk_prunes_and_reports_errors(disk_dir):
    _tree(disk_dir)
    visited = []
    async for path, dirs, _ in aioring.os.walk(disk_dir):
        visited.append(os.path.relpath(path, disk_dir))
        if "a" in dirs:
            dirs.remove("a")
    assert not any(p.startswith("a") for p in visited)
    errors = []
    assert [row async for row in aioring.os.walk(os.path.join(disk_dir, "nope"),
                                                 onerror=errors.append)] == []
    assert isinstance(errors[0], FileNotFoundError)


def _paths_to_ask(root):
    """Every kind of path os.path's stat-based functions meet, and bad ones."""
    import pathlib
    f = os.path.join(root, "f")
    with open(f, "wb") as fh:
        fh.write(b"12345")
    d = os.path.join(root, "d")
    os.mkdir(d)
    os.symlink("f", os.path.join(root, "lf"))
    os.symlink("d", os.path.join(root, "ld"))
    os.symlink("missing", os.path.join(root, "broken"))
    os.symlink("loop", os.path.join(root, "loop"))
    fd = os.open(f, os.O_RDONLY)
    closed_fd = os.open(f, os.O_RDONLY)
    os.close(closed_fd)
    paths = [f, d, os.path.join(root, "lf"), os.path.join(root, "ld"), os.path.join(root, "broken"),
             os.path.join(root, "loop"), os.path.join(root, "missing"), os.path.join(f, "x"),
             os.path.join(root, "x" * 300), f.encode(), pathlib.Path(d), fd, closed_fd, -5, 2**70, -2**70,
             "", "a\0b", b"a\0b", None, 1.5, ["f"]]
    return paths, fd


def _outcome_of(result):
    if isinstance(result, BaseException):
        return type(result), str(result), getattr(result, "errno", None)
    return "ok", result


@pytest.mark.parametrize("name", ["exists", "isfile", "isdir", "islink", "getsize", "getmtime",
                                  "getatime", "getctime"])
async def test_stat_based_path_functions_equal_os_path(disk_dir, name):
    """Results, and the exceptions raised or caught, are os.path's, for every
    kind of file, link, missing path, fd and bad argument."""
    paths, fd = _paths_to_ask(disk_dir)
    try:
        for path in paths:
            try:
                theirs = getattr(os.path, name)(path)
            except Exception as exc:
                theirs = exc
            try:
                ours = await getattr(aioring.ospath, name)(path)
            except Exception as exc:
                ours = exc
            assert _outcome_of(ours) == _outcome_of(theirs), (name, path)
    finally:
        os.close(fd)
    assert getattr(aioring.ospath, name).__name__ == name
    assert getattr(aioring.ospath, name).__doc__ == getattr(os.path, name).__doc__


async def test_samefile_equals_os_path(disk_dir):
    paths, fd = _paths_to_ask(disk_dir)
    try:
        f, d, lf, ld, broken = paths[:5]
        for a, b in ((f, lf), (lf, f), (f, d), (d, ld), (f, fd), (f, broken), (broken, f),
                     (f, None), (f, "a\0b")):
            try:
                theirs = os.path.samefile(a, b)
            except Exception as exc:
                theirs = exc
            try:
                ours = await aioring.ospath.samefile(a, b)
            except Exception as exc:
                ours = exc
            assert _outcome_of(ours) == _outcome_of(theirs), (a, b)
    finally:
        os.close(fd)


async def test_stat_based_path_functions_need_no_executor(disk_dir):
    """They ask the kernel from the loop's thread: a loop whose executor
    refuses work still answers them."""
    class NoExecutor(ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            raise AssertionError("nothing should run in the executor")

    loop = asyncio.get_running_loop()
    loop.set_default_executor(NoExecutor(1))
    f = os.path.join(disk_dir, "f")
    with open(f, "wb") as fh:
        fh.write(b"abc")
    assert await aioring.ospath.exists(f) and await aioring.ospath.isfile(f)
    assert await aioring.ospath.isdir(disk_dir) and not await aioring.ospath.islink(f)
    assert await aioring.ospath.getsize(f) == 3
    assert await aioring.ospath.samefile(f, f)


# ------------------------------------------------------------ as os does it
def _outcome(call):
    """("ok", result) or (exception type, errno, filename, filename2, str)."""
    try:
        return ("ok", call())
    except OSError as exc:
        return (type(exc), exc.errno, exc.filename, exc.filename2, str(exc))
    except Exception as exc:
        return (type(exc), str(exc))


async def _aoutcome(coro):
    try:
        return ("ok", await coro)
    except OSError as exc:
        return (type(exc), exc.errno, exc.filename, exc.filename2, str(exc))
    except Exception as exc:
        return (type(exc), str(exc))


async def test_link_of_a_symlink_links_the_symlink_as_os_link_does(disk_dir, monkeypatch):
    """os.link (before Python 3.14) calls link(2), which never follows a
    symlink: the new name is a hard link to the symlink itself, and a
    dangling symlink links too."""
    monkeypatch.chdir(disk_dir)
    open("target", "w").close()
    os.symlink("target", "sym")
    os.symlink("missing", "dangling")
    for name in ("sym", "dangling"):
        os.link(name, "os_" + name)
        await aioring.os.link(name, "ring_" + name)
        assert os.path.islink("ring_" + name) == os.path.islink("os_" + name)
        assert os.lstat("ring_" + name).st_ino == os.lstat("os_" + name).st_ino
    fd = os.open(".", os.O_RDONLY)
    try:  # with a dir_fd os calls linkat, following the symlink as asked
        os.link("sym", "os_at", src_dir_fd=fd)
        await aioring.os.link("sym", "ring_at", src_dir_fd=fd)
        assert os.lstat("ring_at").st_ino == os.lstat("os_at").st_ino == os.stat("target").st_ino
    finally:
        os.close(fd)


async def test_errors_name_a_pathlike_as_os_names_it(disk_dir):
    from pathlib import Path
    missing, other = Path(disk_dir, "missing"), Path(disk_dir, "other")
    cases = [
        ("stat", (missing,)), ("lstat", (missing,)), ("unlink", (missing,)), ("remove", (missing,)),
        ("rmdir", (missing,)), ("mkdir", (Path(disk_dir, "no", "such"),)), ("rename", (missing, other)),
        ("replace", (missing, other)), ("link", (missing, other)),
    ]
    for name, args in cases:
        expected = _outcome(lambda name=name, args=args: getattr(os, name)(*args))
        assert await _aoutcome(getattr(aioring.os, name)(*args)) == expected, name
        assert type(expected[2]) is str


async def test_odd_arguments_as_os_takes_them(disk_dir, monkeypatch):
    monkeypatch.chdir(disk_dir)
    assert await _aoutcome(aioring.os.mkdir("ring", -1)) == _outcome(lambda: os.mkdir("os", -1))
    assert os.stat("ring").st_mode == os.stat("os").st_mode
    fd = os.open(".", os.O_RDONLY)
    try:
        assert await _aoutcome(aioring.os.stat(fd, follow_symlinks=False)) == \
            _outcome(lambda: os.stat(fd, follow_symlinks=False))
        with open("f", "wb") as f:
            assert await aioring.os.fsync(f) is None  # a file object, as os.fsync takes it
            assert await _aoutcome(aioring.os.ftruncate(f.fileno(), 2**63)) == \
                _outcome(lambda: os.ftruncate(f.fileno(), 2**63))
        assert await _aoutcome(aioring.os.fsync(-1)) == _outcome(lambda: os.fsync(-1))
        assert await _aoutcome(aioring.os.remove(b"f\0")) == _outcome(lambda: os.remove(b"f\0"))
    finally:
        os.close(fd)


class _ReturnsInt:
    def __fspath__(self):
        return 3


class _Raises:
    def __fspath__(self):
        raise TypeError("its own words")


@pytest.mark.parametrize("path", [_ReturnsInt(), _Raises()], ids=["returns-int", "raises"])
async def test_a_bad_fspath_errs_as_with_os(path):
    for name in ("stat", "unlink", "mkdir"):
        expected = _outcome(lambda name=name: getattr(os, name)(path))
        assert await _aoutcome(getattr(aioring.os, name)(path)) == expected
    assert await _aoutcome(aioring.open(path)) == _outcome(lambda: open(path))
