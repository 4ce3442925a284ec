"""Bad input to every public function, one table row per mistake.

Each row makes one mistake with aioring and, where the stdlib has a function
for the same job (os, io, open, socket, asyncio's loop and streams,
tempfile), makes the same mistake with it: aioring must raise exactly the
stdlib's exception type, with its errno and filename.  Where the stdlib has
no counterpart the row names the clear TypeError or ValueError expected.
TypeError, ValueError and friends must come before anything reaches the
ring, and afterwards the file, pipe and sockets the mistakes were made on
still carry data and nothing is left in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import socket
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiofiles.threadpool
import pytest

import aioring
import aioring.os
import aioring.tempfile
from aioring import _ringbase

CONTENT = b"0123456789abcdef"
FAR = 2**70  # beyond any C type
BIG = 2**40  # a C long, but no fd or buffer is that large


class Env:
    """Everything the rows make their mistakes on, built for each row."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.path = os.path.join(base, "file.bin")
        with open(self.path, "wb") as f:
            f.write(CONTENT)
        self.wpath = os.path.join(base, "written.bin")
        self.missing = os.path.join(base, "missing", "nothing")
        self.subdir = os.path.join(base, "sub")
        os.mkdir(self.subdir)
        self.fds: list[int] = []
        self.closers: list[Any] = []
        self.ro = self._fd(os.open(self.path, os.O_RDONLY))
        self.wo = self._fd(os.open(self.wpath, os.O_WRONLY | os.O_CREAT, 0o644))
        self.dirfd = self._fd(os.open(base, os.O_RDONLY | os.O_DIRECTORY))
        self.r, self.w = (self._fd(fd) for fd in os.pipe())
        os.set_blocking(self.r, False)
        self.closed = self._closed_fd()
        self.a, self.b = self._sock(*socket.socketpair())
        for s in (self.a, self.b):
            s.setblocking(False)
        self.udp = self._sock(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        # Neither bound nor listening:
        self.tcp = self._sock(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        self.tcp.setblocking(False)
        self.closed_sock = socket.socket()
        self.closed_sock.close()
        # A socket object whose fd became a pipe's: socket functions meet an fd that is not a socket.
        self.notsock = self._sock(socket.socket())
        os.dup2(self.r, self.notsock.fileno())
        self.text = self._close(open(self.path))
        self.binary = self._close(open(self.path, "rb"))
        self.files: dict[str, Any] = {}
        self.afiles: dict[str, Any] = {}
        self.streams: dict[str, Any] = {}

    def _fd(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def _sock(self, *socks: socket.socket) -> Any:
        self.closers.extend(socks)
        return socks if len(socks) > 1 else socks[0]

    def _close(self, obj: Any) -> Any:
        self.closers.append(obj)
        return obj

    @staticmethod
    def _closed_fd() -> int:
        """An fd number nothing in this process has open, now or later in the row."""
        fd = 999
        while True:
            try:
                os.fstat(fd)
            except OSError:
                return fd
            fd -= 1

    # The stdlib file objects and aioring's, opened the same way, before the spy starts counting.
    async def open_files(self) -> None:
        modes = {"rb": (self.path, "rb", -1), "r": (self.path, "r", -1), "rb0": (self.path, "rb", 0),
                 "wb": (self.wpath, "wb", -1), "w": (self.wpath, "w", -1), "wb0": (self.wpath, "wb", 0)}
        for name, (path, mode, buffering) in modes.items():
            self.files[name] = self._close(open(path, mode, buffering))
            self.afiles[name] = await aioring.open(path, mode, buffering)
        for files, opener in ((self.files, open), (self.afiles, None)):
            if opener is None:
                f = await aioring.open(self.path, "rb")
                await f.close()
                t = await aioring.open(self.path, "r")
                await t.close()
            else:
                f = opener(self.path, "rb")
                f.close()
                t = opener(self.path)
                t.close()
            files["closed"], files["closed text"] = f, t

    async def open_streams(self) -> None:
        """aioring's reader and writer over a socket pair."""
        x, y = self._sock(*socket.socketpair())
        self.streams["aioring"] = await aioring.open_connection(sock=x)
        self.streams["peer"] = y

    async def close(self) -> None:
        for f in self.afiles.values():
            await f.close()
        if self.streams:
            writer = self.streams["aioring"][1]
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        for obj in self.closers:
            obj.close()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True)
class Row:
    """aioring's call, and the stdlib's call for the same mistake or the exception expected."""

    name: str
    ours: Callable[[Env], Awaitable[Any]]
    theirs: Callable[[Env], Any] | type[BaseException]
    kernel: bool = False  # the kernel is the one to say so: the operation is submitted
    streams: bool = False  # the row needs Env.streams
    random_names: bool = False  # the file names in the errors are random (tempfile)


ROWS: list[Row] = []


def row(name: str, ours: Callable[[Env], Any], theirs: Callable[[Env], Any] | type[BaseException],
        kernel: bool = False, streams: bool = False, random_names: bool = False) -> None:
    ROWS.append(Row(name, ours, theirs, kernel, streams, random_names))


# ------------------------------------------------------------ aioring.read, readinto, write, fsync
# Their stdlib counterparts are os.read / os.pread, FileIO.readinto (os.readinto from Python 3.14)
# and os.preadv, os.write / os.pwrite, os.fsync.
def fileio_readinto(fd: Any, buf: Any) -> int:
    with io.FileIO(fd, "r", closefd=False) as f:
        return f.readinto(buf)


for what, fd in (("str", "3"), ("float", 3.0), ("None", None), ("bytes", b"3")):
    row(f"read: fd of type {what}", lambda e, fd=fd: aioring.read(fd, 4), lambda e, fd=fd: os.read(fd, 4))
    row(f"readinto: fd of type {what}", lambda e, fd=fd: aioring.readinto(fd, bytearray(4)),
        lambda e, fd=fd: os.readv(fd, [bytearray(4)]))
    row(f"write: fd of type {what}", lambda e, fd=fd: aioring.write(fd, b"x"),
        lambda e, fd=fd: os.write(fd, b"x"))
    row(f"fsync: fd of type {what}", lambda e, fd=fd: aioring.fsync(fd), lambda e, fd=fd: os.fsync(fd))
row("read: fd beyond a C int", lambda e: aioring.read(BIG, 4), lambda e: os.read(BIG, 4))
row("read: fd beyond any C type", lambda e: aioring.read(FAR, 4), lambda e: os.read(FAR, 4))
row("write: fd beyond a C int", lambda e: aioring.write(-BIG, b"x"), lambda e: os.write(-BIG, b"x"))
row("fsync: fd beyond a C int", lambda e: aioring.fsync(BIG), lambda e: os.fsync(BIG))
row("read: size of type str", lambda e: aioring.read(e.ro, "4"), lambda e: os.read(e.ro, "4"))
row("read: size of type float", lambda e: aioring.read(e.ro, 4.0), lambda e: os.read(e.ro, 4.0))
row("read: negative size", lambda e: aioring.read(e.ro, -1), lambda e: os.read(e.ro, -1))
row("read: size beyond any C type", lambda e: aioring.read(e.ro, FAR), lambda e: os.read(e.ro, FAR))
row("read: offset of type str", lambda e: aioring.read(e.ro, 4, "0"), lambda e: os.pread(e.ro, 4, "0"))
row("read: negative offset", lambda e: aioring.read(e.ro, 4, -2), lambda e: os.pread(e.ro, 4, -2))
row("read: offset beyond any C type", lambda e: aioring.read(e.ro, 4, FAR), lambda e: os.pread(e.ro, 4, FAR))
row("write: negative offset", lambda e: aioring.write(e.wo, b"x", -2), lambda e: os.pwrite(e.wo, b"x", -2))
row("write: offset beyond any C type", lambda e: aioring.write(e.wo, b"x", FAR),
    lambda e: os.pwrite(e.wo, b"x", FAR))
row("readinto: negative offset", lambda e: aioring.readinto(e.ro, bytearray(4), -2),
    lambda e: os.preadv(e.ro, [bytearray(4)], -2))
row("readinto: offset of type float", lambda e: aioring.readinto(e.ro, bytearray(4), 0.0),
    lambda e: os.preadv(e.ro, [bytearray(4)], 0.0))
for what, buf in (("bytes", b"1234"), ("str", "1234"), ("int", 4), ("None", None),
                  ("read-only memoryview", memoryview(b"1234")), ("list", [0, 0, 0, 0])):
    row(f"readinto: buffer of type {what}", lambda e, buf=buf: aioring.readinto(e.ro, buf),
        lambda e, buf=buf: fileio_readinto(e.ro, buf))
row("readinto: non-contiguous buffer", lambda e: aioring.readinto(e.ro, memoryview(bytearray(8))[::2]),
    lambda e: fileio_readinto(e.ro, memoryview(bytearray(8))[::2]))
for what, data in (("str", "x"), ("int", 1), ("None", None), ("list", [b"x"])):
    row(f"write: data of type {what}", lambda e, data=data: aioring.write(e.wo, data),
        lambda e, data=data: os.write(e.wo, data))
row("write: non-contiguous data", lambda e: aioring.write(e.wo, memoryview(b"abcd")[::2]),
    lambda e: os.write(e.wo, memoryview(b"abcd")[::2]))
row("read: closed fd", lambda e: aioring.read(e.closed, 4), lambda e: os.read(e.closed, 4), kernel=True)
row("read: fd -1", lambda e: aioring.read(-1, 4), lambda e: os.read(-1, 4), kernel=True)
row("read: a directory", lambda e: aioring.read(e.dirfd, 4), lambda e: os.read(e.dirfd, 4), kernel=True)
row("read: a write-only fd", lambda e: aioring.read(e.wo, 4), lambda e: os.read(e.wo, 4), kernel=True)
row("read: the write end of a pipe", lambda e: aioring.read(e.w, 4), lambda e: os.read(e.w, 4), kernel=True)
row("readinto: closed fd", lambda e: aioring.readinto(e.closed, bytearray(4)),
    lambda e: os.readv(e.closed, [bytearray(4)]), kernel=True)
row("readinto: a directory at an offset", lambda e: aioring.readinto(e.dirfd, bytearray(4), 0),
    lambda e: os.preadv(e.dirfd, [bytearray(4)], 0), kernel=True)
row("write: closed fd", lambda e: aioring.write(e.closed, b"x"), lambda e: os.write(e.closed, b"x"),
    kernel=True)
row("write: a read-only fd", lambda e: aioring.write(e.ro, b"x"), lambda e: os.write(e.ro, b"x"), kernel=True)
row("write: a read-only fd at an offset", lambda e: aioring.write(e.ro, b"x", 0),
    lambda e: os.pwrite(e.ro, b"x", 0), kernel=True)
row("write: the read end of a pipe", lambda e: aioring.write(e.r, b"x"), lambda e: os.write(e.r, b"x"),
    kernel=True)
row("fsync: closed fd", lambda e: aioring.fsync(e.closed), lambda e: os.fsync(e.closed), kernel=True)
row("fsync: a pipe", lambda e: aioring.fsync(e.w), lambda e: os.fsync(e.w), kernel=True)

# ------------------------------------------------------------------------------ aioring.os
for what, path in (("int-like float", 1.5), ("None", None), ("list", ["x"])):
    row(f"os.stat: path of type {what}", lambda e, p=path: aioring.os.stat(p), lambda e, p=path: os.stat(p))
row("os.stat: NUL in the path", lambda e: aioring.os.stat("a\0b"), lambda e: os.stat("a\0b"))
row("os.stat: missing file", lambda e: aioring.os.stat(e.missing), lambda e: os.stat(e.missing), kernel=True)
row("os.stat: closed fd", lambda e: aioring.os.stat(e.closed), lambda e: os.stat(e.closed), kernel=True)
row("os.stat: dir_fd of type str", lambda e: aioring.os.stat("x", dir_fd="3"),
    lambda e: os.stat("x", dir_fd="3"))
row("os.stat: dir_fd that is a file", lambda e: aioring.os.stat("x", dir_fd=e.ro),
    lambda e: os.stat("x", dir_fd=e.ro), kernel=True)
row("os.lstat: NUL in the path", lambda e: aioring.os.lstat(b"a\0b"), lambda e: os.lstat(b"a\0b"))
row("os.lstat: an fd for the path", lambda e: aioring.os.lstat(e.ro), lambda e: os.lstat(e.ro))
row("os.stat: an fd with a dir_fd", lambda e: aioring.os.stat(e.ro, dir_fd=e.ro),
    lambda e: os.stat(e.ro, dir_fd=e.ro))
row("os.lstat: through a file", lambda e: aioring.os.lstat(e.path + "/x"),
    lambda e: os.lstat(e.path + "/x"), kernel=True)
row("os.mkdir: existing directory", lambda e: aioring.os.mkdir(e.subdir), lambda e: os.mkdir(e.subdir),
    kernel=True)
row("os.mkdir: mode of type str", lambda e: aioring.os.mkdir(e.missing, "755"),
    lambda e: os.mkdir(e.missing, "755"))
row("os.mkdir: missing parent", lambda e: aioring.os.mkdir(e.missing), lambda e: os.mkdir(e.missing),
    kernel=True)
row("os.rmdir: a file", lambda e: aioring.os.rmdir(e.path), lambda e: os.rmdir(e.path), kernel=True)
row("os.rmdir: a non-empty directory", lambda e: aioring.os.rmdir(e.base), lambda e: os.rmdir(e.base),
    kernel=True)
row("os.unlink: a directory", lambda e: aioring.os.unlink(e.subdir), lambda e: os.unlink(e.subdir),
    kernel=True)
row("os.remove: missing file", lambda e: aioring.os.remove(e.missing), lambda e: os.remove(e.missing),
    kernel=True)
row("os.remove: path of type int", lambda e: aioring.os.remove(3), lambda e: os.remove(3))
row("os.rename: missing source", lambda e: aioring.os.rename(e.missing, e.wpath),
    lambda e: os.rename(e.missing, e.wpath), kernel=True)
row("os.rename: directory over a file", lambda e: aioring.os.rename(e.subdir, e.path),
    lambda e: os.rename(e.subdir, e.path), kernel=True)
row("os.rename: NUL in the target", lambda e: aioring.os.rename(e.path, "a\0"),
    lambda e: os.rename(e.path, "a\0"))
row("os.replace: target of type None", lambda e: aioring.os.replace(e.path, None),
    lambda e: os.replace(e.path, None))
row("os.replace: file over a directory", lambda e: aioring.os.replace(e.path, e.subdir),
    lambda e: os.replace(e.path, e.subdir), kernel=True)
row("os.link: existing target", lambda e: aioring.os.link(e.path, e.wpath),
    lambda e: os.link(e.path, e.wpath), kernel=True)
row("os.link: a directory", lambda e: aioring.os.link(e.subdir, e.missing + "2"),
    lambda e: os.link(e.subdir, e.missing + "2"), kernel=True)
row("os.symlink: existing target", lambda e: aioring.os.symlink(e.path, e.subdir),
    lambda e: os.symlink(e.path, e.subdir), kernel=True)
row("os.symlink: NUL in the source", lambda e: aioring.os.symlink("a\0", e.missing),
    lambda e: os.symlink("a\0", e.missing))
row("os.ftruncate: negative length", lambda e: aioring.os.ftruncate(e.wo, -1),
    lambda e: os.ftruncate(e.wo, -1))
row("os.ftruncate: length of type str", lambda e: aioring.os.ftruncate(e.wo, "1"),
    lambda e: os.ftruncate(e.wo, "1"))
row("os.ftruncate: a read-only fd", lambda e: aioring.os.ftruncate(e.ro, 0),
    lambda e: os.ftruncate(e.ro, 0), kernel=True)
row("os.ftruncate: a pipe", lambda e: aioring.os.ftruncate(e.w, 0), lambda e: os.ftruncate(e.w, 0),
    kernel=True)
row("os.fsync: closed fd", lambda e: aioring.os.fsync(e.closed), lambda e: os.fsync(e.closed), kernel=True)
row("os.listdir: missing directory", lambda e: aioring.os.listdir(e.missing),
    lambda e: os.listdir(e.missing), kernel=True)
row("os.scandir: a file", lambda e: aioring.os.scandir(e.path), lambda e: os.scandir(e.path), kernel=True)
row("os.readlink: not a link", lambda e: aioring.os.readlink(e.path), lambda e: os.readlink(e.path),
    kernel=True)
row("os.makedirs: existing directory", lambda e: aioring.os.makedirs(e.subdir),
    lambda e: os.makedirs(e.subdir), kernel=True)
row("os.sendfile: count of type str", lambda e: aioring.os.sendfile(e.w, e.ro, 0, "1"),
    lambda e: os.sendfile(e.w, e.ro, 0, "1"))
row("os.access: mode of type str", lambda e: aioring.os.access(e.path, "r"), lambda e: os.access(e.path, "r"))
row("os.chmod: missing file", lambda e: aioring.os.chmod(e.missing, 0o600),
    lambda e: os.chmod(e.missing, 0o600), kernel=True)
row("os.statvfs: missing directory", lambda e: aioring.os.statvfs(e.missing), lambda e: os.statvfs(e.missing),
    kernel=True)
row("os.renames: missing source", lambda e: aioring.os.renames(e.missing, e.missing + "2"),
    lambda e: os.renames(e.missing, e.missing + "2"), kernel=True)
row("os.removedirs: a non-empty directory", lambda e: aioring.os.removedirs(e.base),
    lambda e: os.removedirs(e.base), kernel=True)
row("os.walk: top of type int", lambda e: _walk(5), lambda e: list(os.walk(5)))  # type: ignore[call-overload]
row("os.path.getsize: missing file", lambda e: aioring.os.path.getsize(e.missing),
    lambda e: os.path.getsize(e.missing), kernel=True)
row("os.path.samefile: missing file", lambda e: aioring.os.path.samefile(e.path, e.missing),
    lambda e: os.path.samefile(e.path, e.missing), kernel=True)


async def _walk(top: Any) -> None:
    async for _ in aioring.os.walk(top):
        pass


# ------------------------------------------------------------------------------ aioring.open
async def _open(*args: Any, **kwargs: Any) -> None:
    async with aioring.open(*args, **kwargs):
        pass


def _builtin_open(*args: Any, **kwargs: Any) -> None:
    with open(*args, **kwargs):
        pass


def open_row(name: str, args: Callable[[Env], tuple[Any, ...]], kernel: bool = False, **kwargs: Any) -> None:
    row(f"open: {name}", lambda e: _open(*args(e), **kwargs), lambda e: _builtin_open(*args(e), **kwargs),
        kernel)


open_row("a directory", lambda e: (e.subdir,), kernel=True)
open_row("a directory for writing", lambda e: (e.subdir, "w"), kernel=True)
open_row("missing file", lambda e: (e.missing,), kernel=True)
open_row("missing file by bytes", lambda e: (os.fsencode(e.missing), "rb"), kernel=True)
open_row("exclusive on an existing file", lambda e: (e.path, "x"), kernel=True)
open_row("through a file", lambda e: (e.path + "/x",), kernel=True)
open_row("NUL in the path", lambda e: ("a\0b",))
open_row("path of type float", lambda e: (1.5,))
open_row("path of type None", lambda e: (None,))
open_row("closed fd", lambda e: (e.closed, "rb"), kernel=True)
open_row("negative fd", lambda e: (-1, "rb"))
open_row("negative fd, text", lambda e: (-5,))
for mode in ("rw", "z", "rr", "rt+b", "bt", "ab+x", "", 3):
    open_row(f"mode {mode!r}", lambda e, m=mode: (e.path, m))
open_row("unknown encoding", lambda e: (e.path,), encoding="no-such-codec")
open_row("encoding of type int", lambda e: (e.path,), encoding=8)
open_row("a binary codec as encoding", lambda e: (e.path,), encoding="base64")
open_row("encoding in binary mode", lambda e: (e.path, "rb"), encoding="utf-8")
open_row("errors in binary mode", lambda e: (e.path, "rb"), errors="strict")
open_row("newline in binary mode", lambda e: (e.path, "rb"), newline="\n")
open_row("errors of type int", lambda e: (e.path,), errors=5)
open_row("newline 'x'", lambda e: (e.path,), newline="x")
open_row("newline of type int", lambda e: (e.path,), newline=1)
open_row("unbuffered text", lambda e: (e.path, "r", 0))
open_row("buffering of type str", lambda e: (e.path, "rb", "1"))
open_row("closefd=False with a path", lambda e: (e.path,), closefd=False)
open_row("opener that is not callable", lambda e: (e.path,), opener="x")
open_row("opener returning a negative fd", lambda e: (e.path,), opener=lambda path, flags: -5)
open_row("unknown keyword", lambda e: (e.path,), colour="blue")


# ------------------------------------------------------------------------------ file objects
async def _on_afile(e: Env, name: str, method: str, *args: Any) -> Any:
    result = getattr(e.afiles[name], method)(*args)
    return await result if inspect.isawaitable(result) else result


def _on_file(e: Env, name: str, method: str, *args: Any) -> Any:
    return getattr(e.files[name], method)(*args)


def file_row(name: str, file: str, method: str, *args: Any, kernel: bool = False) -> None:
    row(f"{file} file: {name}", lambda e: _on_afile(e, file, method, *args),
        lambda e: _on_file(e, file, method, *args), kernel)


for file in ("rb", "rb0", "r"):
    file_row("read of type str", file, "read", "4")
    file_row("read of type float", file, "read", 4.0)
    file_row("readline of type str", file, "readline", "4")
    file_row("readlines of type str", file, "readlines", "4")
    file_row("seek to a negative position", file, "seek", -1)
    file_row("seek with whence 7", file, "seek", 0, 7)
    file_row("seek of type str", file, "seek", "0")
    file_row("write to a read-only file", file, "write", b"x" if "b" in file else "x")
    file_row("truncate a read-only file", file, "truncate", 0)
    file_row("writelines to a read-only file", file, "writelines", [b"x" if "b" in file else "x"])
for file in ("rb", "rb0"):
    for what, buf in (("bytes", b"1234"), ("str", "1234"), ("read-only memoryview", memoryview(b"1234")),
                      ("int", 4)):
        file_row(f"readinto a buffer of type {what}", file, "readinto", buf)
    file_row("pread-like read with two arguments", file, "read", 4, 0)
    file_row("seek beyond any C type", file, "seek", FAR)
for file in ("wb", "wb0", "w"):
    file_row("read from a write-only file", file, "read")
    file_row("readline from a write-only file", file, "readline")
    file_row("truncate to a negative size", file, "truncate", -1)
    file_row("truncate of type str", file, "truncate", "0")
    file_row("write of type int", file, "write", 5)
    file_row("write of type None", file, "write", None)
    file_row("writelines of an int", file, "writelines", 5)
for file in ("wb", "wb0"):
    file_row("write of type str", file, "write", "x")
    file_row("writelines with a str", file, "writelines", ["x"])
file_row("read1 of type str", "rb", "read1", "4")
file_row("write of type bytes", "w", "write", b"x")
file_row("writelines with bytes", "w", "writelines", [b"x"])
for method, args in (("read", ()), ("readline", ()), ("readlines", ()), ("readinto", (bytearray(4),)),
                     ("write", (b"x",)), ("seek", (0,)), ("tell", ()), ("truncate", ()), ("flush", ()),
                     ("fileno", ()), ("isatty", ()), ("readable", ()), ("seekable", ())):
    file_row(f"{method} after close", "closed", method, *args)
for method, args in (("read", ()), ("readline", ()), ("write", ("x",)), ("seek", (0,)), ("tell", ()),
                     ("fileno", ())):
    file_row(f"{method} after close", "closed text", method, *args)
file_row("seek from the end by a non-zero amount", "r", "seek", 1, 2)
file_row("seek from the current position by a non-zero amount", "r", "seek", 1, 1)


# ------------------------------------------------------------------------------ tempfile
for mode in ("rt+b", "r+q", "", "rw"):
    row(f"tempfile.TemporaryFile: mode {mode!r}", lambda e, m=mode: _open_temp("TemporaryFile", mode=m),
        lambda e, m=mode: tempfile.TemporaryFile(mode=m).close())
    row(f"tempfile.NamedTemporaryFile: mode {mode!r}",
        lambda e, m=mode: _open_temp("NamedTemporaryFile", mode=m),
        lambda e, m=mode: tempfile.NamedTemporaryFile(mode=m).close())
row("tempfile.TemporaryFile: unknown encoding",
    lambda e: _open_temp("TemporaryFile", mode="w", encoding="no-such-codec"),
    lambda e: tempfile.TemporaryFile(mode="w", encoding="no-such-codec").close())
row("tempfile.TemporaryFile: missing dir", lambda e: _open_temp("TemporaryFile", dir=e.missing),
    lambda e: tempfile.TemporaryFile(dir=e.missing).close(), kernel=True, random_names=True)
row("tempfile.NamedTemporaryFile: missing dir", lambda e: _open_temp("NamedTemporaryFile", dir=e.missing),
    lambda e: tempfile.NamedTemporaryFile(dir=e.missing).close(), kernel=True, random_names=True)
row("tempfile.TemporaryDirectory: missing dir", lambda e: _open_temp("TemporaryDirectory", dir=e.missing),
    lambda e: tempfile.TemporaryDirectory(dir=e.missing).cleanup(), kernel=True, random_names=True)
row("tempfile.TemporaryDirectory: prefix of type int", lambda e: _open_temp("TemporaryDirectory", prefix=3),
    lambda e: tempfile.TemporaryDirectory(prefix=3).cleanup())


async def _open_temp(name: str, **kwargs: Any) -> None:
    async with getattr(aioring.tempfile, name)(**kwargs):
        pass


# ------------------------------------------------------------------------------ sockets
def in_asyncio(coro_fn: Callable[[asyncio.AbstractEventLoop], Awaitable[Any]]) -> Any:
    """Run coro_fn(loop) on a fresh asyncio event loop, the stdlib's (uvloop differs and lacks some
    sock_* methods), in a thread of its own: the running test loop waits for it."""
    outcome: list[Any] = []

    def run() -> None:
        loop = asyncio.SelectorEventLoop()
        try:
            outcome.append(loop.run_until_complete(coro_fn(loop)))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


# The counterpart is asyncio's loop's own sock_* method, where the loop lets an fd number
# through (it fails on an attribute) a TypeError.
def sock_row(name: str, method: str, args: Callable[[Env], tuple[Any, ...]],
             theirs: Callable[[Env], Any] | type[BaseException] | None = None, kernel: bool = False) -> None:
    def ours(e: Env) -> Any:
        return getattr(aioring, method)(*args(e))

    def loops(e: Env) -> Any:
        if not hasattr(asyncio.SelectorEventLoop, method):  # the datagram ones came in 3.11
            sock, *rest = args(e)
            return getattr(sock, method.removeprefix("sock_"))(*rest)
        return in_asyncio(lambda loop: getattr(loop, method)(*args(e)))

    row(f"{method}: {name}", ours, theirs if theirs is not None else loops, kernel)


for method, args in (("sock_recv", (4,)), ("sock_recv_into", (bytearray(4),)), ("sock_sendall", (b"x",)),
                     ("sock_recvfrom", (4,)), ("sock_recvfrom_into", (bytearray(4),)),
                     ("sock_sendto", (b"x", ("127.0.0.1", 9))), ("sock_accept", ()),
                     ("sock_connect", (("127.0.0.1", 9),))):
    sock_row("an fd number instead of a socket", method, lambda e, a=args: (e.a.fileno(), *a), TypeError)
    sock_row("a file object instead of a socket", method, lambda e, a=args: (e.binary, *a), TypeError)
    sock_row("a closed socket", method, lambda e, a=args: (e.closed_sock, *a), kernel=True)
sock_row("negative size", "sock_recv", lambda e: (e.a, -1), lambda e: e.a.recv(-1))
sock_row("size of type str", "sock_recv", lambda e: (e.a, "4"), lambda e: e.a.recv("4"))
sock_row("size beyond any C type", "sock_recv", lambda e: (e.a, FAR), lambda e: e.a.recv(FAR))
sock_row("a pipe's fd", "sock_recv", lambda e: (e.notsock, 4), lambda e: e.notsock.recv(4), kernel=True)
sock_row("a pipe's fd", "sock_recv_into", lambda e: (e.notsock, bytearray(4)),
         lambda e: e.notsock.recv_into(bytearray(4)), kernel=True)
sock_row("a pipe's fd", "sock_sendall", lambda e: (e.notsock, b"x"), lambda e: e.notsock.sendall(b"x"),
         kernel=True)
sock_row("a pipe's fd", "sock_accept", lambda e: (e.notsock,), lambda e: e.notsock.accept(), kernel=True)
for what, buf in (("bytes", b"1234"), ("str", "1234"), ("read-only memoryview", memoryview(b"1234")),
                  ("int", 4)):
    sock_row(f"buffer of type {what}", "sock_recv_into", lambda e, b=buf: (e.a, b),
             lambda e, b=buf: e.a.recv_into(b))
    sock_row(f"buffer of type {what}", "sock_recvfrom_into", lambda e, b=buf: (e.udp, b),
             lambda e, b=buf: e.udp.recvfrom_into(b))
sock_row("nbytes beyond the buffer", "sock_recvfrom_into", lambda e: (e.udp, bytearray(4), 5),
         lambda e: e.udp.recvfrom_into(bytearray(4), 5))
sock_row("negative nbytes", "sock_recvfrom_into", lambda e: (e.udp, bytearray(4), -1),
         lambda e: e.udp.recvfrom_into(bytearray(4), -1))
sock_row("negative size", "sock_recvfrom", lambda e: (e.udp, -1), lambda e: e.udp.recvfrom(-1))
for what, data in (("str", "x"), ("int", 1), ("None", None), ("list", [b"x"])):
    sock_row(f"data of type {what}", "sock_sendall", lambda e, d=data: (e.a, d),
             lambda e, d=data: e.a.sendall(d))
    sock_row(f"data of type {what}", "sock_sendto", lambda e, d=data: (e.udp, d, ("127.0.0.1", 9)),
             lambda e, d=data: e.udp.sendto(d, ("127.0.0.1", 9)))
for what, address in (("a str", "127.0.0.1"), ("a 1-tuple", ("127.0.0.1",)),
                      ("a 3-tuple", ("127.0.0.1", 9, 0)),
                      ("port of type str", ("127.0.0.1", "x")), ("port out of range", ("127.0.0.1", 70000)),
                      ("host of type int", (5, 9)), ("None", None)):
    sock_row(f"address {what}", "sock_sendto", lambda e, a=address: (e.udp, b"x", a),
             lambda e, a=address: e.udp.sendto(b"x", a))
    sock_row(f"address {what}", "sock_connect", lambda e, a=address: (e.tcp, a),
             lambda e, a=address: e.tcp.connect(a))
sock_row("a socket that is not listening", "sock_accept", lambda e: (e.tcp,), lambda e: e.tcp.accept(),
         kernel=True)
sock_row("a datagram socket", "sock_accept", lambda e: (e.udp,), lambda e: e.udp.accept(), kernel=True)
sock_row("a connected socket", "sock_connect", lambda e: (e.a, e.a.getsockname()),
         lambda e: e.a.connect(e.a.getsockname()), kernel=True)
sock_row("a text file", "sock_sendfile", lambda e: (e.a, e.text))
sock_row("a datagram socket", "sock_sendfile", lambda e: (e.udp, e.binary))
sock_row("a negative offset", "sock_sendfile", lambda e: (e.a, e.binary, -1))
sock_row("an offset of type str", "sock_sendfile", lambda e: (e.a, e.binary, "0"))
sock_row("count 0", "sock_sendfile", lambda e: (e.a, e.binary, 0, 0))
sock_row("a negative count", "sock_sendfile", lambda e: (e.a, e.binary, 0, -1))
sock_row("a count of type float", "sock_sendfile", lambda e: (e.a, e.binary, 0, 1.0))
sock_row("a path instead of a file", "sock_sendfile", lambda e: (e.a, e.path), TypeError)


# ------------------------------------------------------------------------------ streams
# aioring's StreamReader and StreamWriter against asyncio's, each over its own socket pair.
def _attribute(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


async def _on_stream(e: Env, side: int, method: str, *args: Any) -> Any:
    result = _attribute(e.streams["aioring"][side], method)(*args)
    return await result if inspect.isawaitable(result) else result


async def _on_asyncio_stream(side: int, method: str, *args: Any) -> Any:
    x, y = socket.socketpair()
    with y:
        streams = await asyncio.open_connection(sock=x)
        try:
            result = _attribute(streams[side], method)(*args)
            return await result if inspect.isawaitable(result) else result
        finally:
            streams[1].close()
            await streams[1].wait_closed()


def stream_row(name: str, side: int, method: str, *args: Any,
               theirs: type[BaseException] | None = None) -> None:
    row(f"stream {('reader', 'writer')[side]}: {name}", lambda e: _on_stream(e, side, method, *args),
        theirs if theirs is not None else
        lambda e: in_asyncio(lambda loop: _on_asyncio_stream(side, method, *args)),
        streams=True)


def asyncio_row(name: str, ours: Callable[[Env], Any], theirs: Callable[[Env], Awaitable[Any]],
                kernel: bool = False) -> None:
    """aioring's call against asyncio's, run on asyncio's own loop."""
    row(name, ours, lambda e: in_asyncio(lambda loop: theirs(e)), kernel)


stream_row("read of type str", 0, "read", "4")
stream_row("readexactly a negative size", 0, "readexactly", -1)
stream_row("readexactly of type str", 0, "readexactly", "4")
stream_row("readuntil an empty separator", 0, "readuntil", b"")
stream_row("readinto a bytes object", 0, "readinto", b"1234", theirs=TypeError)
stream_row("readinto a str", 0, "readinto", "1234", theirs=TypeError)
stream_row("readinto a read-only memoryview", 0, "readinto", memoryview(b"1234"), theirs=TypeError)
stream_row("readinto a non-contiguous buffer", 0, "readinto", memoryview(bytearray(8))[::2], theirs=TypeError)
stream_row("readinto_exactly a bytes object", 0, "readinto_exactly", b"1234", theirs=TypeError)
stream_row("readinto_exactly an int", 0, "readinto_exactly", 4, theirs=TypeError)
stream_row("write of type str", 1, "write", "x")
stream_row("write of type int", 1, "write", 5)
stream_row("write of type None", 1, "write", None)
stream_row("writelines with a str", 1, "writelines", ["x"])
stream_row("get_extra_info without a name", 1, "get_extra_info")
stream_row("write buffer limits high below low", 1, "transport.set_write_buffer_limits", 1, 2)
stream_row("write buffer limits negative", 1, "transport.set_write_buffer_limits", -1)
stream_row("readexactly beyond any C type", 0, "readexactly", FAR * -1)
asyncio_row("open_connection: limit 0", lambda e: aioring.open_connection(sock=e.a, limit=0),
    lambda e: asyncio.open_connection(sock=e.a, limit=0))
asyncio_row("open_connection: host and sock", lambda e: aioring.open_connection("127.0.0.1", 9, sock=e.a),
    lambda e: asyncio.open_connection("127.0.0.1", 9, sock=e.a))
asyncio_row("open_connection: neither host nor sock", lambda e: aioring.open_connection(),
    lambda e: asyncio.open_connection())
asyncio_row("open_connection: a datagram socket", lambda e: aioring.open_connection(sock=e.udp),
    lambda e: asyncio.open_connection(sock=e.udp))
asyncio_row("open_unix_connection: missing path", lambda e: aioring.open_unix_connection(e.missing),
    lambda e: asyncio.open_unix_connection(e.missing), kernel=True)
asyncio_row("open_unix_connection: a regular file", lambda e: aioring.open_unix_connection(e.path),
    lambda e: asyncio.open_unix_connection(e.path), kernel=True)
asyncio_row("open_unix_connection: NUL in the path", lambda e: aioring.open_unix_connection("a\0b"),
    lambda e: asyncio.open_unix_connection("a\0b"), kernel=True)
asyncio_row("open_connection: port out of range", lambda e: aioring.open_connection("127.0.0.1", 70000),
            lambda e: asyncio.open_connection("127.0.0.1", 70000))
asyncio_row("open_connection: port of type list", lambda e: aioring.open_connection("127.0.0.1", [1]),
            lambda e: asyncio.open_connection("127.0.0.1", [1]))
asyncio_row("open_unix_connection: a path too long", lambda e: aioring.open_unix_connection("x" * 200),
            lambda e: asyncio.open_unix_connection("x" * 200))
asyncio_row("start_unix_server: a path too long", lambda e: aioring.start_unix_server(print, "x" * 200),
            lambda e: asyncio.start_unix_server(print, "x" * 200))
asyncio_row("start_server: host of type int", lambda e: aioring.start_server(print, 5, 0),
            lambda e: asyncio.start_server(print, 5, 0))
asyncio_row("start_server: port out of range", lambda e: aioring.start_server(print, "127.0.0.1", 70000),
    lambda e: asyncio.start_server(print, "127.0.0.1", 70000))
asyncio_row("start_unix_server: a path through a file",
            lambda e: aioring.start_unix_server(print, e.path + "/s"),
    lambda e: asyncio.start_unix_server(print, e.path + "/s"), kernel=True)
row("open_pipe_reader: a str", lambda e: aioring.open_pipe_reader("3"), TypeError)
row("open_pipe_reader: a closed fd", lambda e: aioring.open_pipe_reader(e.closed), OSError, kernel=True)
row("open_pipe_reader: a regular file", lambda e: aioring.open_pipe_reader(e.ro), ValueError)
row("open_pipe_writer: a directory", lambda e: aioring.open_pipe_writer(e.dirfd), ValueError)
row("open_pipe_writer: a regular file", lambda e: aioring.open_pipe_writer(e.wo), ValueError)
row("open_pipe_writer: a float", lambda e: aioring.open_pipe_writer(1.0), TypeError)
row("threadpool.wrap: an int", lambda e: aioring.threadpool.wrap(5), lambda e: aiofiles.threadpool.wrap(5))
row("threadpool.wrap: a socket", lambda e: aioring.threadpool.wrap(e.a),
    lambda e: aiofiles.threadpool.wrap(e.a))


# ------------------------------------------------------------------------------ the test
class _Spy:
    """Counts the operations handed to any ring (both backends start theirs here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = 0
        start = _ringbase.RingBase.start

        def counting(ring: Any, *args: Any, **kwargs: Any) -> Any:
            self.started += 1
            return start(ring, *args, **kwargs)

        monkeypatch.setattr(_ringbase.RingBase, "start", counting)


async def _outcome(call: Callable[[], Any]) -> BaseException | None:
    try:
        result = call()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        return exc
    return None


def test_the_table_is_large() -> None:
    assert len(ROWS) >= 300, len(ROWS)
    assert len({r.name for r in ROWS}) == len(ROWS), "two rows share a name"


@pytest.mark.parametrize("case", ROWS, ids=[r.name for r in ROWS])
async def test_bad_input(case: Row, disk_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env(disk_dir)
    try:
        await env.open_files()
        if case.streams:
            await env.open_streams()
        in_flight = aioring.statistics()["in_flight"]
        if isinstance(case.theirs, type):
            expected: BaseException | None = None
            expected_type = case.theirs
        else:
            theirs = case.theirs
            expected = await _outcome(lambda: theirs(env))
            assert expected is not None, "the stdlib accepts this: not a mistake"
            expected_type = type(expected)
        spy = _Spy(monkeypatch)
        got = await _outcome(lambda: case.ours(env))
        started = spy.started
        monkeypatch.undo()
        assert got is not None, f"aioring accepted it; the stdlib raises {expected_type.__name__}"
        if expected is None:
            assert isinstance(got, expected_type), repr(got)
        else:
            assert type(got) is expected_type, f"{got!r} where the stdlib raises {expected!r}"
        if isinstance(expected, OSError):
            assert isinstance(got, OSError)
            assert got.errno == expected.errno
            names, their_names = [got.filename, got.filename2], [expected.filename, expected.filename2]
            if case.random_names:  # tempfile's: the same directory, another random name
                names = [os.path.dirname(n) if isinstance(n, str) else n for n in names]
                their_names = [os.path.dirname(n) if isinstance(n, str) else n for n in their_names]
            for name, theirs_name in zip(names, their_names, strict=True):
                if theirs_name is not None:  # where the stdlib names none, naming one is fine
                    assert name == theirs_name
        if not case.kernel:
            assert started == 0, "submitted before the mistake was found"
        await _still_works(env, in_flight)
    finally:
        await env.close()


async def _still_works(env: Env, in_flight: int) -> None:
    """The fds the mistakes were made on still carry data, and nothing is left in flight."""
    os.write(env.w, b"p")
    assert await aioring.read(env.r, 1) == b"p"
    await aioring.sock_sendall(env.a, b"s")
    assert await aioring.sock_recv(env.b, 1) == b"s"
    assert await aioring.read(env.ro, len(CONTENT), 0) == CONTENT
    assert aioring.statistics()["in_flight"] == in_flight

