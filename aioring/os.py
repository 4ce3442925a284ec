"""aioring.os: every name of aiofiles.os, with the I/O on io_uring where it can be.

stat, lstat, rename, replace, remove, unlink, mkdir, rmdir, link, symlink and
fsync go through their io_uring opcodes; what io_uring cannot do (listdir,
scandir, readlink, access, getcwd, statvfs, the recursive makedirs, renames,
removedirs) runs in the loop's executor, as aiofiles does.  Every function
takes the os function's arguments plus keyword-only `loop` and `executor`
(used by the executor-backed ones) and returns and raises what os does.
"""

from __future__ import annotations

import asyncio
import functools
import os as _os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from . import _ops, _pathops
from . import ospath as path
from .base import wrap

__all__ = ["access", "chmod", "fsync", "ftruncate", "getcwd", "link", "listdir", "lstat", "makedirs", "mkdir",
           "path", "posix_fadvise", "readlink", "remove", "removedirs", "rename", "renames", "replace",
           "rmdir", "scandir", "sendfile", "stat", "statvfs", "symlink", "unlink", "walk", "wrap"]


def _on_ring(os_func: Callable[..., Any],
             ring_func: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """os_func's name, docs and arguments; the work done by ring_func."""

    @functools.wraps(os_func)
    async def run(*args: Any, loop: asyncio.AbstractEventLoop | None = None,
                  executor: Any = None, **kwargs: Any) -> Any:
        return await ring_func(*args, **kwargs)

    return run


stat = _on_ring(_os.stat, _pathops.stat)
lstat = _on_ring(_os.lstat, _pathops.lstat)
rename = _on_ring(_os.rename, _pathops.rename)
replace = _on_ring(_os.replace, _pathops.replace)
remove = _on_ring(_os.remove, _pathops.remove)
unlink = _on_ring(_os.unlink, _pathops.unlink)
mkdir = _on_ring(_os.mkdir, _pathops.mkdir)
rmdir = _on_ring(_os.rmdir, _pathops.rmdir)
link = _on_ring(_os.link, _pathops.link)
symlink = _on_ring(_os.symlink, _pathops.symlink)
ftruncate = _on_ring(_os.ftruncate, _pathops.ftruncate)


async def fsync(fd: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                executor: Any = None) -> None:
    """os.fsync through IORING_OP_FSYNC: raises what os.fsync raises."""
    await _ops.fsync(fd)


# Advice that only sets the file's readahead mode costs the kernel nothing;
# the rest may read (WILLNEED), write back or drop pages (DONTNEED), so it
# runs in the executor, as aiofiles runs os functions.
_ADVICE_AT_ONCE = frozenset(getattr(_os, name) for name in
                            ("POSIX_FADV_NORMAL", "POSIX_FADV_RANDOM", "POSIX_FADV_SEQUENTIAL")
                            if hasattr(_os, name))


async def posix_fadvise(fd: int, offset: int, length: int, advice: int, *,
                        loop: asyncio.AbstractEventLoop | None = None, executor: Any = None) -> None:
    """os.posix_fadvise: announce how fd's bytes from `offset` (`length` of
    them, 0: to the end) will be read: POSIX_FADV_RANDOM (no readahead),
    POSIX_FADV_SEQUENTIAL (more), POSIX_FADV_WILLNEED (read them in now),
    POSIX_FADV_DONTNEED (drop them from the page cache), ...

    The readahead modes are set at once; the advice that may do I/O runs in
    the loop's executor.  Raises what os.posix_fadvise raises: TypeError for
    a non-integer, OverflowError, OSError EBADF for a bad fd, ESPIPE for a
    pipe, EINVAL for unknown advice or a negative length.
    """
    if advice in _ADVICE_AT_ONCE:
        _os.posix_fadvise(fd, offset, length, advice)
        return
    running = asyncio.get_running_loop() if loop is None else loop
    await running.run_in_executor(executor, _os.posix_fadvise, fd, offset, length, advice)


renames = wrap(_os.renames)
makedirs = wrap(_os.makedirs)
removedirs = wrap(_os.removedirs)
readlink = wrap(_os.readlink)
listdir = wrap(_os.listdir)
scandir = wrap(_os.scandir)
access = wrap(_os.access)
getcwd = wrap(_os.getcwd)
sendfile = wrap(_os.sendfile)
statvfs = wrap(_os.statvfs)
chmod = wrap(_os.chmod)


async def walk(top: Any, topdown: bool = True,
               onerror: Callable[[OSError], Any] | None = None,
               followlinks: bool = False, *, executor: Any = None) -> AsyncIterator[
                   tuple[Any, list[Any], list[Any]]]:
    """os.walk as an async generator: each directory is listed in the executor.

    Yields (dirpath, dirnames, filenames) in os.walk's order; with topdown,
    editing dirnames in place prunes the walk, as with os.walk.
    """
    loop = asyncio.get_running_loop()
    top = _os.fspath(top)
    stack: list[Any] = [top]
    while stack:
        entry = stack.pop()
        if isinstance(entry, tuple):  # bottom-up: the directory's own turn, after its children
            yield entry
            continue
        try:
            dirs, files, links = await loop.run_in_executor(executor, _list_dir, entry)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        if topdown:
            yield entry, dirs, files  # the caller may prune dirs in place meanwhile
        else:
            stack.append((entry, dirs, files))
        stack.extend(reversed([_os.path.join(entry, d) for d in dirs
                               if followlinks or not links.get(d, False)]))


def _list_dir(top: Any) -> tuple[list[Any], list[Any], dict[Any, bool]]:
    """One directory, as os.walk sees it: names of dirs and files, and which dirs are links."""
    dirs, files, links = [], [], {}
    with _os.scandir(top) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                dirs.append(entry.name)
                try:
                    links[entry.name] = entry.is_symlink()
                except OSError:
                    links[entry.name] = False
            else:
                files.append(entry.name)
    return dirs, files, links
