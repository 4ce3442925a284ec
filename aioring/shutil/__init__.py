"""aioring.shutil: the stdlib's shutil as coroutines, the I/O on io_uring.

Every function takes the arguments of its shutil namesake and returns and
raises what it does (the exceptions are shutil's own classes, so
``except shutil.Error`` catches them).  How the work is done:

* File data is moved by the kernel: a large file is spliced from the source
  to the destination through pipes on the ring, one pipe filling while
  another is written out; a small one is read from the page cache and
  written through the ring.  copyfileobj does the same between fds and
  aioring's binary files (at their positions, which it moves as shutil's
  reads and writes would).
* copytree copies many files at once (at most COPY_TASKS), and rmtree
  removes every entry of a directory at once (at most REMOVE_OPS in flight,
  run by up to _kernel.BATCH_WORKERS of the kernel's workers), while the
  loop goes on listing directories.  Opens, stats, creates,
  unlinks, renames go through the ring (aioring's own path operations).
  With copy2 or copy, the core copies a small cached file from its read to
  its metadata with no Python between the steps (_core.CopyQueue), and
  hands every other file back to the steps below.
* Directories are listed in the loop's thread (io_uring has no getdents):
  a listing comes from the kernel's caches in microseconds.  Metadata with
  no io_uring opcode (chmod, utime, extended attributes) is set through the
  fds the copy holds, in the loop's thread too.
* rmtree walks by fds (openat, fstat, unlinkat relative to the directory's
  fd), as CPython's does, so a directory swapped for a symlink during the
  walk is never followed out of the tree.
* Errors are shutil's: copytree collects them into shutil.Error, rmtree
  hands each to onexc/onerror (which may also be coroutine functions), in
  the order the kernel finishes them.
* A cancelled copy waits for what the kernel is doing, removes the
  destination file it was writing, and raises CancelledError: a
  half-written file is never reported as copied.
* disk_usage, chown, which, make_archive and unpack_archive, which gain
  nothing from the ring, run shutil's own in the loop's executor.  What
  does no I/O (ignore_patterns, the archive format registry,
  get_terminal_size) is shutil's own, as is.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import functools
import inspect
import os
import posixpath
import shutil as _shutil
import stat as _stat
import sys
from collections.abc import Callable
from typing import Any

from .. import _ops, _pathops
from .._core import copy_finish as _copy_finish
from .._core import copy_source as _copy_source
from . import _kernel
from .._ringbase import Op
from ..threadpool.binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO

__all__ = ["COPY_BUFSIZE", "COPY_TASKS", "REMOVE_DIRS", "REMOVE_OPS", "Error", "ExecError", "ReadError",
           "RegistryError", "SameFileError", "SpecialFileError", "chown", "copy", "copy2", "copyfile",
           "copyfileobj", "copymode", "copystat", "copytree", "disk_usage", "get_archive_formats",
           "get_terminal_size", "get_unpack_formats", "ignore_patterns", "make_archive", "move",
           "register_archive_format", "register_unpack_format", "rmtree", "unpack_archive",
           "unregister_archive_format", "unregister_unpack_format", "which"]

Error = _shutil.Error
SameFileError = _shutil.SameFileError
SpecialFileError = _shutil.SpecialFileError
ExecError = _shutil.ExecError
ReadError = _shutil.ReadError
RegistryError = _shutil.RegistryError
ignore_patterns = _shutil.ignore_patterns
# What does no I/O is shutil's own: the archive formats are shutil's
# registry, which make_archive and unpack_archive (below) use.
get_archive_formats = _shutil.get_archive_formats
register_archive_format = _shutil.register_archive_format
unregister_archive_format = _shutil.unregister_archive_format
get_unpack_formats = _shutil.get_unpack_formats
register_unpack_format = _shutil.register_unpack_format
unregister_unpack_format = _shutil.unregister_unpack_format
get_terminal_size = _shutil.get_terminal_size

# copyfileobj's default chunk: larger than shutil's 64 KiB, since each chunk
# costs a trip through the loop.
COPY_BUFSIZE = 1 << 20
# Files copytree copies at once, and unlinks rmtree has in flight at most.
# (With _kernel.BATCH_WORKERS kernel workers running the unlinks, medians
# of 5 interleaved runs under the machine's other load: 128 or 512 in
# flight no better than 256, 674 and 679 ms against 566.)
COPY_TASKS = 32
# A regular file up to this size, found by a directory walk (copytree's), is
# opened, read and closed, and its metadata copied, by the core at once when
# the page cache holds it (_copy_small): only its create and write wait.
SMALL_COPY = 1 << 16
_META = {"": 0, "mode": 1, "stat": 2}  # (_copyfile's meta, as copy_finish takes it)
REMOVE_OPS = 256
# Directories rmtree walks at once (each holds an fd while it is emptied).
REMOVE_DIRS = 16

_O_READ = os.O_RDONLY | os.O_CLOEXEC
_O_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_ONEXC = sys.version_info >= (3, 12)  # rmtree has onexc (and dir_fd from 3.11)
# From 3.13 rmtree lets entries that vanished meanwhile go, and names the
# full path in the errors of a directory's steps (before, what the os call
# was given: a name relative to its parent).
_MISSING_IS_GONE = _FULL_NAMES = sys.version_info >= (3, 13)
_XATTR_SKIP = (errno.ENOTSUP, errno.ENODATA, errno.EINVAL)
_XATTR_SKIP_EACH = (errno.EPERM, errno.ENOTSUP, errno.ENODATA, errno.EINVAL, errno.EACCES)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


# ------------------------------------------------------------------ copyfileobj
class _FdEnd:
    """A plain fd as copyfileobj's source or destination: at its own position."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def read(self, n: int) -> bytes:
        if n < 0:
            parts = []
            while chunk := await _ops.read(self.fd, COPY_BUFSIZE):
                parts.append(chunk)
            return b"".join(parts)
        return await _ops.read(self.fd, n)

    async def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += await _ops.write(self.fd, view[done:])
        return done


# The async file classes whose data copyfileobj may move in the kernel.
_RING_FILES = (AsyncBufferedReader, AsyncBufferedIOBase, AsyncFileIO)


def _in_kernel(f: Any, write: bool) -> tuple[int, Any] | None:
    """(fd, f's aioring file object or None) when copyfileobj may move the data
    of `f` in the kernel: an fd, or an aioring binary file opened "rb" (or
    "wb", "xb" as the destination: no read window or append of its own), of a
    regular file that the fd may read (write at any offset: no O_APPEND); None
    for anything else."""
    if isinstance(f, int):
        fd, obj = f, None
    elif type(f) in _RING_FILES and f._raw is not None and not f.closed \
            and f.mode in (("wb", "xb") if write else ("rb",)):
        fd, obj = f.fileno(), f
    else:
        return None
    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return None
    access = flags & os.O_ACCMODE
    if write:
        ok = access in (os.O_WRONLY, os.O_RDWR) and not flags & (os.O_APPEND | os.O_DIRECT)
    else:
        ok = access in (os.O_RDONLY, os.O_RDWR) and not flags & os.O_DIRECT
    return (fd, obj) if ok and _stat.S_ISREG(st.st_mode) else None


async def _position(fd: int, obj: Any) -> int:
    return os.lseek(fd, 0, os.SEEK_CUR) if obj is None else await obj.tell()


async def _move_to(fd: int, obj: Any, pos: int) -> None:
    if obj is None:
        os.lseek(fd, pos, os.SEEK_SET)
    else:
        await obj.seek(pos)


async def _copy_in_kernel(src: tuple[int, Any], dst: tuple[int, Any]) -> None:
    """copyfileobj's copy between regular files by their fds: from the
    source's position to its end, to the destination at its position,
    leaving both where shutil.copyfileobj's reads and writes would (the source
    at its end, nothing of it buffered; the destination after what it was
    given, what it buffered before written first, in its place)."""
    (src_fd, fsrc), (dst_fd, fdst) = src, dst
    if fdst is not None:
        await fdst.flush()
    src_pos, dst_pos = await _position(src_fd, fsrc), await _position(dst_fd, fdst)
    # What fsrc's buffer holds ahead of its position goes first, as read() would give it.
    ahead = fsrc.raw.tell() - src_pos if isinstance(fsrc, AsyncBufferedReader) else 0
    done = 0
    if ahead > 0:
        head = memoryview(await fsrc.read(ahead))
        while done < len(head):
            done += await _ops.write(dst_fd, head[done:], dst_pos + done)
    size = max(os.fstat(src_fd).st_size - src_pos - done, 0)
    done += await _kernel.copy_data(src_fd, dst_fd, size, src_pos + done, dst_pos + done)
    await _move_to(src_fd, fsrc, src_pos + done)
    await _move_to(dst_fd, fdst, dst_pos + done)


async def copyfileobj(fsrc: Any, fdst: Any, length: int = 0) -> None:
    """shutil.copyfileobj: copy `fsrc` to `fdst` in chunks of `length` bytes
    (0: COPY_BUFSIZE; negative: all of it in one read).

    Either may be an async file object (aioring's, aiofiles', anything whose
    read and write are coroutines), a plain file object, or an fd (read and
    written at its position).  Between two regular files that are fds or
    aioring binary files (the source opened "rb", the destination "wb" or
    "xb"), the data moves in the kernel, as copyfile's, and both are left
    where copyfileobj's reads and writes leave them; otherwise the next
    chunk is read while the last one is written.  Raises what their read and
    write raise."""
    src = _in_kernel(fsrc, False)
    dst = _in_kernel(fdst, True) if src is not None else None
    if src is not None and dst is not None \
            and not os.path.samestat(os.fstat(src[0]), os.fstat(dst[0])):
        await _copy_in_kernel(src, dst)
        return
    if not length:
        length = COPY_BUFSIZE
    src_end = _FdEnd(fsrc) if isinstance(fsrc, int) else fsrc
    dst_end = _FdEnd(fdst) if isinstance(fdst, int) else fdst
    src_read, dst_write = src_end.read, dst_end.write
    buf = await _maybe_await(src_read(length))
    while buf:
        reading = asyncio.ensure_future(_maybe_await(src_read(length)))
        try:
            await _maybe_await(dst_write(buf))
        except BaseException:
            reading.cancel()
            try:
                await reading
            except BaseException:
                pass
            raise
        buf = await reading


# ------------------------------------------------------------ one file's copy
async def _stat_of(fn: Any) -> os.stat_result:
    return fn.stat() if isinstance(fn, os.DirEntry) else await _pathops.stat(fn)


async def _stat_or_none(fn: Any) -> os.stat_result | None:
    try:
        return await _stat_of(fn)
    except OSError:
        return None


async def _islink(fn: Any) -> bool:
    if isinstance(fn, os.DirEntry):
        return fn.is_symlink()
    try:
        st = await _pathops.lstat(fn)
    except (OSError, ValueError):
        return False
    return _stat.S_ISLNK(st.st_mode)


async def _exists(path: Any) -> bool:
    try:
        await _pathops.stat(path)
    except (OSError, ValueError):
        return False
    return True


async def _isdir(path: Any) -> bool:
    try:
        st = await _pathops.stat(path)
    except (OSError, ValueError):
        return False
    return _stat.S_ISDIR(st.st_mode)


def _copy_xattrs(src: Any, dst: Any, follow_symlinks: bool = True) -> None:
    """shutil's extended attribute copy, src and dst paths or fds."""
    try:
        names = os.listxattr(src, follow_symlinks=follow_symlinks)
    except OSError as exc:
        if exc.errno not in _XATTR_SKIP:
            raise
        return
    for name in names:
        try:
            value = os.getxattr(src, name, follow_symlinks=follow_symlinks)
            os.setxattr(dst, name, value, follow_symlinks=follow_symlinks)
        except OSError as exc:
            if exc.errno not in _XATTR_SKIP_EACH:
                raise


def _special(fn: Any, st: os.stat_result | None) -> None:
    if st is not None and _stat.S_ISFIFO(st.st_mode):
        fn = fn.path if isinstance(fn, os.DirEntry) else fn
        raise SpecialFileError(f"`{fn}` is a named pipe")


async def _check_dst(src: Any, dst: Any, st_src: os.stat_result | None) -> None:
    """shutil's checks of `dst` before a copy: the same file as `src`, or a named pipe."""
    st_dst = await _stat_or_none(dst)
    if st_src is not None and st_dst is not None and os.path.samestat(st_src, st_dst):
        raise SameFileError(f"{src!r} and {dst!r} are the same file")
    _special(src, st_src)
    _special(dst, st_dst)


async def _open_dst(dst: Any, flags: int, mode: int, data: bytes | None = None) -> int:
    """os.open(dst, flags, mode) of a copy's destination; with `data`, a new
    file (flags _O_CREATE) that gets it in the same operation (create_with)."""
    try:
        if data is None:
            return await _pathops.open(dst, flags, mode)
        return await _kernel.create_with(dst, flags, mode, data)
    except IsADirectoryError as exc:
        if not await _exists(dst):
            raise FileNotFoundError(f"Directory does not exist: {dst}") from exc
        raise


async def _copyfile(src: Any, dst: Any, follow_symlinks: bool = True, meta: str = "",
                    audited: bool = False, atime_ns: int | None = None) -> Any:
    """copyfile, then (meta "mode" or "stat") copymode or copystat, as copy
    and copy2 do: on the fds the copy holds where the file was copied.

    shutil looks `dst` up before it creates it; here a new `dst` is created
    with O_EXCL (and the source's mode, where that is the mode to give it),
    and only one that exists is looked at as shutil does: the same checks in
    the same order, one directory search instead of two, and no chmod.

    A job a CopyQueue handed back (src a DirEntry) comes `audited` (its
    audit event raised), and with the source's access time from before the
    queue tried to read it (atime_ns: that try may have moved it)."""
    if not audited:  # (a job a CopyQueue handed back raised it already)
        sys.audit("shutil.copyfile", src, dst)
    if isinstance(src, os.DirEntry) and src.is_file(follow_symlinks=False):
        if await _copy_small(src, dst, meta, atime_ns):
            return dst
        st_src = None  # a regular file by its directory entry: no stat needed to know it is no pipe
    else:
        st_src = await _stat_or_none(src)
    if st_src is not None and _stat.S_ISFIFO(st_src.st_mode):
        await _check_dst(src, dst, st_src)
    if not follow_symlinks and await _islink(src):
        await _check_dst(src, dst, st_src)
        await _pathops.symlink(os.readlink(src), dst)
        if meta == "stat":
            await copystat(src, dst, follow_symlinks=False)
        elif meta == "mode":
            await copymode(src, dst, follow_symlinks=False)
        return dst
    src_name = os.fspath(src)
    try:
        src_fd = await _pathops.open(src_name, _O_READ)
    except OSError:
        await _check_dst(src, dst, None)
        raise
    try:
        st = os.fstat(src_fd)
        if _stat.S_ISDIR(st.st_mode):
            await _check_dst(src, dst, st)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), src_name)
        mode = _stat.S_IMODE(st.st_mode) & 0o777 if meta else 0o666
        try:
            dst_fd = await _open_dst(dst, _O_CREATE, mode)
            created = True
        except FileExistsError:
            await _check_dst(src, dst, st)
            dst_fd = await _open_dst(dst, _O_WRITE, 0o666)
            created = False
        await _fill(src_fd, dst_fd, st, dst, meta, created)
    finally:
        os.close(src_fd)
    return dst


async def _fill(src_fd: int, dst_fd: int, st: os.stat_result, dst: Any, meta: str, created: bool) -> None:
    """The data (and metadata) of the copy into dst_fd, which it closes.
    Cancelled, it removes `dst`: a partial copy is never left looking whole."""
    try:
        await _kernel.copy_data(src_fd, dst_fd, st.st_size)
        _copy_meta(src_fd, dst_fd, st.st_mode, st.st_atime_ns, st.st_mtime_ns, meta, created)
    except asyncio.CancelledError:
        _abandon(dst_fd, dst)
        raise
    except BaseException:
        os.close(dst_fd)
        raise
    os.close(dst_fd)


def _copy_meta(src_fd: int, dst_fd: int, st_mode: int, atime_ns: int, mtime_ns: int, meta: str,
               created: bool) -> None:
    """copystat's (meta "stat") or copymode's ("mode") part of a copy, on its fds."""
    if meta == "stat":
        os.utime(dst_fd, ns=(atime_ns, mtime_ns))
        _copy_xattrs(src_fd, dst_fd)
    if meta:
        mode = _stat.S_IMODE(st_mode)
        if not created or _stat.S_IMODE(os.fstat(dst_fd).st_mode) != mode:  # (the umask took some)
            os.chmod(dst_fd, mode)


def _abandon(dst_fd: int, dst: Any) -> None:
    """A cancelled copy's destination closed and removed."""
    os.close(dst_fd)
    try:
        os.unlink(dst)
    except OSError:
        pass


async def _copy_small(src: os.DirEntry[Any], dst: Any, meta: str, atime_ns: int | None = None) -> bool:
    """_copyfile of a regular file, by its directory entry, that is small
    (SMALL_COPY): opened, read if the page cache holds it, and closed, and
    its metadata copied, by the core at once (copy_source, copy_finish);
    the new `dst` created (O_EXCL) and written through the ring, as one
    operation when the bytes were read (create_with).  False,
    with nothing done, when the file is not such a file or `dst` exists:
    _copyfile's own steps then make the copy, and raise its errors."""
    source = _copy_source(os.fsencode(src.path), SMALL_COPY)
    if source is None:
        return False
    src_fd, data, st_mode, st_size, st_atime_ns, mtime_ns = source
    if atime_ns is None:
        atime_ns = st_atime_ns
    mode = _stat.S_IMODE(st_mode) & 0o777 if meta else 0o666
    try:
        dst_fd = await _open_dst(dst, _O_CREATE, mode, data)  # (data None: not all cached, read below)
    except FileExistsError:
        os.close(src_fd)
        return False
    except BaseException:
        os.close(src_fd)
        raise
    try:
        if data is None:
            await _kernel.copy_data(src_fd, dst_fd, st_size)
        done = _copy_finish(src_fd, dst_fd, atime_ns, mtime_ns, _stat.S_IMODE(st_mode), _META[meta])
    except asyncio.CancelledError:
        _abandon(dst_fd, dst)
        os.close(src_fd)
        raise
    except BaseException:
        os.close(dst_fd)
        os.close(src_fd)
        raise
    if not done:  # (extended attributes to copy: the steps _fill takes)
        try:
            _copy_meta(src_fd, dst_fd, st_mode, atime_ns, mtime_ns, meta, True)
        finally:
            os.close(dst_fd)
            os.close(src_fd)
    return True


async def copyfile(src: Any, dst: Any, *, follow_symlinks: bool = True) -> Any:
    """shutil.copyfile: copy the data of `src` to `dst` (created or
    truncated) and return `dst`; with follow_symlinks false and `src` a
    symlink, make `dst` a symlink to the same target.

    Raises SameFileError, SpecialFileError for a named pipe, IsADirectoryError
    (FileNotFoundError "Directory does not exist" for a missing directory in
    `dst`), and the OSError of an open, read or write, as shutil does."""
    return await _copyfile(src, dst, follow_symlinks)


async def copymode(src: Any, dst: Any, *, follow_symlinks: bool = True) -> None:
    """shutil.copymode: copy the permission bits of `src` to `dst`.  With
    follow_symlinks false and both symlinks, nothing happens (Linux has no
    lchmod).  Raises the OSError of the stat or the chmod."""
    sys.audit("shutil.copymode", src, dst)
    if not follow_symlinks and await _islink(src) and await _islink(dst):
        if not hasattr(os, "lchmod"):
            return
    st = await _stat_of(src)
    os.chmod(dst, _stat.S_IMODE(st.st_mode))


async def copystat(src: Any, dst: Any, *, follow_symlinks: bool = True) -> None:
    """shutil.copystat: copy the permission bits, access and modification
    times and extended attributes of `src` to `dst` (the symlinks
    themselves where follow_symlinks is false and both are symlinks).
    Raises the OSError of the stat, utime, chmod or xattr calls."""
    sys.audit("shutil.copystat", src, dst)
    follow = follow_symlinks or not (await _islink(src) and await _islink(dst))
    if isinstance(src, os.DirEntry):
        st = src.stat(follow_symlinks=follow)
    else:
        st = await _pathops.stat(src, follow_symlinks=follow)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=follow)
    _copy_xattrs(src, dst, follow)
    if follow or os.chmod in os.supports_follow_symlinks:
        try:
            os.chmod(dst, _stat.S_IMODE(st.st_mode), follow_symlinks=follow)
        except NotImplementedError:
            pass


async def _into_dir(src: Any, dst: Any) -> Any:
    if await _isdir(dst):
        return os.path.join(dst, os.path.basename(src))
    return dst


async def copy(src: Any, dst: Any, *, follow_symlinks: bool = True) -> Any:
    """shutil.copy: copyfile and copymode; `dst` may be a directory (the
    copy keeps the source's name).  Returns the new file's path."""
    dst = await _into_dir(src, dst)
    return await _copyfile(src, dst, follow_symlinks, "mode")


async def copy2(src: Any, dst: Any, *, follow_symlinks: bool = True) -> Any:
    """shutil.copy2: copyfile and copystat (times, permissions, extended
    attributes); `dst` may be a directory.  Returns the new file's path."""
    dst = await _into_dir(src, dst)
    return await _copyfile(src, dst, follow_symlinks, "stat")


# -------------------------------------------------------------------- copytree
async def _makedirs(path: Any, exist_ok: bool) -> None:
    """os.makedirs through the ring's mkdir."""
    try:
        await _pathops.mkdir(path)
    except FileNotFoundError:
        head = posixpath.dirname(posixpath.normpath(os.fspath(path)))
        if not head or head == path:
            raise
        await _makedirs(head, True)
        await _makedirs(path, exist_ok)
    except OSError:
        if not exist_ok or not await _isdir(path):
            raise


class _Jobs:
    """The file copies of a copytree, a row per directory, handed out in
    turn from each row: creates in one directory wait for each other (its
    lock), those in different ones go side by side."""

    def __init__(self) -> None:
        self.rows: collections.deque[collections.deque[Any]] = collections.deque()
        self.closed = False
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.loop = asyncio.get_running_loop()

    def add(self, row: list[Any]) -> None:
        """A row of copies: as many waiting workers woken, not every one."""
        if row:
            self.rows.append(collections.deque(row))
            self._wake(len(row))

    def close(self) -> None:
        self.closed = True
        self._wake(len(self.waiters))

    def _wake(self, most: int) -> None:
        waiters = self.waiters
        while most and waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # (else a cancelled worker's)
                waiter.set_result(None)
                most -= 1

    async def next(self) -> Any:
        """The next copy, or None once the walk is over and none is left."""
        while not self.rows:
            if self.closed:
                return None
            waiter = self.loop.create_future()
            self.waiters.append(waiter)
            await waiter
        row = self.rows.popleft()
        job = row.popleft()
        if row:
            self.rows.append(row)
        return job


class _TreeCopy:
    """One copytree call: the walk lists and makes the directories (sibling
    subtrees side by side) while the files it found are copied: with copy2
    or copy, a directory's regular files by the core (a CopyQueue: up to
    COPY_TASKS at once, each opened and read at once if it is small and
    cached, then created and written by one op, its metadata set when that
    op ends), and what the queue hands back, with any other copy_function,
    by COPY_TASKS workers.  Per directory its results, in shutil's order,
    become the errors of shutil.Error."""

    def __init__(self, symlinks: bool, ignore: Any, copy_function: Any, ignore_dangling: bool,
                 dirs_exist_ok: bool) -> None:
        self.symlinks = symlinks
        self.ignore = ignore
        self.copy_function = copy_function
        self.ignore_dangling = ignore_dangling
        self.dirs_exist_ok = dirs_exist_ok
        self.fast = {copy2: "stat", copy: "mode"}.get(copy_function, "")
        self.jobs = _Jobs()
        self.dirs: list[tuple[Any, Any, list[Any]]] = []  # (src, dst, results) of each directory
        self.queue = _kernel.copy_queue(_META[self.fast], SMALL_COPY, COPY_TASKS, self._hand_back) \
            if self.fast else None

    def _hand_back(self, job: tuple[Any, ...], audited: bool, atime_ns: int | None) -> None:
        """The queue's job for the workers (see _copyfile's audited and atime_ns)."""
        self.jobs.add([(*job, audited, atime_ns)])

    async def walk(self, src: Any, dst: Any, entries: list[os.DirEntry[Any]]) -> list[Any]:
        """tree() of the top, then the queue's copies waited for (what it
        hands back goes to the workers meanwhile), and the workers told that
        no more jobs come.  On an error or a cancellation the queue starts
        no more copies, and those in flight end first."""
        queue = self.queue
        try:
            results = await self.tree(src, dst, entries)
        except GeneratorExit:  # (closed unfinished: nothing may be awaited)
            if queue is not None:
                queue.cancel()
            raise
        except BaseException:
            if queue is not None:
                queue.cancel()
                await _kernel.drain(queue)
            self.jobs.close()
            raise
        if queue is not None:
            await _kernel.drain(queue)
        self.jobs.close()
        return results

    async def tree(self, src: Any, dst: Any, entries: list[os.DirEntry[Any]]) -> list[Any]:
        """What shutil's _copytree does for one directory, the file copies
        queued; returns its results (an error list, a queued copy's slot, or
        a subtree's results)."""
        names = [e.name for e in entries]
        ignored = self.ignore(os.fspath(src), names) if self.ignore is not None else ()
        await _makedirs(dst, self.dirs_exist_ok)
        results: list[Any] = []
        jobs: list[tuple[list[Any], Any, Any, Any]] = []
        queued: list[tuple[list[Any], Any, Any, Any]] = []  # (regular files, or anything not a link)
        subtrees: list[tuple[int, Any, Any, Any]] = []
        if entries:
            # os.path.join(src, name) and (dst, name) of each entry, as shutil names
            # them: each directory joined once with an empty name (which only ends it
            # with a separator; mixed str and bytes raise join's TypeError, as there).
            empty = entries[0].name[:0]
            src_dir = os.path.join(os.fspath(src), empty)
            dst_dir = os.path.join(os.fspath(dst), empty)
        for entry in entries:
            if entry.name in ignored:
                continue
            srcname = src_dir + entry.name
            dstname = dst_dir + entry.name
            srcobj = entry if self.fast else srcname
            slot: list[Any] = []
            try:
                link = entry.is_symlink()
                if link:
                    linkto = os.readlink(srcname)
                    if self.symlinks:
                        await _pathops.symlink(linkto, dstname)
                        await copystat(srcobj, dstname, follow_symlinks=False)
                        continue
                    if self.ignore_dangling and not await _exists(linkto):
                        continue
                if entry.is_dir():
                    subtrees.append((len(results), srcobj, srcname, dstname))
                elif self.queue is None or link:
                    jobs.append((slot, srcobj, dstname, srcname))
                else:
                    queued.append((slot, srcobj, dstname, srcname))
            except OSError as why:
                slot.append((srcname, dstname, str(why)))
            results.append(slot)
        self.jobs.add(jobs)
        if queued:
            assert self.queue is not None
            self.queue.add(queued, src_dir, dst_dir)
        found = await _kernel.together([self.subtree(*sub) for sub in subtrees])
        for (i, *_), subtree_results in zip(subtrees, found, strict=True):
            results[i] = subtree_results
        self.dirs.append((src, dst, results))
        return results

    async def subtree(self, _: int, src: Any, srcname: Any, dstname: Any) -> list[Any]:
        """copytree of a subdirectory: its results, or its error as shutil's
        loop records it."""
        try:
            sys.audit("shutil.copytree", src, dstname)
            with os.scandir(src) as it:
                entries = list(it)
            return await self.tree(src, dstname, entries)
        except OSError as why:
            return [[(srcname, dstname, str(why))]]

    async def copy_files(self) -> None:
        await _kernel.together([self._worker() for _ in range(COPY_TASKS)])

    async def _worker(self) -> None:
        while (job := await self.jobs.next()) is not None:
            slot, srcobj, dstname, srcname, *handed_back = job
            try:
                if self.fast:
                    await _copyfile(srcobj, dstname, True, self.fast, *handed_back)
                else:
                    await _maybe_await(self.copy_function(srcobj, dstname))
            except Error as err:
                slot.extend(err.args[0])
            except OSError as why:
                slot.append((srcname, dstname, str(why)))

    async def finish_dirs(self) -> None:
        """copystat of each directory, now that its contents are all there."""
        for src, dst, results in self.dirs:
            try:
                await copystat(src, dst)
            except OSError as why:
                results.append([(src, dst, str(why))])

    @staticmethod
    def errors(results: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in results:
            if item and isinstance(item[0], list):
                out.extend(_TreeCopy.errors(item))
            else:
                out.extend(item)
        return out


async def copytree(src: Any, dst: Any, symlinks: bool = False, ignore: Any = None,
                   copy_function: Any = None, ignore_dangling_symlinks: bool = False,
                   dirs_exist_ok: bool = False) -> Any:
    """shutil.copytree: copy the directory tree `src` to `dst` (made with its
    parents; FileExistsError if it exists, unless dirs_exist_ok) and return `dst`.

    symlinks, ignore (see ignore_patterns), copy_function (default copy2;
    may be a coroutine function or a plain one), ignore_dangling_symlinks
    and dirs_exist_ok mean what they mean to shutil.  Up to COPY_TASKS
    files are copied at once.  The errors of the files and directories are
    collected, in shutil's order, and raised together as shutil.Error;
    listing `src` or making `dst` raises its OSError at once."""
    if copy_function is None:
        copy_function = copy2
    sys.audit("shutil.copytree", src, dst)
    with os.scandir(src) as it:
        entries = list(it)
    job = _TreeCopy(symlinks, ignore, copy_function, ignore_dangling_symlinks, dirs_exist_ok)
    done = await _kernel.together([job.walk(src, dst, entries), job.copy_files()])
    results: list[Any] = done[0] or []
    await job.finish_dirs()
    errors = job.errors(results)
    if errors:
        raise Error(errors)
    return dst


# ---------------------------------------------------------------------- rmtree
class _TreeRemoval:
    """One rmtree call, by fds as CPython's: each directory is opened
    relative to its parent's fd and checked to be the one lstat saw (a
    symlink swapped in is never followed); its entries are unlinked
    relative to its fd, all at once through a Batch."""

    def __init__(self, onexc: Callable[..., Any]) -> None:
        self.onexc = onexc
        self.batch = _kernel.Batch(REMOVE_OPS, _kernel.BATCH_WORKERS)
        self.walking = 0  # directories walked by tasks of their own

    async def report(self, func: Any, path: Any, exc: BaseException) -> None:
        """Hand an error to the caller's handler (shutil's default re-raises it)."""
        try:
            raise exc
        except BaseException:
            await _maybe_await(self.onexc(func, path, exc))

    async def top(self, path: Any, dir_fd: int | None) -> None:
        if await self.empty(path, dir_fd, path):
            try:
                await _pathops.rmdir(path, dir_fd=dir_fd)
            except OSError as err:
                await self.report(os.rmdir, path, err)

    async def empty(self, name: str, dir_fd: int | None, fullname: str,
                    entry: os.DirEntry[str] | None = None) -> bool:
        """Open the directory `name` (the top, or `entry`) relative to dir_fd,
        check it is the one lstat saw, and remove its contents; True when it
        is to be removed itself."""
        func: Any = os.lstat
        fd = -1
        try:
            if entry is None:
                orig_st = await _pathops.lstat(name, dir_fd=dir_fd)
            else:
                orig_st = entry.stat(follow_symlinks=False)
            func = os.open
            fd = await _pathops.open(name, _O_DIR, dir_fd=dir_fd)
            func = os.path.islink
            if not os.path.samestat(orig_st, os.fstat(fd)):
                raise OSError("Cannot call rmtree on a symbolic link")
        except OSError as err:
            if fd >= 0:
                os.close(fd)
            if entry is None or not (_MISSING_IS_GONE and isinstance(err, FileNotFoundError)):
                if _FULL_NAMES:
                    err.filename = fullname
                await self.report(func, fullname, err)
            return False
        await self.contents_then_close(fd, fullname)
        return True

    async def contents_then_close(self, fd: int, path: str) -> None:
        """Remove what the directory open at `fd` holds, then close it."""
        try:
            await self.contents(fd, path)
        finally:
            try:
                os.close(fd)
            except OSError as err:
                await self.report(os.close, path, err)

    async def contents(self, fd: int, path: str) -> None:
        try:
            with os.scandir(fd) as it:
                entries = list(it)
        except OSError as err:
            err.filename = path
            await self.report(os.scandir, path, err)
            return
        batch = self.batch
        tally = _kernel.Tally(batch)
        started: list[tuple[Op, str, bool]] = []  # (op, name, an rmdir)
        try:
            subdirs = []
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry)
                        continue
                except FileNotFoundError:
                    if _MISSING_IS_GONE:
                        continue
                except OSError:
                    pass
                if batch.crowded():
                    await batch.room()
                started.append((batch.unlinkat(tally, fd, entry.name), entry.name, False))
            for removable, entry in await self.subdirs(fd, path, subdirs):
                if removable:
                    if batch.crowded():
                        await batch.room()
                    started.append((batch.unlinkat(tally, fd, entry.name, True), entry.name, True))
            if tally.left:
                await tally.wait()
            for op, name, rmdir in started:
                if op.res >= 0:
                    continue
                fullname = os.path.join(path, name)
                failure = batch.error(op, fullname if _FULL_NAMES and rmdir else name)
                if failure is not None and not (_MISSING_IS_GONE and isinstance(failure, FileNotFoundError)):
                    await self.report(os.rmdir if rmdir else os.unlink, fullname, failure)
        finally:
            if tally.left:
                batch.cancel(op for op, _, _ in started)
                await tally.wait(settle=True)  # (before the caller closes fd)

    async def subdirs(self, fd: int, path: str,
                      subdirs: list[os.DirEntry[str]]) -> list[tuple[bool, os.DirEntry[str]]]:
        """empty() for each of `subdirs`, up to REMOVE_DIRS directories at once
        in all (the rest in this task: the open fds stay bounded)."""
        spawned: list[tuple[asyncio.Future[bool], os.DirEntry[str]]] = []
        done: list[tuple[bool, os.DirEntry[str]]] = []
        try:
            for entry in subdirs:
                fullname = os.path.join(path, entry.name)
                if self.walking < REMOVE_DIRS:
                    self.walking += 1
                    walk = self.empty(entry.name, fd, fullname, entry)
                    task: asyncio.Future[bool] = asyncio.ensure_future(walk)
                    task.add_done_callback(self._walked)
                    spawned.append((task, entry))
                else:
                    done.append((await self.empty(entry.name, fd, fullname, entry), entry))
            for task, entry in spawned:
                done.append((await task, entry))
        except BaseException:
            for task, _ in spawned:
                task.cancel()
            for task, _ in spawned:  # (each settles its ops before fd is closed)
                try:
                    await task
                except BaseException:
                    pass
            raise
        return done

    def _walked(self, task: asyncio.Future[bool]) -> None:
        self.walking -= 1

def _onexc_of(ignore_errors: bool, onerror: Any, onexc: Any) -> Callable[..., Any]:
    if ignore_errors:
        def skip(*args: Any) -> None:
            pass
        return skip
    if onexc is not None:
        return onexc
    if onerror is None:
        def reraise(*args: Any) -> None:
            raise  # noqa: PLE0704  (called inside the except block of the error)
        return reraise

    def delegate(func: Any, path: Any, exc: BaseException) -> Any:
        return onerror(func, path, (type(exc), exc, exc.__traceback__))
    return delegate


async def rmtree(path: Any, ignore_errors: bool = False, onerror: Any = None, *,
                 onexc: Any = None, dir_fd: int | None = None) -> None:
    """shutil.rmtree: remove the directory tree `path` (relative to dir_fd
    if given), its entries many at once.

    Each error goes to onexc(func, path, exc) (or the older onerror(func,
    path, exc_info)), either of which may be a coroutine function; with
    ignore_errors they are ignored, with neither handler the first is raised.
    `func` is the os function shutil names (os.lstat, os.open, os.scandir,
    os.unlink, os.rmdir, os.close, os.path.islink for a symlink given as the
    top).  As on the running Python: onexc from 3.12 and dir_fd from 3.11
    (TypeError before, as shutil's), and from 3.13 entries that vanish
    meanwhile are no error."""
    if onexc is not None and not _ONEXC:
        raise TypeError("rmtree() got an unexpected keyword argument 'onexc'")
    if dir_fd is not None and sys.version_info < (3, 11):
        raise TypeError("rmtree() got an unexpected keyword argument 'dir_fd'")
    sys.audit("shutil.rmtree", path, dir_fd)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    removal = _TreeRemoval(_onexc_of(ignore_errors, onerror, onexc))
    try:
        await removal.top(path, dir_fd)
    finally:
        removal.batch.close()


# ------------------------------------------------------------------------ move
def _basename(path: Any) -> Any:
    path = os.fspath(path)
    sep = os.path.sep + (os.path.altsep or "")
    return os.path.basename(path.rstrip(sep if isinstance(path, str) else os.fsencode(sep)))


def _destinsrc(src: Any, dst: Any) -> bool:
    src = os.path.abspath(os.fspath(src))
    dst = os.path.abspath(os.fspath(dst))
    sep = os.path.sep if isinstance(src, str) else os.fsencode(os.path.sep)
    if not src.endswith(sep):
        src += sep
    if not dst.endswith(sep):
        dst += sep
    return dst.startswith(src)


async def move(src: Any, dst: Any, copy_function: Any = None) -> Any:
    """shutil.move: rename `src` to `dst` (into it, if it is a directory)
    through the ring; across file systems copy (copy_function, default copy2;
    copytree with symlinks for a directory) and remove the source.  Returns
    the destination.  Raises shutil.Error when the destination exists inside
    a directory `dst` or a directory would move into itself."""
    if copy_function is None:
        copy_function = copy2
    sys.audit("shutil.move", src, dst)
    real_dst = dst
    if await _isdir(dst):
        st_src, st_dst = await _stat_or_none(src), await _stat_or_none(dst)
        if st_src is not None and st_dst is not None and os.path.samestat(st_src, st_dst) \
                and not await _islink(src):
            await _pathops.rename(src, dst)
            return None
        real_dst = os.path.join(dst, _basename(src))
        if await _exists(real_dst):
            raise Error(f"Destination path '{real_dst}' already exists")
    try:
        await _pathops.rename(src, real_dst)
    except OSError:
        if await _islink(src):
            await _pathops.symlink(os.readlink(src), real_dst)
            await _pathops.unlink(src)
        elif await _isdir(src):
            if _destinsrc(src, dst):
                raise Error(f"Cannot move a directory '{src}' into itself '{dst}'.") from None
            await copytree(src, real_dst, copy_function=copy_function, symlinks=True)
            await rmtree(src)
        else:
            await _maybe_await(copy_function(src, real_dst))
            await _pathops.unlink(src)
    return real_dst


# ----------------------------------------------------------- in the executor
def _in_executor(func: Callable[..., Any]) -> Callable[..., Any]:
    """func's name, docs and arguments, run in the loop's default executor."""

    @functools.wraps(func)
    async def run(*args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(func, *args, **kwargs))

    return run


disk_usage = _in_executor(_shutil.disk_usage)
chown = _in_executor(_shutil.chown)
which = _in_executor(_shutil.which)
make_archive = _in_executor(_shutil.make_archive)
unpack_archive = _in_executor(_shutil.unpack_archive)
