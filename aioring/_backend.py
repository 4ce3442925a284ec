"""L3: which backend serves this process."""

from __future__ import annotations

import asyncio
import math

from . import _loops
from ._loops import chosen_backend, get_ring

__all__ = ["backend", "set_sqpoll", "statistics"]


def backend() -> str:
    """The backend that serves aioring's operations in this process:
    "io_uring", or "threads" where the kernel refuses io_uring (then a
    RuntimeWarning said so once) or AIORING_BACKEND=threads asks for it.

    Chosen once per process, at the first call or the first operation.
    Raises OSError when AIORING_BACKEND=io_uring and io_uring is not
    available, ValueError for another value of AIORING_BACKEND.
    """
    return chosen_backend()


# The polling ring's counters that statistics() reports, as "polling_<name>".
_POLLING_COUNTERS = ("submit_calls", "wakeups", "completions", "in_flight")


def statistics() -> dict[str, int]:
    """Counters of the running loop's ring: submit calls, wakeups, completions,
    operations held back by backpressure, cancellations, and what is in flight.
    Once the loop has a polling ring (set_sqpoll), its submit calls, wakeups,
    completions and reads in flight too, as polling_submit_calls,
    polling_wakeups, polling_completions and polling_in_flight.

    Raises RuntimeError outside a running event loop."""
    ring = get_ring(asyncio.get_running_loop())
    stats = ring.statistics()
    polling = ring.polling
    if polling is not None and polling is not ring:  # (ring: the kernel refused one)
        of_polling = polling.statistics()
        stats.update((f"polling_{name}", of_polling[name]) for name in _POLLING_COUNTERS)
    return stats


def set_sqpoll(idle: float | None = 0.05) -> float | None:
    """Send reads that wait for the device to a ring whose submission queue a
    kernel thread polls (IORING_SETUP_SQPOLL); None sends them back to the
    loop's ring (the default).  Returns the setting before, in seconds.

    The reads concerned are those of uncached pages at an offset (of files
    whose recent reads missed the page cache) and of O_DIRECT files, through
    ``aioring.read``, ``aioring.readinto`` and ``aioring.open``.  The kernel's
    part of each such read (its submission, and the completion's work) then
    runs in the polling thread instead of the loop's thread, on another CPU
    where there is one: more reads a second from one loop, at more CPU a
    read in all.

    Each loop makes its polling ring at its first such read after this call,
    with the `idle` then set: the thread sleeps after `idle` seconds (rounded
    up to a millisecond) without a submission, and wakes at the next.  The
    ring closes with the loop's ring.  Where the kernel refuses a polling
    ring, a RuntimeWarning says so once and the reads stay on the loop's
    ring; the threads backend has none.  The polling thread is one of the
    process's threads (Python 3.12+ warns at ``os.fork()`` of a process
    with more than one); a forked child makes polling rings of its own.

    Raises TypeError unless `idle` is a real number or None, ValueError
    unless it is positive and finite (at most 2**32 - 1 milliseconds).
    """
    before = _loops.sqpoll_idle_ms
    if idle is None:
        ms = None
    else:
        kind = type(idle)
        if isinstance(idle, (str, bytes, bytearray)) or not (hasattr(kind, "__float__") or
                                                             hasattr(kind, "__index__")):
            raise TypeError(f"idle must be a number of seconds or None, not {kind.__name__}")
        idle = float(idle)  # (an __index__ of any size: OverflowError, as float() raises it)
        if not (0 < idle and math.isfinite(idle)):
            raise ValueError(f"idle must be positive and finite, not {idle!r}")
        ms = math.ceil(idle * 1000)
        if ms >= 2 ** 32:
            raise ValueError(f"idle must be at most {(2 ** 32 - 1) / 1000} seconds")
    _loops.sqpoll_idle_ms = ms
    return None if before is None else before / 1000
