"""The README's quickstart runs as written: its file, aiofiles, socket and
stream examples, each checked against what the stdlib says they did."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    BLOCKS = re.findall(r"```python\n(.*?)```", _f.read(), re.DOTALL)
FILES, AIOFILES, SOCKETS, STREAMS = BLOCKS[:4]


async def _run_as_coroutine(code: str, namespace: dict) -> None:
    """Run a README fragment written as the body of a coroutine."""
    exec("async def _fragment():\n" + textwrap.indent(code, "    "), namespace)
    await namespace["_fragment"]()


def test_the_files_example(disk_dir, monkeypatch):
    monkeypatch.chdir(disk_dir)
    with open("data.bin", "wb") as f:
        f.write(os.urandom(10000))
    ns: dict = {}
    exec(FILES.replace("asyncio.run(main())", ""), ns)
    asyncio.run(ns["main"]())


async def test_the_aiofiles_example(disk_dir, monkeypatch):
    monkeypatch.chdir(disk_dir)
    with open("data.csv", "w", newline="") as f:
        f.write("a,b\r\nc,d\n")
    await _run_as_coroutine(AIOFILES, {})
    with open("log.txt", encoding="utf-8") as f:
        assert f.read() == "started\n"


async def test_the_sockets_example():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    client = socket.create_connection(listener.getsockname())
    try:
        client.sendall(b"ping")
        ns = {"aioring": __import__("aioring"), "listener": listener, "buf": bytearray(4)}
        await _run_as_coroutine(SOCKETS + "\nconn.close()", ns)
        assert client.recv(4) == b"ping"
    finally:
        client.close()
        listener.close()


async def test_the_streams_echo_server_with_readinto_exactly():
    ns: dict = {}
    exec(STREAMS, ns)
    import aioring
    server = await aioring.start_server(ns["echo"], "127.0.0.1", 0)
    async with server:
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        frames = [b"", b"x", os.urandom(70000)]
        for payload in frames:
            writer.write(len(payload).to_bytes(8, "big") + payload)
        await writer.drain()
        for payload in frames:
            n = int.from_bytes(await reader.readexactly(8), "big")
            assert await reader.readexactly(n) == payload
        writer.close()
        assert await reader.read() == b""  # the server closed after the peer did
        await writer.wait_closed()

