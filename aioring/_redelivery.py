"""L1: cancellations a task owes itself.

A task cancelled while the kernel held its operation waits for the
operation's CQE (Ring.settle).  When the operation completed anyway, its
result is returned, so that nothing the kernel did is lost, and the task
owes the cancellation it swallowed: its next ring operation raises it
instead of being submitted (deliver_owed, called before anything is
submitted or exported) or, if the task awaits something else first, it is
cancelled again on the next loop iteration.  Without the first rule a task
whose every operation completes anyway (page-cache reads) would never see
its cancellation.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["deliver_owed", "owed", "redeliver_later"]

# Tasks that swallowed a cancellation to return a late result, and still owe
# it: (message, Task.cancelling() then).  Callers test it (`if owed:`) before
# calling deliver_owed, which keeps the common case to one dict test.
owed: dict[asyncio.Task[Any], tuple[Any, int | None]] = {}


def redeliver_later(exc: asyncio.CancelledError) -> None:
    """The current task swallowed `exc` to return a late result: it owes it."""
    task = asyncio.current_task()
    if task is None:
        return
    cancelling = getattr(task, "cancelling", None)  # 3.11+
    pending = cancelling() if cancelling is not None else None
    msg = exc.args[0] if exc.args else None
    owed[task] = (msg, pending)
    task.get_loop().call_soon(_redeliver, task, msg, pending)


def deliver_owed() -> None:
    """Raise the cancellation the current task owes, if any (unless it took
    it back meanwhile), before anything is submitted.

    Raises asyncio.CancelledError with the message of the cancellation owed."""
    task = asyncio.current_task()
    if task is None or task not in owed:
        return
    msg, pending = owed.pop(task)
    if pending is not None and getattr(task, "cancelling")() < pending:  # noqa: B009
        return  # uncancelled meanwhile, e.g. by the timeout block it left
    raise asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()


def _redeliver(task: asyncio.Task[Any], msg: Any, pending: int | None) -> None:
    if owed.pop(task, None) is None:
        return  # raised by the task's next operation already
    if task.done():
        return  # it finished with the result: nothing left to cancel
    if pending is not None:  # 3.11+: Task.cancelling and Task.uncancel exist
        if getattr(task, "cancelling")() < pending:  # noqa: B009
            return  # uncancelled meanwhile, e.g. by the timeout block it left
        getattr(task, "uncancel")()  # noqa: B009 - one request, delivered once
    task.cancel(msg)
