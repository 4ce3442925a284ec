"""L1: one ring per running event loop, and the backend that makes it.

The policy around the rings, apart from what a ring does:

* **The registry.**  ``get_ring(loop)`` finds the loop's ring, or makes it on
  first use on the loop's own thread.  Each loop keeps its ring (as
  ``loop._aioring_ring``); the registry and the ring found last refer to
  rings weakly.  A ring's operations refer to their loop through their
  futures: a strong reference to the ring from here would keep a loop dropped
  without close() alive for ever, and its ring with it.

* **Closing with the loop.**  ``loop.close`` is wrapped on the loop instance
  when its ring is made: it drains and closes the ring first.  A ring closed
  otherwise is found closed here and replaced by the next ``get_ring``.

* **The backend.**  Chosen once per process, at its first ring:
  ``Ring`` (io_uring), or ``ThreadRing`` (threads) where the kernel refuses
  io_uring or ``AIORING_BACKEND`` says so.

* **The polling ring.**  With ``aioring.set_sqpoll``, a loop's reads that
  wait for the device go to a second ring of the loop, whose submission
  queue a kernel thread polls (``device_ring``).  The loop's ring owns it:
  made at the loop's first such read, closed and abandoned with it.

* **Fork.**  A child clears the registry at fork and abandons the parent's
  rings: each drops its copies of mappings and fds without touching the
  parent's.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import warnings
import weakref
from collections.abc import Callable

from ._ring import Ring, setup_error
from ._ringbase import DEFAULT_ENTRIES, RingBase

__all__ = ["chosen_backend", "close_ring", "device_ring", "get_ring"]

_lock = threading.RLock()  # (get_ring closes a ring it failed to register under it)
_rings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[RingBase]] = \
    weakref.WeakKeyDictionary()


def _no_ring() -> None:
    return None


# The ring found last: one call and one attribute check on the hot path.
_last: Callable[[], RingBase | None] = _no_ring


def _ring_of(loop: asyncio.AbstractEventLoop) -> RingBase | None:
    ref = _rings.get(loop)
    return ref() if ref is not None else None


# The backend of this process, chosen at its first ring: "io_uring", or
# "threads" (see _threads) where the kernel refuses io_uring, or as the
# AIORING_BACKEND environment variable says.
_backend: str | None = None
_backend_lock = threading.Lock()
_BACKENDS = ("io_uring", "threads")


def chosen_backend() -> str:
    """The backend of this process: chosen once, at the first call.

    Raises OSError when AIORING_BACKEND=io_uring and io_uring is not
    available, ValueError for another value of AIORING_BACKEND."""
    global _backend
    if _backend is None:
        with _backend_lock:
            if _backend is None:
                _backend = _choose_backend()
    return _backend


def _choose_backend() -> str:
    wanted = os.environ.get("AIORING_BACKEND", "").strip().lower()
    if wanted and wanted not in _BACKENDS:
        raise ValueError(f"AIORING_BACKEND must be 'io_uring' or 'threads', not {wanted!r}")
    if wanted == "threads":
        return "threads"
    error = setup_error()
    if error is None:
        return "io_uring"
    if wanted == "io_uring" or error.errno in (errno.EMFILE, errno.ENFILE):
        # Asked for, or out of fds for now: that is no reason to settle for threads.
        raise OSError(error.errno, f"io_uring is not available: {error.strerror}")
    warnings.warn(f"aioring: io_uring is not available here ({error.strerror}, errno "
                  f"{errno.errorcode.get(error.errno or 0, error.errno)}); file, socket and pipe "
                  "I/O goes through threads and the event loop instead (AIORING_BACKEND=threads "
                  "says so without this warning)", RuntimeWarning, stacklevel=4)
    return "threads"


def get_ring(loop: asyncio.AbstractEventLoop | None = None, *, entries: int | None = None) -> RingBase:
    """The ring of `loop` (default: the running loop), made on first use.

    `entries` sizes the submission queue of a ring made by this call (the
    completion queue holds twice as many); it is ignored for an existing ring.
    Raises RuntimeError without a running loop or for a closed loop, OSError
    when the ring cannot be made.
    """
    global _last
    if loop is None:
        loop = asyncio.get_running_loop()
    ring = _last()
    if ring is not None and ring._loop_ref() is loop and not ring._closed:
        return ring
    ring = _ring_of(loop)
    if ring is None or ring._closed:
        with _lock:
            ring = _ring_of(loop)
            if ring is None or ring._closed:
                if loop.is_closed():
                    raise RuntimeError("Event loop is closed")
                ring = None
                try:  # (an interrupt part-way leaves no ring behind)
                    if chosen_backend() == "threads":
                        from ._threads import ThreadRing
                        ring = ThreadRing(loop, DEFAULT_ENTRIES if entries is None else entries)
                    else:
                        ring = Ring(loop, DEFAULT_ENTRIES if entries is None else entries)
                    _rings[loop] = weakref.ref(ring)
                    loop._aioring_ring = ring  # type: ignore[attr-defined]
                    _wrap_loop_close(loop)
                except BaseException:
                    if ring is not None:
                        _close(ring)
                    raise
    _last = weakref.ref(ring)
    return ring


# aioring.set_sqpoll's setting: the milliseconds a polling ring's kernel
# thread polls without work before it sleeps; None: no polling ring, every
# read goes to the loop's ring.
sqpoll_idle_ms: int | None = None
_sqpoll_refused = False  # (warned once)


def device_ring(loop: asyncio.AbstractEventLoop, ring: RingBase) -> RingBase:
    """With set_sqpoll on, `loop`'s polling ring (`ring`, the loop's ring,
    makes it at the first call and owns it); `ring` itself where there is
    none: set_sqpoll off, the threads backend, or a kernel that refused it
    (a RuntimeWarning says so once)."""
    polling = ring.polling
    if polling is not None and not polling._closed:
        return polling
    idle = sqpoll_idle_ms
    if idle is None or not isinstance(ring, Ring) or ring._closed:
        return ring
    try:
        polling = Ring(loop, ring.sq_entries, sq_thread_idle=idle)
    except OSError as exc:
        global _sqpoll_refused
        ring.polling = ring  # (not asked again for this loop)
        if not _sqpoll_refused:
            _sqpoll_refused = True
            warnings.warn(f"aioring: the kernel refused a ring with a polling thread ({exc.strerror}); "
                          "reads that wait for the device go to the loop's ring", RuntimeWarning,
                          stacklevel=5)
        return ring
    ring.polling = polling
    return polling


def close_ring(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Close the ring of `loop` (default: the running loop), draining it first.

    Raises RuntimeError without a running loop, or from another thread than
    the running loop's."""
    if loop is None:
        loop = asyncio.get_running_loop()
    ring = _ring_of(loop)
    if ring is not None:
        _close(ring)


def _close(ring: RingBase) -> None:
    """Close `ring` and take it out of the registry once it is closed."""
    try:
        ring.close()
    finally:
        if ring.closed:
            _forget(ring)


def _forget(ring: RingBase) -> None:
    global _last
    loop = ring._loop_ref()
    with _lock:
        if loop is not None:
            if _ring_of(loop) is ring:
                del _rings[loop]
            if getattr(loop, "_aioring_ring", None) is ring:
                loop._aioring_ring = None  # type: ignore[attr-defined]
        if _last() is ring:
            _last = _no_ring


def _wrap_loop_close(loop: asyncio.AbstractEventLoop) -> None:
    """Make loop.close() drain and close the loop's ring first (once per loop)."""
    if getattr(loop, "_aioring_close_wrapped", False):
        return
    original = loop.close

    def close() -> None:
        # (The ring as the loop keeps it: found when the collector finalizes
        # a loop dropped without close(), once weak references to it are gone.)
        ring = getattr(loop, "_aioring_ring", None)
        try:
            if ring is not None and not loop.is_running():
                _close(ring)
        finally:
            original()

    loop.close = close  # type: ignore[method-assign]
    loop._aioring_close_wrapped = True  # type: ignore[attr-defined]


def _after_fork_in_child() -> None:
    global _last, _lock
    _lock = threading.RLock()  # another thread may have held it at the fork
    rings = [ref() for ref in _rings.values()]
    _rings.clear()
    _last = _no_ring
    for ring in rings:
        if ring is not None:
            ring._abandon()


os.register_at_fork(after_in_child=_after_fork_in_child)
