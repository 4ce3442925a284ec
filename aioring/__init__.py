"""aioring: io_uring for asyncio.

File, pipe and socket I/O through one io_uring per running event loop, with
completions delivered as ordinary asyncio futures, on asyncio's loop and on
uvloop.  `import aioring as aiofiles` gives code written for aiofiles the
same API with its I/O on the ring.
"""

from . import tempfile, threadpool
from ._backend import backend, statistics
from ._ops import fsync, read, readinto, write
from .threadpool import open, stderr, stderr_bytes, stdin, stdin_bytes, stdout, stdout_bytes

__all__ = ["backend", "fsync", "open", "read", "readinto", "statistics", "stderr", "stderr_bytes", "stdin",
           "stdin_bytes", "stdout", "stdout_bytes", "tempfile", "threadpool", "write"]
__version__ = "0.1.0"
