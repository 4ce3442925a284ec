"""L0: the binding's Python side, the one module that imports ``aioring._liburing``.

The C it names is in ``src/binding_api.h`` (what each helper takes and
returns) and ``src/binding.cdef`` (the constants); ``_build_cffi.py`` builds
it.  Above this module nothing sees ``ffi`` or ``lib``: it gets

- opcodes (``OP_*``) and flags, as ints;
- prep functions (``prep_*``): each gets, prepares and tags one SQE when
  the ring calls it as ``prep(ring, *args, user_data)``, returning 0 or
  -errno.  Callers hand them, with their ``args``, to ``Ring.start`` without
  calling them; they are the binding's own objects (cffi functions), so
  that the core calls them without a Python frame between;
- the ring itself (``IoUring``): the ``struct io_uring`` and its mappings,
  made, probed and unmapped here, lent to the core by address;
- each prep function's system call twin (``sync``, ``SYNC_OPCODES``), which
  worker threads make where the kernel cannot;
- a few calls whose C result needs converting (``statx_fields``), and
  ``os_error``, the exception of every -errno.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable, Iterable
from typing import Any

from ._liburing import ffi, lib

Prep = Callable[..., int]  # prep(ring, *args, user_data) -> 0 or -errno
Sync = Callable[..., int]  # sync(*args) -> what the CQE would carry

# A pointer argument given no buffer (a prep function's `addr`, say).
NULL: Any = ffi.NULL
# release(cdata): let go of an export (ffi.from_buffer) or of memory the
# binding made now, not when the last reference to it goes.
release: Callable[[Any], None] = ffi.release


def os_error(res: int, filename: Any = None, filename2: Any = None) -> OSError:
    """The exception for a negative result (-errno of a CQE or of a call
    here): OSError picks the PEP 3151 subclass."""
    code = -res
    if filename2 is not None:
        return OSError(code, os.strerror(code), filename, None, filename2)
    if filename is not None:
        return OSError(code, os.strerror(code), filename)
    return OSError(code, os.strerror(code))


# ---- how this build linked liburing (_build_liburing.py) -------------------
LIBURING_VERSION: tuple[int, int] | None = (
    (lib.AIOR_LIBURING_MAJOR, lib.AIOR_LIBURING_MINOR) if lib.AIOR_LIBURING_MAJOR else None)
LIBURING_STATIC: bool = bool(lib.AIOR_LIBURING_STATIC)

# ---- ring features and setup flags ------------------------------------------
FEAT_NODROP: int = lib.IORING_FEAT_NODROP
FEAT_FAST_POLL: int = lib.IORING_FEAT_FAST_POLL
FEAT_RW_CUR_POS: int = lib.IORING_FEAT_RW_CUR_POS
FEAT_CQE_SKIP: int = lib.IORING_FEAT_CQE_SKIP
SETUP_SUBMIT_ALL: int = lib.IORING_SETUP_SUBMIT_ALL
SETUP_SQPOLL: int = lib.IORING_SETUP_SQPOLL
SETUP_COOP_TASKRUN: int = lib.IORING_SETUP_COOP_TASKRUN
SETUP_TASKRUN_FLAG: int = lib.IORING_SETUP_TASKRUN_FLAG

# ---- opcodes ----------------------------------------------------------------
OP_READ: int = lib.IORING_OP_READ
OP_WRITE: int = lib.IORING_OP_WRITE
OP_READV: int = lib.IORING_OP_READV
OP_WRITEV: int = lib.IORING_OP_WRITEV
OP_FSYNC: int = lib.IORING_OP_FSYNC
OP_POLL_ADD: int = lib.IORING_OP_POLL_ADD
OP_ASYNC_CANCEL: int = lib.IORING_OP_ASYNC_CANCEL
OP_SEND: int = lib.IORING_OP_SEND
OP_RECV: int = lib.IORING_OP_RECV
OP_SENDMSG: int = lib.IORING_OP_SENDMSG
OP_RECVMSG: int = lib.IORING_OP_RECVMSG
OP_ACCEPT: int = lib.IORING_OP_ACCEPT
OP_CONNECT: int = lib.IORING_OP_CONNECT
OP_SPLICE: int = lib.IORING_OP_SPLICE
OP_SHUTDOWN: int = lib.IORING_OP_SHUTDOWN
OP_OPENAT: int = lib.IORING_OP_OPENAT
OP_CLOSE: int = lib.IORING_OP_CLOSE
OP_STATX: int = lib.IORING_OP_STATX
OP_UNLINKAT: int = lib.IORING_OP_UNLINKAT
OP_RENAMEAT: int = lib.IORING_OP_RENAMEAT
OP_MKDIRAT: int = lib.IORING_OP_MKDIRAT
OP_LINKAT: int = lib.IORING_OP_LINKAT
OP_SYMLINKAT: int = lib.IORING_OP_SYMLINKAT
OP_FALLOCATE: int = lib.IORING_OP_FALLOCATE
OP_FTRUNCATE: int = lib.AIOR_OP_FTRUNCATE  # Linux 6.9; newer than liburing's enum


def opcodes() -> dict[str, int]:
    """Every opcode the binding names: name (without IORING_OP_) -> number."""
    names = {}
    for name in dir(lib):
        for prefix in ("IORING_OP_", "AIOR_OP_"):
            if name.startswith(prefix) and name != "IORING_OP_LAST":  # (the enum's end)
                names[name[len(prefix):]] = int(getattr(lib, name))
    return names


# ---- flags of the operations -------------------------------------------------
IOSQE_ASYNC: int = lib.IOSQE_ASYNC
IOSQE_IO_LINK: int = lib.IOSQE_IO_LINK
IOSQE_CQE_SKIP_SUCCESS: int = lib.IOSQE_CQE_SKIP_SUCCESS
FSYNC_DATASYNC: int = lib.IORING_FSYNC_DATASYNC
MSG_NOSIGNAL: int = lib.MSG_NOSIGNAL
MSG_WAITALL: int = lib.MSG_WAITALL
SOCK_CLOEXEC: int = lib.SOCK_CLOEXEC
AT_FDCWD: int = lib.AT_FDCWD
AT_EMPTY_PATH: int = lib.AT_EMPTY_PATH
AT_SYMLINK_NOFOLLOW: int = lib.AT_SYMLINK_NOFOLLOW
AT_REMOVEDIR: int = lib.AT_REMOVEDIR
STATX_BASIC_STATS: int = lib.STATX_BASIC_STATS
SPLICE_F_MOVE: int = lib.SPLICE_F_MOVE

# ---- prep functions ---------------------------------------------------------
prep_rw: Prep = lib.aior_prep_rw
prep_rw_sqe: Prep = lib.aior_prep_rw_sqe
prep_poll: Prep = lib.aior_prep_poll
prep_msg: Prep = lib.aior_prep_msg
prep_accept: Prep = lib.aior_prep_accept
prep_connect: Prep = lib.aior_prep_connect
prep_shutdown: Prep = lib.aior_prep_shutdown
prep_openat: Prep = lib.aior_prep_openat
prep_close: Prep = lib.aior_prep_close
prep_statx: Prep = lib.aior_prep_statx
prep_unlinkat: Prep = lib.aior_prep_unlinkat
prep_renameat: Prep = lib.aior_prep_renameat
prep_mkdirat: Prep = lib.aior_prep_mkdirat
prep_linkat: Prep = lib.aior_prep_linkat
prep_symlinkat: Prep = lib.aior_prep_symlinkat
prep_fallocate: Prep = lib.aior_prep_fallocate
prep_splice: Prep = lib.aior_prep_splice

# ---- the ring ----------------------------------------------------------------
class IoUring:
    """One io_uring of the kernel, as liburing's ``struct io_uring``: its fd and
    its submission and completion queues, mapped into this process.

    It owns them from the setup the constructor makes until `exit()` unmaps
    them.  The core borrows them through `handle` (the cdata every prep
    function takes as its ring, which the core keeps alive) and `address`
    (the struct's address, an int); whoever gave them to a core detaches it
    before calling `exit()`.

    `IoUring(entries, flag_sets)` sets up a ring of `entries` SQEs with the
    first of `flag_sets` (IORING_SETUP_* bits) the kernel accepts: EINVAL, a
    flag it lacks, tries the next.  Raises the OSError of io_uring_setup
    (ENOSYS, EPERM, ENOMEM: see docs/design.md).
    """

    __slots__ = ("address", "cq_entries", "features", "handle", "setup_flags", "sq_entries")

    def __init__(self, entries: int, flag_sets: Iterable[int] = (0,), sq_thread_idle: int = 0) -> None:
        handle = ffi.new("struct io_uring *")
        out = ffi.new("unsigned[3]")
        ret = -errno.EINVAL
        for flags in flag_sets:
            ret = lib.aior_setup(handle, entries, 0, flags, sq_thread_idle, out, out + 1, out + 2)
            if ret != -errno.EINVAL:
                break  # EINVAL: a flag this kernel lacks; try the next set
        if ret < 0:
            raise os_error(ret)
        self.handle: Any = handle  # None once unmapped
        self.address = int(ffi.cast("uintptr_t", handle))
        self.setup_flags: int = flags
        self.features: int = out[0]  # IORING_FEAT_* bits
        self.sq_entries: int = out[1]
        self.cq_entries: int = out[2]

    def _mapped(self) -> Any:
        handle = self.handle
        if handle is None:
            raise ValueError("this io_uring is unmapped")
        return handle

    @property
    def fd(self) -> int:
        """The ring's fd; ValueError once unmapped."""
        return int(lib.aior_ring_fd(self._mapped()))

    def probe(self) -> frozenset[int]:
        """The opcodes the kernel supports (IORING_REGISTER_PROBE); OSError
        if it cannot say."""
        supported = ffi.new("unsigned char[256]")
        n = lib.aior_probe(self._mapped(), supported, 256)
        if n < 0:
            raise os_error(n)
        return frozenset(op for op in range(n) if supported[op])

    def register_eventfd(self, efd: int) -> None:
        """Have the kernel signal `efd` whenever it posts a CQE; OSError if it refuses."""
        ret = lib.io_uring_register_eventfd(self._mapped(), efd)
        if ret < 0:
            raise os_error(ret)

    def max_workers(self, bound: int, unbound: int = 0) -> tuple[int, int]:
        """Set the most kernel workers (io-wq) that may run the calling
        thread's requests at once, of the bounded kind (path operations,
        regular files) and of the unbounded (sockets, pipes), 0 leaving one
        as it is (IORING_REGISTER_IOWQ_MAX_WORKERS); the two as they were
        before.  OSError if the kernel refuses."""
        values = ffi.new("unsigned int[2]", (bound, unbound))
        ret = lib.io_uring_register_iowq_max_workers(self._mapped(), values)
        if ret < 0:
            raise os_error(ret)
        return values[0], values[1]

    def wait(self, timeout: float) -> int:
        """Submit what the SQ holds, then block until a CQE is ready: 0, or
        -ETIME when none came within `timeout` seconds, or another -errno (a
        closing ring drains with it)."""
        return int(lib.aior_wait(self._mapped(), int(timeout * 1000)))

    def withdraw(self, user_data: int) -> bool:
        """Turn the SQE tagged `user_data`, if the kernel has not read it yet,
        into a NOP with the same tag (whose CQE still comes): True if so."""
        handle = self.handle
        return handle is not None and lib.aior_withdraw(handle, user_data) == 1

    def exit(self) -> None:
        """Unmap the queues and close the ring's fd (io_uring_queue_exit), once.

        In a forked child this drops the child's copies only: the kernel's
        ring lives on while the parent's fd holds it."""
        handle, self.handle = self.handle, None
        if handle is not None:
            lib.io_uring_queue_exit(handle)


# ---- the system call twins ------------------------------------------------------
# One per prep function, with its arguments less the ring and the tag,
# returning what the CQE would carry (a count, or -errno).  Worker threads
# make them: every blocking request of the threads backend, and on io_uring
# the requests whose opcode the kernel lacks.
sync_rw: Sync = lib.aior_sync_rw
sync_rw_sqe: Sync = lib.aior_sync_rw_sqe
sync_msg: Sync = lib.aior_sync_msg
sync_openat: Sync = lib.aior_sync_openat
sync_close: Sync = lib.aior_sync_close
sync_statx: Sync = lib.aior_sync_statx
sync_unlinkat: Sync = lib.aior_sync_unlinkat
sync_renameat: Sync = lib.aior_sync_renameat
sync_mkdirat: Sync = lib.aior_sync_mkdirat
sync_linkat: Sync = lib.aior_sync_linkat
sync_symlinkat: Sync = lib.aior_sync_symlinkat
sync_fallocate: Sync = lib.aior_sync_fallocate
sync_accept: Sync = lib.aior_sync_accept
sync_connect: Sync = lib.aior_sync_connect
sync_splice: Sync = lib.aior_sync_splice
sync_shutdown: Sync = lib.aior_sync_shutdown

# Each prep function's twin, and the opcode of its requests (None: args[0],
# whose fd is then args[1]; else the fd, if any, is args[0]).  The key None
# is a read or write the core prepares itself (see sync).
_TWINS: dict[Prep | None, tuple[Sync | None, int | None]] = {
    None: (None, None),
    prep_rw: (sync_rw, None),
    prep_rw_sqe: (sync_rw_sqe, None),
    prep_msg: (sync_msg, None),
    prep_openat: (sync_openat, OP_OPENAT),
    prep_close: (sync_close, OP_CLOSE),
    prep_statx: (sync_statx, OP_STATX),
    prep_unlinkat: (sync_unlinkat, OP_UNLINKAT),
    prep_renameat: (sync_renameat, OP_RENAMEAT),
    prep_mkdirat: (sync_mkdirat, OP_MKDIRAT),
    prep_linkat: (sync_linkat, OP_LINKAT),
    prep_symlinkat: (sync_symlinkat, OP_SYMLINKAT),
    prep_fallocate: (sync_fallocate, OP_FALLOCATE),
    prep_accept: (sync_accept, OP_ACCEPT),
    prep_connect: (sync_connect, OP_CONNECT),
    prep_splice: (sync_splice, OP_SPLICE),
    prep_shutdown: (sync_shutdown, OP_SHUTDOWN),
}
PREP_OPCODE: dict[Prep | None, int | None] = {prep: opcode for prep, (_, opcode) in _TWINS.items()}
_SYNC: dict[Prep | None, Sync | None] = {prep: twin for prep, (twin, _) in _TWINS.items()}
# The opcodes whose requests sync() makes (those of sync_rw, sync_msg and
# the twins above).
SYNC_OPCODES: frozenset[int] = frozenset({
    OP_READ, OP_WRITE, OP_READV, OP_WRITEV, OP_RECV, OP_SEND, OP_SENDMSG, OP_RECVMSG, OP_FSYNC, OP_FTRUNCATE,
    *(opcode for opcode in PREP_OPCODE.values() if opcode is not None),
})


def opcode_of(prep: Prep | None, args: tuple[Any, ...]) -> int:
    """The opcode of the request prep(ring, *args, tag) prepares (prep None:
    a read or write the core prepares, whose opcode is args[0])."""
    if prep is prep_poll:
        return OP_POLL_ADD
    opcode = PREP_OPCODE[prep]
    return args[0] if opcode is None else opcode


_CHARS = ffi.typeof("char[]")


def sync(prep: Prep | None, args: tuple[Any, ...], pinned: Any) -> int:
    """Make the request prep(ring, *args, tag) would prepare as its system
    call, now, in this thread (cffi releases the GIL during the call):
    what its CQE would carry, a count or -errno (-ECANCELED when
    stop_request stopped it).  KeyError for a prep function without a twin
    (prep_poll: a poll is the caller's to make).

    prep None is a read or write the core prepares itself (src/core.h):
    args are (opcode, fd, start, length, offset, rw_flags[, sqe_flags]),
    start and length in the buffer of `pinned` (None: no buffer), of which
    the call takes an export of its own, held until it returned."""
    if prep is not None:
        return _SYNC[prep](*args)  # type: ignore[misc]
    if pinned is None:
        return _sync_at(NULL, args)
    export = ffi.from_buffer(_CHARS, pinned)
    try:
        return _sync_at(export, args)
    finally:
        ffi.release(export)  # before the caller hears: its memoryview can be released at once


def _sync_at(export: Any, args: tuple[Any, ...]) -> int:
    if len(args) == 6:
        return sync_rw(args[0], args[1], export + args[2], args[3], args[4], args[5])
    return sync_rw_sqe(args[0], args[1], export + args[2], args[3], args[4], args[5], args[6])


# Stopping a worker's blocked call (src/binding_api.h): stop_signal_setup(sig)
# once, begin(request) and end() around each call, stop_request(thread, sig,
# request) from the canceller.
stop_signal_setup: Callable[[int], int] = lib.aior_stop_signal_setup
begin: Callable[[int], None] = lib.aior_begin
end: Callable[[], None] = lib.aior_end
stop_request: Callable[[int, int, int], int] = lib.aior_stop_request
# What an fd is: fd_may_block(fd) -> 0 when a call on it cannot block (a
# non-blocking pipe or socket); fs_type(fd) -> statfs's f_type, or -errno.
fd_may_block: Callable[[int], int] = lib.aior_fd_may_block
fs_type: Callable[[int], int] = lib.aior_fs_type

# ---- calls done at once -----------------------------------------------------
# open_now(dfd, path: bytes, flags) -> fd, or -errno (-EAGAIN: it could wait),
# or at most -FIFO_HELD: a FIFO's read end held open, fifo_held(result) its fd.
open_now: Callable[[int, bytes, int], int] = lib.aior_open_now
FIFO_HELD: int = lib.AIOR_FIFO_HELD


def fifo_held(res: int) -> int:
    """The fd of the FIFO read end an open_now result holds, or -1."""
    return -res - FIFO_HELD if res <= -FIFO_HELD else -1

_STATX = ffi.typeof("struct statx *")
_I64_16 = ffi.typeof("int64_t[16]")


def new_scratch(n: int) -> Any:
    """`n` bytes of C memory for requests to read into (prep_rw's addr),
    held as long as the returned object is."""
    return ffi.new("char[]", n)


def new_statx() -> Any:
    """A zeroed ``struct statx`` for prep_statx to fill; the caller keeps it
    (as the op's `keep`) until the request's CQE."""
    return ffi.new(_STATX)


def statx_fields(buf: Any) -> list[int]:
    """The 16 numbers an os.stat_result is made of, from a filled statx:
    mode, ino, dev, nlink, uid, gid, size, then atime, mtime and ctime each
    as seconds and nanoseconds, then blksize, blocks, rdev.  Each is C's
    int64_t: the unsigned ones past 2**63 come back negative."""
    fields = ffi.new(_I64_16)
    lib.aior_statx_fields(buf, fields)
    return ffi.unpack(fields, 16)


# ---- what the operations of files and sockets need built in C memory --------
# (L2's _ops, _net and _file: reads and writes of one buffer go to the core,
# which pins the caller's buffer itself; these are the rest.)
_UNSIGNED_2 = ffi.typeof("unsigned[2]")
_SOCKLEN = ffi.typeof("socklen_t *")
_IOVECS = ffi.typeof("struct iovec[]")
_MSGHDR = ffi.typeof("struct msghdr *")
_SOCKADDR = ffi.typeof("struct sockaddr *")
_alloc = ffi.new_allocator(should_clear_after_alloc=False)
SOCKADDR_SIZE: int = lib.aior_sockaddr_storage_size()
_MSGHDR_SIZE: int = lib.aior_msghdr_size()


def dio_align(fd: int) -> tuple[int, int] | None:
    """O_DIRECT's alignment on fd as the kernel reports it (statx's
    STATX_DIOALIGN): (buffer address, offset and length), or None where it
    does not say."""
    out = ffi.new(_UNSIGNED_2)
    if lib.aior_dio_align(fd, out, out + 1) != 0:
        return None
    return out[0], out[1]


def buffer_address(buffer: Any) -> int:
    """The address of `buffer`'s memory (for an error message)."""
    export = ffi.from_buffer(_CHARS, buffer, False)
    try:
        return int(ffi.cast("uintptr_t", export))
    finally:
        ffi.release(export)


class Filling:
    """A writable memoryview of a new bytes object that its caller fills, as
    os.read fills the one it returns, before anything else sees it (bytes
    are immutable only once shared): ``with Filling(out) as view``; the view
    and the export under it are released on leaving."""

    __slots__ = ("_export", "_view")

    def __init__(self, out: bytes) -> None:
        self._export = ffi.from_buffer(_CHARS, out, False)
        self._view = memoryview(ffi.buffer(self._export))

    def __enter__(self) -> memoryview:
        return self._view

    def __exit__(self, *exc: object) -> None:
        self._view.release()
        ffi.release(self._export)


class Exports:
    """Exports of Python buffers (ffi.from_buffer) that a binding request
    names, held in its `keep` until the CQE.  release() lets them go, so that
    a bytearray can be resized again at once.

    A request's `keep` holds the list of exports and the C memory, never the
    request itself: a request in a reference cycle would leave its exports
    to the garbage collector, which may clear an exported memoryview before
    the export that must release it."""

    __slots__ = ("_exports",)

    def __init__(self) -> None:
        self._exports: list[Any] = []

    def export(self, buffer: Any, writable: bool) -> Any:
        c = ffi.from_buffer(_CHARS, buffer, writable)
        self._exports.append(c)
        return c

    def release(self) -> None:
        exports = self._exports
        for c in exports:
            ffi.release(c)
        exports.clear()


class MsgRequest(Exports):
    """A SENDMSG or RECVMSG (prep_msg) of `nbytes` of one buffer, with an
    address: `name` (a sockaddr as bytes) for a send, room for the sender's
    for a receive.  `args` and `keep` go to Ring.start; release() once the
    CQE came (not if the kernel still holds it)."""

    __slots__ = ("_msg", "_name", "args", "keep")

    def __init__(self, opcode: int, fd: int, buffer: Any, nbytes: int, name: bytes | None,
                 flags: int) -> None:
        super().__init__()
        receive = opcode == OP_RECVMSG
        data = self.export(buffer, receive)
        iov = ffi.new(_IOVECS, 1)
        iov[0].iov_base = data
        iov[0].iov_len = nbytes
        self._msg = _alloc(_CHARS, _MSGHDR_SIZE)
        if receive:
            cname, size = _alloc(_CHARS, SOCKADDR_SIZE), SOCKADDR_SIZE
        else:
            assert name is not None
            cname, size = self.export(name, False), len(name)
        self._name = cname
        self.args = (opcode, fd, ffi.cast(_MSGHDR, self._msg), iov, 1, cname, size, flags)
        self.keep = (self._exports, self._msg, cname, iov)

    def address(self) -> bytes:
        """The sockaddr a RECVMSG's CQE left (as the kernel wrote it)."""
        return ffi.buffer(self._name, lib.aior_msg_namelen(ffi.cast(_MSGHDR, self._msg)))[:]


class AcceptRequest:
    """An ACCEPT (prep_accept) of a close-on-exec socket, with room for the
    peer's address; `args` and `keep` go to Ring.start."""

    __slots__ = ("_name", "_namelen", "args", "keep")

    def __init__(self, fd: int) -> None:
        self._name = _alloc(_CHARS, SOCKADDR_SIZE)
        self._namelen = ffi.new(_SOCKLEN, SOCKADDR_SIZE)
        self.args = (fd, ffi.cast(_SOCKADDR, self._name), self._namelen, SOCK_CLOEXEC)
        self.keep = (self._name, self._namelen)

    def reset(self) -> None:
        """Room for a whole address again, before the next accept."""
        self._namelen[0] = SOCKADDR_SIZE

    def address(self) -> bytes:
        """The peer's sockaddr, once the CQE came."""
        return ffi.buffer(self._name, self._namelen[0])[:]


class ConnectRequest(Exports):
    """A CONNECT (prep_connect) to `name`, a sockaddr as bytes; `args` and
    `keep` go to Ring.start."""

    __slots__ = ("args", "keep")

    def __init__(self, fd: int, name: bytes) -> None:
        super().__init__()
        cname = self.export(name, False)
        self.args = (fd, ffi.cast(_SOCKADDR, cname), len(name))
        self.keep = (self._exports,)


class VectorRead(Exports):
    """A READV (prep_rw) of fd at `offset` into the given writable buffers in
    turn (a bytes object its caller fills, as pread_now, is taken too);
    `args` and `keep` go to Ring.start; release() once the CQE came."""

    __slots__ = ("args", "keep")

    def __init__(self, fd: int, buffers: tuple[Any, ...], offset: int) -> None:
        super().__init__()
        iov = ffi.new(_IOVECS, len(buffers))
        for i, buffer in enumerate(buffers):
            iov[i].iov_base = self.export(buffer, False)
            iov[i].iov_len = len(buffer)
        self.args = (OP_READV, fd, iov, len(buffers), offset, 0)
        self.keep = (self._exports, iov)


class VectorSend(Exports):
    """A send of several buffers in turn, at the fd's own position: a
    SENDMSG (prep_msg) with `flags` on a socket, else a WRITEV (prep_rw).
    `prep`, `args` and `keep` go to Ring.start; the exports go with `keep`
    once the CQE came."""

    __slots__ = ("args", "keep", "prep")

    def __init__(self, fd: int, buffers: Iterable[Any], count: int, is_socket: bool,
                 flags: int) -> None:
        super().__init__()
        self.args: tuple[Any, ...]
        self.keep: tuple[Any, ...]
        iov = ffi.new(_IOVECS, count)
        for i, buffer in enumerate(itertools.islice(buffers, count)):
            c = self.export(buffer, False)
            iov[i].iov_base = c
            iov[i].iov_len = len(c)
        if is_socket:
            msg = _alloc(_CHARS, _MSGHDR_SIZE)
            self.prep = prep_msg
            self.args = (OP_SENDMSG, fd, ffi.cast(_MSGHDR, msg), iov, count, NULL, 0, flags)
            self.keep = (self._exports, msg, iov)
        else:
            self.prep = prep_rw
            self.args = (OP_WRITEV, fd, iov, count, -1, 0)
            self.keep = (self._exports, iov)


def uninitialized(n: int) -> memoryview:
    """A writable memoryview of n bytes of new memory, not zeroed: pages
    nothing writes cost no memory, and a large one no page faults up front."""
    return memoryview(ffi.buffer(_alloc(_CHARS, n)))
