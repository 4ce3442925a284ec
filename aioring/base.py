"""aiofiles.base counterparts: the executor wrapper for what io_uring cannot do."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

__all__ = ["wrap"]

def wrap(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Make a blocking function awaitable: it runs in `executor` (default: the
    loop's default executor), with the same arguments, result and exceptions.
    `loop` and `executor` are keyword-only and never passed to `func`."""

    @functools.wraps(func)
    async def run(*args: Any, loop: asyncio.AbstractEventLoop | None = None,
                  executor: Executor | None = None, **kwargs: Any) -> Any:
        if loop is None:
            loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(func, *args, **kwargs))

    return run
