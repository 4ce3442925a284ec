"""Path and file operations on the ring, compared with the os functions they mirror."""

from __future__ import annotations

import errno
import functools
import os
import pathlib
import resource
import stat

import pytest

from aioring import _pathops as ring_os
from aioring import statistics


def _os_error(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except OSError as exc:
        return exc
    raise AssertionError(f"{fn.__name__} did not fail")


async def _same_error(coro, expected):
    with pytest.raises(OSError) as info:
        await coro
    got = info.value
    assert type(got) is type(expected)
    assert (got.errno, got.strerror, got.filename, got.filename2) == (
        expected.errno, expected.strerror, expected.filename, expected.filename2)
    assert str(got) == str(expected)


def _stat_fields(st):
    names = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
             "st_mtime_ns", "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev", "st_mtime")
    return tuple(getattr(st, n) for n in names) + tuple(st)[:10]


async def test_open_write_stat_close(disk_dir):
    path = os.path.join(disk_dir, "f")
    fd = await ring_os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    assert not os.get_inheritable(fd)  # as os.open
    os.write(fd, b"x" * 5000)
    for target in (path, pathlib.Path(path), os.fsencode(path), fd):
        assert _stat_fields(await ring_os.stat(target)) == _stat_fields(os.stat(target))
    await ring_os.close(fd)
    with pytest.raises(OSError):
        os.fstat(fd)


async def test_stat_and_lstat_of_a_symlink(disk_dir):
    target = os.path.join(disk_dir, "target")
    os.mkdir(target)
    link = os.path.join(disk_dir, "link")
    os.symlink(target, link)
    assert _stat_fields(await ring_os.stat(link)) == _stat_fields(os.stat(link))
    assert _stat_fields(await ring_os.lstat(link)) == _stat_fields(os.lstat(link))
    dfd = os.open(disk_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _stat_fields(await ring_os.stat("link", dir_fd=dfd)) == _stat_fields(os.stat(link))
    finally:
        os.close(dfd)


def _open_fds():
    return {int(fd): os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


@pytest.mark.parametrize("how", ["at-once", "ring"])
async def test_stat_matches_os_stat_on_every_kind_of_path(disk_dir, how, monkeypatch):
    """Files, directories, a FIFO (stat must not open it for reading), a device,
    symlinks (dangling, looping, to a directory) and trailing slashes: each
    result or error equals os.stat's and os.lstat's, and no fd is left open;
    with paths in the kernel's cache (at once) and as if they were not (ring)."""
    if how == "ring":
        monkeypatch.setattr(ring_os, "_open_now", [False])
    join = functools.partial(os.path.join, disk_dir)
    with open(join("file"), "wb") as f:
        f.write(b"x" * 12345)
    os.mkdir(join("dir"))
    os.mkfifo(join("fifo"))
    os.symlink(join("dir"), join("to_dir"))
    os.symlink(join("nowhere"), join("dangling"))
    os.symlink(join("loop"), join("loop"))
    os.chmod(join("file"), 0)
    paths = [join(n) for n in ("file", "dir", "fifo", "to_dir", "dangling", "loop", "missing")]
    paths += [join("file") + "/", join("dir") + "/", join("to_dir") + "/", "/dev/null", ""]
    await ring_os.stat(disk_dir)  # the loop's ring and its eventfd are open from here on
    fds = _open_fds()
    for path in paths:
        for follow in (True, False):
            try:
                expected = _stat_fields(os.stat(path, follow_symlinks=follow))
            except OSError as exc:
                await _same_error(ring_os.stat(path, follow_symlinks=follow), exc)
            else:
                got = await ring_os.stat(path, follow_symlinks=follow)
                assert _stat_fields(got) == expected, (path, follow)
    assert _open_fds() == fds


async def test_stat_and_open_of_cached_paths_take_no_ring_op(disk_dir):
    path = os.path.join(disk_dir, "f")
    with open(path, "wb") as f:
        f.write(b"abc")
    os.stat(path)  # (in the kernel's cache)
    statistics()
    before = statistics()["completions"], statistics()["submit_calls"]
    assert _stat_fields(await ring_os.stat(path)) == _stat_fields(os.stat(path))
    await _same_error(ring_os.stat(path + "x"), _os_error(os.stat, path + "x"))
    fd = await ring_os.open(path, os.O_RDONLY)
    try:
        assert not os.get_inheritable(fd) and os.read(fd, 10) == b"abc"
        assert os.get_blocking(fd)  # (the open's own O_NONBLOCK is gone)
    finally:
        os.close(fd)
    await _same_error(ring_os.open(path + "x", os.O_RDONLY), _os_error(os.open, path + "x", os.O_RDONLY))
    assert (statistics()["completions"], statistics()["submit_calls"]) == before


async def test_a_cached_directory_opens_at_once_and_o_tmpfile_as_os_opens_it(disk_dir):
    """O_TMPFILE holds O_DIRECTORY's bit: an O_DIRECTORY open of a cached
    directory is still done at once, and an O_TMPFILE open (never done at
    once) makes the unnamed file os.open makes."""
    sub = os.path.join(disk_dir, "d")
    os.mkdir(sub)
    plain = os.path.join(disk_dir, "f")
    with open(plain, "wb"):
        pass
    os.stat(sub)  # (in the kernel's cache)
    before = statistics()["completions"], statistics()["submit_calls"]
    fd = await ring_os.open(sub, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _stat_fields(os.fstat(fd)) == _stat_fields(os.stat(sub))
    finally:
        os.close(fd)
    await _same_error(ring_os.open(plain, os.O_RDONLY | os.O_DIRECTORY),
                      _os_error(os.open, plain, os.O_RDONLY | os.O_DIRECTORY))
    assert (statistics()["completions"], statistics()["submit_calls"]) == before
    fd = await ring_os.open(sub, os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        st = os.fstat(fd)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and stat.S_IMODE(st.st_mode) == 0o600
        assert os.write(fd, b"abc") == 3 and os.pread(fd, 3, 0) == b"abc"
    finally:
        os.close(fd)
    assert os.listdir(sub) == []


async def test_stat_without_a_free_fd_still_works(disk_dir):
    path = os.path.join(disk_dir, "f")
    with open(path, "wb") as f:
        f.write(b"abc")
    await ring_os.stat(path)  # the ring exists before the limit drops
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    dups = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in _open_fds()) + 8, hard))
    try:
        with pytest.raises(OSError) as info:
            while True:
                dups.append(os.dup(0))
        assert info.value.errno == errno.EMFILE
        assert _stat_fields(await ring_os.stat(path)) == _stat_fields(os.stat(path))
        await _same_error(ring_os.stat(path + "x"), _os_error(os.stat, path + "x"))
    finally:
        for fd in dups:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_directory_and_link_operations(disk_dir):
    d = os.path.join(disk_dir, "d")
    await ring_os.mkdir(d, 0o750)
    assert os.path.isdir(d)
    assert os.stat(d).st_mode & 0o777 == 0o750 & ~_umask()
    a = os.path.join(d, "a")
    with open(a, "wb") as f:
        f.write(b"data")
    b = os.path.join(d, "b")
    await ring_os.link(a, b)
    assert os.stat(a).st_nlink == 2
    s = os.path.join(d, "s")
    await ring_os.symlink("a", s)
    assert os.readlink(s) == "a"
    c = os.path.join(d, "c")
    await ring_os.rename(b, c)
    assert os.path.exists(c) and not os.path.exists(b)
    e = os.path.join(d, "e")
    with open(e, "wb") as f:
        f.write(b"new")
    await ring_os.replace(e, a)
    with open(a, "rb") as f:
        assert f.read() == b"new"
    assert os.stat(c).st_nlink == 1
    for name in (a, c, s):
        await ring_os.unlink(name)
    await ring_os.rmdir(d)
    assert not os.path.exists(d)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


async def test_errors_are_os_errors_with_filenames(disk_dir):
    missing = os.path.join(disk_dir, "missing")
    here = os.path.join(disk_dir, "here")
    os.mkdir(here)
    cases = [
        (ring_os.open(missing, os.O_RDONLY), _os_error(os.open, missing, os.O_RDONLY)),
        (ring_os.stat(missing), _os_error(os.stat, missing)),
        (ring_os.stat(os.fsencode(missing)), _os_error(os.stat, os.fsencode(missing))),
        (ring_os.unlink(missing), _os_error(os.unlink, missing)),
        (ring_os.unlink(here), _os_error(os.unlink, here)),
        (ring_os.rmdir(missing), _os_error(os.rmdir, missing)),
        (ring_os.mkdir(here), _os_error(os.mkdir, here)),
        (ring_os.rename(missing, here), _os_error(os.rename, missing, here)),
        (ring_os.link(missing, here), _os_error(os.link, missing, here)),
        (ring_os.symlink("x", here), _os_error(os.symlink, "x", here)),
        (ring_os.close(10_000), _os_error(os.close, 10_000)),
    ]
    for coro, expected in cases:
        await _same_error(coro, expected)


@pytest.mark.parametrize("call,exc", [
    (lambda: ring_os.stat(1.5), TypeError),
    (lambda: ring_os.open(None, os.O_RDONLY), TypeError),
    (lambda: ring_os.unlink("a\0b"), ValueError),
    (lambda: ring_os.rename("a", b"b\0"), ValueError),
    (lambda: ring_os.mkdir(["x"]), TypeError),
])
async def test_bad_arguments_raise_before_submitting(call, exc):
    await ring_os.stat(".")
    before = statistics()["submit_calls"], statistics()["completions"]
    with pytest.raises(exc):
        await call()
    assert (statistics()["submit_calls"], statistics()["completions"]) == before


async def test_fallocate(disk_dir):
    fd = os.open(os.path.join(disk_dir, "pre"), os.O_RDWR | os.O_CREAT)
    try:
        await ring_os.fallocate(fd, 0, 0, 1 << 20)
        assert os.fstat(fd).st_size == 1 << 20
        with pytest.raises(ValueError):
            await ring_os.fallocate(fd, 0, -1, 10)
    finally:
        os.close(fd)


async def test_ftruncate(disk_dir):
    fd = os.open(os.path.join(disk_dir, "t"), os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 1000)
        await ring_os.ftruncate(fd, 10)
        assert os.fstat(fd).st_size == 10
        await ring_os.ftruncate(fd, 5000)
        assert os.pread(fd, 6000, 0) == b"x" * 10 + b"\0" * 4990
        await _same_error(ring_os.ftruncate(fd, -1), _os_error(os.ftruncate, fd, -1))
    finally:
        os.close(fd)
    await _same_error(ring_os.ftruncate(fd, 1), _os_error(os.ftruncate, fd, 1))


async def test_a_task_opening_cached_files_still_lets_the_loop_run(disk_dir):
    import asyncio
    path = os.path.join(disk_dir, "f")
    pathlib.Path(path).write_bytes(b"abc")
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1
    task = asyncio.ensure_future(other())
    try:
        await asyncio.sleep(0)
        turns = 0
        for _ in range(300):
            os.close(await ring_os.open(path, os.O_RDONLY))
            await ring_os.stat(path)
        assert turns > 0
    finally:
        task.cancel()
