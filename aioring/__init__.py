"""aioring: io_uring for asyncio.

File, pipe and socket I/O through one io_uring per running event loop, with
completions delivered as ordinary asyncio futures, on asyncio's loop and on
uvloop.  `import aioring as aiofiles` gives code written for aiofiles the
same API with its I/O on the ring.
"""

from typing import TYPE_CHECKING

from . import threadpool
from ._backend import backend, set_sqpoll, statistics
from ._ops import aligned_buffer, fsync, read, readinto, write
from .threadpool import open, stderr, stderr_bytes, stdin, stdin_bytes, stdout, stdout_bytes

__all__ = [
    "Server",
    "StreamReader",
    "StreamWriter",
    "aligned_buffer",
    "backend",
    "fsync",
    "open",
    "open_connection",
    "open_pipe_reader",
    "open_pipe_writer",
    "open_unix_connection",
    "read",
    "readinto",
    "set_sqpoll",
    "shutil",
    "sock_accept",
    "sock_connect",
    "sock_recv",
    "sock_recv_into",
    "sock_recvfrom",
    "sock_recvfrom_into",
    "sock_sendall",
    "sock_sendfile",
    "sock_sendto",
    "start_server",
    "start_unix_server",
    "statistics",
    "stderr",
    "stderr_bytes",
    "stdin",
    "stdin_bytes",
    "stdout",
    "stdout_bytes",
    "tempfile",
    "threadpool",
    "write",
]
__version__ = "0.1.0"

# Sockets, streams, aioring.shutil and aioring.tempfile (and with them the
# stdlib's tempfile, random, shutil) are imported when first used: a program
# that only reads files does not carry them.
_LAZY = {
    **dict.fromkeys(["sock_accept", "sock_connect", "sock_recv", "sock_recv_into", "sock_recvfrom",
                     "sock_recvfrom_into", "sock_sendall", "sock_sendfile", "sock_sendto"], "._net"),
    **dict.fromkeys(["Server", "StreamReader", "StreamWriter", "open_connection", "open_pipe_reader",
                     "open_pipe_writer", "open_unix_connection", "start_server", "start_unix_server"],
                    "._streams"),
}

if TYPE_CHECKING:
    from . import shutil, tempfile
    from ._net import (sock_accept, sock_connect, sock_recv, sock_recv_into, sock_recvfrom,
                       sock_recvfrom_into, sock_sendall, sock_sendfile, sock_sendto)
    from ._streams import (Server, StreamReader, StreamWriter, open_connection, open_pipe_reader,
                           open_pipe_writer, open_unix_connection, start_server, start_unix_server)
else:
    def __getattr__(name: str) -> object:
        import importlib
        if name in ("tempfile", "shutil"):
            return importlib.import_module("." + name, __name__)
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, __name__), name)
        globals()[name] = value  # found directly from now on
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
