# The compiled core (src/core.c; the seam is described in src/core.h).
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import EllipsisType
from typing import Any

WAITING: int
SUBMITTED: int
DONE: int
AWAITED: int

class Op:
    future: Any
    prep: Any
    args: tuple[Any, ...]
    keep: Any
    finish: Any  # (op, res) -> its result, a NewFile (src/treecopy.h), or None
    waiter: Any
    sink: Callable[[int], None] | None
    key: int
    state: int
    res: int
    poll_mask: int
    polling: bool
    readied: bool
    unbounded: bool
    cancelled: bool
    continued: bool
    pinned: Any
    address: int
    def __init__(self, future: Any, prep: Any, args: tuple[Any, ...], keep: Any,
                 finish: Callable[[Op, int], Any] | NewFile | None, poll_mask: int) -> None: ...
    def pin(self, buffer: Any, writable: bool = False, /) -> int: ...
    def unpin(self) -> None: ...

class Core:
    ops: dict[int, Op]
    unbounded: int
    submit_calls: int
    wakeups: int
    completions: int
    next_key: int
    sq_pending: int
    sq_tagged: int
    flush_handle: Any  # the flush's handle (a FlushHandle, or call_soon's), or None
    eager_task: Any  # the task of the iteration's eager run, or None
    task_of: Any  # task_of(loop): the loop's running task (asyncio.current_task), or None
    solo: bool
    closed: bool
    deferred: list[Callable[[], None]]
    limit: int
    waiting: Any  # policy's deque of held-back ops, or None
    eager_left: int
    preps: bool
    cq_due: bool
    def __init__(self, owner: Any, address: int, ops: dict[int, Op], cancel_entry: Op,
                 release: Callable[[Any], None], os_error: Callable[[int], OSError],
                 retry: Callable[[Op, int], int | None],
                 strand: Callable[[int, int, Op | None, list[tuple[int, int]]], None],
                 invalid_state: type[BaseException]) -> None: ...
    def start(self, op: Op, tag: int = 0, /) -> int: ...
    def start_chain(self, ops: list[Op], tag: int, link: int, /) -> bool: ...
    def launch(self, loop: Any, prep: Any, args: tuple[Any, ...], keep: Any,
               finish: Callable[[Op, int], Any] | NewFile | None, poll_mask: int, writable: bool,
               /) -> Op | None: ...
    def withdrawable(self, tag: int, /) -> Sequence[Op]: ...
    def cancel(self, key: int) -> bool: ...
    def submit(self) -> int: ...
    def reap(self, efd: int) -> int: ...
    def complete_batch(self, pairs: list[tuple[int, int]]) -> None: ...
    def harvest(self) -> list[tuple[int, int]]: ...
    def mute(self) -> None: ...
    def detach(self) -> None: ...
    def bind(self, policy: Any, loop_ref: Any, ready: Any, stranded: list[tuple[int, int]], /) -> None: ...
    def schedule_flush(self, loop: Any = None, /) -> None: ...
    def flush(self) -> None: ...

# The flush of a loop iteration (src/flush.c; see src/flush.h).
class FlushHandle:
    _cancelled: bool
    def _run(self) -> None: ...
    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...

# The channel's receive target (src/channel.c; see src/channel.h).
RECV_CHUNK: int
JOIN_MAX: int
POOL_MIN: int

class Receiver:
    _reader: Any
    _core: Core | None
    _flush: Callable[[], None] | None
    _armed: bool
    _closing: bool
    _paused: bool
    _into_op: Op | None
    _into_waiter: Any
    _waitall: int
    _scratch: Any
    _pull_skip: int
    _pull_backoff: int
    _fd: int
    _rwf_nowait: int
    _is_socket: bool
    _bodies: bool
    _into_small: bool
    _eager: bool
    _ended: bool
    @property
    def _into_out(self) -> bool: ...
    @property
    def _into_got(self) -> int: ...
    @property
    def _into_res(self) -> int: ...
    has_chunk: bool
    def __call__(self, res: int, /) -> None: ...
    def _deliver(self, res: int, /) -> None: ...
    def _rearm(self, op: Op, /) -> bool: ...
    def pull_due(self) -> bool: ...
    def pull(self) -> bool: ...
    def arrival(self, func_name: str, want: int = 0, /) -> Awaitable[None] | None: ...
    def _receive_into(self, buffer: Any, start: int, exact: bool, waiter: Any, /) -> bool: ...
    def _into_done(self, res: int, /) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...  # (3.12+; the chunk)

class Sender:
    _pending: deque[Any] | None
    _pending_size: int
    _sending: Op | None
    _write_exc: OSError | None
    _pooled: deque[tuple[int, Any]] | None
    _drain_waiters: list[Any] | None
    _defer: Callable[[Callable[[], None]], None] | None
    _send_soon: Callable[[], None] | None
    _core: Core | None
    _sent_total: int
    _fd: int
    _rwf_nowait: int
    _eof_wanted: bool
    _closing: bool
    _soon: bool
    _direct: bool
    _is_socket: bool
    def write(self, data: Any, /) -> None: ...
    def _send_now(self) -> None: ...

# Page-cache reads at an offset, served at once (src/fileops.c; see src/fileops.h).
def fileops_setup(plain: set[int], owed: dict[Any, Any], unyielded: list[int], yield_every: int,
                  size_max: int, cache_missed: Callable[[int], None],
                  pace_due: Callable[[], bool], fd_cache: dict[int, list[int]], cold_reads: list[int],
                  /) -> None: ...
def pace() -> bool: ...
def readinto_cached(fd: Any, buffer: Any, offset: Any, /) -> int: ...
def read_cached(fd: Any, size: Any, offset: Any, /) -> bytes | bytearray | EllipsisType | None: ...

TRY_READINTO: int
TRY_READ: int

class CacheFirst:
    """A coroutine function whose awaited call first tries the page cache in C."""
    def __init__(self, kind: int, public: Callable[..., Any], rest: Callable[..., Any],
                 served: Callable[[Any], Any], cold: Callable[..., Any] = ...,
                 raised: Callable[..., Any] = ..., /) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def cold_call(self, fd: int, size: int, offset: int, /) -> Any: ...

# A stream reader's reads that need no coroutine frame: read, readinto and
# readinto_exactly (src/streamread.c; see src/streamread.h).
class StreamRead:
    """A coroutine method whose reads of a ring stream that read ahead run in C."""
    def __init__(self, public: Callable[..., Any], name: str, read_ahead: int,
                 incomplete: type[BaseException], /) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, objtype: Any = None, /) -> Any: ...

# A file's read and seek without a coroutine frame: AsyncFileIO's
# (src/filemethod.c; see src/filemethod.h).
class FileMethod:
    """A coroutine method (read or seek) whose calls on a free file run in C."""
    def __init__(self, public: Callable[..., Any], name: str, raw_type: type, ops: Any, limit: int,
                 /) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, objtype: Any = None, /) -> Any: ...

# A whole file's rest from the page cache, at once, and the fstat an open needs
# (src/wholefile.c; see src/wholefile.h).
def read_whole_now(fd: int, n: int, offset: int, /) -> bytes | None: ...
def fstat_brief(fd: int, /) -> tuple[int, int, int, int, int]: ...
class NewFile:
    opened: bool
    def __init__(self, path: bytes, data: Any, /) -> None: ...
    def drop(self, res: int, /) -> None: ...

class CopyQueue:
    in_flight: int
    copied: int
    handed_back: int
    def __init__(self, core: Core, prep: Any, meta: int, size_max: int, limit: int,
                 hand_back: Callable[[tuple[Any, ...], bool, int | None], None], /) -> None: ...
    def add(self, jobs: Iterable[tuple[Any, ...]], src_dir: Any, dst_dir: Any, /) -> None: ...
    def close(self, waiter: Any, /) -> None: ...
    def cancel(self) -> None: ...

def copy_source(path: bytes, size_max: int, /) -> tuple[int, bytes | None, int, int, int, int] | None: ...
def copy_finish(src_fd: int, dst_fd: int, atime_ns: int, mtime_ns: int, mode: int, meta: int, /) -> bool: ...
