#!/usr/bin/env python3
"""Echo server requests per second under many concurrent connections, over loopback TCP.

An echo server sends back whatever it receives.  The load generator opens C
connections (25 and 250 by default) and on each does ping-pong: send a
512-byte message, wait until all of it has come back and equals what was
sent, send the next.  Requests per second is the number of such round trips
completed per second, over all connections, in a timed window after a
warm-up.

The server runs in a process of its own (this script started again with
--serve), a new one for every run, on 127.0.0.1 and a port the kernel picks.
The server and the load generator each run on a CPU of their own (--no-pin
leaves them to the scheduler, which otherwise often puts both on one CPU,
taking turns, for some runs and not others).
Variants of the server (each on asyncio's default loop and on uvloop):

* aioring-readinto  ``aioring.start_server``; the handler loops on
                    ``n = await reader.readinto(buf)`` into one preallocated 64 KiB
                    bytearray, ``writer.write(view[:n])`` (aioring's writer copies
                    it), ``await writer.drain()``
* aioring-read      ``aioring.start_server`` with the handler of asyncio-streams
* asyncio-streams   ``asyncio.start_server``; ``data = await reader.read(65536)``,
                    ``writer.write(data)``, ``await writer.drain()``.  On uvloop
                    these are "uvloop streams"
* floor             the protocol below, but ``data_received`` hands the bytes to a task of
                    the connection through a future, and the task writes the echo: what any
                    server whose handler awaits a read costs at least over that loop's own
                    transport (a future and a task wake-up per request, nothing else)
* protocol          a plain ``asyncio.Protocol`` whose ``data_received`` calls
                    ``transport.write(data)``.  On uvloop this is "uvloop Protocol"

The listening socket is made with ``proto=IPPROTO_TCP`` (so asyncio's loop
sets TCP_NODELAY on every accepted socket; aioring sets it anyway); each
server checks TCP_NODELAY on every connection it accepts and the report says
so.  The load generator's sockets have TCP_NODELAY set too.

The load generator is the same for every server: this process, one event
loop (uvloop when it is installed, else asyncio's), one small asyncio.Protocol
per connection.  Each request costs it about as much CPU as the cheapest
server spends (on loopback much of a request's cost is the kernel's TCP work,
which both sides pay), so it is not negligible: the report gives both
processes' CPU use in the window (CPU seconds per wall second: 1.00 is one
core busy) and marks the rows where the load generator used at least 0.9x
the server's CPU.  There the rate is set by the two together, and the
server's CPU time per request is the fairer comparison.

Each configuration runs --repeat times, interleaved round-robin (the order
rotated every repeat), and the median is reported.

Run from the repository root:  python benchmarks/echo_rps.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from benchlib import (
    REPO, error_text, git_state, log, machine_cpu, machine_info, machine_line, new_loop, open_fds,
    parse_list, pin_pair, preset_value, spread_note, uvloop, version, write_json,
)

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring


HOST = "127.0.0.1"
ALL_VARIANTS = ("aioring-readinto", "aioring-read", "asyncio-streams", "floor", "protocol")
AIORING_VARIANTS = ALL_VARIANTS[:2]
ALL_LOOPS = ("asyncio", "uvloop")
ALL_CONNS = (25, 250)
READ_SIZE = 64 * 1024
UVLOOP_STREAMS = ("asyncio-streams", "uvloop")
UVLOOP_PROTOCOL = ("protocol", "uvloop")
# Targets for aioring's streams: (connections, reference, threshold) in requests/s, and
# (connections, reference, ratio at most) in server CPU per request.
TARGETS = ((250, UVLOOP_STREAMS, 1.3),)
CPU_TARGETS = ((250, UVLOOP_PROTOCOL, 1.1),)
DEFAULTS: dict[str, Any] = {"duration": 1.2, "warmup": 0.4, "repeat": 3}
QUICK: dict[str, Any] = {"duration": 0.25, "warmup": 0.1, "repeat": 1}
CLIENT_SHARE = 0.9  # load generator CPU over server CPU from which a row is marked
_TICK = os.sysconf("SC_CLK_TCK")


def ref_name(ref: tuple[str, str]) -> str:
    return {UVLOOP_STREAMS: "uvloop streams", UVLOOP_PROTOCOL: "uvloop Protocol"}[ref]


def parse_conns(text: str) -> list[int]:
    try:
        conns = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of connection counts: {text!r}") from None
    if not conns or min(conns) < 1:
        raise argparse.ArgumentTypeError("connection counts must be positive")
    return conns


# =================================================================== server
# This runs in the server process (--serve): serve until stdin reaches EOF,
# then print one JSON line of what happened and exit.

class ServerState:
    def __init__(self) -> None:
        self.accepted = 0
        self.nodelay = 0
        self.errors: list[str] = []
        self.handlers: set[asyncio.Task[Any]] = set()
        self.transports: set[asyncio.Transport] = set()

    def connected(self, sock: Any) -> None:
        self.accepted += 1
        try:
            if sock is not None and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
                self.nodelay += 1
        except OSError:
            pass


def aioring_handler(state: ServerState) -> Callable[[Any, Any], Any]:
    async def echo(reader: Any, writer: Any) -> None:
        state.connected(writer.get_extra_info("socket"))
        task = asyncio.current_task()
        assert task is not None
        state.handlers.add(task)
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        try:
            while n := await reader.readinto(buf):
                writer.write(view[:n])
                await writer.drain()
        except Exception as exc:
            state.errors.append(f"handler: {error_text(exc)}")
        finally:
            writer.close()
            state.handlers.discard(task)
    return echo


def read_handler(state: ServerState) -> Callable[[Any, Any], Any]:
    """The stream echo with read(): asyncio's start_server gives it asyncio's streams, aioring's its own."""
    async def echo(reader: Any, writer: Any) -> None:
        state.connected(writer.get_extra_info("socket"))
        task = asyncio.current_task()
        assert task is not None
        state.handlers.add(task)
        try:
            while data := await reader.read(READ_SIZE):
                writer.write(data)
                await writer.drain()
        except Exception as exc:
            state.errors.append(f"handler: {error_text(exc)}")
        finally:
            writer.close()
            state.handlers.discard(task)
    return echo


class EchoProtocol(asyncio.Protocol):
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self.state.transports.add(self.transport)
        self.state.connected(transport.get_extra_info("socket"))

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.state.errors.append(f"connection lost: {error_text(exc)}")
        if self.transport is not None:
            self.state.transports.discard(self.transport)


class FloorProtocol(EchoProtocol):
    """EchoProtocol whose bytes go to a task of the connection, through a future, for it to echo."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.task = asyncio.get_running_loop().create_task(self.echo())

    def data_received(self, data: bytes) -> None:
        self.pending.append(data)
        self.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.wake()
        super().connection_lost(exc)

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def echo(self) -> None:
        loop = asyncio.get_running_loop()
        pending = self.pending
        assert self.transport is not None
        write = self.transport.write
        while True:
            while not pending:
                if self.lost:
                    return
                self.waiter = loop.create_future()
                await self.waiter
            data = b"".join(pending) if len(pending) > 1 else pending[0]
            pending.clear()
            write(data)


async def serve(variant: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    state = ServerState()

    def handler(_: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        exc = ctx.get("exception")
        state.errors.append("loop: " + ctx.get("message", "") + (f": {error_text(exc)}" if exc else ""))
    loop.set_exception_handler(handler)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, 0))
    port = listener.getsockname()[1]
    server: Any
    if variant == "aioring-readinto":
        server = await aioring.start_server(aioring_handler(state), sock=listener, backlog=1024)
    elif variant == "aioring-read":
        server = await aioring.start_server(read_handler(state), sock=listener, backlog=1024)
    elif variant == "asyncio-streams":
        server = await asyncio.start_server(read_handler(state), sock=listener, backlog=1024)
    elif variant == "floor":
        server = await loop.create_server(lambda: FloorProtocol(state), sock=listener, backlog=1024)
    else:
        server = await loop.create_server(lambda: EchoProtocol(state), sock=listener, backlog=1024)
    stop = loop.create_future()

    def stdin_ready() -> None:
        if not os.read(0, 4096) and not stop.done():  # EOF: the parent is done (or gone)
            stop.set_result(None)
    loop.add_reader(0, stdin_ready)
    ring0 = aioring.statistics() if variant.startswith("aioring") else {}
    print(json.dumps({"port": port}), flush=True)
    try:
        await stop
    finally:
        loop.remove_reader(0)
    server.close()
    # The load generator closed its connections before stopping us: every
    # handler should be over.  Wait a little for stragglers, then count them.
    deadline = loop.time() + 3
    while (state.handlers or state.transports) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    unfinished = len(state.handlers) + len(state.transports)
    for task in list(state.handlers):
        task.cancel()
    for transport in list(state.transports):
        transport.abort()
    await asyncio.sleep(0)
    try:
        await asyncio.wait_for(server.wait_closed(), 3)
    except asyncio.TimeoutError:
        state.errors.append("server.wait_closed() did not return within 3 s")
    ring = {}
    if ring0:
        ring1 = aioring.statistics()
        ring = {k: ring1[k] - ring0[k] for k in ("submit_calls", "wakeups", "completions") if k in ring1}
    return {"accepted": state.accepted, "nodelay": state.nodelay, "errors": state.errors[:10],
            "error_count": len(state.errors), "unfinished": unfinished, "ring": ring}


def server_main(variant: str, loop_name: str) -> int:
    if loop_name == "uvloop":
        new_loop("uvloop").close()  # libuv's process-wide pipe is made now, not counted below
    fds0 = open_fds()
    loop = new_loop(loop_name)
    try:
        report = loop.run_until_complete(serve(variant))
    finally:
        loop.close()
    gc.collect()
    report["fds_leaked"] = open_fds() - fds0
    print(json.dumps(report), flush=True)
    return 0


# ============================================================ load generator
class LoadState:
    def __init__(self) -> None:
        self.stopping = False
        self.errors: list[str] = []


class PingPong(asyncio.Protocol):
    """One connection of the load generator: send a message, wait for all of it back, repeat.

    It alternates between two messages of its own, so an echo that is late,
    repeated or another connection's is noticed.
    """

    def __init__(self, state: LoadState, messages: tuple[bytes, bytes],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.state = state
        self.messages = messages
        self.size = len(messages[0])
        self.turn = 0
        self.partial = b""
        self.count = 0
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.Future[None] = loop.create_future()  # no request in flight after stopping
        self.lost: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def start(self) -> None:
        assert self.transport is not None
        self.transport.write(self.messages[0])

    def data_received(self, data: bytes) -> None:
        if self.partial:
            data = self.partial + data
        if len(data) != self.size:
            if len(data) < self.size:
                self.partial = data
                return
            self.fail(f"{len(data)} bytes came back for a {self.size}-byte message")
            return
        self.partial = b""
        expected = self.messages[self.turn]
        if data != expected:
            self.fail("an echo differs from the message sent")
            return
        self.count += 1
        if self.state.stopping:
            if not self.idle.done():
                self.idle.set_result(None)
            return
        self.turn ^= 1
        self.transport.write(self.messages[self.turn])  # type: ignore[union-attr]

    def fail(self, what: str) -> None:
        self.state.errors.append(what)
        if not self.idle.done():
            self.idle.set_result(None)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool | None:
        if not self.state.stopping:
            self.state.errors.append("the server closed a connection during the run")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.state.stopping:
            self.state.errors.append(f"connection lost: {error_text(exc)}")
        if not self.idle.done():
            self.idle.set_result(None)
        if not self.lost.done():
            self.lost.set_result(None)


def proc_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user, system; all threads) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


@dataclass
class Sample:
    variant: str
    loop: str
    conns: int
    repeat: int
    size: int
    requests: int = 0
    wall_s: float = 0.0
    rps: float = 0.0
    server_cpu_s: float = 0.0
    server_sys_s: float = 0.0  # the kernel's part of server_cpu_s
    client_cpu_s: float = 0.0
    server_cores: float = 0.0  # server CPU seconds per wall second in the window
    client_cores: float = 0.0
    server_cpu_us_per_req: float = 0.0
    server_sys_us_per_req: float = 0.0
    other_cpu_s: float = 0.0  # the rest of the machine meanwhile (tick resolution)
    steal_s: float = 0.0
    total_requests: int = 0  # warm-up and wind-down included
    server: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


async def generate_load(sample: Sample, port: int, pid: int, warmup: float, duration: float) -> None:
    loop = asyncio.get_running_loop()
    state = LoadState()
    logged: list[str] = []
    loop.set_exception_handler(lambda _, ctx: logged.append(ctx.get("message", "")))
    protocols: list[PingPong] = []
    try:
        for i in range(sample.conns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                await loop.sock_connect(sock, (HOST, port))
            except BaseException:
                sock.close()
                raise
            stamp = i.to_bytes(4, "big")
            msgs = (stamp + b"a" + bytes(range(256)) * (sample.size // 256 + 1))[:sample.size], \
                   (stamp + b"b" + bytes(range(255, -1, -1)) * (sample.size // 256 + 1))[:sample.size]
            protocol = PingPong(state, msgs, loop)
            await loop.create_connection(lambda p=protocol: p, sock=sock)  # type: ignore[misc]
            protocols.append(protocol)
        for p in protocols:
            p.start()
        await asyncio.sleep(warmup)
        if state.errors:
            raise RuntimeError(state.errors[0])
        busy0, steal0 = machine_cpu()
        c0, (u0, k0) = time.process_time(), proc_cpu(pid)
        n0, t0 = sum(p.count for p in protocols), time.perf_counter()
        await asyncio.sleep(duration)
        n1, t1 = sum(p.count for p in protocols), time.perf_counter()
        c1, (u1, k1) = time.process_time(), proc_cpu(pid)
        busy1, steal1 = machine_cpu()
        state.stopping = True
        await asyncio.wait_for(asyncio.gather(*(p.idle for p in protocols)), 10)
        if state.errors:
            raise RuntimeError(f"{len(state.errors)} errors, the first: {state.errors[0]}")
    finally:
        state.stopping = True
        for p in protocols:
            if p.transport is not None:
                p.transport.close()
        if protocols:
            _, pending = await asyncio.wait([p.lost for p in protocols], timeout=10)
            if pending:
                raise RuntimeError(f"{len(pending)} connections of the load generator did not close "
                                   "within 10 s")
    if logged:
        raise RuntimeError("the load generator's loop logged: " + "; ".join(logged[:3]))
    sample.requests = n1 - n0
    sample.wall_s = t1 - t0
    sample.client_cpu_s = c1 - c0
    sample.server_cpu_s = (u1 - u0) + (k1 - k0)
    sample.server_sys_s = k1 - k0
    sample.other_cpu_s = max(0.0, busy1 - busy0 - sample.client_cpu_s - sample.server_cpu_s)
    sample.steal_s = steal1 - steal0
    sample.total_requests = sum(p.count for p in protocols)


def read_line(stream: IO[bytes], timeout: float) -> bytes:
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise TimeoutError(f"the server process said nothing within {timeout:.0f} s")
    return stream.readline()


def stop_server(proc: subprocess.Popen[bytes]) -> bytes:
    """Close the server's stdin (it stops and reports) and return its stdout; kill it if it hangs."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError("the server process did not stop within 15 s of its stdin closing; "
                           "killed") from None
    return proc.stdout.read()  # (one line: it cannot have filled the pipe)


def one_run(sample: Sample, client_loop: str, warmup: float, duration: float, timeout: float,
            pin: bool) -> str:
    """Start a server process, load it, stop it, and check that it stopped cleanly."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", sample.variant,
           "--serve-loop", sample.loop]
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
        assert proc.stdout is not None
        try:
            pinned = pin_pair(proc.pid, os.getpid()) if pin else "no"
            try:
                line = read_line(proc.stdout, 30)
                if not line:
                    raise RuntimeError("the server process exited before listening")
                port = json.loads(line)["port"]
                loop = new_loop(client_loop)
                try:
                    loop.run_until_complete(asyncio.wait_for(
                        generate_load(sample, port, proc.pid, warmup, duration), timeout))
                finally:
                    loop.close()
            except Exception:
                with contextlib.suppress(Exception):  # the load's error is the one to report
                    stop_server(proc)
                raise
            out = stop_server(proc)
        except BaseException:
            if proc.poll() is None:  # (also on KeyboardInterrupt: no server is left behind)
                proc.kill()
                proc.wait()
            errors.seek(0)
            tail = errors.read().decode(errors="replace").strip().splitlines()[-3:]
            if tail:
                log("\n    server stderr: " + "\n    ".join(tail), end="")
            raise
        errors.seek(0)
        err_text = errors.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        raise RuntimeError(f"the server process exited with {proc.returncode}: {err_text[-300:]}")
    report = json.loads(out.splitlines()[-1])
    sample.server = report
    if report["error_count"]:
        raise RuntimeError(f"the server saw {report['error_count']} errors, the first: {report['errors'][0]}")
    if report["unfinished"]:
        raise RuntimeError(f"{report['unfinished']} server connections were still open after the "
                           "load generator had closed its own")
    if report["fds_leaked"]:
        raise RuntimeError(f"the server process had {report['fds_leaked']} more fds open at the end")
    if report["accepted"] != sample.conns:
        raise RuntimeError(f"the server accepted {report['accepted']} connections, not {sample.conns}")
    if err_text:
        raise RuntimeError(f"the server process wrote to stderr: {err_text[-300:]}")
    sample.rps = sample.requests / sample.wall_s
    sample.server_cores = sample.server_cpu_s / sample.wall_s
    sample.client_cores = sample.client_cpu_s / sample.wall_s
    sample.server_cpu_us_per_req = sample.server_cpu_s / max(sample.requests, 1) * 1e6
    sample.server_sys_us_per_req = sample.server_sys_s / max(sample.requests, 1) * 1e6
    return pinned


# ================================================================ reporting
Key = tuple[str, str, int]


def median_rows(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    groups: dict[Key, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.variant, s.loop, s.conns), []).append(s)
    out: dict[Key, dict[str, Any]] = {}
    for key, group in groups.items():
        ok = [s for s in group if s.error is None]
        row: dict[str, Any] = {"variant": key[0], "loop": key[1], "conns": key[2], "runs": len(ok),
                               "errors": [s.error for s in group if s.error]}
        if ok:
            rates = [s.rps for s in ok]
            row.update(rps=statistics.median(rates), rps_min=min(rates), rps_max=max(rates),
                       server_cores=statistics.median(s.server_cores for s in ok),
                       client_cores=statistics.median(s.client_cores for s in ok),
                       server_cpu_us_per_req=statistics.median(s.server_cpu_us_per_req for s in ok),
                       server_sys_us_per_req=statistics.median(s.server_sys_us_per_req for s in ok),
                       nodelay_all=all(s.server.get("nodelay") == s.conns for s in ok),
                       client_bound=sum(s.client_cpu_s >= CLIENT_SHARE * s.server_cpu_s for s in ok))
            ring = [s.server["ring"] for s in ok if s.server.get("ring")]
            if ring:
                row["server_submits_per_req"] = statistics.median(
                    r["submit_calls"] / s.total_requests for r, s in
                    zip(ring, [s for s in ok if s.server.get("ring")], strict=True))
        out[key] = row
    return out


def render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:  # the first two columns are names: left-aligned
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def report(medians: dict[Key, dict[str, Any]], configs: list[tuple[str, str]], conns: list[int],
           size: int, repeat: int, client_loop: str) -> str:
    out = []
    for c in conns:
        out.append(f"\n{c} connections, {size}-byte messages, ping-pong on each; median of {repeat} "
                   f"(load generator: one process on {client_loop})")
        rows = []
        for variant, loop in configs:
            r = medians.get((variant, loop, c), {})
            if not r.get("runs"):
                rows.append([variant, loop, "FAILED"] + [""] * 7)
                continue
            rps = r["rps"]
            flag = "  *" if r["client_bound"] else ""
            rows.append([variant, loop, f"{rps:,.0f}", f"{r['server_cpu_us_per_req']:.1f}",
                         f"{r['server_sys_us_per_req']:.1f}",
                         f"{r['server_cores']:.2f}", f"{r['client_cores']:.2f}{flag}",
                         ratio(rps, medians.get((*UVLOOP_STREAMS, c), {}).get("rps")),
                         ratio(rps, medians.get((*UVLOOP_PROTOCOL, c), {}).get("rps")),
                         ratio(rps, medians.get(("asyncio-streams", "asyncio", c), {}).get("rps"))])
        out.append(render(["server", "loop", "requests/s", "server CPU us/req", "of it kernel", "server CPU",
                           "client CPU", "/ uvloop streams", "/ uvloop Protocol", "/ asyncio streams"],
                          rows))
    return "\n".join(out)


def targets(medians: dict[Key, dict[str, Any]], variants: list[str], loops: list[str]) -> str:
    lines = ["Targets, requests/s of aioring's streams:"]
    for c, ref, threshold in TARGETS:
        base = medians.get((*ref, c), {}).get("rps")
        for variant in variants:
            for loop in loops:
                mine = medians.get((variant, loop, c), {}).get("rps")
                what = f"{c} connections: {variant}/{loop} >= {threshold}x {ref_name(ref)}"
                if mine is None or base is None:
                    lines.append(f"  n/a   {what} (not measured)")
                    continue
                verdict = "PASS" if mine >= threshold * base else "FAIL"
                lines.append(f"  {verdict}  {what}: {mine / base:.2f}x ({mine:,.0f} vs {base:,.0f})")
    lines.append("Server CPU per request of aioring's streams:")
    for c, ref, most in CPU_TARGETS:
        base = medians.get((*ref, c), {}).get("server_cpu_us_per_req")
        for variant in variants:
            for loop in loops:
                mine = medians.get((variant, loop, c), {}).get("server_cpu_us_per_req")
                what = f"{c} connections: {variant}/{loop} <= {most}x {ref_name(ref)}'s"
                if mine is None or base is None:
                    lines.append(f"  n/a   {what} (not measured)")
                    continue
                verdict = "PASS" if mine <= most * base else "FAIL"
                lines.append(f"  {verdict}  {what}: {mine / base:.2f}x ({mine:.1f} vs {base:.1f} us)")
    return "\n".join(lines)


def floor_lines(medians: dict[Key, dict[str, Any]], loops: list[str], conns: list[int]) -> str:
    """Where the floor (a future and a task wake-up per request on the loop's
    own transport) stands against the targets' references: what no server
    whose handler awaits its reads passes on that loop."""
    lines = []
    for c in conns:
        for loop in loops:
            floor = medians.get(("floor", loop, c), {})
            if not floor.get("runs"):
                continue
            parts = []
            for _, ref, threshold in (t for t in TARGETS if t[0] == c):
                base = medians.get((*ref, c), {}).get("rps")
                if base:
                    parts.append(f"{floor['rps'] / base:.2f}x {ref_name(ref)}' requests/s "
                                 f"(target {threshold}x)")
            for _, ref, most in (t for t in CPU_TARGETS if t[0] == c):
                base = medians.get((*ref, c), {}).get("server_cpu_us_per_req")
                if base:
                    parts.append(f"{floor['server_cpu_us_per_req'] / base:.2f}x {ref_name(ref)}'s CPU "
                                 f"per request (target at most {most}x)")
            for variant in AIORING_VARIANTS:
                mine = medians.get((variant, loop, c), {}).get("rps")
                if mine:
                    parts.append(f"{variant} {mine / floor['rps']:.2f}x the floor")
            if parts:
                lines.append(f"  {c} connections, {loop}: {floor['rps']:,.0f} requests/s, "
                             f"{floor['server_cpu_us_per_req']:.1f} us/req = " + "; ".join(parts))
    if not lines:
        return ""
    return "\n".join(["The floor (the loop's own transport, a future and a task wake-up per request; "
                      "no server whose handler awaits its reads over that loop's transport passes it):",
                      *lines])


def notes(medians: dict[Key, dict[str, Any]], samples: list[Sample]) -> str:
    out = []
    ok = [s for s in samples if s.error is None]
    missing = sorted({f"{s.variant}/{s.loop}" for s in ok if s.server.get("nodelay") != s.conns})
    if ok:
        out.append("TCP_NODELAY read back on every accepted connection of every run: "
                   + ("set on all." if not missing else "NOT set on some connections of "
                      + ", ".join(missing)))
    out.append("Server CPU and client CPU are CPU seconds per wall second in the window (1.00 = one "
               "core), each process with all its threads, from /proc/<pid>/stat and process_time().")
    client = [s.client_cpu_s / s.requests * 1e6 for s in ok if s.requests]
    if client:
        out.append(f"The load generator spent {min(client):.1f} to {max(client):.1f} us of CPU per request "
                   f"(median {statistics.median(client):.1f}).")
    bound = [k for k, r in medians.items() if r.get("client_bound")]
    if bound:
        out.append(f"* in at least one run the load generator used >= {CLIENT_SHARE}x the server's CPU: "
                   "the rate is set by both processes there, not by the server alone (on 2 cores, more so "
                   "while other work takes CPU); compare 'server CPU us/req' too.")
    ring = [f"{v}/{lp}/{c}: {r['server_submits_per_req']:.3f}" for (v, lp, c), r in sorted(medians.items())
            if "server_submits_per_req" in r]
    if ring:
        out.append("aioring server, io_uring submit calls per request (median, whole run): "
                   + ", ".join(ring))
    if ok:
        wall = sum(s.wall_s for s in ok)
        other = sum(s.other_cpu_s for s in ok) / wall
        steal = sum(s.steal_s for s in ok) / wall
        line = (f"Besides the server and the load generator, the machine used {other:.2f} CPUs on average "
                f"during the windows, and the hypervisor stole {steal:.2f} CPUs.")
        if other > 0.1 or steal > 0.05:
            line += " Results are noisier than on an idle machine."
        out.append(line)
    spread = spread_note(medians.items(), "rps", lambda k: f"{k[0]}, {k[1]}, {k[2]} connections")
    if spread:
        out.append(f"Largest {spread}.")
    return "\n".join(out)


# ===================================================================== main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Echo server requests/s over loopback TCP with 25 and 250 concurrent ping-pong "
                    "connections: aioring's streams vs asyncio's and uvloop's streams and a plain "
                    "Protocol; each server in its own process, one load generator for all.")
    parser.add_argument("--conns", type=parse_conns, default=list(ALL_CONNS),
                        help="comma-separated connection counts (default 25,250)")
    parser.add_argument("--size", type=int, default=512, help="message size in bytes (default 512)")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS, canonical=True),
                        default=list(ALL_VARIANTS),
                        help="comma-separated servers (default " + ",".join(ALL_VARIANTS) + ")")
    parser.add_argument("--loops", type=parse_list(ALL_LOOPS, canonical=True), default=list(ALL_LOOPS),
                        help="comma-separated server event loops (default asyncio,uvloop)")
    parser.add_argument("--duration", type=float, default=None,
                        help=f"timed window per run, seconds (default {DEFAULTS['duration']}, "
                             f"--quick {QUICK['duration']})")
    parser.add_argument("--warmup", type=float, default=None,
                        help=f"untimed load before it, seconds (default {DEFAULTS['warmup']}, "
                             f"--quick {QUICK['warmup']})")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per configuration, interleaved; the median is reported "
                             f"(default {DEFAULTS['repeat']}, --quick {QUICK['repeat']})")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds before one run is abandoned as hung (default 60)")
    parser.add_argument("--quick", action="store_true", help="short windows, one run each: a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw and median results here")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="leave the server and the load generator where the scheduler puts them "
                             "(default: each on a CPU of its own, when there are two)")
    parser.add_argument("--serve", choices=ALL_VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--serve-loop", choices=ALL_LOOPS, default="asyncio", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return server_main(args.serve, args.serve_loop)
    preset = QUICK if args.quick else DEFAULTS
    duration, warmup, repeat = (preset_value(args, preset, k) for k in ("duration", "warmup", "repeat"))
    if duration <= 0 or warmup < 0 or repeat < 1 or args.size < 16:
        parser.error("--duration and --repeat must be positive, --size at least 16")
    started = time.perf_counter()

    skipped: list[str] = []
    loops = list(args.loops)
    if "uvloop" in loops and uvloop is None:
        loops.remove("uvloop")
        skipped.append("uvloop: not installed; the uvloop servers (uvloop streams, uvloop Protocol, "
                       "aioring on uvloop) are skipped, their targets are n/a, and the load generator "
                       "runs on asyncio's loop (pip install uvloop)")
    if not loops:
        sys.exit("error: no event loop left to run on")
    client_loop = "uvloop" if uvloop is not None else "asyncio"
    for note in skipped:
        log("note: " + note)
    try:
        backend = aioring.backend()
    except OSError as exc:
        sys.exit(f"error: io_uring is not available here: {exc}")
    if client_loop == "uvloop":
        new_loop("uvloop").close()  # libuv's process-wide pipe is made now, not counted below
    need = max(args.conns) + 64
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        sys.exit(f"error: {max(args.conns)} connections need about {need} fds; ulimit -n is {soft}")

    configs = [(v, lp) for v in args.variants for lp in loops]
    plan = [(v, lp, c) for c in args.conns for v, lp in configs]
    total = len(plan) * repeat
    log(f"{len(plan)} configurations x {repeat} runs, {warmup} s warm-up + {duration} s window each; "
        f"load generator on {client_loop}")
    fds_before = open_fds()
    samples: list[Sample] = []
    pinned = "no"
    n = 0
    for rep in range(repeat):
        shift = rep % len(plan)
        for variant, loop_name, c in plan[shift:] + plan[:shift]:
            n += 1
            log(f"[{n}/{total}] {variant:<15} loop={loop_name:<7} conns={c:<4} "
                f"repeat {rep + 1}/{repeat} ... ", end="")
            s = Sample(variant, loop_name, c, rep + 1, args.size)
            try:
                pinned = one_run(s, client_loop, warmup, duration, args.timeout, args.pin)
            except Exception as exc:
                s.error = error_text(exc) or type(exc).__name__
                log(f"FAILED: {s.error}")
            else:
                log(f"{s.rps:>9,.0f} req/s  server {s.server_cores:.2f} / client {s.client_cores:.2f} CPU")
            samples.append(s)

    medians = median_rows(samples)
    gc.collect()
    leaked_fds = open_fds() - fds_before
    elapsed = time.perf_counter() - started
    meta: dict[str, Any] = {
        **machine_info(), "aioring_backend": backend, "git": git_state(),
        "versions": {d: version(d) for d in ("aioring", "uvloop")},
        "client_loop": client_loop, "size": args.size, "conns": args.conns, "variants": args.variants,
        "loops": loops, "repeat": repeat, "duration_s": duration, "warmup_s": warmup,
        "skipped": skipped, "leaked_fds_in_load_generator": leaked_fds, "runtime_s": elapsed,
        "pinned": pinned,
    }
    v = meta["versions"]
    print(f"{machine_line(meta)} | aioring.backend() = {backend} | {meta['git']}")
    print(f"aioring {v['aioring']}, uvloop {v['uvloop']}; server and load generator in separate processes, "
          f"{HOST}, {duration} s windows after {warmup} s of warm-up")
    for note in skipped:
        print("skipped: " + note)
    print(report(medians, configs, args.conns, args.size, repeat, client_loop))
    print()
    print(targets(medians, [v for v in args.variants if v in AIORING_VARIANTS], loops))
    floors = floor_lines(medians, loops, args.conns)
    if floors:
        print(floors)
    print()
    print(notes(medians, samples))
    if leaked_fds:
        print(f"NOTE: the load generator has {leaked_fds} more fds open after all runs than before.")
    failed = [s for s in samples if s.error]
    if failed:
        print(f"FAILED runs: {len(failed)} of {len(samples)}")
        for s in failed:
            print(f"  {s.variant} {s.loop} {s.conns} connections, repeat {s.repeat}: {s.error}")
    print(f"total runtime {elapsed:.1f} s")
    write_json(args.json, {"meta": meta, "samples": [asdict(s) for s in samples],
                           "medians": list(medians.values())})
    return 1 if failed or leaked_fds else 0


if __name__ == "__main__":
    sys.exit(main())
