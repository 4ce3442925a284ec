"""aioring.ospath (also aioring.os.path): aiofiles.ospath's functions.

Each is os.path's function run in the loop's executor: these are lookups that
io_uring has no opcode for, or whose answer (exists, isfile, ...) os.path
derives from a stat that would gain nothing from the ring.
"""

from __future__ import annotations

from os import path as _path

from .base import wrap

__all__ = ["abspath", "exists", "getatime", "getctime", "getmtime", "getsize", "isdir", "isfile",
           "islink", "ismount", "samefile", "sameopenfile"]

abspath = wrap(_path.abspath)
exists = wrap(_path.exists)
getatime = wrap(_path.getatime)
getctime = wrap(_path.getctime)
getmtime = wrap(_path.getmtime)
getsize = wrap(_path.getsize)
isdir = wrap(_path.isdir)
isfile = wrap(_path.isfile)
islink = wrap(_path.islink)
ismount = wrap(_path.ismount)
samefile = wrap(_path.samefile)
sameopenfile = wrap(_path.sameopenfile)
