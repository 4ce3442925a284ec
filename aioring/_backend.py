"""L3: which backend serves this process."""

from __future__ import annotations

import asyncio

from ._loops import chosen_backend, get_ring

__all__ = ["backend", "statistics"]


def backend() -> str:
    """The backend that serves aioring's operations in this process:
    "io_uring", or "threads" where the kernel refuses io_uring (then a
    RuntimeWarning said so once) or AIORING_BACKEND=threads asks for it.

    Chosen once per process, at the first call or the first operation.
    Raises OSError when AIORING_BACKEND=io_uring and io_uring is not
    available, ValueError for another value of AIORING_BACKEND.
    """
    return chosen_backend()


def statistics() -> dict[str, int]:
    """Counters of the running loop's ring: submit calls, wakeups, completions,
    operations held back by backpressure, cancellations, and what is in flight.

    Raises RuntimeError outside a running event loop."""
    return get_ring(asyncio.get_running_loop()).statistics()
