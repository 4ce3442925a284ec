"""aioring.shutil against the stdlib's shutil: the same trees, results and errors."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aiofiles
import pytest

import aioring
import aioring.shutil as ashutil
from aioring import _loops, _pathops
from aioring._loops import get_ring
from aioring.shutil import _kernel

LARGE = _kernel.SPLICE_MIN * 2 + 12345  # spliced, by three lanes


def _make_tree(root: str) -> None:
    """Files (empty, small, large), hard links, symlinks (to a file, a
    directory, dangling, looping), non-ASCII and undecodable names,
    permissions and timestamps."""
    os.makedirs(os.path.join(root, "sub", "deeper"))
    os.mkdir(os.path.join(root, "ünï✓"))
    files = {"empty": b"", "small": b"abc" * 1000, os.path.join("sub", "big"): os.urandom(LARGE),
             os.path.join("sub", "deeper", "x"): b"x", os.path.join("ünï✓", "ß"): b"\xff" * 77}
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    fd = os.open(os.path.join(os.fsencode(root), b"sub", b"bad\xff\xfename"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"undecodable")
    os.close(fd)
    os.link(os.path.join(root, "small"), os.path.join(root, "hardlink"))
    os.symlink("small", os.path.join(root, "to_file"))
    os.symlink("sub", os.path.join(root, "to_dir"))
    os.symlink("nowhere", os.path.join(root, "dangling"))
    os.symlink("loop", os.path.join(root, "loop"))
    os.chmod(os.path.join(root, "small"), 0o640)
    os.chmod(os.path.join(root, "sub", "deeper"), 0o750)
    for i, (dirpath, dirs, names) in enumerate(os.walk(root)):
        for j, name in enumerate(names + dirs):
            path = os.path.join(dirpath, name)
            os.utime(path, ns=(1_000_000_123 + i, 2_000_000_456 + j), follow_symlinks=False)


def _snapshot(root: str, times: bool = True) -> dict[bytes, tuple[Any, ...]]:
    """Each entry under root: kind, mode, content or link target, mtime (and
    which entries are hard links of each other, as groups)."""
    out: dict[bytes, tuple[Any, ...]] = {}
    broot = os.fsencode(root)
    for dirpath, dirs, names in os.walk(broot):
        for name in dirs + names:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, broot)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns if times else 0)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns if times else 0, f.read(),
                                st.st_nlink)
    return out


def _errors(exc: shutil.Error, *bases: str) -> list[tuple[str, ...]]:
    """shutil.Error's list with the differing destination roots made alike."""
    out = []
    for entry in exc.args[0]:
        text = tuple(str(x) for x in entry)
        for i, base in enumerate(bases):
            text = tuple(t.replace(base, f"<dst{i}>") for t in text)
        out.append(text)
    return sorted(out)


@pytest.fixture
def tree(disk_dir: str) -> str:
    root = os.path.join(disk_dir, "src")
    _make_tree(root)
    return root


@pytest.fixture
def queues(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each _kernel.copy_queue call of the test returns (a CopyQueue
    and its release), in order."""
    made: list[Any] = []
    real = _kernel.copy_queue

    def spy(*args: Any) -> Any:
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(_kernel, "copy_queue", spy)
    return made


@contextlib.contextmanager
def _immutable(path: str) -> Iterator[None]:
    """`path` made immutable (chattr +i): even root gets EPERM changing it."""
    if subprocess.run(["chattr", "+i", path], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


def test_names_mirror_shutil() -> None:
    assert aioring.shutil is ashutil
    for name in ashutil.__all__:
        assert hasattr(ashutil, name), name
    # `import aioring.shutil as shutil` finds every public name of the stdlib's.
    assert set(shutil.__all__) <= set(ashutil.__all__)
    assert ashutil.Error is shutil.Error and ashutil.SameFileError is shutil.SameFileError
    assert ashutil.ignore_patterns is shutil.ignore_patterns
    assert ashutil.which.__name__ == "which" and ashutil.rmtree.__name__ == "rmtree"


@pytest.mark.parametrize("symlinks", [False, True])
async def test_copytree_like_shutil(tree: str, disk_dir: str, symlinks: bool) -> None:
    want, got = os.path.join(disk_dir, "want"), os.path.join(disk_dir, "got")
    if symlinks:  # the links are copied as links: nothing to complain about
        assert shutil.copytree(tree, want, symlinks=True) == want
        assert await ashutil.copytree(tree, got, symlinks=True) == got
        assert _snapshot(got)[b"loop"] == ("link", b"loop")
    else:  # the dangling and the looping link fail (the rest is copied)
        with pytest.raises(shutil.Error) as sync_err:
            shutil.copytree(tree, want)
        with pytest.raises(shutil.Error) as async_err:
            await ashutil.copytree(tree, got)
        assert _errors(async_err.value, got) == _errors(sync_err.value, want)
        assert len(async_err.value.args[0]) == 2
    assert _snapshot(got) == _snapshot(want)


def _drop(path: str, start: int = 0) -> None:
    """`path`'s pages from `start` on synced and dropped from the page cache
    (what a read there would not find; a non-blocking one starts the
    readahead that brings them back)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, start, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _metadata(root: str) -> dict[str, tuple[Any, ...]]:
    """Each file under root: content, mode, access and modification times,
    extended attributes."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                data = f.read()
            xattrs = {key: os.getxattr(path, key) for key in os.listxattr(path)}
            rel = os.path.relpath(path, root)
            out[rel] = (data, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns, xattrs)
    return out


# The "shutil.copyfile" audit events raised while _audited is on.
_audited: list[tuple[Any, ...]] = []
_auditing = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _auditing[0] and event == "shutil.copyfile":
        _audited.append(args)


sys.addaudithook(_audit)


@pytest.mark.parametrize("umask", [0o022, 0o077])
async def test_copytree_small_files_like_shutil(disk_dir: str, umask: int, queues: list[Any]) -> None:
    """Small cached files, which the core copies (a CopyQueue), beside ones
    it hands back to the full steps (uncached, larger, with extended
    attributes): contents, permission bits (set-id bits and what the umask
    took included), times to the nanosecond and extended attributes as
    shutil.copytree leaves them, and one audit event a file, as shutil
    raises them."""
    src = os.path.join(disk_dir, "src")
    os.makedirs(os.path.join(src, "d"))
    files = {"empty": (b"", 0o644), "one": (b"1", 0o600), "page": (os.urandom(4096), 0o755),
             "limit": (os.urandom(ashutil.SMALL_COPY), 0o2750),
             "over": (os.urandom(ashutil.SMALL_COPY + 1), 0o640),
             os.path.join("d", "setuid"): (b"#!", 0o4711),
             os.path.join("d", "cold"): (os.urandom(9000), 0o604),
             os.path.join("d", "xattr"): (b"with attributes", 0o664)}
    for name, (data, mode) in files.items():
        path = os.path.join(src, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)

    def stamp() -> None:  # (each copy reads the sources, which moves their access times)
        for i, name in enumerate(files):
            times = (1_500_000_000_123_456_789 + i, 1_600_000_000_987_654_321 - i)
            os.utime(os.path.join(src, name), ns=times)

    try:
        os.setxattr(os.path.join(src, "d", "xattr"), "user.aioring", b"value")
        attributes = True
    except OSError:
        attributes = False  # (a file system without user attributes: a plain file)
    _drop(os.path.join(src, "d", "cold"))
    old = os.umask(umask)
    try:
        stamp()
        _auditing[0] = True
        want = shutil.copytree(src, os.path.join(disk_dir, "want"))
        want_events = sorted((os.fspath(a), b) for a, b in _audited)
        _audited.clear()
        _drop(os.path.join(src, "d", "cold"))
        stamp()
        got = await ashutil.copytree(src, os.path.join(disk_dir, "got"))
        got_events = sorted((os.fspath(a), b) for a, b in _audited)
    finally:
        _auditing[0] = False
        _audited.clear()
        os.umask(old)
    copied = _metadata(got)
    assert copied == _metadata(want)
    assert copied[os.path.join("d", "setuid")][1] == 0o4711
    assert [(a, os.path.relpath(b, got)) for a, b in got_events] == [
        (a, os.path.relpath(b, want)) for a, b in want_events]
    (queue,) = queues
    # (handed back: "over", with attributes "xattr", and "cold" unless its
    # pages came back meanwhile, by readahead)
    back = 2 if attributes else 1
    assert queue.handed_back in (back, back + 1)
    assert queue.copied + queue.handed_back == len(files)
    assert queue.in_flight == 0


async def test_a_copy_queue_copies_or_hands_back_each_job(disk_dir: str) -> None:
    """A CopyQueue's jobs, each copied as copy2 copies it (data, mode,
    times) or handed back once, audited and untouched, for the caller's own
    steps: a missing source, a directory, a larger file, a destination that
    exists (left as it was) or whose directory is missing.  A row's names
    are taken relative to its directories, or whole where those cannot be
    opened."""
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    os.mkdir(src)
    os.mkdir(dst)
    os.mkdir(os.path.join(src, "dir"))
    for name, size, mode in (("a", 10, 0o640), ("b", 0, 0o600), ("c", 5000, 0o751),
                             ("big", ashutil.SMALL_COPY + 1, 0o644), ("taken", 3, 0o644)):
        with open(os.path.join(src, name), "wb") as f:
            f.write(os.urandom(size))
        os.chmod(os.path.join(src, name), mode)
        os.utime(os.path.join(src, name), ns=(1_000_000_007, 2_000_000_009))
    with open(os.path.join(dst, "taken"), "wb") as f:
        f.write(b"mine")
    back: list[tuple[Any, bool, int | None]] = []
    queue = _kernel.copy_queue(2, ashutil.SMALL_COPY, 4, lambda *args: back.append(args))
    jobs = [([], name, os.path.join(dst, name), os.path.join(src, name))
            for name in ("a", "b", "c", "missing", "dir", "big", "taken")]
    queue.add(jobs, src + os.sep, dst + os.sep)
    queue.add([([], "x", os.path.join(dst, "nowhere", "x"), os.path.join(src, "a"))],
              src + os.sep, os.path.join(dst, "nowhere") + os.sep)
    await _kernel.drain(queue)
    handed = {job[1]: (audited, atime) for job, audited, atime in back}
    assert handed == {name: (True, None) for name in ("big", "dir", "missing", "taken", "x")}
    assert (queue.copied, queue.handed_back, queue.in_flight) == (3, 5, 0)
    for name in ("a", "b", "c"):
        want, got = os.stat(os.path.join(src, name)), os.stat(os.path.join(dst, name))
        assert (got.st_mode, got.st_mtime_ns, got.st_atime_ns) == (want.st_mode, 2_000_000_009, 1_000_000_007)
        with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "rb") as g:
            assert f.read() == g.read()
    with open(os.path.join(dst, "taken"), "rb") as f:
        assert f.read() == b"mine"
    assert sorted(os.listdir(dst)) == ["a", "b", "c", "taken"]


def test_copy_source_reads_a_small_cached_file(disk_dir: str) -> None:
    """_core.copy_source: the fd (non-inheritable), the bytes and the stat
    fields copy2 uses of a small cached regular file; None, with no fd left
    open, for anything else."""
    path = os.path.join(disk_dir, "f")
    data = os.urandom(5000)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, ns=(1_234_567_890_123_456_789, 1_334_567_890_987_654_321))
    fds = len(os.listdir("/proc/self/fd"))
    before = os.stat(path)  # (its read moves the access time: the stat is from before it)
    fd, got, mode, size, atime_ns, mtime_ns = ashutil._copy_source(os.fsencode(path), 5000)
    try:
        assert got == data and not os.get_inheritable(fd)
        want = [before.st_mode, 5000, before.st_atime_ns, before.st_mtime_ns]
        assert [mode, size, atime_ns, mtime_ns] == want
        assert os.path.samestat(os.fstat(fd), before)
    finally:
        os.close(fd)
    fifo = os.path.join(disk_dir, "fifo")
    os.mkfifo(fifo)
    empty = os.path.join(disk_dir, "empty")
    open(empty, "wb").close()
    fd, got, *_ = ashutil._copy_source(os.fsencode(empty), 0)
    os.close(fd)
    assert got == b""
    for name, limit in ((path, 4999), (disk_dir, 1 << 20), (fifo, 1 << 20), (path + "-missing", 1 << 20),
                        (path + "\0", 1 << 20)):
        assert ashutil._copy_source(os.fsencode(name), limit) is None, name
    for start in (4096, 0):  # (a read stops at the first page not cached: never part of the file)
        _drop(path, start)
        before = os.stat(path)
        fd, got, *fields = ashutil._copy_source(os.fsencode(path), 5000)
        blocking = not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
        os.close(fd)
        assert got in (None, data)  # (data: its pages came back meanwhile, by readahead)
        assert blocking or got is not None  # (the ring reads the rest: it must wait, not refuse)
        assert fields == [before.st_mode, 5000, before.st_atime_ns, before.st_mtime_ns]
    assert len(os.listdir("/proc/self/fd")) == fds
    with pytest.raises(TypeError):
        ashutil._copy_source(path, 5000)  # type: ignore[arg-type]


def test_copy_finish_sets_times_and_mode_then_closes(disk_dir: str) -> None:
    """_core.copy_finish: copy2's times and mode set and both fds closed;
    False with both open when the source has extended attributes; on an
    error both closed and os's OSError raised."""
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    with open(src, "wb") as f:
        f.write(b"x")
    src_fd = os.open(src, os.O_RDONLY)
    dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)
    assert ashutil._copy_finish(src_fd, dst_fd, 1_000_000_001, 2_000_000_002, 0o751, 2) is True
    for fd in (src_fd, dst_fd):
        with pytest.raises(OSError) as closed:
            os.fstat(fd)
        assert closed.value.errno == errno.EBADF
    st = os.stat(dst)
    assert (st.st_atime_ns, st.st_mtime_ns, stat.S_IMODE(st.st_mode)) == (1_000_000_001, 2_000_000_002, 0o751)
    src_fd = os.open(src, os.O_RDONLY)
    dst_fd = os.open(dst, os.O_WRONLY)
    assert ashutil._copy_finish(src_fd, dst_fd, 5, 6, 0o640, 1) is True  # (copy: the mode alone)
    st = os.stat(dst)
    assert (st.st_mtime_ns, stat.S_IMODE(st.st_mode)) == (2_000_000_002, 0o640)
    try:
        os.setxattr(src, "user.aioring", b"v")
    except OSError:
        pass
    else:
        src_fd = os.open(src, os.O_RDONLY)
        dst_fd = os.open(dst, os.O_WRONLY)
        assert ashutil._copy_finish(src_fd, dst_fd, 5, 6, 0o600, 2) is False
        assert stat.S_IMODE(os.fstat(dst_fd).st_mode) == 0o640  # (nothing done)
        os.close(src_fd)
        os.close(dst_fd)
    src_fd = os.open(dst, os.O_RDONLY)
    bad = os.open(dst, os.O_RDONLY)
    os.close(bad)  # (a closed fd: each call on it fails)
    with pytest.raises(OSError) as failed:
        ashutil._copy_finish(src_fd, bad, 5, 6, 0o600, 1)
    assert failed.value.errno == errno.EBADF and failed.value.filename is None  # (os.fstat's)
    with pytest.raises(OSError) as closed:
        os.fstat(src_fd)
    assert closed.value.errno == errno.EBADF


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_create_with_makes_and_fills_a_new_file(disk_dir: str) -> None:
    """_kernel.create_with: a new file created (its mode narrowed by the
    umask, as os.open's) and the data written, in one operation; its fd the
    caller's and non-inheritable.  The open's errors are os.open's, naming
    the path, and leave no fd behind."""
    await _pathops.stat(disk_dir)  # (the loop's ring made: its fds are not the copy's)
    fds = _open_fds()
    for size in (0, 1, 5000, 70_000):
        path = os.path.join(disk_dir, f"new{size}")
        data = os.urandom(size)
        old = os.umask(0o027)
        try:
            fd = await _kernel.create_with(path, ashutil._O_CREATE, 0o666, data)
        finally:
            os.umask(old)
        try:
            assert not os.get_inheritable(fd)
            assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o640
            assert os.fstat(fd).st_size == size
        finally:
            os.close(fd)
        with open(path, "rb") as f:
            assert f.read() == data
    with pytest.raises(FileExistsError) as exists:
        await _kernel.create_with(path, ashutil._O_CREATE, 0o666, b"again")
    with pytest.raises(FileExistsError) as expected:
        os.open(path, ashutil._O_CREATE, 0o666)
    assert (exists.value.errno, exists.value.filename, str(exists.value)) == (
        expected.value.errno, expected.value.filename, str(expected.value))
    missing = os.path.join(disk_dir, "no", "such")
    with pytest.raises(FileNotFoundError) as absent:
        await _kernel.create_with(missing, ashutil._O_CREATE, 0o666, b"x")
    assert absent.value.filename == missing
    with pytest.raises(ValueError):
        await _kernel.create_with(path + "\0x", ashutil._O_CREATE, 0o666, b"x")
    assert os.path.getsize(path) == 70_000  # (untouched by the failed calls)
    assert _open_fds() == fds


async def test_create_with_a_failed_write_closes_the_fd(disk_dir: str) -> None:
    """A write the kernel fails (EFBIG past RLIMIT_FSIZE) raises os.write's
    OSError, with the fd closed and the file left as written, as a loop of
    os.write leaves it."""
    import resource
    import signal

    await _pathops.stat(disk_dir)
    fds = _open_fds()
    path = os.path.join(disk_dir, "big")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))
    try:
        with pytest.raises(OSError) as failed:
            await _kernel.create_with(path, ashutil._O_CREATE, 0o600, b"y" * 5000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert failed.value.errno == errno.EFBIG and failed.value.filename is None
    with open(path, "rb") as f:
        assert f.read() == b"y" * 3000
    assert _open_fds() == fds


async def test_create_with_cancelled_leaves_the_file_whole_or_gone(disk_dir: str) -> None:
    """Cancelled at any point, create_with either returns the fd of the
    whole file (the cancellation comes at the task's next await) or raises
    CancelledError with no file and no fd left; nothing stays in the
    ring's table."""
    await _pathops.stat(disk_dir)
    ring = get_ring(asyncio.get_running_loop())
    fds = _open_fds()
    data = os.urandom(20_000)
    outcomes = set()
    for steps in range(12):
        path = os.path.join(disk_dir, f"c{steps}")
        got: list[int] = []

        async def create(path: str, got: list[int]) -> None:
            got.append(await _kernel.create_with(path, ashutil._O_CREATE, 0o600, data))
            await asyncio.sleep(0)  # (where a cancellation the create outran comes)

        task = asyncio.ensure_future(create(path, got))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if got:
            os.close(got[0])
            outcomes.add("whole")
            with open(path, "rb") as f:
                assert f.read() == data
        else:
            outcomes.add("gone")
            assert not os.path.lexists(path), steps
        for _ in range(10_000):
            if not ring.statistics()["in_flight"]:
                break
            await asyncio.sleep(0)
        assert ring.statistics()["in_flight"] == 0
    assert _open_fds() == fds
    assert "gone" in outcomes


async def test_copytree_options_like_shutil(tree: str, disk_dir: str) -> None:
    os.remove(os.path.join(tree, "loop"))
    want, got = os.path.join(disk_dir, "a", "want"), os.path.join(disk_dir, "a", "got")
    kwargs: dict[str, Any] = {"ignore": shutil.ignore_patterns("*.x", "dee*", "empty"),
                              "ignore_dangling_symlinks": True}
    assert shutil.copytree(tree, want, **kwargs) == want
    assert await ashutil.copytree(tree, got, **kwargs) == got
    assert _snapshot(got) == _snapshot(want)
    # dirs_exist_ok: copied over what is there; without it, FileExistsError
    with pytest.raises(FileExistsError):
        await ashutil.copytree(tree, got, **kwargs)
    assert await ashutil.copytree(tree, got, dirs_exist_ok=True, **kwargs) == got
    assert _snapshot(got) == _snapshot(want)
    # a plain copy_function (sync or async) gets the paths, as shutil's does
    seen: list[tuple[str, str]] = []

    async def record(src: str, dst: str) -> str:
        seen.append((src, dst))
        return await ashutil.copy(src, dst)

    third = os.path.join(disk_dir, "third")
    await ashutil.copytree(os.path.join(tree, "sub"), third, copy_function=record)
    sub = os.path.join(tree, "sub")
    want = [(os.path.join(sub, n), os.path.join(third, n)) for n in os.listdir(sub) if n != "deeper"]
    want.append((os.path.join(sub, "deeper", "x"), os.path.join(third, "deeper", "x")))
    assert sorted(seen) == sorted(want)
    with pytest.raises(FileNotFoundError) as sync_exc:
        shutil.copytree(os.path.join(tree, "missing"), third + "2")
    with pytest.raises(FileNotFoundError) as async_exc:
        await ashutil.copytree(os.path.join(tree, "missing"), third + "2")
    assert str(async_exc.value) == str(sync_exc.value)


@pytest.mark.parametrize("kind", ["str", "slash", "path", "bytes"])
async def test_copytree_names_its_entries_as_shutil_does(tree: str, disk_dir: str, kind: str) -> None:
    """The names a copy_function gets (and errors carry) are shutil's
    os.path.join of the directory as given and the entry's name: with a
    trailing separator, a pathlib.Path, or bytes."""
    import pathlib
    os.remove(os.path.join(tree, "loop"))
    os.remove(os.path.join(tree, "dangling"))
    convert = {"str": str, "slash": lambda p: p + os.sep, "path": pathlib.Path, "bytes": os.fsencode}[kind]

    def recorder(seen: list[Any]) -> Any:
        def record(src: Any, dst: Any) -> Any:
            seen.append((src, dst))
            return dst
        return record

    want: list[Any] = []
    got: list[Any] = []
    src = convert(tree)
    shutil.copytree(src, convert(os.path.join(disk_dir, "want")), copy_function=recorder(want))
    await ashutil.copytree(src, convert(os.path.join(disk_dir, "got")), copy_function=recorder(got))
    assert want
    assert sorted(got) == sorted((s, d.replace(*((b"want", b"got") if kind == "bytes" else ("want", "got"))))
                                 for s, d in want)


@pytest.mark.parametrize("in_flight", [ashutil.REMOVE_OPS, 2])
async def test_rmtree_removes_what_shutil_removes(
        tree: str, disk_dir: str, in_flight: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with at most 2 unlinks in flight: each start then waits for room."""
    monkeypatch.setattr(ashutil, "REMOVE_OPS", in_flight)
    shutil.copytree(tree, os.path.join(disk_dir, "twin"), symlinks=True)
    outside = os.path.join(disk_dir, "outside")
    os.mkdir(outside)
    open(os.path.join(outside, "keep"), "w").close()
    os.symlink(outside, os.path.join(tree, "sub", "out"))
    assert await ashutil.rmtree(tree) is None
    assert not os.path.lexists(tree)
    assert os.listdir(outside) == ["keep"]  # a symlink is removed, never followed
    await ashutil.rmtree(os.fsencode(os.path.join(disk_dir, "twin")))
    assert sorted(os.listdir(disk_dir)) == ["outside"]


async def _both_rmtree(path: str, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """The (func, path, error) calls of the handler, shutil's then ours."""
    calls: list[list[Any]] = [[], []]
    for i in (0, 1):
        def handler(func: Any, p: Any, exc: Any, i: int = i) -> None:
            exc = exc[1] if isinstance(exc, tuple) else exc
            calls[i].append((func, p, type(exc), str(exc)))
        key = "onexc" if sys.version_info >= (3, 12) else "onerror"
        if i == 0:
            shutil.rmtree(path, **{key: handler}, **kwargs)
        else:
            await ashutil.rmtree(path, **{key: handler}, **kwargs)
    return calls[0], calls[1]


async def test_rmtree_errors_like_shutil(disk_dir: str) -> None:
    missing = os.path.join(disk_dir, "missing")
    want, got = await _both_rmtree(missing)
    assert got == want and want[0][0] is os.lstat
    link = os.path.join(disk_dir, "link")
    os.symlink(disk_dir, link)
    want, got = await _both_rmtree(link)
    assert got == want and want[0][0] is os.path.islink
    assert os.path.islink(link)
    a_file = os.path.join(disk_dir, "file")
    open(a_file, "w").close()
    want, got = await _both_rmtree(a_file)
    assert got == want and [c[0] for c in want] == [os.scandir, os.rmdir]
    # without a handler the first error is raised, with ignore_errors none
    with pytest.raises(FileNotFoundError) as exc:
        await ashutil.rmtree(missing)
    assert exc.value.filename == missing
    await ashutil.rmtree(missing, ignore_errors=True)
    with pytest.raises(NotADirectoryError):
        await ashutil.rmtree(a_file)


@pytest.mark.parametrize("in_flight", [ashutil.REMOVE_OPS, 2])
async def test_rmtree_unremovable_entries_like_shutil(
        tree: str, in_flight: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ashutil, "REMOVE_OPS", in_flight)
    stuck = os.path.join(tree, "sub", "deeper")
    with _immutable(stuck):
        want, got = await _both_rmtree(tree)
        assert sorted(got, key=str) == sorted(want, key=str)
        assert {c[0] for c in want} == {os.unlink, os.rmdir}
        assert sorted(os.listdir(tree)) == ["sub"]
    await ashutil.rmtree(tree)
    assert not os.path.lexists(tree)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="onexc is new in 3.12")
async def test_rmtree_coroutine_handler(disk_dir: str) -> None:
    seen = []

    async def handler(func: Any, path: Any, exc: BaseException) -> None:
        await asyncio.sleep(0)
        seen.append((func, path, type(exc)))

    await ashutil.rmtree(os.path.join(disk_dir, "x"), onexc=handler)
    assert seen == [(os.lstat, os.path.join(disk_dir, "x"), FileNotFoundError)]


@pytest.mark.backends("io_uring")
async def test_rmtree_raises_the_kernel_workers_while_it_works(disk_dir: str) -> None:
    """More of the kernel's workers run the unlinks while any rmtree of the
    loop works (also one called from another's error handler), and the
    loop's ring has as many as before once all are done, failed or not."""
    ring = get_ring(asyncio.get_running_loop())
    before = ring.bound_workers(0)
    raised = max(before, _kernel.BATCH_WORKERS)
    seen = []

    async def inner(*args: Any) -> None:
        seen.append(ring.bound_workers(0))

    async def outer(*args: Any) -> None:
        seen.append(ring.bound_workers(0))
        await ashutil.rmtree(os.path.join(disk_dir, "y"), **{key: inner})
        seen.append(ring.bound_workers(0))

    key = "onexc" if sys.version_info >= (3, 12) else "onerror"
    await ashutil.rmtree(os.path.join(disk_dir, "x"), **{key: outer})
    assert seen == [raised] * 3
    assert ring.bound_workers(0) == before


async def test_rmtree_never_follows_a_directory_swapped_for_a_symlink(
        tree: str, disk_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = os.path.join(disk_dir, "outside")
    os.mkdir(outside)
    open(os.path.join(outside, "keep"), "w").close()
    real_open = _pathops.open

    async def swapping_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "deeper":  # between rmtree's lstat and its open: the attack
            os.rename("deeper", "moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.symlink(outside, "deeper", dir_fd=dir_fd)
        return await real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(_pathops, "open", swapping_open)
    with pytest.raises(OSError) as exc:
        await ashutil.rmtree(tree)
    assert exc.value.args == ("Cannot call rmtree on a symbolic link",)
    # (shutil names the path in this error from 3.13 on)
    named = os.path.join(tree, "sub", "deeper") if sys.version_info >= (3, 13) else None
    assert exc.value.filename == named
    assert os.listdir(outside) == ["keep"]


async def test_copyfile_results_and_errors_like_shutil(tree: str, disk_dir: str) -> None:
    small, big = os.path.join(tree, "small"), os.path.join(tree, "sub", "big")
    fifo = os.path.join(disk_dir, "fifo")
    os.mkfifo(fifo)
    cases = [
        (small, os.path.join(disk_dir, "c1"), {}),
        (big, os.path.join(disk_dir, "c2"), {}),
        (os.path.join(tree, "empty"), os.path.join(disk_dir, "c3"), {}),
        (os.path.join(tree, "to_file"), os.path.join(disk_dir, "c4"), {"follow_symlinks": False}),
        (os.path.join(tree, "missing"), os.path.join(disk_dir, "c5"), {}),  # missing source
        (small, tree, {}),  # a directory where a file is expected
        (tree, os.path.join(disk_dir, "c6"), {}),  # a directory as the source
        (small, os.path.join(disk_dir, "nodir", ""), {}),  # "Directory does not exist"
        (small, os.path.join(tree, "hardlink"), {}),  # SameFileError
        (fifo, os.path.join(disk_dir, "c7"), {}),  # SpecialFileError
        (os.path.join(tree, "loop"), os.path.join(disk_dir, "c8"), {}),
    ]
    for src, dst, kwargs in cases:
        outcome = []
        for func in (shutil.copyfile, ashutil.copyfile):
            try:
                res = func(src, dst, **kwargs)
                if asyncio.iscoroutine(res):
                    res = await res
                st = os.lstat(dst)
                with contextlib.suppress(OSError):
                    with open(dst, "rb") as f:
                        data = f.read()
                outcome.append(("ok", res, stat.S_IFMT(st.st_mode), data if not os.path.islink(dst) else
                                os.readlink(dst)))
                os.remove(dst)
            except (OSError, shutil.Error) as exc:
                outcome.append((type(exc), str(exc), type(exc.__cause__)))
        assert outcome[1] == outcome[0], (src, dst)


async def test_copy_copy2_copymode_copystat_like_shutil(tree: str, disk_dir: str) -> None:
    src = os.path.join(tree, "small")
    for name in ("copy", "copy2"):
        want_dir, got_dir = os.path.join(disk_dir, name + "w"), os.path.join(disk_dir, name + "g")
        os.mkdir(want_dir)
        os.mkdir(got_dir)
        assert getattr(shutil, name)(src, want_dir) == os.path.join(want_dir, "small")
        assert await getattr(ashutil, name)(src, got_dir) == os.path.join(got_dir, "small")
        assert await getattr(ashutil, name)(os.path.join(tree, "to_file"), os.path.join(got_dir, "l"),
                                            follow_symlinks=False) == os.path.join(got_dir, "l")
        getattr(shutil, name)(os.path.join(tree, "to_file"), os.path.join(want_dir, "l"),
                              follow_symlinks=False)
        assert _snapshot(got_dir, name == "copy2") == _snapshot(want_dir, name == "copy2")
    targets = []
    for i in (0, 1):
        target = os.path.join(disk_dir, f"meta{i}")
        with open(target, "wb") as f:
            f.write(b"?")
        os.chmod(target, 0o600)
        targets.append(target)
    shutil.copymode(src, targets[0])
    await ashutil.copymode(src, targets[1])
    assert os.stat(targets[1]).st_mode == os.stat(targets[0]).st_mode == os.stat(src).st_mode
    shutil.copystat(src, targets[0])
    await ashutil.copystat(src, targets[1])
    assert os.stat(targets[1]).st_mtime_ns == os.stat(targets[0]).st_mtime_ns == os.stat(src).st_mtime_ns
    with pytest.raises(FileNotFoundError):
        await ashutil.copystat(os.path.join(tree, "missing"), targets[1])


async def test_copyfileobj_async_files_and_fds(tree: str, disk_dir: str) -> None:
    big = os.path.join(tree, "sub", "big")
    with open(big, "rb") as f:
        data = f.read()
    out = os.path.join(disk_dir, "out")
    async with aioring.open(big, "rb") as fsrc, aioring.open(out, "wb") as fdst:
        await ashutil.copyfileobj(fsrc, fdst)
    async with aiofiles.open(big, "rb") as asrc, aiofiles.open(out + "2", "wb") as adst:
        await ashutil.copyfileobj(asrc, adst, 100_000)
    src_fd, dst_fd = os.open(big, os.O_RDONLY), os.open(out + "3", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.lseek(src_fd, 10, os.SEEK_SET)
        await ashutil.copyfileobj(src_fd, dst_fd, -1)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    with open(big, "rb") as sync_src, open(out + "4", "wb") as sync_dst:
        await ashutil.copyfileobj(sync_src, sync_dst)
    for suffix, want in (("", data), ("2", data), ("3", data[10:]), ("4", data)):
        with open(out + suffix, "rb") as f:
            assert f.read() == want, suffix


@pytest.mark.parametrize("size", [0, 5000, LARGE])
async def test_copyfileobj_between_aioring_files_leaves_them_as_shutil(
        disk_dir: str, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Moved in the kernel: the same bytes, and both files at the positions
    shutil.copyfileobj leaves the stdlib's files at (the source read ahead
    into its buffer, the destination with writes of its own still buffered)."""
    kernel_copies: list[int] = []
    copy_data = _kernel.copy_data

    async def counted(*args: Any) -> int:
        kernel_copies.append(await copy_data(*args))
        return kernel_copies[-1]

    monkeypatch.setattr(_kernel, "copy_data", counted)
    src = os.path.join(disk_dir, "src")
    with open(src, "wb") as f:
        f.write(os.urandom(size))
    outs = {}
    for kind in ("shutil", "aioring"):
        out = outs[kind] = os.path.join(disk_dir, kind)
        if kind == "shutil":
            with open(src, "rb") as fsrc, open(out, "wb") as fdst:
                fsrc.read(3)
                fdst.write(b"head")
                shutil.copyfileobj(fsrc, fdst)
                want = (fsrc.tell(), fdst.tell(), fsrc.read(), fdst.write(b"tail"))
        else:
            async with aioring.open(src, "rb") as asrc, aioring.open(out, "wb") as adst:
                await asrc.read(3)
                await adst.write(b"head")
                await ashutil.copyfileobj(asrc, adst)
                got = (await asrc.tell(), await adst.tell(), await asrc.read(), await adst.write(b"tail"))
    assert got == want
    assert len(kernel_copies) == 1
    with open(outs["shutil"], "rb") as f, open(outs["aioring"], "rb") as g:
        assert f.read() == g.read()


async def test_copyfileobj_between_fds_from_their_positions(disk_dir: str) -> None:
    src, out = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "out")
    data = os.urandom(LARGE)
    with open(src, "wb") as f:
        f.write(data)
    src_fd, dst_fd = os.open(src, os.O_RDONLY), os.open(out, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.lseek(src_fd, 1000, os.SEEK_SET)
        os.write(dst_fd, b"0123456789")
        os.lseek(dst_fd, 5, os.SEEK_SET)
        await ashutil.copyfileobj(src_fd, dst_fd)
        positions = os.lseek(src_fd, 0, os.SEEK_CUR), os.lseek(dst_fd, 0, os.SEEK_CUR)
        assert positions == (LARGE, 5 + LARGE - 1000)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    with open(out, "rb") as f:
        assert f.read() == b"01234" + data[1000:]


@pytest.mark.parametrize("quiet", [True, False])
async def test_cancelled_copy_is_never_left_half_written(
        disk_dir: str, quiet: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled some loop iterations after it started, or after a chain of
    splices (quiet or not) is in flight: the destination is whole or gone,
    and nothing is left in the ring's table."""
    monkeypatch.setattr(_kernel, "QUIET_CHAIN", quiet)
    monkeypatch.setattr(_kernel, "SPLICE_CHAIN", 4)
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    data = os.urandom(2 * _kernel.SPLICE_MIN + 1)  # (spliced: chains of 4 steps, many of them)
    with open(src, "wb") as f:
        f.write(data)
    ring = get_ring(asyncio.get_running_loop())
    for chained, steps in ((False, 1), (False, 3), (False, 10), (True, 0), (True, 1), (True, 3)):
        task = asyncio.ensure_future(ashutil.copyfile(src, dst))
        # (the threads backend has no chains: at once)
        while chained and not task.done() and ring.statistics()["in_flight"] < 2 * 4 and ring.fd >= 0:
            await asyncio.sleep(0)
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        try:
            assert await task == dst
        except asyncio.CancelledError:
            assert not os.path.exists(dst)
        else:
            with open(dst, "rb") as f:
                assert f.read() == data
        # Only the cancel requests' own completions may still be on their way.
        for _ in range(10_000):
            if not ring.statistics()["in_flight"]:
                break
            await asyncio.sleep(0)
        assert ring.statistics()["in_flight"] == 0


async def test_move_like_shutil(tree: str, disk_dir: str) -> None:
    target = os.path.join(disk_dir, "target")
    os.mkdir(target)
    moved = await ashutil.move(os.path.join(tree, "small"), target)
    assert moved == os.path.join(target, "small") and os.path.isfile(moved)
    with open(os.path.join(tree, "small"), "w") as f:
        f.write("again")
    with pytest.raises(shutil.Error, match="already exists"):
        await ashutil.move(os.path.join(tree, "small"), target)
    with pytest.raises(shutil.Error, match="into itself"):
        shutil.move(tree, os.path.join(tree, "sub"))
    assert await ashutil.move(os.path.join(tree, "sub"), os.path.join(disk_dir, "s2")) == os.path.join(
        disk_dir, "s2")
    assert os.path.isdir(os.path.join(disk_dir, "s2", "deeper"))


@pytest.mark.backends("io_uring")
async def test_executor_functions_return_shutil_results(tree: str, disk_dir: str) -> None:
    assert await ashutil.which("sh") == shutil.which("sh")
    assert (await ashutil.disk_usage(disk_dir)).total == shutil.disk_usage(disk_dir).total
    archive = await ashutil.make_archive(os.path.join(disk_dir, "arch"), "tar", os.path.join(tree, "sub"))
    await ashutil.unpack_archive(archive, os.path.join(disk_dir, "unpacked"), filter="data")
    unpacked = os.path.join(disk_dir, "unpacked")
    assert sorted(os.listdir(unpacked)) == sorted(os.listdir(os.path.join(tree, "sub")))
    await ashutil.chown(archive, os.getuid(), os.getgid())


@pytest.mark.backends("io_uring")
async def test_an_archive_format_registered_here_is_the_one_make_archive_uses(disk_dir: str) -> None:
    src = os.path.join(disk_dir, "src")
    os.mkdir(src)
    for name in ("b", "a", "c"):
        open(os.path.join(src, name), "w").close()
    made: list[str] = []

    def listing(base_name: str, base_dir: str, **kwargs: Any) -> str:
        out = base_name + ".list"
        with open(out, "w") as f:
            f.write(" ".join(sorted(os.listdir(base_dir))))
        made.append(base_dir)
        return out

    assert ashutil.get_archive_formats() == shutil.get_archive_formats()
    assert ashutil.get_unpack_formats() == shutil.get_unpack_formats()
    ashutil.register_archive_format("listing", listing, description="names")
    try:
        assert ("listing", "names") in shutil.get_archive_formats()
        out = await ashutil.make_archive(os.path.join(disk_dir, "names"), "listing", base_dir=src)
        assert out == os.path.join(disk_dir, "names.list") and made == [src]
        with open(out) as f:
            assert f.read() == "a b c"
    finally:
        ashutil.unregister_archive_format("listing")
    assert ashutil.get_archive_formats() == shutil.get_archive_formats()
    with pytest.raises(ValueError, match="unknown archive format"):
        await ashutil.make_archive(os.path.join(disk_dir, "x"), "listing", base_dir=src)
    assert ashutil.get_terminal_size((91, 17)) == shutil.get_terminal_size((91, 17))


@pytest.mark.parametrize("how", ["cancel_then_close", "ring_closes"])
def test_closing_the_loop_while_a_tree_is_copied(
        new_loop: Any, disk_dir: str, how: str, queues: list[Any]) -> None:
    """The loop closes while the core copies a tree's files (a CopyQueue
    with copies in flight), as asyncio.run ends it (the task cancelled
    first); or the loop's ring closes under the copies, and the copytree
    raises CancelledError, as an operation's caller sees it then.  Every
    file in the copy is whole, and no fd is left open."""
    src, dst = os.path.join(disk_dir, "src"), os.path.join(disk_dir, "dst")
    for d in range(4):
        os.makedirs(os.path.join(src, str(d)))
        for f in range(50):
            with open(os.path.join(src, str(d), str(f)), "wb") as out:
                out.write(os.urandom(1000 + f))
    new_loop().close()  # (the loop library's process-wide fds exist before the baseline)
    fds = _open_fds()
    loop = new_loop()

    async def start() -> asyncio.Task[Any]:
        task = asyncio.ensure_future(ashutil.copytree(src, dst))
        for _ in range(100_000):
            if queues and queues[0].in_flight:
                break
            await asyncio.sleep(0)
        assert queues[0].in_flight
        return task

    task = loop.run_until_complete(start())
    if how == "ring_closes":
        _loops.close_ring(loop)
        assert queues[0].in_flight == 0
    else:
        task.cancel()
    loop.run_until_complete(asyncio.wait([task]))
    assert task.cancelled()
    loop.close()
    del task
    for dirpath, _, names in os.walk(dst):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f, open(os.path.join(src, os.path.relpath(path, dst)), "rb") as g:
                assert f.read() == g.read(), path
    assert queues[0].in_flight == 0
    assert _open_fds() == fds


async def test_cancelled_tree_operations_leave_nothing_behind(tree: str, disk_dir: str) -> None:
    await _pathops.stat(tree)  # (the loop's ring made: its fds are not the copy's)
    fds = len(os.listdir("/proc/self/fd"))
    for steps in (2, 8):
        dst = os.path.join(disk_dir, f"copy{steps}")
        task = asyncio.ensure_future(ashutil.copytree(tree, dst, symlinks=True))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for dirpath, _, names in os.walk(dst):  # every file there is whole
            for name in names:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    rel = os.path.relpath(path, dst)
                    with open(path, "rb") as f, open(os.path.join(tree, rel), "rb") as g:
                        assert f.read() == g.read(), rel
        task = asyncio.ensure_future(ashutil.rmtree(dst))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, FileNotFoundError):
            await task
        await ashutil.rmtree(dst, ignore_errors=True)
        assert not os.path.lexists(dst)
    assert len(os.listdir("/proc/self/fd")) == fds
