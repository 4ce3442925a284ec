#!/usr/bin/env python3
"""Framed echo over loopback TCP: aioring's streams and sock_* functions against their peers.

A frame is an 8-byte big-endian payload length followed by the payload.  A
client sends a frame, waits for the whole echo, checks it, and sends the next
(request/response ping-pong).  Server and client run in two separate worker
processes (multiprocessing, "spawn" context) that live for the whole run; the
parent only tells them what to do next.  Each worker is pinned to a CPU of its
own (--no-pin leaves them to the scheduler, which otherwise often puts both on
one CPU, taking turns, for some runs and not others).  --one-cpu pins both to
one CPU instead: they take turns, and frames per second then measure the CPU
a frame costs both ends together (a server under load is CPU-bound).

Frame sizes (payload, --sizes): 100 MB (10^8 bytes, the size of the experiment
this benchmark grew from), 1 MiB and 64 KiB over one connection; 1 KiB over 25
concurrent connections (--small-conns), each its own ping-pong.  64 MiB and any
other size can be asked for.

Variants (server and client alike; the async ones run on asyncio's default
loop and on uvloop, --loop):

* aioring-streams   aioring.start_server / open_connection; reads with
                    ``reader.readinto_exactly`` into preallocated buffers.  The
                    server reads the header into ``view[:8]`` and the payload into
                    ``view[8:8 + n]`` of one buffer and echoes ``write(view[:8 + n])``,
                    ``await drain()``: a memoryview, which aioring's writer copies.  The
                    client writes the header and the payload as bytes (not copied)
* aioring-sock      aioring.sock_accept / sock_connect, sock_recv_into loops into a
                    preallocated buffer, one sock_sendall of header + payload
* asyncio-streams   asyncio.start_server / open_connection, readexactly, write + drain
* asyncio-sock      loop.sock_recv_into loops + loop.sock_sendall
* asyncio-protocol  a naive asyncio.Protocol that accumulates bytes and cuts frames
* uvloop-bufferedprotocol  an asyncio.BufferedProtocol under uvloop whose get_buffer
                    hands out the rest of the preallocated frame buffer (uvloop only)
* floor             asyncio-protocol's client and server, but the server hands each
                    complete frame to a task of its connection through a future,
                    and the task writes the echo: what a reader that a task awaits
                    costs at least on that loop's own transport (a future and a
                    task wake-up per frame, nothing else), the bar for any
                    task-based reader there
* threads           blocking sockets, a thread per connection, recv_into + sendall:
                    the limit

TLS (--tls): aioring-streams-tls and asyncio-streams-tls are the two streams
variants over TLS (ssl= on start_server and open_connection; certificates made
by trustme in benchmarks/.data/tls), on both loops: asyncio-streams-tls on
uvloop is uvloop's TLS streams, the reference of the TLS targets (1 MiB and
1 KiB frames by default).

Measured per run, over a timed window after a warm-up: payload bytes echoed per
second (one direction; MB = 10^6 bytes), frames per second, and the CPU time of
the server and the client process (all their threads, kernel time included) in
the window, read from their process CPU clocks.  Each configuration runs
--repeat times, interleaved with the others of its frame size, and the median
is reported, with each variant's ratio to uvloop's asyncio streams and to the
threads variant.  A line per run shows where it stands (run n of N, time
elapsed and left); the results go to benchmarks/results/framed_echo.json and a
chart of them beside it, framed_echo.png (--json, --chart).

Buffer layout: every server that receives into a buffer of its own (aioring's
streams and sock_* functions, the loop's sock_* methods, the threads) keeps
the header at offset 0 and the payload from offset 8 of one buffer, and every
client receives the payload at offset 0 of a buffer of its own.  Where a
receive lands in memory changes what the kernel's copy costs: on the machine
this was written on, receiving 64 MiB frames at the very start of a
bytearray took the kernel twice as long as receiving them 8 bytes further in.
The same layout for every variant keeps that out of the comparison.

TCP_NODELAY: asyncio sets it on the sockets of its transports only when
``sock.proto == IPPROTO_TCP``, which a socket made with ``socket(AF_INET,
SOCK_STREAM)`` (proto 0) is not.  Every socket here is made with
proto=IPPROTO_TCP, listeners included (accepted sockets inherit the proto), and
none is given TCP_NODELAY before the library under test has had its chance:
the benchmark reads the option first (the report says which libraries had set
it), then sets it on every socket of every variant and reads it back.

Caveat on 64 KiB: a 64 KiB payload makes a 65,544-byte frame, just past 64 KiB.
On the 2-vCPU VM this was written on, loopback ping-pong with the threads
variant ran ~620 MB/s at 65,528-byte payloads (65,536-byte frames) but ~250
MB/s at 65,536 (and ~250 at 70,000): that row measures a TCP latency step of
the kernel more than the libraries, and is the noisiest.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import multiprocessing
import os
import re
import socket
import ssl
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from statistics import median
from typing import Any, cast

from benchlib import (
    KIB, MB, MIB, REPO, Progress, add_run_options, aioring_backend, die_with_parent, error_text, log,
    machine_cpu, machine_line, median_rows, new_loop, noise_notes, parse_list, pin_pair, pin_together,
    presets, print_failures, render, run_meta, uvloop, write_json,
)
from chart import Bar, Panel, draw

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring


HOST = "127.0.0.1"
HDR = struct.Struct(">Q")
ALL_VARIANTS = ("aioring-streams", "aioring-sock", "asyncio-streams", "asyncio-sock",
                "asyncio-protocol", "uvloop-bufferedprotocol", "floor", "threads")
ALL_LOOPS = ("asyncio", "uvloop")
ALL_SIZES = (100 * MB, 1 * MIB, 64 * KIB, 1 * KIB)
SMALL = 64 * KIB  # frames below this run over --small-conns connections, the rest over one
FULL_VERIFY_MAX = 64 * KIB  # payloads up to this are compared in full, every frame
SPOTS = 14  # 64-byte slices compared per larger frame, besides its first and last 64 bytes
PHASES = 8  # the slices move between frames (8 sets of positions)
SPOT = 64
REFERENCE = ("asyncio-streams", "uvloop")  # "uvloop streams" in the ratios
LIMIT = ("threads", "-")
BUFFERED = ("uvloop-bufferedprotocol", "uvloop")
PROTOCOL = ("asyncio-protocol", "uvloop")
TLS_VARIANTS = ("aioring-streams-tls", "asyncio-streams-tls")
TLS_SIZES = (1 * MIB, 1 * KIB)
TLS_REFERENCE = ("asyncio-streams-tls", "uvloop")  # uvloop's TLS streams
FLOOR = ("floor", "")  # the floor on the loop of the variant measured
REF_NAMES = {REFERENCE: "uvloop streams", LIMIT: "threads", BUFFERED: "uvloop's BufferedProtocol",
             PROTOCOL: "uvloop's Protocol", TLS_REFERENCE: "uvloop TLS streams",
             FLOOR: "the floor on its loop"}
# What aioring-streams should reach on each loop: (payload size, metric, reference, ratio at
# least, connections the runs of that size must have used: None for any[, the only loops it
# applies to]).
Goal = tuple[Any, ...]
TARGETS: tuple[Goal, ...] = (
    (1 * KIB, "frames_per_s", FLOOR, 0.9, 25), (1 * KIB, "frames_per_s", PROTOCOL, 0.9, 25, ("uvloop",)),
    (1 * KIB, "frames_per_s", REFERENCE, 1.5, 250),
    (64 * KIB, "mb_per_s", REFERENCE, 1.0, None), (1 * MIB, "mb_per_s", REFERENCE, 1.3, None),
    (64 * MIB, "mb_per_s", REFERENCE, 3.0, None), (64 * MIB, "mb_per_s", LIMIT, 0.95, None))
# Further goals, printed for information (neither list changes the exit status).
GOALS: tuple[Goal, ...] = (
    (100 * MB, "mb_per_s", REFERENCE, 4.0, None), (100 * MB, "mb_per_s", LIMIT, 1.0, None),
    (1 * KIB, "frames_per_s", BUFFERED, 1.0, 25), (1 * KIB, "frames_per_s", PROTOCOL, 1.0, 25))
# What aioring-streams-tls should reach on each loop (--tls).
TLS_TARGETS: tuple[Goal, ...] = (
    (1 * MIB, "mb_per_s", TLS_REFERENCE, 1.2, None), (1 * KIB, "frames_per_s", TLS_REFERENCE, 1.0, None))
TLS_DIR = REPO / "benchmarks" / ".data" / "tls"
TLS_NAME = "framed-echo.test"
# With --one-cpu, instead of both lists: the CPU a frame costs, against uvloop's streams.
ONE_CPU_GOALS: tuple[Goal, ...] = ((1 * KIB, "frames_per_s", REFERENCE, 1.3, None),)
DEFAULTS: dict[str, Any] = {"duration": 0.4, "repeat": 3, "min_frames": 2}
QUICK: dict[str, Any] = {"duration": 0.08, "repeat": 1, "min_frames": 1}
RESULTS = REPO / "benchmarks" / "results"


def loops_of(variant: str, loops: Sequence[str]) -> list[str]:
    if variant == "threads":
        return ["-"]
    if variant == "uvloop-bufferedprotocol":
        return ["uvloop"]
    return list(loops)


def conns_for(size: int, small_conns: int) -> int:
    return small_conns if size < SMALL else 1


def size_name(size: int) -> str:
    for unit, name in ((MIB, "MiB"), (KIB, "KiB"), (MB, "MB"), (1000, "kB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def size_option(size: int) -> str:
    """How --sizes spells a size: 100MB, 64M, 1K."""
    for unit, name in ((MIB, "M"), (KIB, "K"), (MB, "MB"), (1000, "KB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def parse_sizes(text: str) -> list[int]:
    """'100MB,64M,1M,64K,1K' -> payload sizes in bytes: K and M (or KiB and MiB) are
    binary, KB and MB decimal (10^3, 10^6 bytes)."""
    units = {"": 1, "k": KIB, "ki": KIB, "kib": KIB, "m": MIB, "mi": MIB, "mib": MIB, "kb": 1000, "mb": MB}
    sizes = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", item)
        if not match or match[2].lower() not in units:
            raise argparse.ArgumentTypeError(f"not a size: {item!r} (use e.g. 100MB, 64M, 1M, 64K, 1K)")
        size = int(match[1]) * units[match[2].lower()]
        if size < 2 * SPOT:
            raise argparse.ArgumentTypeError(f"frames must carry at least {2 * SPOT} bytes, not {size}")
        sizes.append(size)
    return sizes


def make_certificates() -> None:
    """A CA and a certificate for TLS_NAME, made by trustme, for the TLS variants' workers."""
    import trustme
    ca = trustme.CA()
    cert = ca.issue_cert(TLS_NAME)
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(TLS_DIR / "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(TLS_DIR / "server.pem"))


_contexts: dict[bool, ssl.SSLContext] = {}


def tls_context(server_side: bool) -> ssl.SSLContext:
    """The server's or the client's context (the client trusts make_certificates()'s CA)."""
    if server_side not in _contexts:
        if server_side:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(TLS_DIR / "server.pem")
        else:
            context = ssl.create_default_context(cafile=TLS_DIR / "ca.pem")
        _contexts[server_side] = context
    return _contexts[server_side]


def set_nodelay(sock: Any) -> tuple[bool, bool]:
    """Set TCP_NODELAY on a socket (or a loop's socket wrapper): whether it was set
    already (by the library that made or wrapped the socket), and whether it reads
    back as set now."""
    before = bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return before, bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


def tcp_socket(blocking: bool = False) -> socket.socket:
    """A TCP socket made with proto=IPPROTO_TCP, so that asyncio's own
    `sock.proto == IPPROTO_TCP` check sets TCP_NODELAY on its transports.
    TCP_NODELAY is not set here: accepted sockets would inherit it from a
    listener, and set_nodelay() would not see whether the library set it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setblocking(blocking)
    return sock


def listener(blocking: bool = False) -> socket.socket:
    sock = tcp_socket(blocking)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen(128)
    return sock


class Mismatch(Exception):
    """The echo differs from what was sent."""


# ------------------------------------------------------------------ frames
class Frames:
    """What the client sends: per connection two payloads (even and odd frames)
    that differ throughout (one is a rotation of the other, with its own stamp)."""

    def __init__(self, size: int, conns: int) -> None:
        self.size = size
        self.hdr = HDR.pack(size)
        base = os.urandom(size)
        self.payload: list[tuple[bytes, bytes]] = []
        for c in range(conns):
            pair = []
            for parity in (0, 1):
                rot = (1 + 4099 * (2 * c + parity)) % size
                stamp = struct.pack(">4sII", b"echo", c, parity)
                body = base[rot:] + base[:rot]
                pair.append(stamp + body[len(stamp):size - len(stamp)] + stamp)
            self.payload.append((pair[0], pair[1]))
        self.frame = [(self.hdr + a, self.hdr + b) for a, b in self.payload]  # header + payload
        self.full = size <= FULL_VERIFY_MAX
        # Sampled check of larger payloads: first and last 64 bytes (the stamps)
        # and SPOTS slices, at positions that move from frame to frame.
        stride = (size - SPOT) // (SPOTS + 1)
        self.spots: list[tuple[list[list[tuple[int, bytes]]], ...]] = []
        for a, b in self.payload:
            per_parity = []
            for p in (a, b):
                phases = []
                for ph in range(PHASES):
                    shift = ph * stride // PHASES
                    offs = [0, size - SPOT] + [j * stride + shift for j in range(1, SPOTS + 1)]
                    phases.append([(o, p[o:o + SPOT]) for o in offs])
                per_parity.append(phases)
            self.spots.append(tuple(per_parity))

    def check(self, c: int, k: int, data: bytes | bytearray, full: bool = False) -> None:
        """Payload of frame k on connection c: all of it (small frames, or `full`),
        else the stamps and the spots of this frame's phase."""
        if full or self.full:
            if len(data) != self.size or not data.startswith(self.payload[c][k & 1]):
                raise Mismatch(f"connection {c} frame {k}: the echoed payload differs")
            return
        for off, part in self.spots[c][k & 1][k % PHASES]:
            if not data.startswith(part, off):
                raise Mismatch(f"connection {c} frame {k}: the echoed payload differs at {off}")

    def check_hdr(self, c: int, k: int, hdr: bytes | bytearray) -> None:
        if hdr != self.hdr:
            raise Mismatch(f"connection {c} frame {k}: header {bytes(hdr).hex()} != {self.hdr.hex()}")


# ------------------------------------------------------------------ servers
class ServerState:
    """One served run: the handlers still running, what went wrong, TCP_NODELAY seen."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.transports: list[asyncio.BaseTransport] = []
        self.errors: list[str] = []
        self.nodelay: set[bool] = set()
        self.preset: set[bool] = set()
        self.accepted = 0
        self.closers: list[Callable[[], Any]] = []

    def new_conn(self, sock: Any) -> None:
        self.accepted += 1
        preset, now = set_nodelay(sock)
        self.preset.add(preset)
        self.nodelay.add(now)

    def spawn(self, loop: asyncio.AbstractEventLoop, handler: Awaitable[None]) -> None:
        task = loop.create_task(self.guard(handler))
        self.tasks.add(task)  # guard() discards it when it ends

    async def guard(self, handler: Awaitable[None]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await handler
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client went away; it closes only between frames
        except Exception as exc:
            self.errors.append(error_text(exc))
        finally:
            self.tasks.discard(task)

    async def close(self) -> dict[str, Any]:
        for closer in self.closers:
            res = closer()
            if asyncio.iscoroutine(res):
                await res
        if self.tasks:
            _, pending = await asyncio.wait(list(self.tasks), timeout=5)
            for task in pending:
                task.cancel()
            if pending:
                self.errors.append(f"{len(pending)} handlers still running after the client left")
        for transport in self.transports:
            transport.close()
        await asyncio.sleep(0)
        return {"errors": self.errors, "nodelay": sorted(self.nodelay), "preset": sorted(self.preset),
                "accepted": self.accepted}


# aioring-sock and asyncio-sock share their code: aioring's module-level sock_*
# functions and the loop's sock_* methods take the same arguments, so `api` below
# is either the aioring module or the running loop.
RecvInto = Callable[[socket.socket, memoryview], Awaitable[int]]


async def recv_exactly(recv_into: RecvInto, sock: socket.socket, view: memoryview) -> bool:
    """Fill view with recv_into (aioring's or the loop's sock_recv_into); False at EOF
    before the first byte."""
    got, n = 0, len(view)
    while got < n:
        r = await recv_into(sock, view[got:] if got else view)
        if not r:
            if got:
                raise ConnectionResetError(f"EOF after {got} of {n} bytes")
            return False
        got += r
    return True


async def serve_aioring_streams(state: ServerState, tls: bool = False) -> int:
    async def handle(reader: aioring.StreamReader, writer: aioring.StreamWriter) -> None:
        state.new_conn(writer.get_extra_info("socket"))
        # The header and the payload in one buffer, as the sock and threads
        # servers keep them (see "Buffer layout" above).
        buf = bytearray(8)
        view = memoryview(buf)
        try:
            while True:
                try:
                    await reader.readinto_exactly(view[:8])
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise
                    return
                n = HDR.unpack_from(buf)[0]
                if n + 8 > len(buf):
                    buf = bytearray(n + 8)  # a new buffer, never a resize
                    buf[:8] = view[:8]
                    view = memoryview(buf)
                await reader.readinto_exactly(view[8:8 + n])
                writer.write(view[:8 + n])  # copied by the writer (a memoryview)
                await writer.drain()
        finally:
            writer.close()

    server = await aioring.start_server(lambda r, w: state.guard(handle(r, w)), HOST, 0,
                                        ssl=tls_context(True) if tls else None)
    state.closers.append(server.close)
    return int(server.sockets[0].getsockname()[1])


async def serve_asyncio_streams(state: ServerState, tls: bool = False) -> int:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.new_conn(writer.get_extra_info("socket"))
        try:
            while True:
                try:
                    hdr = await reader.readexactly(8)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise
                    return
                payload = await reader.readexactly(HDR.unpack(hdr)[0])
                writer.write(hdr)
                writer.write(payload)
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(lambda r, w: state.guard(handle(r, w)), sock=listener(),
                                        ssl=tls_context(True) if tls else None)
    state.closers.append(server.close)
    return int(server.sockets[0].getsockname()[1])


async def serve_sock(state: ServerState, use_aioring: bool) -> int:
    """aioring-sock (`api`: the aioring module) and asyncio-sock (`api`: the running loop)."""
    loop = asyncio.get_running_loop()
    api: Any = aioring if use_aioring else loop
    lsock = listener()
    recv_into, sendall = api.sock_recv_into, api.sock_sendall

    async def handle(conn: socket.socket) -> None:
        buf = bytearray(8)
        view = memoryview(buf)
        try:
            while True:
                if not await recv_exactly(recv_into, conn, view[:8]):
                    return
                n = HDR.unpack_from(buf)[0]
                if n + 8 > len(buf):
                    buf = bytearray(n + 8)
                    buf[:8] = view[:8]
                    view = memoryview(buf)
                if not await recv_exactly(recv_into, conn, view[8:8 + n]):
                    raise ConnectionResetError("EOF after a header")
                await sendall(conn, view[:8 + n])
        finally:
            conn.close()

    async def accept() -> None:
        while True:
            conn, _ = await api.sock_accept(lsock)
            conn.setblocking(False)
            state.new_conn(conn)
            state.spawn(loop, handle(conn))

    acceptor = loop.create_task(accept())

    async def stop() -> None:
        acceptor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acceptor
        lsock.close()
    state.closers.append(stop)
    return int(lsock.getsockname()[1])


class NaiveEchoProtocol(asyncio.Protocol):
    """Accumulate whatever arrives; echo every complete frame."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport
        self.state.transports.append(transport)
        self.state.new_conn(transport.get_extra_info("socket"))
        self.deliver: Callable[[bytearray], object] = self.transport.write  # what a complete frame gets

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 8:
            end = 8 + HDR.unpack_from(buf)[0]
            if len(buf) < end:
                break
            self.deliver(buf[:end])
            del buf[:end]


class FloorEchoProtocol(NaiveEchoProtocol):
    """The naive Protocol, whose complete frames go to a task of their
    connection, through a future, for the task to echo: the least that any
    reader a task awaits costs on this loop (the loop's own transport, a future
    and a task wake-up per frame, nothing else)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.frames: collections.deque[bytearray] = collections.deque()
        self.deliver = self.frames.append
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.state.spawn(asyncio.get_running_loop(), self.echo())

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def echo(self) -> None:
        loop = asyncio.get_running_loop()
        frames, write = self.frames, self.transport.write
        while True:
            while not frames:
                if self.lost:
                    return
                self.waiter = loop.create_future()
                await self.waiter
            write(frames.popleft())


class BufferedEchoProtocol(asyncio.BufferedProtocol):
    """get_buffer hands out the rest of the current frame's region of one buffer."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.buf = bytearray(8)
        self.view = memoryview(self.buf)
        self.pos = 0
        self.end = 8  # 8 while reading the header, then 8 + payload length

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport
        self.state.transports.append(transport)
        self.state.new_conn(transport.get_extra_info("socket"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view[self.pos:self.end]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.pos < self.end:
            return
        if self.end == 8:
            n = HDR.unpack_from(self.buf)[0]
            self.end = 8 + n
            if self.end > len(self.buf):
                buf = bytearray(self.end)  # a new buffer: the old one may still be exported
                buf[:8] = self.view[:8]
                self.buf, self.view = buf, memoryview(buf)
            if n:
                return
        self.transport.write(self.view[:self.end])  # ping-pong: nothing arrives before it is out
        self.pos, self.end = 0, 8

    def eof_received(self) -> bool | None:
        if self.pos:
            self.state.errors.append("EOF inside a frame")
        return None


async def serve_protocol(state: ServerState, factory: Callable[[ServerState], asyncio.BaseProtocol]) -> int:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: factory(state), sock=listener())
    state.closers.append(server.close)
    return int(server.sockets[0].getsockname()[1])


ASYNC_SERVERS: dict[str, Callable[[ServerState], Awaitable[int]]] = {
    "aioring-streams": serve_aioring_streams,
    "aioring-sock": lambda st: serve_sock(st, use_aioring=True),
    "asyncio-streams": serve_asyncio_streams,
    "asyncio-sock": lambda st: serve_sock(st, use_aioring=False),
    "asyncio-protocol": lambda st: serve_protocol(st, NaiveEchoProtocol),
    "floor": lambda st: serve_protocol(st, FloorEchoProtocol),
    "uvloop-bufferedprotocol": lambda st: serve_protocol(st, BufferedEchoProtocol),
    "aioring-streams-tls": lambda st: serve_aioring_streams(st, tls=True),
    "asyncio-streams-tls": lambda st: serve_asyncio_streams(st, tls=True),
}


def recv_exactly_blocking(sock: socket.socket, view: memoryview) -> bool:
    got, n = 0, len(view)
    recv_into = sock.recv_into
    while got < n:
        r = recv_into(view[got:] if got else view)
        if not r:
            if got:
                raise ConnectionResetError(f"EOF after {got} of {n} bytes")
            return False
        got += r
    return True


def serve_threads(conn: Connection) -> dict[str, Any]:
    """The threads variant's server, run until the parent says stop."""
    lsock = listener(blocking=True)
    errors: list[str] = []
    nodelay: set[bool] = set()
    preset: set[bool] = set()
    handlers: list[threading.Thread] = []

    def handle(sock: socket.socket) -> None:
        buf = bytearray(8)
        view = memoryview(buf)
        try:
            while True:
                if not recv_exactly_blocking(sock, view[:8]):
                    return
                n = HDR.unpack_from(buf)[0]
                if n + 8 > len(buf):
                    buf = bytearray(n + 8)
                    buf[:8] = view[:8]
                    view = memoryview(buf)
                if not recv_exactly_blocking(sock, view[8:8 + n]):
                    raise ConnectionResetError("EOF after a header")
                sock.sendall(view[:8 + n])
        except (ConnectionResetError, BrokenPipeError):
            pass
        except Exception as exc:
            errors.append(error_text(exc))
        finally:
            sock.close()

    def accept() -> None:
        while True:
            try:
                sock, _ = lsock.accept()
            except OSError:
                return  # the listener was shut down
            was, now = set_nodelay(sock)
            preset.add(was)
            nodelay.add(now)
            t = threading.Thread(target=handle, args=(sock,), daemon=True)
            handlers.append(t)
            t.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    conn.send(("ok", lsock.getsockname()[1]))
    conn.recv()  # stop
    with contextlib.suppress(OSError):
        lsock.shutdown(socket.SHUT_RDWR)  # wakes accept()
    acceptor.join(5)
    lsock.close()
    for t in handlers:
        t.join(5)
    if any(t.is_alive() for t in handlers):
        errors.append("handler threads still running after the client left")
    return {"errors": errors, "nodelay": sorted(nodelay), "preset": sorted(preset), "accepted": len(handlers)}


def serve_async(conn: Connection, variant: str, loop_name: str) -> dict[str, Any]:
    """Serve one run on a fresh loop until the parent says stop (a message on `conn`)."""
    loop = new_loop(loop_name)
    asyncio.set_event_loop(loop)
    state = ServerState()
    loop.set_exception_handler(lambda _, context: state.errors.append(loop_error(context)))
    try:
        port = loop.run_until_complete(ASYNC_SERVERS[variant](state))
        ring0 = loop.run_until_complete(ring_stats()) if variant.startswith("aioring") else {}
        conn.send(("ok", port))
        stop: asyncio.Future[Any] = loop.create_future()

        def on_control() -> None:
            msg = conn.recv()
            if not stop.done():
                stop.set_result(msg)

        loop.add_reader(conn.fileno(), on_control)
        try:
            loop.run_until_complete(stop)
        finally:
            loop.remove_reader(conn.fileno())
            os.set_blocking(conn.fileno(), True)  # uvloop's add_reader made it non-blocking
        info = loop.run_until_complete(state.close())
        if ring0:
            ring1 = loop.run_until_complete(ring_stats())
            info["ring"] = {k: ring1[k] - ring0.get(k, 0) for k in RING_COUNTERS}
        return info
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()


def loop_error(context: dict[str, Any]) -> str:
    """What the loop's exception handler was told, in one line."""
    exc = context.get("exception")
    return f"{context.get('message')}: {error_text(exc)}" if exc is not None else str(context.get("message"))


RING_COUNTERS = ("submit_calls", "wakeups", "completions", "backpressured", "cancels")


async def ring_stats() -> dict[str, int]:
    return aioring.statistics()


# ------------------------------------------------------------------ clients
class Conn:
    """One client connection of an async variant: roundtrip(k) sends frame k,
    receives its echo and checks it; last() is the last payload received."""

    def __init__(self, frames: Frames, c: int) -> None:
        self.frames = frames
        self.c = c
        self.preset, self.nodelay = False, False  # TCP_NODELAY before and after set_nodelay()

    async def open(self, port: int) -> None:
        raise NotImplementedError

    async def roundtrip(self, k: int, full: bool = False) -> None:
        raise NotImplementedError

    def last(self) -> bytes | bytearray:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class StreamsConn(Conn):
    """The two streams variants: a reader and a writer."""

    writer: asyncio.StreamWriter | aioring.StreamWriter

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class AioringStreamsConn(StreamsConn):
    tls = False

    async def open(self, port: int) -> None:
        if self.tls:
            self.reader, self.writer = await aioring.open_connection(
                HOST, port, ssl=tls_context(False), server_hostname=TLS_NAME)
        else:
            self.reader, self.writer = await aioring.open_connection(HOST, port)
        self.preset, self.nodelay = set_nodelay(self.writer.get_extra_info("socket"))
        self.rhdr = bytearray(8)
        self.rbuf = bytearray(self.frames.size)

    async def roundtrip(self, k: int, full: bool = False) -> None:
        f = self.frames
        w, r = self.writer, self.reader
        w.write(f.hdr)
        w.write(f.payload[self.c][k & 1])  # bytes: sent without a copy
        await w.drain()
        await r.readinto_exactly(self.rhdr)
        f.check_hdr(self.c, k, self.rhdr)
        await r.readinto_exactly(self.rbuf)
        f.check(self.c, k, self.rbuf, full)

    def last(self) -> bytearray:
        return self.rbuf


class SockConn(Conn):
    """aioring-sock (`api`: the aioring module) and asyncio-sock (`api`: the running loop)."""

    def __init__(self, frames: Frames, c: int, use_aioring: bool) -> None:
        super().__init__(frames, c)
        self.use_aioring = use_aioring

    async def open(self, port: int) -> None:
        self.api: Any = aioring if self.use_aioring else asyncio.get_running_loop()
        self.sock = tcp_socket()
        self.preset, self.nodelay = set_nodelay(self.sock)
        await self.api.sock_connect(self.sock, (HOST, port))
        self.rhdr = bytearray(8)
        self.rbuf = bytearray(self.frames.size)
        self.hview, self.rview = memoryview(self.rhdr), memoryview(self.rbuf)

    async def roundtrip(self, k: int, full: bool = False) -> None:
        f, api = self.frames, self.api
        await api.sock_sendall(self.sock, f.frame[self.c][k & 1])
        if not await recv_exactly(api.sock_recv_into, self.sock, self.hview):
            raise ConnectionResetError("the server closed the connection")
        f.check_hdr(self.c, k, self.rhdr)
        if not await recv_exactly(api.sock_recv_into, self.sock, self.rview):
            raise ConnectionResetError("EOF after a header")
        f.check(self.c, k, self.rbuf, full)

    def last(self) -> bytearray:
        return self.rbuf

    async def close(self) -> None:
        self.sock.close()


class AsyncioStreamsConn(StreamsConn):
    tls = False

    async def open(self, port: int) -> None:
        sock = tcp_socket()
        await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
        if self.tls:
            self.reader, self.writer = await asyncio.open_connection(
                sock=sock, ssl=tls_context(False), server_hostname=TLS_NAME)
        else:
            self.reader, self.writer = await asyncio.open_connection(sock=sock)
        self.preset, self.nodelay = set_nodelay(self.writer.get_extra_info("socket"))
        self.data = b""

    async def roundtrip(self, k: int, full: bool = False) -> None:
        f = self.frames
        w, r = self.writer, self.reader
        w.write(f.hdr)
        w.write(f.payload[self.c][k & 1])
        await w.drain()
        f.check_hdr(self.c, k, await r.readexactly(8))
        self.data = await r.readexactly(f.size)
        f.check(self.c, k, self.data, full)

    def last(self) -> bytes:
        return self.data


class AioringTLSConn(AioringStreamsConn):
    tls = True


class AsyncioTLSConn(AsyncioStreamsConn):
    tls = True


class ClientEnd:
    """What the two client protocols share: the future of the frame awaited (`waiter`)
    and the future of the connection's end (`lost`)."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future[Any] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def deliver(self, result: Any) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(result)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionResetError("the server closed the connection"))
        if not self.lost.done():
            self.lost.set_result(None)


class NaiveClientProtocol(ClientEnd, asyncio.Protocol):
    """Accumulate whatever arrives; deliver (header, payload) of a complete frame."""

    def __init__(self) -> None:
        super().__init__()
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if len(buf) >= 8:
            end = 8 + HDR.unpack_from(buf)[0]
            if len(buf) >= end:
                frame = (bytes(buf[:8]), bytes(buf[8:end]))
                del buf[:end]
                self.deliver(frame)


class BufferedClientProtocol(ClientEnd, asyncio.BufferedProtocol):
    """get_buffer hands out the rest of the header, then of the payload buffer."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.rhdr = bytearray(8)
        self.rbuf = bytearray(size)
        self.hview, self.rview = memoryview(self.rhdr), memoryview(self.rbuf)
        self.pos = 0
        self.in_payload = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.rview[self.pos:] if self.in_payload else self.hview[self.pos:]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if not self.in_payload:
            if self.pos == 8:
                self.in_payload, self.pos = True, 0
            return
        if self.pos == len(self.rbuf):
            self.in_payload, self.pos = False, 0
            self.deliver(None)


class ProtocolConn(Conn):
    """The two protocol variants: a transport made with create_connection on our socket."""

    proto: ClientEnd

    async def connect(self, port: int, factory: Callable[[], Any]) -> Any:
        self.loop = asyncio.get_running_loop()
        sock = tcp_socket()
        await self.loop.sock_connect(sock, (HOST, port))
        self.transport, proto = await self.loop.create_connection(factory, sock=sock)
        self.preset, self.nodelay = set_nodelay(self.transport.get_extra_info("socket"))
        return proto

    async def close(self) -> None:
        self.transport.close()
        await self.proto.lost


class AsyncioProtocolConn(ProtocolConn):
    async def open(self, port: int) -> None:
        self.proto = self.naive = await self.connect(port, NaiveClientProtocol)
        self.data = b""

    async def roundtrip(self, k: int, full: bool = False) -> None:
        f, proto = self.frames, self.naive
        proto.waiter = waiter = self.loop.create_future()
        self.transport.write(f.frame[self.c][k & 1])
        hdr, self.data = await waiter
        f.check_hdr(self.c, k, hdr)
        f.check(self.c, k, self.data, full)

    def last(self) -> bytes:
        return self.data


class BufferedProtocolConn(ProtocolConn):
    async def open(self, port: int) -> None:
        size = self.frames.size
        self.proto = self.buffered = await self.connect(port, lambda: BufferedClientProtocol(size))

    async def roundtrip(self, k: int, full: bool = False) -> None:
        f, proto = self.frames, self.buffered
        proto.waiter = waiter = self.loop.create_future()
        self.transport.write(f.frame[self.c][k & 1])
        await waiter
        f.check_hdr(self.c, k, proto.rhdr)
        f.check(self.c, k, proto.rbuf, full)

    def last(self) -> bytearray:
        return self.buffered.rbuf


CLIENTS: dict[str, Callable[[Frames, int], Conn]] = {
    "aioring-streams": AioringStreamsConn,
    "aioring-sock": lambda frames, c: SockConn(frames, c, use_aioring=True),
    "asyncio-streams": AsyncioStreamsConn,
    "asyncio-sock": lambda frames, c: SockConn(frames, c, use_aioring=False),
    "asyncio-protocol": AsyncioProtocolConn,
    "floor": AsyncioProtocolConn,  # (the server differs)
    "uvloop-bufferedprotocol": BufferedProtocolConn,
    "aioring-streams-tls": AioringTLSConn,
    "asyncio-streams-tls": AsyncioTLSConn,
}


def cpu_clock(pid: int) -> int:
    """The clock id of another process's CPU time, all its threads (clock_getcpuclockid)."""
    return ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)


@dataclass
class Window:
    """The timed window of one run, as the client saw it."""

    frames: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    machine_busy_s: float = 0.0  # CPU the whole machine used meanwhile (/proc/stat)
    steal_s: float = 0.0  # time the hypervisor gave our vCPUs to someone else
    nodelay: list[bool] = field(default_factory=list)  # TCP_NODELAY read back on the client's sockets
    preset: list[bool] = field(default_factory=list)  # whether it was set before set_nodelay()
    ring: dict[str, int] = field(default_factory=dict)


class Clock:
    def __init__(self, server_pid: int) -> None:
        self.server = cpu_clock(server_pid)

    def start(self) -> None:
        self.m0 = machine_cpu()
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.s0 = time.clock_gettime(self.server)

    def stop(self, win: Window) -> None:
        win.wall_s = time.perf_counter() - self.t0
        win.client_cpu_s = time.process_time() - self.c0
        win.server_cpu_s = time.clock_gettime(self.server) - self.s0
        busy, steal = machine_cpu()
        win.machine_busy_s, win.steal_s = busy - self.m0[0], steal - self.m0[1]


async def client_async(spec: dict[str, Any], frames: Frames) -> Window:
    variant, nconns = spec["variant"], spec["conns"]
    conns = [CLIENTS[variant](frames, c) for c in range(nconns)]
    win = Window()
    try:
        for conn in conns:
            await conn.open(spec["port"])
        win.nodelay = sorted({conn.nodelay for conn in conns})
        win.preset = sorted({conn.preset for conn in conns})
        warm: int = spec["warmup"]

        async def warmup(conn: Conn) -> None:
            for k in range(warm):
                await conn.roundtrip(k, full=True)

        await asyncio.gather(*(warmup(conn) for conn in conns))
        deadline = 0.0
        min_frames = spec["min_frames"]
        now = time.perf_counter

        async def timed(conn: Conn) -> int:
            rt = conn.roundtrip
            k = warm
            while k - warm < min_frames or now() < deadline:
                await rt(k)
                k += 1
            return k - warm

        is_aioring = variant.startswith("aioring")
        ring0 = aioring.statistics() if is_aioring else {}
        clock = Clock(spec["server_pid"])
        gc.collect()
        clock.start()
        deadline = clock.t0 + spec["duration"]
        counts = await asyncio.gather(*(timed(conn) for conn in conns))
        clock.stop(win)
        if is_aioring:
            ring1 = aioring.statistics()
            win.ring = {k: ring1[k] - ring0[k] for k in RING_COUNTERS}
        win.frames = sum(counts)
        for conn, n in zip(conns, counts, strict=True):  # the last frame in full, untimed
            frames.check(conn.c, warm + n - 1, conn.last(), full=True)
    finally:
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
    return win


class ThreadConn:
    def __init__(self, frames: Frames, c: int, port: int) -> None:
        self.frames, self.c = frames, c
        self.sock = tcp_socket(blocking=True)
        self.preset, self.nodelay = set_nodelay(self.sock)
        self.sock.connect((HOST, port))
        self.rhdr = bytearray(8)
        self.rbuf = bytearray(frames.size)
        self.hview, self.rview = memoryview(self.rhdr), memoryview(self.rbuf)

    def roundtrip(self, k: int, full: bool = False) -> None:
        f = self.frames
        self.sock.sendall(f.frame[self.c][k & 1])
        if not recv_exactly_blocking(self.sock, self.hview):
            raise ConnectionResetError("the server closed the connection")
        f.check_hdr(self.c, k, self.rhdr)
        if not recv_exactly_blocking(self.sock, self.rview):
            raise ConnectionResetError("EOF after a header")
        f.check(self.c, k, self.rbuf, full)


def client_threads(spec: dict[str, Any], frames: Frames) -> Window:
    nconns, warm, min_frames = spec["conns"], spec["warmup"], spec["min_frames"]
    conns = [ThreadConn(frames, c, spec["port"]) for c in range(nconns)]
    win = Window(nodelay=sorted({conn.nodelay for conn in conns}),
                 preset=sorted({conn.preset for conn in conns}))
    clock = Clock(spec["server_pid"])
    counts = [0] * nconns
    errors: list[BaseException] = []
    deadline = [0.0]

    def start() -> None:
        gc.collect()
        clock.start()
        deadline[0] = clock.t0 + spec["duration"]

    barrier = threading.Barrier(nconns, action=start)

    def run(i: int) -> None:
        conn = conns[i]
        try:
            for k in range(warm):
                conn.roundtrip(k, full=True)
            barrier.wait()
            k, end, now = warm, deadline[0], time.perf_counter
            while k - warm < min_frames or now() < end:
                conn.roundtrip(k)
                k += 1
            counts[i] = k - warm
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(nconns)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:  # the first real one: the others may just have seen the barrier broken
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
        clock.stop(win)
        win.frames = sum(counts)
        for conn, n in zip(conns, counts, strict=True):
            frames.check(conn.c, warm + n - 1, conn.rbuf, full=True)
    finally:
        for conn in conns:
            conn.sock.close()
    return win


# ------------------------------------------------------------------ workers
def worker_main(role: str, conn: Connection) -> None:
    """A server or client process: do what the parent sends until it sends
    None (or ends: killed, the parent leaves it nothing to serve)."""
    die_with_parent()
    frames_cache: dict[tuple[int, int], Frames] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            if role == "server":
                _, variant, loop_name = msg
                info = serve_threads(conn) if variant == "threads" else serve_async(conn, variant, loop_name)
                conn.send(("stopped", info))
            else:
                spec = msg[1]
                key = (spec["size"], spec["conns"])
                if key not in frames_cache:
                    if len(frames_cache) > 1:  # keep memory bounded: at most two sizes' payloads
                        frames_cache.pop(next(iter(frames_cache)))
                    frames_cache[key] = Frames(*key)
                frames = frames_cache[key]
                if spec["variant"] == "threads":
                    win = client_threads(spec, frames)
                else:
                    win = run_client_loop(spec, frames)
                conn.send(("ok", asdict(win)))
        except Exception as exc:
            conn.send(("error", error_text(exc)))


def run_client_loop(spec: dict[str, Any], frames: Frames) -> Window:
    loop = new_loop(spec["loop"])
    asyncio.set_event_loop(loop)
    errors: list[str] = []
    loop.set_exception_handler(lambda _, context: errors.append(loop_error(context)))
    try:
        win = loop.run_until_complete(client_async(spec, frames))
        if errors:
            raise RuntimeError("the loop's exception handler was called: " + "; ".join(errors[:3]))
        return win
    finally:
        asyncio.set_event_loop(None)
        loop.close()


class Worker:
    """A worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, role: str) -> None:
        self.role = role
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(role, child), daemon=True,
                                name=f"framed_echo-{role}")
        self.proc.start()
        child.close()

    @property
    def pid(self) -> int:
        return int(self.proc.pid or 0)

    def ask(self, msg: Any, timeout: float) -> tuple[str, Any]:
        self.conn.send(msg)
        return self.receive(timeout)

    def receive(self, timeout: float) -> tuple[str, Any]:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"the {self.role} process did not answer within {timeout:.0f} s")
        reply: tuple[str, Any] = self.conn.recv()
        return reply

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


# ------------------------------------------------------------------ measuring
@dataclass
class Sample:
    variant: str
    loop: str
    size: int
    conns: int
    repeat: int
    frames: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    mb_per_s: float = 0.0
    frames_per_s: float = 0.0
    cpu_s: float = 0.0
    cpu_us_per_frame: float = 0.0
    other_cpu_s: float = 0.0  # CPU of the rest of the machine in the window (tick resolution)
    steal_s: float = 0.0
    nodelay_client: list[bool] = field(default_factory=list)
    nodelay_server: list[bool] = field(default_factory=list)
    preset_client: list[bool] = field(default_factory=list)  # TCP_NODELAY before the benchmark set it
    preset_server: list[bool] = field(default_factory=list)
    ring_client: dict[str, int] = field(default_factory=dict)
    ring_server: dict[str, int] = field(default_factory=dict)
    error: str | None = None


class Bench:
    def __init__(self, timeout: float, pin: bool, one_cpu: bool = False) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.timeout = timeout
        self.pin = pin
        self.one_cpu = one_cpu
        self.pinned = "no"
        self.server: Worker | None = None
        self.client: Worker | None = None

    def start(self) -> None:
        self.server = Worker(self.ctx, "server")
        self.client = Worker(self.ctx, "client")
        if self.one_cpu:
            self.pinned = pin_together(self.server.pid, self.client.pid)
        elif self.pin:
            self.pinned = pin_pair(self.server.pid, self.client.pid)
        log(f"worker processes: server pid {self.server.pid}, client pid {self.client.pid}"
            + (f" ({self.pinned})" if self.pinned != "no" else ""))

    def restart(self) -> None:
        self.close()
        self.start()

    def close(self) -> None:
        for w in (self.server, self.client):
            if w is not None:
                w.stop()
        self.server = self.client = None

    def run(self, s: Sample, duration: float, min_frames: int) -> None:
        """One measured run: start the server, run the client, stop the server."""
        assert self.server is not None and self.client is not None
        status, port = self.server.ask(("serve", s.variant, s.loop), self.timeout)
        if status != "ok":
            raise RuntimeError(f"server: {port}")
        spec = {"variant": s.variant, "loop": s.loop, "size": s.size, "conns": s.conns, "port": port,
                "server_pid": self.server.pid, "duration": duration, "min_frames": min_frames,
                "warmup": warmup_frames(s.size)}
        # Generous: a slow variant's 64 MiB frame can take a second, and the
        # client makes its payloads the first time it sees a size.
        status, out = self.client.ask(("run", spec), self.timeout)
        status_s, info = self.server.ask(("stop",), self.timeout)
        if status != "ok":
            raise RuntimeError(f"client: {out}")
        if status_s != "stopped":
            raise RuntimeError(f"server: {info}")
        if info["errors"]:
            raise RuntimeError("server: " + "; ".join(info["errors"][:3]))
        s.frames = out["frames"]
        s.wall_s, s.client_cpu_s, s.server_cpu_s = out["wall_s"], out["client_cpu_s"], out["server_cpu_s"]
        s.nodelay_client, s.nodelay_server = out["nodelay"], info["nodelay"]
        s.preset_client, s.preset_server = out["preset"], info["preset"]
        s.ring_client, s.ring_server = out["ring"], info.get("ring", {})
        s.mb_per_s = s.frames * s.size / s.wall_s / MB
        s.frames_per_s = s.frames / s.wall_s
        s.cpu_s = s.client_cpu_s + s.server_cpu_s
        s.cpu_us_per_frame = s.cpu_s / s.frames * 1e6
        s.other_cpu_s = max(0.0, out["machine_busy_s"] - s.cpu_s)
        s.steal_s = out["steal_s"]


# ------------------------------------------------------------------ reporting
Key = tuple[str, str, int]  # variant, loop, size
MEDIAN_FIELDS = ("mb_per_s", "frames_per_s", "cpu_s", "client_cpu_s", "server_cpu_s", "cpu_us_per_frame",
                 "wall_s", "frames")


def summarize(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    """Medians (and min, max) per variant, loop and size; aioring.statistics() per frame."""
    def head(key: Key, group: list[Sample]) -> dict[str, Any]:
        return {"variant": key[0], "loop": key[1], "size": key[2], "conns": group[0].conns}

    def ring_per_frame(ok: list[Sample]) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for side in ("ring_client", "ring_server"):
            per_frame = {k: median(getattr(s, side)[k] / s.frames for s in ok)
                         for k in RING_COUNTERS if all(k in getattr(s, side) for s in ok)}
            if per_frame:
                row[f"{side}_per_frame"] = per_frame
        return row

    return median_rows(samples, lambda s: (s.variant, s.loop, s.size), head, MEDIAN_FIELDS, ring_per_frame)


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def conns_name(conns: int) -> str:
    return f"{conns} connection{'s' if conns > 1 else ''}"


def size_conns(medians: dict[Key, dict[str, Any]], size: int) -> int | None:
    """The connections the runs of this size used, or None if there were none."""
    return next((r["conns"] for k, r in medians.items() if k[2] == size), None)


def report(medians: dict[Key, dict[str, Any]], configs: list[tuple[str, str]], sizes: list[int],
           repeat: int, reference: tuple[str, str] = REFERENCE) -> str:
    """A table per frame size, with ratios to `reference` and to threads."""
    out: list[str] = []
    ref_name = REF_NAMES[reference]
    for size in sizes:
        out.append(f"\n== {size_name(size)} frames, {conns_name(size_conns(medians, size) or 1)} "
                   f"(ping-pong each): median of {repeat} ==")
        ref = medians.get((*reference, size), {}).get("frames_per_s")
        lim = medians.get((*LIMIT, size), {}).get("frames_per_s")
        rows = []
        for variant, loop in configs:
            r = medians.get((variant, loop, size))
            if r is None:
                continue
            if "mb_per_s" not in r:
                rows.append([variant, loop, "FAILED"] + [""] * 6)
                continue
            rows.append([variant, loop, fmt_rate(r["mb_per_s"]), fmt_rate(r["frames_per_s"]),
                         f"{r['cpu_s']:.2f} ({r['server_cpu_s']:.2f}+{r['client_cpu_s']:.2f})",
                         f"{r['cpu_us_per_frame']:,.0f}" if r["cpu_us_per_frame"] >= 100
                         else f"{r['cpu_us_per_frame']:.1f}",
                         f"{r['wall_s']:.2f}",
                         fmt_ratio(r["frames_per_s"], ref), fmt_ratio(r["frames_per_s"], lim)])
        out.append(render(["variant", "loop", "MB/s", "frames/s", "CPU s (srv+cli)", "CPU us/frame", "wall s",
                           f"x {ref_name}", "x threads"], rows, left=2))
    out.append("MB/s: payload bytes echoed per second in one direction (MB = 10^6 B); CPU s: the server's "
               f"and the client's process CPU time in the timed window of wall s; x {ref_name}, "
               f"x threads: frames/s (the same ratio as MB/s) over {reference[0]} on {reference[1]} and over "
               "blocking sockets in threads (the limit).")
    return "\n".join(out)


def targets(medians: dict[Key, dict[str, Any]], loops: list[str], goals: Sequence[Goal],
            title: str, variant: str = "aioring-streams") -> str:
    """A line per goal and loop: PASS, FAIL or n/a, with the ratio measured."""
    lines = [title]
    for size, metric, ref_key, threshold, wanted, *only in goals:
        unit = "MB/s" if metric == "mb_per_s" else "frames/s"
        conns = size_conns(medians, size)
        shown = wanted or conns
        name = size_name(size) + (f" x{shown}" if shown and shown > 1 else "")
        for loop in loops:
            if only and loop not in only[0]:
                continue
            ref = medians.get((ref_key[0], ref_key[1] or loop, size), {}).get(metric)
            mine = medians.get((variant, loop, size), {}).get(metric)
            what = f"{name}: {variant}/{loop} {unit} >= {threshold}x {REF_NAMES[ref_key]}"
            if wanted is not None and conns is not None and conns != wanted:
                lines.append(f"  n/a   {what} (this run used {conns} connections: --small-conns {wanted})")
                continue
            if mine is None or ref is None:
                why = "not measured" if conns else f"not measured: add {size_option(size)} to --sizes"
                lines.append(f"  n/a   {what} ({why})")
                continue
            lines.append(f"  {'PASS' if mine >= threshold * ref else 'FAIL'}  {what}: {mine / ref:.2f}x "
                         f"({fmt_rate(mine)} vs {fmt_rate(ref)})")
    return "\n".join(lines)


def floor_lines(medians: dict[Key, dict[str, Any]], loops: list[str], sizes: Sequence[int]) -> str:
    """Where the floor (a task woken per frame on the loop's own transport) stands, by size and loop."""
    lines = []
    for size in sizes:
        conns = size_conns(medians, size)
        name = size_name(size) + (f" x{conns}" if conns and conns > 1 else "")
        for loop in loops:
            floor = medians.get(("floor", loop, size), {}).get("frames_per_s")
            if not floor:
                continue
            parts = [f"{floor / ref:.2f}x {REF_NAMES[key]}" for key in (PROTOCOL, REFERENCE)
                     if (ref := medians.get((*key, size), {}).get("frames_per_s"))]
            mine = medians.get(("aioring-streams", loop, size), {}).get("frames_per_s")
            if mine:
                parts.append(f"aioring-streams {mine / floor:.2f}x the floor")
            lines.append(f"  {name}, {loop}: {fmt_rate(floor)} frames/s" + (" = " + ", ".join(parts)
                                                                               if parts else ""))
    if not lines:
        return ""
    return "\n".join(["The floor (the loop's own transport, a future and a task wake-up per frame on the "
                      "server; the client as asyncio-protocol's) on each loop:", *lines])


def nodelay_note(samples: list[Sample]) -> str:
    """Whether TCP_NODELAY read back as set everywhere, and where the library had set it first."""
    flags: dict[tuple[str, str], list[set[bool]]] = {}
    for s in samples:
        f = flags.setdefault((s.variant, s.loop), [set(), set(), set(), set()])
        for have, got in zip(f, (s.nodelay_server, s.nodelay_client, s.preset_server, s.preset_client),
                             strict=True):
            have.update(got)
    missing = [f"{v}/{lp}" for (v, lp), f in flags.items() if f[0] != {True} or f[1] != {True}]
    out = ("TCP_NODELAY read back on every socket of every run: "
           + ("set everywhere." if not missing else "NOT set on some sockets of " + ", ".join(missing) + "."))
    order = ("on both sides", "on the server side only", "on the client side only",
             "on neither side (the benchmark's own setsockopt only)")
    sides: dict[str, list[str]] = {}
    for (v, lp), (_, _, srv, cli) in flags.items():
        where = order[2 * (srv != {True}) + (cli != {True})]
        sides.setdefault(where, []).append(v if lp == "-" else f"{v}/{lp}")
    out += (" It was already on when the benchmark looked, i.e. the library under test had set it, "
            + "; ".join(f"{where}: {', '.join(sides[where])}" for where in order if where in sides) + ".")
    return out


def notes(medians: dict[Key, dict[str, Any]], samples: list[Sample]) -> str:
    out = []
    ok = [s for s in samples if s.error is None]
    if ok:
        out.append(nodelay_note(ok))
    ring_rows = []
    for (v, lp, size), r in sorted(medians.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2])):
        c, s = r.get("ring_client_per_frame"), r.get("ring_server_per_frame")
        if c:
            ring_rows.append([v, lp, size_name(size)]
                             + [f"{c[k]:.2f}" for k in ("submit_calls", "wakeups", "completions")]
                             + ([f"{s[k]:.2f}" for k in ("submit_calls", "wakeups", "completions")]
                                if s else ["-"] * 3))
    if ring_rows:
        out.append("aioring.statistics() per frame (client: timed window; server: whole run incl. warm-up):")
        out.append(render(["variant", "loop", "size", "cli submits", "cli wakeups", "cli completions",
                           "srv submits", "srv wakeups", "srv completions"], ring_rows, left=3))
    out += noise_notes(ok, "the timed windows", medians.items(), "mb_per_s",
                       lambda k: f"{k[0]}, {k[1]}, {size_name(k[2])}")
    return "\n".join(out)


def chart(path: Path, medians: dict[Key, dict[str, Any]], configs: list[tuple[str, str]], sizes: list[int],
          meta: dict[str, Any]) -> str | None:
    """A panel per frame size, a bar per variant and loop; returns why nothing was drawn, if so."""
    panels = []
    for size in sizes:
        conns = size_conns(medians, size)
        if conns is None:
            continue
        metric = "frames_per_s" if size < SMALL else "mb_per_s"
        bars = []
        for v, lp in configs:
            r = medians.get((v, lp, size), {})
            bars.append(Bar(v if lp == "-" else f"{v} / {lp}", r.get(metric), r.get(f"{metric}_min"),
                            r.get(f"{metric}_max"), family=v, hatched=lp == "uvloop"))
        refs = [(REF_NAMES[k], medians.get((k[0], k[1], size), {}).get(metric)) for k in (REFERENCE, LIMIT)]
        lines = [(name, value) for name, value in refs if value]
        unit = "frames/s (all connections)" if metric == "frames_per_s" else "MB/s (payload, one direction)"
        panels.append(Panel(f"{size_name(size)} frames, {conns_name(conns)}", unit, bars, lines))
    v = meta["versions"]
    title = (f"Framed echo over loopback TCP, request/response, server and client in separate processes: "
             f"median of {meta['repeat']} run{'s' if meta['repeat'] > 1 else ''} (whiskers: min-max)")
    footnote = (f"{machine_line(meta)} | aioring {v['aioring']} ({meta['aioring_backend']}), "
                f"uvloop {v['uvloop']} | checkout {meta['git']}")
    return draw(path, title, panels, footnote)


# ------------------------------------------------------------------ main
def warmup_frames(size: int) -> int:
    """Untimed frames per connection before the window: up to about 1 MiB, 1 to 20 frames."""
    return max(1, min(20, MIB // size))


def first_guess(size: int, conns: int, duration: float, min_frames: int) -> float:
    """Seconds a run of this size may take, for the time left until one has finished:
    300 MB/s of frames, 0.1 s around them."""
    frame_s = size * conns / 300e6
    return 0.1 + warmup_frames(size) * frame_s + max(duration, min_frames * frame_s)


def windows_text(duration: float, min_frames: int) -> str:
    return (f"timed windows of {duration} s (at least {min_frames} frame{'s' if min_frames > 1 else ''} "
            "per connection)")


def output_path(given: Path | None, default: Path) -> Path | None:
    """--json or --chart: the default if not given, None for '-'."""
    if given is None:
        return default
    return None if str(given) == "-" else given


def redraw(json_path: Path, chart_path: Path | None) -> int:
    """Draw the chart of an earlier run from its JSON."""
    with open(json_path) as f:
        results = json.load(f)
    meta = results["meta"]
    medians = {(r["variant"], r["loop"], r["size"]): r for r in results["medians"]}
    configs = [(v, lp) for v in meta["variants"] for lp in loops_of(v, meta["loops"])]
    path = chart_path or json_path.with_suffix(".png")
    why = chart(path, medians, configs, meta["sizes"], meta)
    print(f"chart drawn to {path}" if why is None else f"no chart: {why}")
    return 0 if why is None else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Framed echo over loopback TCP (8-byte big-endian length + payload), server and "
                    "client in separate processes, each on a CPU of its own, request/response "
                    "ping-pong: aioring's streams and sock_* functions against asyncio's streams, "
                    "sock_* methods, a naive Protocol, "
                    "uvloop with a BufferedProtocol, and blocking sockets with a thread per connection. "
                    "Prints a line per run while it goes, then tables of MB/s, frames/s, CPU and ratios "
                    "to uvloop streams and to threads; writes them as JSON and draws a PNG chart. "
                    "TCP_NODELAY is set (and read back) on every socket of every variant, on both sides; "
                    "the sockets given to asyncio are made with proto=IPPROTO_TCP so that asyncio's own "
                    "check sets it.",
        epilog="Verification: every echoed header is compared; payloads up to "
               f"{size_name(FULL_VERIFY_MAX)} are compared in full on every frame; larger payloads "
               f"have their first and last {SPOT} bytes (a connection/parity stamp) and {SPOTS} more "
               f"{SPOT}-byte slices compared on every frame (the positions move between frames), and "
               "are compared in full on every warm-up frame and on each connection's last timed frame "
               "(after the clock stopped). Even and odd frames carry different payloads throughout, so "
               "stale buffer contents are caught. MB/s counts payload bytes echoed per second in one "
               "direction (MB = 10^6 B). CPU is the server's and the client's process CPU time (all "
               "threads, user + system) over the timed window. asyncio-streams use asyncio's default "
               "limit (64 KiB). aioring-streams' server writes a memoryview of its receive buffer, which "
               "aioring's writer copies; clients write bytes, which it sends without a copy.")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS + TLS_VARIANTS, canonical=True),
                        default=None,
                        help="comma-separated variants (default: all: " + ",".join(ALL_VARIANTS) + "; "
                             "with --tls: " + ",".join(TLS_VARIANTS) + ")")
    parser.add_argument("--tls", action="store_true",
                        help="the streams over TLS: aioring's against asyncio's (uvloop's TLS streams "
                             "on uvloop), at " + ",".join(size_option(s) for s in TLS_SIZES)
                             + " unless --sizes says otherwise, with the TLS targets")
    parser.add_argument("--loop", "--loops", dest="loops", type=parse_list(ALL_LOOPS, canonical=True),
                        default=list(ALL_LOOPS),
                        help="event loops of the async variants (default asyncio,uvloop); "
                             "uvloop-bufferedprotocol always runs on uvloop, threads on none")
    parser.add_argument("--sizes", type=parse_sizes, default=None,
                        help="comma-separated payload sizes, K and M binary (KiB, MiB), KB and MB decimal "
                             f"(default {','.join(size_option(s) for s in ALL_SIZES)}; the targets also "
                             "name 64M); sizes below 64K run over --small-conns connections, the others "
                             "over one")
    parser.add_argument("--small-conns", type=int, default=25,
                        help="concurrent connections for frames below 64 KiB (default 25)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of each timed window, after the warm-up; every connection "
                             "finishes the frame in flight (default "
                             f"{DEFAULTS['duration']}, --quick {QUICK['duration']})")
    parser.add_argument("--min-frames", type=int, default=None,
                        help="frames each connection does in a timed window at least, however long "
                             f"they take (default {DEFAULTS['min_frames']}, --quick {QUICK['min_frames']})")
    add_run_options(parser, DEFAULTS, QUICK, timeout=60.0, timeout_help="the workers are then restarted",
                    quick_help="a smoke run: short windows, one repetition (results go to "
                               "framed_echo.quick.json and .png unless --json says otherwise)",
                    json_help="where to write raw samples and medians (default "
                              "benchmarks/results/framed_echo.json; '-' for nowhere)")
    parser.add_argument("--chart", type=Path, metavar="PATH",
                        help="where to draw the PNG chart (default: beside the JSON, .png; '-' for none); "
                             "needs matplotlib")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="leave the server and the client process where the scheduler puts them "
                             "(default: each on a CPU of its own, when there are two)")
    parser.add_argument("--one-cpu", action="store_true",
                        help="pin the server and the client process together to one CPU: frames/s "
                             "then measure the CPU a frame costs (results go to framed_echo.one_cpu.json)")
    parser.add_argument("--redraw", type=Path, metavar="JSON",
                        help="run nothing: draw the chart of the results in JSON (beside it, or --chart)")
    args = parser.parse_args(argv)
    if args.redraw:
        return redraw(args.redraw, args.chart)
    preset = presets(args, DEFAULTS, QUICK)
    duration, repeat, min_frames = preset["duration"], preset["repeat"], preset["min_frames"]
    if repeat < 1 or duration <= 0 or min_frames < 1 or args.small_conns < 1:
        parser.error("--repeat, --duration, --min-frames and --small-conns must be positive")
    name = "framed_echo.tls" if args.tls else "framed_echo"
    default_json = RESULTS / (name + (".one_cpu" if args.one_cpu else "")
                              + (".quick" if args.quick else "") + ".json")
    json_path = output_path(args.json, default_json)
    chart_path = output_path(args.chart, (json_path or default_json).with_suffix(".png"))
    started = time.perf_counter()

    skipped: list[str] = []
    loops = list(args.loops)
    variants = list(args.variants or (TLS_VARIANTS if args.tls else ALL_VARIANTS))
    if any(v in TLS_VARIANTS for v in variants):
        make_certificates()
    if uvloop is None:
        if "uvloop" in loops:
            loops.remove("uvloop")
            skipped.append("uvloop is not installed: the async variants run on asyncio's loop only")
        if "uvloop-bufferedprotocol" in variants:
            variants.remove("uvloop-bufferedprotocol")
            skipped.append("uvloop is not installed: uvloop-bufferedprotocol is skipped (pip install uvloop)")
    configs = [(v, lp) for v in variants for lp in loops_of(v, loops)]
    if not configs:
        sys.exit("error: nothing to run")
    for note in skipped:
        log("note: " + note)
    backend = aioring_backend(aioring)

    sizes = list(args.sizes or (TLS_SIZES if args.tls else ALL_SIZES))
    # One frame size after the other (the client makes each size's payloads once); within
    # a size, the repeats of a configuration are spread out between the others.
    runs = [(size, r, v, lp) for size in sizes for r in range(1, repeat + 1) for v, lp in configs]
    progress = Progress([size for size, *_ in runs],
                        [first_guess(size, conns_for(size, args.small_conns), duration, min_frames)
                         for size, *_ in runs], started=started)
    log(f"{len(runs)} runs: {len(configs)} variant/loop pairs x {len(sizes)} frame sizes x {repeat} "
        f"repeats, {windows_text(duration, min_frames)}")
    bench = Bench(args.timeout, args.pin, args.one_cpu)
    bench.start()
    samples: list[Sample] = []
    try:
        for size, r, variant, loop_name in runs:
            conns = conns_for(size, args.small_conns)
            progress.start(f"{size_name(size):>7} x{conns:<2} {variant:<23} loop={loop_name:<7} "
                           f"repeat {r}/{repeat}")
            s = Sample(variant, loop_name, size, conns, r)
            try:
                bench.run(s, duration, min_frames)
            except Exception as exc:
                s.error = error_text(exc)
                progress.finish(f"FAILED: {s.error}")
                if isinstance(exc, (TimeoutError, EOFError, OSError)):
                    bench.restart()  # a worker hung or died: start afresh
            else:
                progress.finish(f"{s.mb_per_s:>9,.1f} MB/s {s.frames_per_s:>9,.0f} frames/s  "
                                f"CPU {s.cpu_s:.2f} s ({s.frames} frames in {s.wall_s:.2f} s)")
            samples.append(s)
    finally:
        bench.close()
    elapsed = progress.elapsed

    medians = summarize(samples)
    meta: dict[str, Any] = {
        **run_meta(backend, ("aioring", "uvloop", "cffi")),
        "variants": variants, "loops": loops, "sizes": sizes, "small_conns": args.small_conns,
        "duration_s": duration, "min_frames": min_frames, "repeat": repeat, "quick": args.quick,
        "full_verify_max": FULL_VERIFY_MAX, "skipped": skipped, "runtime_s": elapsed,
        "pinned": bench.pinned,
    }
    v = meta["versions"]
    print(f"{machine_line(meta)} | aioring {v['aioring']} ({backend}), uvloop {v['uvloop']} | "
          f"checkout {meta['git']}")
    print(f"framed echo over loopback TCP, server and client in separate processes; "
          f"{windows_text(duration, min_frames)}, median of {repeat}")
    for note in skipped:
        print("skipped: " + note)
    print()
    print(notes(medians, samples))
    print()
    aioring_loops = loops_of("aioring-streams", loops)
    if args.tls:
        print(targets(medians, aioring_loops, TLS_TARGETS,
                      "TLS targets, for aioring-streams-tls on each loop:", "aioring-streams-tls"))
    elif args.one_cpu:
        print(targets(medians, aioring_loops, ONE_CPU_GOALS,
                      "Goal with server and client on one CPU (for information):"))
    else:
        print(targets(medians, aioring_loops, TARGETS, "Targets, for aioring-streams on each loop:"))
        print(targets(medians, aioring_loops, GOALS, "Further goals (for information):"))
    floors = floor_lines(medians, aioring_loops, sizes)
    if floors:
        print(floors)
    print(report(medians, configs, sizes, repeat, TLS_REFERENCE if args.tls else REFERENCE))
    print()
    failed = print_failures(samples, lambda s: f"{s.variant} {s.loop} {size_name(s.size)} repeat {s.repeat}")
    print(f"total runtime {elapsed:.1f} s")
    write_json(json_path, {"meta": meta, "samples": [asdict(s) for s in samples],
                           "medians": list(medians.values())})
    if chart_path is not None:
        why = chart(chart_path, medians, configs, sizes, meta)
        print(f"chart drawn to {chart_path}" if why is None else f"no chart: {why}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
