"""aioring: io_uring for asyncio.

File, pipe and socket I/O through one io_uring per running event loop, with
completions delivered as ordinary asyncio futures, on asyncio's loop and on
uvloop.
"""

from ._backend import backend, statistics
from ._ops import fsync, read, readinto, write

__all__ = ["backend", "fsync", "read", "readinto", "statistics", "write"]
__version__ = "0.1.0"
