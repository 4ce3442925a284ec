#!/usr/bin/env python3
"""Idle connections: the server's RSS per open, idle stream connection.

A server process (one per run) accepts --conns loopback TCP connections and
gives each a handler that waits in ``reader.read(1)``: an idle connection as a
real server holds it, its receive armed.  This process is the client, with
plain blocking sockets.  The server's RSS (VmRSS, after gc.collect()) is read
after a warm-up of 50 connections opened and closed, and again once every
connection's handler runs; the difference over --conns is the RSS per idle
connection.

Variants (server side): aioring-streams (aioring.start_server) and
asyncio-streams (asyncio.start_server), each on asyncio's loop and on uvloop.
The goal: aioring's streams hold no more per idle connection than asyncio's
streams on uvloop ("uvloop streams").  Runs are interleaved, --repeat times,
and the median is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HOST = "127.0.0.1"
VARIANTS = ("aioring-streams", "asyncio-streams")
LOOPS = ("asyncio", "uvloop")
WARM = 50
REFERENCE = ("asyncio-streams", "uvloop")


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def serve(variant: str) -> None:
    """The server: prints its port, then answers lines on stdin (count, rss, quit)."""
    count = 0
    done = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        count += 1
        try:
            await reader.read(1)
        finally:
            writer.close()

    if variant == "aioring-streams":
        import aioring
        server = await aioring.start_server(handle, HOST, 0)  # type: ignore[arg-type]
    else:
        server = await asyncio.start_server(handle, HOST, 0)
    print(server.sockets[0].getsockname()[1], flush=True)

    def command() -> None:
        line = sys.stdin.readline().strip()
        if line == "count":
            print(count, flush=True)
        elif line == "rss":
            gc.collect()
            print(rss_kib(), flush=True)
        elif not done.done():
            done.set_result(None)

    asyncio.get_running_loop().add_reader(sys.stdin.fileno(), command)
    await done
    server.close()


class Server:
    def __init__(self, variant: str, loop: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", variant, loop],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.ask(None))

    def ask(self, what: str | None) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if what is not None:
            self.proc.stdin.write(what + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the server ended (exit status {self.proc.wait()})")
        return line.strip()

    def wait_count(self, n: int, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while int(self.ask("count")) < n:
            if time.monotonic() > end:
                raise TimeoutError(f"fewer than {n} connections reached their handler")
            time.sleep(0.01)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(30)


def one_run(variant: str, loop: str, conns: int) -> float:
    """RSS per idle connection, in KiB."""
    server = Server(variant, loop)
    try:
        warm = [socket.create_connection((HOST, server.port)) for _ in range(WARM)]
        server.wait_count(WARM)
        for s in warm:
            s.close()
        before = int(server.ask("rss"))
        socks = [socket.create_connection((HOST, server.port)) for _ in range(conns)]
        try:
            server.wait_count(WARM + conns)
            after = int(server.ask("rss"))
        finally:
            for s in socks:
                s.close()
        return (after - before) / conns
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conns", type=int, default=2000, help="idle connections (default 2000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration (default 3)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 connections, once")
    parser.add_argument("--json", metavar="PATH", help="also write the runs and medians here, as JSON")
    parser.add_argument("--serve", nargs=2, metavar=("VARIANT", "LOOP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        variant, loop = args.serve
        if loop == "uvloop":
            import uvloop
            uvloop.run(serve(variant))
        else:
            asyncio.run(serve(variant))
        return 0
    conns, repeat = (200, 1) if args.quick else (args.conns, args.repeat)
    loops = list(LOOPS) if importlib.util.find_spec("uvloop") is not None else ["asyncio"]
    configs = [(v, lp) for v in VARIANTS for lp in loops]
    results: dict[tuple[str, str], list[float]] = {c: [] for c in configs}
    for r in range(1, repeat + 1):
        for variant, loop in configs:
            per = one_run(variant, loop, conns)
            results[(variant, loop)].append(per)
            print(f"run {r}/{repeat}: {variant:16} {loop:8} {per:7.2f} KiB per idle connection", flush=True)
    med = {c: statistics.median(v) for c, v in results.items()}
    print(f"\n== server RSS per idle connection, {conns} connections: median of {repeat} ==")
    ref = med.get(REFERENCE)
    for (variant, loop), value in med.items():
        ratio = f"{value / ref:.2f}x uvloop streams" if ref else ""
        print(f"  {variant:16} {loop:8} {value:7.2f} KiB  {ratio}")
    if ref:
        print("Goal (for information):")
        for loop in loops:
            mine = med[("aioring-streams", loop)]
            verdict = "PASS" if mine <= ref else "FAIL"
            print(f"  {verdict}  aioring-streams/{loop} <= uvloop streams per idle connection: "
                  f"{mine:.2f} vs {ref:.2f} KiB")
    if args.json:
        rows = [{"variant": v, "loop": lp, "kib_per_conn": med[(v, lp)], "runs": results[(v, lp)]}
                for v, lp in configs]
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"conns": conns, "repeat": repeat, "medians": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
