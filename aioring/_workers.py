"""L1: the worker threads both backends make system calls in.

A small pool of daemon threads (a request blocked forever, a read of an idle
pipe say, never holds up the interpreter's exit), started as requests need
them.  Each request is the plain system call twin of an io_uring prep
function (the binding's ``sync``); cffi releases the GIL during the call.
Workers block all signals, so that signals reach the main thread; system
calls interrupted anyway are retried in C.  Stopping a request a worker
makes interrupts its call with a real-time signal to that thread only
(``STOP_SIGNAL``), as the kernel's cancellation does; the call may have
completed first.

``ThreadRing`` (``_threads``) makes every blocking request here; ``Ring``
(``_ring``) makes here just the requests whose opcode the kernel lacks
(among the binding's ``SYNC_OPCODES``), so opcodes fall back one by one,
never the whole ring.
"""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ._binding import begin, end, stop_request, stop_signal_setup, sync
from ._core import Op

__all__ = ["STOP_SIGNAL", "run_in_worker", "stop_in_worker", "workers"]

_ECANCELED = -errno.ECANCELED


# ------------------------------------------------------------ worker pool
# The signal that stops a worker's blocked call (see src/binding.c).
STOP_SIGNAL = signal.SIGRTMAX - 3
# A stop signal can come just before the call blocks: it is sent again
# this often until the request is done.
_STOP_AGAIN = 0.01


class _Pool:
    """Daemon worker threads, started as requests need them, up to `size`."""

    def __init__(self, size: int) -> None:
        ret = stop_signal_setup(STOP_SIGNAL)
        if ret < 0:
            raise OSError(-ret, os.strerror(-ret))
        self._size = size
        self._queue: queue.SimpleQueue[tuple[int, Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)  # notified as each request ends
        self._threads = 0
        self._idle = 0
        self._next = 0
        self._queued: set[int] = set()  # requests no worker took yet
        self._running: dict[int, int] = {}  # request -> the thread making it
        self._dropped: set[int] = set()  # queued requests stopped before they started

    def submit(self, fn: Callable[..., None], *args: Any) -> int:
        """Queue fn(*args, request) for a worker; returns the request's id."""
        with self._lock:
            self._next = self._next % 0x7FFFFFFF + 1
            request = self._next
            self._queued.add(request)
            if self._idle:
                self._idle -= 1  # this request takes an idle worker
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"aioring-{self._threads}", daemon=True).start()
        self._queue.put((request, fn, args))
        return request

    def stop(self, request: int) -> bool:
        """Interrupt `request`'s call (or drop it if not started); False once it is done."""
        with self._lock:
            thread = self._running.get(request)
            if thread is not None:
                stop_request(thread, STOP_SIGNAL, request)
                return True
            if request in self._queued:
                self._dropped.add(request)
            return False

    def finish(self, requests: Iterable[int]) -> None:
        """Stop `requests` and wait until no worker makes any of them (a ring
        closes).  The stop signal is sent again and again: one that comes just
        before a call blocks is not seen by it."""
        left = set(requests)
        with self._finished:
            while True:
                left = {r for r in left if r in self._running or r in self._queued}
                if not left:
                    return
                for request in left:
                    thread = self._running.get(request)
                    if thread is not None:
                        stop_request(thread, STOP_SIGNAL, request)
                    else:
                        self._dropped.add(request)
                self._finished.wait(_STOP_AGAIN)

    def _work(self) -> None:
        # Signals go to the main thread; only the stop signal reaches a worker.
        signal.pthread_sigmask(signal.SIG_SETMASK, signal.valid_signals() - {STOP_SIGNAL})
        me = threading.get_ident()
        while True:
            request, fn, args = self._queue.get()
            with self._lock:
                self._queued.discard(request)
                dropped = request in self._dropped
                if dropped:
                    self._dropped.discard(request)
                else:
                    self._running[request] = me
            fn(*args, request, dropped)
            del fn, args  # what the call touched goes now, not at the next request
            with self._lock:
                self._running.pop(request, None)
                self._idle += 1
                self._finished.notify_all()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def workers() -> _Pool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = _Pool(min(32, (os.cpu_count() or 1) + 4))
    return _pool


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool = None  # the parent's workers do not exist here
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _call(prep: Any, args: tuple[Any, ...], keep: Any, pinned: Any, done: Callable[[int], None],
          request: int, dropped: bool) -> None:
    """In a worker: make the call, report its result.  What the call touches
    (`args`, `keep`, `pinned`) is held until it returned, whatever happened
    to the op."""
    if dropped:
        res = _ECANCELED
    else:
        begin(request)
        try:
            res = sync(prep, args, pinned)
        except BaseException:  # pragma: no cover - the C twins do not raise
            res = -errno.EIO
        end()
    done(res)


def run_in_worker(op: Op, done: Callable[[int], None]) -> int:
    """Make `op`'s request in a worker thread, as its system call twin (the
    binding's sync); done(result) is called there.  Returns the request's
    id, for stop_in_worker."""
    return workers().submit(_call, op.prep, op.args, op.keep, op.pinned, done)


def stop_in_worker(loop: asyncio.AbstractEventLoop, request: int, pending: Callable[[], bool]) -> None:
    """Interrupt `request` (as the kernel cancels a blocked request), again
    and again while pending() says its result has not come back."""
    if pending() and workers().stop(request):
        loop.call_later(_STOP_AGAIN, stop_in_worker, loop, request, pending)


