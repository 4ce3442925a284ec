"""L3: which backend serves this process."""

from __future__ import annotations

import asyncio
import functools

from ._liburing import ffi, lib
from ._ring import get_ring, os_error

__all__ = ["backend", "statistics"]


@functools.cache
def _io_uring_error() -> OSError | None:
    """Set up and tear down a tiny ring once: None when io_uring works here."""
    ring = ffi.new("struct io_uring *")
    out = ffi.new("unsigned[3]")
    ret = lib.aior_setup(ring, 2, 0, 0, out, out + 1, out + 2)
    if ret < 0:
        return os_error(ret)
    lib.io_uring_queue_exit(ring)
    return None


def backend() -> str:
    """The backend that serves aioring's operations in this process: "io_uring".

    Raises the OSError that io_uring_setup returned when the kernel refuses
    io_uring (ENOSYS, EPERM under a seccomp profile, ...).
    """
    error = _io_uring_error()
    if error is not None:
        raise error
    return "io_uring"


def statistics() -> dict[str, int]:
    """Counters of the running loop's ring: submit calls, wakeups, completions,
    operations held back by backpressure, cancellations, and what is in flight."""
    return get_ring(asyncio.get_running_loop()).statistics()
