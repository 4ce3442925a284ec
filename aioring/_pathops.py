"""L2: path and file operations on the ring, each mirroring its os function.

open, close, unlink, rmdir, rename, replace, mkdir,
link, symlink and fallocate go through their io_uring opcodes; stat by path
is an O_PATH open and an fstat (see stat below), and fstat is STATX.  Where the
kernel's probe lacks an opcode, that one function runs its os counterpart in
the loop's default executor instead; the rest still use the ring.

Arguments are checked as os checks them (TypeError for a bad path type,
ValueError for an embedded NUL) before anything is submitted; kernel errors
carry the filename(s) exactly as given, as os's do.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import sys
from typing import Any
from collections.abc import Awaitable, Callable

from . import _binding, _redelivery
from ._ops import _INT_MAX, _INT_MIN, _yield_keeping, check_fd, check_int, check_size, opened, pace, result
from ._loops import get_ring
from ._ringbase import Op, RingBase, os_error

__all__ = ["close", "fallocate", "ftruncate", "link", "lstat", "mkdir", "open", "rename", "replace", "rmdir",
           "stat", "symlink", "unlink"]

Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]

_AT_FDCWD = _binding.AT_FDCWD


_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def _encode(path: Any, func: str, name: str = "path", fd_too: bool = False) -> bytes:
    """os's path conversion: str, bytes or os.PathLike (or an int, where
    `fd_too`, which the caller handles); no NUL inside.  Errors as os's."""
    if type(path) is str:
        raw: str | bytes = path
        encoded = path.encode(_FS_ENCODING, _FS_ERRORS)  # (os.fsencode's, without its checks)
    else:
        try:
            raw = os.fspath(path)
        except TypeError:
            if hasattr(type(path), "__fspath__"):
                raise  # its __fspath__'s own error, as os passes it on
            kinds = "string, bytes, os.PathLike or integer" if fd_too else "string, bytes or os.PathLike"
            raise TypeError(f"{func}: {name} should be {kinds}, not {type(path).__name__}") from None
        encoded = os.fsencode(raw)
    if b"\0" in encoded:
        if isinstance(raw, str) and sys.version_info < (3, 13):
            raise ValueError("embedded null byte")
        raise ValueError(f"{func}: embedded null character in {name}")
    return encoded


def _dir_fd(dir_fd: int | None) -> int:
    return _AT_FDCWD if dir_fd is None else check_fd(dir_fd)


def _call(opcode: int, fallback: Callable[[], Any], prep: Any, args: tuple[Any, ...],
          keep: Any = None, finish: Callable[[Op, int], Any] | None = None,
          filename: Any = None, filename2: Any = None) -> Awaitable[Any]:
    """What the caller awaits for `opcode`: the ring's operation, or
    `fallback` in the loop's executor where the ring lacks the opcode.  (A
    function, not a coroutine: no coroutine of its own between the caller
    and the operation.)"""
    loop = asyncio.get_running_loop()
    ring = get_ring(loop)
    if not ring.supports(opcode):
        return loop.run_in_executor(None, fallback)
    return _on_ring(loop, ring, prep, args, keep, finish, filename, filename2)


async def _on_ring(loop: asyncio.AbstractEventLoop, ring: RingBase, prep: Any, args: tuple[Any, ...],
                   keep: Any = None, finish: Callable[[Op, int], Any] | None = None,
                   filename: Any = None, filename2: Any = None) -> Any:
    op = ring.start(loop, prep, args, keep, finish)
    try:
        return await result(ring, op)
    except OSError as exc:
        if exc.filename is None and filename is not None and exc.errno is not None:
            raise os_error(-exc.errno, _named(filename), _named(filename2)) from None
        raise


def _named(path: Any) -> Any:
    """A path as os names it in an error: a PathLike as its str or bytes."""
    if path is None or type(path) is str or type(path) is bytes or isinstance(path, int):
        return path
    try:
        return os.fspath(path)
    except TypeError:
        return path


def _finish_none(op: Op, res: int) -> None:
    return None


# Opens are tried at once without waiting first (_binding.open_now); off if
# the kernel lacks openat2.
_open_now = [True]


# Opens that are never done at once (_binding.open_now refuses them).
_CREATING = os.O_CREAT | os.O_TRUNC

# What an open that never waits reports as the path walk's own answer (the
# ring's OPENAT would walk the same cached path to the same error).
_WALK_ERRORS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP,
                          errno.ENAMETOOLONG, errno.EISDIR})


def _opened_now(dfd: int, encoded: bytes, flags: int, path: Any) -> int:
    """The fd of an open done at once (see open), or a negative number: the
    ring's turn, or a FIFO's read end opened before a writer came when
    _binding.fifo_held gives its fd (see _fifo_reader).
    The caller yields now and then (pace): a task opening cached files
    would not yield otherwise."""
    if not _open_now[0]:
        return -1
    if _redelivery.owed:
        _redelivery.deliver_owed()
    fd = _binding.open_now(dfd, encoded, flags)
    if fd >= 0:
        opened(fd, flags)
        return fd
    if _binding.fifo_held(fd) >= 0:
        return fd
    if -fd in _WALK_ERRORS:
        raise os_error(fd, _named(path))
    if fd == -errno.ENOSYS:
        _open_now[0] = False
    return -1  # EAGAIN (the disk), or what the ring's OPENAT should say


async def open(path: Path, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    """os.open through IORING_OP_OPENAT: the new fd is non-inheritable, as os.open's.

    An open that needs nothing but the kernel's caches (no path component to
    read from the disk, nothing to create or truncate) is done at once, with
    no ring operation and no wait for the loop, as the kernel itself would do
    the ring's OPENAT inside the submit call; the others go to the ring."""
    encoded = _encode(path, "open")
    if type(flags) is not int or not _INT_MIN <= flags <= _INT_MAX:
        flags = check_int(flags, "flags")
    if type(mode) is not int or not _INT_MIN <= mode <= _INT_MAX:
        mode = check_int(mode, "mode")
    return await open_encoded(path, encoded, flags | os.O_CLOEXEC, mode & 0xFFFFFFFF, dir_fd)


async def open_encoded(path: Path, encoded: bytes, flags: int, mode: int, dir_fd: int | None = None) -> int:
    """open, with the path encoded (_encode) and `flags` (O_CLOEXEC included)
    and `mode` known to be C ints."""
    if flags & _CREATING:
        fd = -errno.EAGAIN  # (never at once: creating or truncating may wait for the disk)
    else:
        fd = _opened_now(_dir_fd(dir_fd), encoded, flags, path)
        if fd >= 0:
            if pace():
                await _yield_keeping()
            return fd
    return await open_after(path, encoded, flags, mode, dir_fd, fd)


async def open_after(path: Path, encoded: bytes, flags: int, mode: int, dir_fd: int | None,
                     tried: int) -> int:
    """open_encoded's rest after _opened_now answered `tried` (negative):
    a FIFO's read end waits for its writer, any other open goes to the ring."""
    held = _binding.fifo_held(tried)
    if held >= 0:
        return await _fifo_reader(held)
    fallback = functools.partial(os.open, path, flags, mode, dir_fd=dir_fd)
    fd: int = await _call(_binding.OP_OPENAT, fallback, _binding.prep_openat,
                          (_dir_fd(dir_fd), encoded, flags, mode), filename=path)
    opened(fd, flags)
    return fd


async def _fifo_reader(fd: int) -> int:
    """`fd`, a FIFO's read end that open_now opened before any writer came,
    once a writer came: its first data, or its close, makes `fd` readable.
    Until then a read would see an end of file, which a blocking open never
    shows.  (A blocking open returns when the writer opens; this one when
    the writer writes or closes.  Neither the ring's OPENAT, which opens a
    FIFO at once without a writer, nor a blocking open in a thread, which
    would wait on for a writer that came and went while `fd` held the FIFO
    open, can do better.)  The fd is made blocking, as os.open's."""
    loop = asyncio.get_running_loop()
    came = loop.create_future()
    loop.add_reader(fd, _set_once, came)
    try:
        await came
    except BaseException:
        loop.remove_reader(fd)
        os.close(fd)
        raise
    loop.remove_reader(fd)
    os.set_blocking(fd, True)
    return fd


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def close(fd: int) -> None:
    """os.close through IORING_OP_CLOSE."""
    fd = check_fd(fd)
    await _call(_binding.OP_CLOSE, functools.partial(os.close, fd), _binding.prep_close,
                (fd,), finish=_finish_none)


_U64 = 1 << 64


def _finish_stat(op: Op, res: int) -> os.stat_result:
    v = _binding.statx_fields(op.keep)
    ino, dev, size, blocks, rdev = (x % _U64 for x in (v[1], v[2], v[6], v[14], v[15]))
    a, an, m, mn, c, cn = v[7:13]
    return os.stat_result((
        v[0], ino, dev, v[3], v[4], v[5], size,
        a, m, c,
        a + an * 1e-9, m + mn * 1e-9, c + cn * 1e-9,
        a * 1_000_000_000 + an, m * 1_000_000_000 + mn, c * 1_000_000_000 + cn,
        v[13], blocks, rdev,
    ))


# stat by path opens the file with O_PATH through the ring and fstat()s the
# new fd.  The kernel always hands IORING_OP_STATX to a worker thread, while
# OPENAT resolves a path whose dentries are cached inline, inside the submit
# call (and goes to a worker only when it must read the disk): in the common
# case stat costs no thread hop at all.  An O_PATH open reads and changes
# nothing, needs no permission on the file itself, and fails with exactly
# the errors stat(2) gives for the same path.
_O_PATH = os.O_PATH | os.O_CLOEXEC
_NO_FD_LEFT = (errno.EMFILE, errno.ENFILE)


def _path_fd(value: int) -> int:
    """An fd given where os takes a path or an fd: os's OverflowError messages."""
    if value > _INT_MAX:
        raise OverflowError("fd is greater than maximum")
    if value < _INT_MIN:
        raise OverflowError("fd is less than minimum")
    return check_fd(value)


async def stat(path: Path | int, *, dir_fd: int | None = None,
               follow_symlinks: bool = True) -> os.stat_result:
    """os.stat: an O_PATH open through IORING_OP_OPENAT and an fstat of it
    (IORING_OP_STATX when no fd is left, or for an int path, which is an fd)."""
    return await _stat(path, dir_fd, follow_symlinks, "stat")


async def lstat(path: Path, *, dir_fd: int | None = None) -> os.stat_result:
    """os.lstat: stat without following a final symlink (and no fd for a path)."""
    if isinstance(path, int):
        raise TypeError(f"lstat: path should be string, bytes or os.PathLike, not {type(path).__name__}")
    return await _stat(path, dir_fd, False, "lstat")


async def _stat(path: Path | int, dir_fd: int | None, follow_symlinks: bool,
                func: str) -> os.stat_result:
    name: Any = path  # os.stat's errors name the fd too
    if isinstance(path, int):
        fd = _path_fd(path)
        if dir_fd is not None:
            raise ValueError(f"{func}: can't specify dir_fd without matching path")
        if not follow_symlinks and fd > 0:  # (os checks fd > 0 only)
            raise ValueError(f"{func}: cannot use fd and follow_symlinks together")
        encoded, dfd, flags = b"", fd, _binding.AT_EMPTY_PATH
    else:
        encoded, dfd = _encode(path, func, fd_too=func == "stat"), _dir_fd(dir_fd)
        flags = 0 if follow_symlinks else _binding.AT_SYMLINK_NOFOLLOW
        loop = asyncio.get_running_loop()
        ring = get_ring(loop)
        oflags = _O_PATH if follow_symlinks else _O_PATH | os.O_NOFOLLOW
        fd = _opened_now(dfd, encoded, oflags, path)
        if fd >= 0:
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if pace():
                await _yield_keeping()
            return st
        if ring.supports(_binding.OP_OPENAT):
            try:
                fd = await _on_ring(loop, ring, _binding.prep_openat, (dfd, encoded, oflags, 0),
                                    filename=path)
            except OSError as exc:
                if exc.errno not in _NO_FD_LEFT:
                    raise
            else:
                try:
                    return os.fstat(fd)
                finally:
                    os.close(fd)
    buf = _binding.new_statx()
    fallback = functools.partial(os.stat, path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    return await _call(_binding.OP_STATX, fallback, _binding.prep_statx,
                       (dfd, encoded, flags, _binding.STATX_BASIC_STATS, buf), buf, _finish_stat,
                       filename=name)


async def _unlinkat(func: str, path: Path, dir_fd: int | None, flags: int) -> None:
    fallback = functools.partial(getattr(os, func), path, dir_fd=dir_fd)
    await _call(_binding.OP_UNLINKAT, fallback, _binding.prep_unlinkat,
                (_dir_fd(dir_fd), _encode(path, func), flags), finish=_finish_none,
                filename=path)


async def unlink(path: Path, *, dir_fd: int | None = None) -> None:
    """os.unlink (os.remove) through IORING_OP_UNLINKAT."""
    await _unlinkat("unlink", path, dir_fd, 0)


async def remove(path: Path, *, dir_fd: int | None = None) -> None:
    """os.remove through IORING_OP_UNLINKAT (unlink, with its own name in errors)."""
    await _unlinkat("remove", path, dir_fd, 0)


async def rmdir(path: Path, *, dir_fd: int | None = None) -> None:
    """os.rmdir through IORING_OP_UNLINKAT with AT_REMOVEDIR."""
    await _unlinkat("rmdir", path, dir_fd, _binding.AT_REMOVEDIR)


async def _renameat(func: str, src: Path, dst: Path, src_dir_fd: int | None,
                    dst_dir_fd: int | None) -> None:
    args = (_dir_fd(src_dir_fd), _encode(src, func, "src"), _dir_fd(dst_dir_fd),
            _encode(dst, func, "dst"), 0)
    fallback = functools.partial(getattr(os, func), src, dst, src_dir_fd=src_dir_fd,
                                 dst_dir_fd=dst_dir_fd)
    await _call(_binding.OP_RENAMEAT, fallback, _binding.prep_renameat, args,
                finish=_finish_none, filename=src, filename2=dst)


async def rename(src: Path, dst: Path, *, src_dir_fd: int | None = None,
                 dst_dir_fd: int | None = None) -> None:
    """os.rename through IORING_OP_RENAMEAT."""
    await _renameat("rename", src, dst, src_dir_fd, dst_dir_fd)


async def replace(src: Path, dst: Path, *, src_dir_fd: int | None = None,
                  dst_dir_fd: int | None = None) -> None:
    """os.replace through IORING_OP_RENAMEAT (on Linux rename replaces too)."""
    await _renameat("replace", src, dst, src_dir_fd, dst_dir_fd)


async def mkdir(path: Path, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
    """os.mkdir through IORING_OP_MKDIRAT."""
    mode_t = check_int(mode, "mode") & 0xFFFFFFFF  # (a C int, as os passes it: -1 too)
    args = (_dir_fd(dir_fd), _encode(path, "mkdir"), mode_t)
    fallback = functools.partial(os.mkdir, path, mode, dir_fd=dir_fd)
    await _call(_binding.OP_MKDIRAT, fallback, _binding.prep_mkdirat, args, finish=_finish_none,
                filename=path)


async def link(src: Path, dst: Path, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
    """os.link through IORING_OP_LINKAT."""
    # AT_SYMLINK_FOLLOW as os.link passes it: before 3.14 it calls link(2),
    # which never follows, unless a dir_fd is given.
    follows = follow_symlinks and (sys.version_info >= (3, 14) or src_dir_fd is not None
                                   or dst_dir_fd is not None)
    flags = 0x400 if follows else 0
    args = (_dir_fd(src_dir_fd), _encode(src, "link", "src"), _dir_fd(dst_dir_fd),
            _encode(dst, "link", "dst"), flags)
    fallback = functools.partial(os.link, src, dst, src_dir_fd=src_dir_fd,
                                 dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
    await _call(_binding.OP_LINKAT, fallback, _binding.prep_linkat, args,
                finish=_finish_none, filename=src, filename2=dst)


async def symlink(src: Path, dst: Path, target_is_directory: bool = False, *,
                  dir_fd: int | None = None) -> None:
    """os.symlink through IORING_OP_SYMLINKAT (target_is_directory matters on Windows only)."""
    args = (_encode(src, "symlink", "src"), _dir_fd(dir_fd), _encode(dst, "symlink", "dst"))
    fallback = functools.partial(os.symlink, src, dst, target_is_directory, dir_fd=dir_fd)
    await _call(_binding.OP_SYMLINKAT, fallback, _binding.prep_symlinkat, args,
                finish=_finish_none, filename=src, filename2=dst)


async def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """Linux fallocate(2) through IORING_OP_FALLOCATE (os.posix_fallocate is mode 0)."""
    fd = check_fd(fd)
    if offset < 0 or length <= 0:
        raise ValueError("fallocate: offset must be non-negative and length positive")

    def fallback() -> None:
        if mode:
            raise OSError(95, os.strerror(95))  # EOPNOTSUPP: os has only posix_fallocate
        os.posix_fallocate(fd, offset, length)

    await _call(_binding.OP_FALLOCATE, fallback, _binding.prep_fallocate,
                (fd, mode, offset, length), finish=_finish_none)


async def ftruncate(fd: int, length: int) -> None:
    """os.ftruncate through IORING_OP_FTRUNCATE (Linux 6.9; the executor before)."""
    fd = check_fd(fd)
    length = check_size(length)
    await _call(_binding.OP_FTRUNCATE, functools.partial(os.ftruncate, fd, length),
                _binding.prep_rw, (_binding.OP_FTRUNCATE, fd, _binding.NULL, 0, length, 0),
                finish=_finish_none)
