"""aioring.ospath (also aioring.os.path): aiofiles.ospath's functions.

Those that os.path answers from a stat (exists, isfile, isdir, islink,
getsize, getmtime, getatime, getctime, samefile) take it from aioring.os.stat
and lstat: from the kernel's caches at once, or through the ring.  They catch
and raise exactly what os.path's do.  abspath, ismount and sameopenfile run
os.path's function in the loop's executor, as aiofiles does.  Every function
takes keyword-only `loop` and `executor`, as aiofiles' do.
"""

from __future__ import annotations

import asyncio
import functools
import stat as _stat
from collections.abc import Awaitable, Callable
from os import path as _path
from typing import Any

from . import _pathops
from .base import wrap

__all__ = ["abspath", "exists", "getatime", "getctime", "getmtime", "getsize", "isdir", "isfile",
           "islink", "ismount", "samefile", "sameopenfile"]


def _like(os_func: Callable[..., Any]) -> Callable[[Callable[..., Awaitable[Any]]],
                                                   Callable[..., Awaitable[Any]]]:
    """os_func's name and docs on its counterpart here."""
    def decorate(func: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        return functools.wraps(os_func)(func)
    return decorate


@_like(_path.exists)
async def exists(path: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Any = None) -> bool:
    try:
        await _pathops.stat(path)
    except (OSError, ValueError):
        return False
    return True


@_like(_path.isfile)
async def isfile(path: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Any = None) -> bool:
    try:
        st = await _pathops.stat(path)
    except (OSError, ValueError):
        return False
    return _stat.S_ISREG(st.st_mode)


@_like(_path.isdir)
async def isdir(s: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                executor: Any = None) -> bool:
    try:
        st = await _pathops.stat(s)
    except (OSError, ValueError):
        return False
    return _stat.S_ISDIR(st.st_mode)


@_like(_path.islink)
async def islink(path: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                 executor: Any = None) -> bool:
    try:
        st = await _pathops.lstat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return _stat.S_ISLNK(st.st_mode)


@_like(_path.getsize)
async def getsize(filename: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                  executor: Any = None) -> int:
    return (await _pathops.stat(filename)).st_size


@_like(_path.getmtime)
async def getmtime(filename: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                   executor: Any = None) -> float:
    return (await _pathops.stat(filename)).st_mtime


@_like(_path.getatime)
async def getatime(filename: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                   executor: Any = None) -> float:
    return (await _pathops.stat(filename)).st_atime


@_like(_path.getctime)
async def getctime(filename: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                   executor: Any = None) -> float:
    return (await _pathops.stat(filename)).st_ctime


@_like(_path.samefile)
async def samefile(f1: Any, f2: Any, *, loop: asyncio.AbstractEventLoop | None = None,
                   executor: Any = None) -> bool:
    s1 = await _pathops.stat(f1)
    s2 = await _pathops.stat(f2)
    return _path.samestat(s1, s2)


abspath = wrap(_path.abspath)
ismount = wrap(_path.ismount)
sameopenfile = wrap(_path.sameopenfile)
