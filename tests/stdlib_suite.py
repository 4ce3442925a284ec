"""Run CPython's own asyncio stream and socket tests against aioring, on
asyncio's loop and on uvloop, once on each backend (io_uring, threads).

The tests are those of the running Python's installation (``test.test_asyncio``:
test_streams, test_sock_lowlevel, test_server, test_sendfile); nothing is
copied.  Where the installation lacks them (Debian ships them apart, in
libpython3.X-testsuite), this says so and skips.  They are routed to aioring
through the public entry points: ``asyncio.open_connection``,
``start_server`` and their unix twins become aioring's, and the loop's
``sock_*`` methods call ``aioring.sock_*``.  For uvloop, the loops the tests
make are uvloop's.  tests/README.md lists every test left out and why.

Usage: python tests/stdlib_suite.py [-v]
       python tests/stdlib_suite.py --list-left-out asyncio|uvloop
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

MODULES = ("test_streams", "test_sock_lowlevel", "test_server", "test_sendfile")
LOOPS = ("asyncio", "uvloop")
BACKENDS = ("io_uring", "threads")

_INTERNALS = "builds or inspects asyncio's internals directly"
_SAME_TESTS = "the same tests on another selector, which aioring does not use"
_TRANSPORTS = "the loop's own transports and protocols (loop.sendfile), which aioring does not replace"

# Left out everywhere: test id (or a prefix of it, ending in ".") -> reason.
EXCLUDED: dict[str, str] = {
    "test_streams.StreamTests.test_streamreaderprotocol_": _INTERNALS + " (StreamReaderProtocol)",
    "test_streams.StreamTests.test_open_connection_happy_eyeball_refcycles":
        "asserts that asyncio's open_connection leaves no reference cycles through its own frames",
    "test_server.SelectorStartServerTests.test_start_server_1":
        _INTERNALS + " (asserts asyncio.Server's private _sockets and _waiters)",
    "test_server.SelectorStartServerTests.test_start_unix_server_1":
        _INTERNALS + " (asserts asyncio.Server's private _sockets and _waiters)",
    "test_server.ProactorStartServerTests.": "Windows only",
    "test_sock_lowlevel.PollEventLoopTests.": _SAME_TESTS,
    "test_sock_lowlevel.SelectEventLoopTests.": _SAME_TESTS,
    "test_sendfile.PollEventLoopTests.": _SAME_TESTS,
    "test_sendfile.SelectEventLoopTests.": _SAME_TESTS,
    "test_sendfile.EPollEventLoopTests.test_sendfile": _TRANSPORTS,
    "test_sendfile.EPollEventLoopTests.test_sendfile_": _TRANSPORTS,
    "test_streams.StreamTests.test_open_connection_error":
        _INTERNALS + " (calls the StreamReaderProtocol's connection_lost)",
    "test_streams.StreamTests.test_open_unix_connection_error":
        _INTERNALS + " (calls the StreamReaderProtocol's connection_lost)",
    "test_server.TestServer2.test_abort_clients":
        "waits for the client's transport to stop reading by itself once its reader holds more than "
        "2 x limit unread; aioring's streams receive only when the reader reads, so an unread "
        "connection never fills its reader and is_reading() stays True (the test loops forever)",
    "test_sock_lowlevel.EPollEventLoopTests.test_sock_client_racing":
        "cancels a sock_recv_into whose receive may already be in the kernel, then receives into the "
        "same buffer; on io_uring the cancelled receive can still take the first bytes (its task "
        "returns them, nothing is lost), where the selector loop never reads for a cancelled call, "
        "so the second receive may overwrite them (timing-dependent)",
    "test_sock_lowlevel.EPollEventLoopTests.test_sendto_blocking":
        "hands the loop a Mock socket whose sendto() raises, to reach the loop's own retry; "
        "aioring sends through the kernel, not through socket.sendto",
}
# Left out on uvloop only: what fails there without aioring too.
EXCLUDED_UVLOOP: dict[str, str] = {
    "test_streams.StreamTests.test_read_all_from_pipe_reader":
        "spawns its child through asyncio's child watchers, which uvloop's policy does not have",
    "test_sock_lowlevel.EPollEventLoopTests.test_create_connection_sock":
        "asserts that loop.create_connection's transport is an asyncio.Transport; uvloop's is its own",
}


# Left out where this Python's version of the test reaches into asyncio.
EXCLUDED_BEFORE_3_13: dict[str, str] = {
    "test_server.TestServer2.test_wait_closed_basic": _INTERNALS + " (3.12's calls Server._attach)",
    "test_server.TestServer2.test_wait_closed_race": _INTERNALS + " (3.12's calls Server._attach)",
}


def _excluded(test_id: str, loop: str) -> str | None:
    short = test_id.removeprefix("test.test_asyncio.")
    for table in (EXCLUDED, EXCLUDED_UVLOOP if loop == "uvloop" else {},
                  EXCLUDED_BEFORE_3_13 if sys.version_info < (3, 13) else {}):
        for key, reason in table.items():
            if short == key or (key.endswith(".") and short.startswith(key)) or \
                    (not key.endswith(".") and short.startswith(key) and key.endswith("_")):
                return reason
    return None


def _route(loop_kind: str) -> None:
    """Point the public entry points the tests use at aioring."""
    import asyncio
    import asyncio.selector_events
    import asyncio.streams

    import aioring

    for name in ("open_connection", "start_server", "open_unix_connection", "start_unix_server"):
        setattr(asyncio, name, getattr(aioring, name))
        setattr(asyncio.streams, name, getattr(aioring, name))

    def routed(func):  # type: ignore[no-untyped-def]
        async def method(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return await func(*args, **kwargs)
        method.__name__ = func.__name__
        return method

    classes: list[type] = [asyncio.selector_events.BaseSelectorEventLoop]
    if loop_kind == "uvloop":
        import uvloop
        classes = [uvloop.Loop]
        # The tests' harness reads this asyncio attribute when it closes a
        # loop (test_asyncio.utils.TestCase.close_loop); uvloop's has none.
        uvloop.Loop._default_executor = None  # type: ignore[attr-defined]
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.SelectorEventLoop = lambda *args, **kwargs: uvloop.new_event_loop()  # type: ignore[misc,assignment]
        asyncio.new_event_loop = uvloop.new_event_loop
    names = ["sock_recv", "sock_recv_into", "sock_sendall", "sock_connect", "sock_accept", "sock_sendfile"]
    if sys.version_info >= (3, 11):
        names += ["sock_recvfrom", "sock_recvfrom_into", "sock_sendto"]
    for cls in classes:
        for name in names:
            setattr(cls, name, routed(getattr(aioring, name)))


def _run_one(loop_kind: str, verbose: bool, listing: bool = False) -> int:
    """In the child: route, collect, leave out, run."""
    import asyncio
    import unittest

    try:
        import test.test_asyncio
    except ImportError:
        print(f"stdlib suite: Python {sys.version.split()[0]} at {sys.executable} has no "
              "test.test_asyncio (Debian: libpython3.X-testsuite); skipped")
        return 0
    if os.environ.get("STDLIB_SUITE_UNROUTED") != "1":  # (=1: the loop alone, for comparison)
        _route(loop_kind)
    elif loop_kind == "uvloop":
        import uvloop
        uvloop.Loop._default_executor = None  # type: ignore[attr-defined]
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.SelectorEventLoop = lambda *args, **kwargs: uvloop.new_event_loop()  # type: ignore[misc,assignment]
        asyncio.new_event_loop = uvloop.new_event_loop
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    left_out = 0
    for module in MODULES:
        try:
            tests = loader.loadTestsFromName(f"test.test_asyncio.{module}")
        except ImportError as exc:
            print(f"stdlib suite: test.test_asyncio.{module} is not here ({exc}); skipped")
            continue
        for test in _flatten(tests):
            reason = _excluded(test.id(), loop_kind)
            if reason is None:
                suite.addTest(test)
            else:
                left_out += 1
                if listing:
                    print(f"{test.id().removeprefix('test.test_asyncio.')}: {reason}")
    if listing:
        return 0
    runner = unittest.TextTestRunner(verbosity=2 if verbose else 1, stream=sys.stdout)
    result = runner.run(suite)
    print(f"stdlib suite [{loop_kind}, {os.environ.get('AIORING_BACKEND')}]: {result.testsRun} run, "
          f"{len(result.skipped)} skipped by the tests, {left_out} left out (tests/README.md)")
    return 0 if result.wasSuccessful() else 1


def _flatten(suite):  # type: ignore[no-untyped-def]
    for item in suite:
        if hasattr(item, "__iter__"):
            yield from _flatten(item)
        else:
            yield item


def main() -> int:
    verbose = "-v" in sys.argv[1:]
    if "--child" in sys.argv[1:]:
        return _run_one(sys.argv[sys.argv.index("--child") + 1], verbose)
    if "--list-left-out" in sys.argv[1:]:  # what is left out here, and why
        return _run_one(sys.argv[sys.argv.index("--list-left-out") + 1], verbose, listing=True)
    failed = []
    for loop_kind in LOOPS:
        for backend in BACKENDS:
            began = time.monotonic()
            env = dict(os.environ, AIORING_BACKEND=backend, PYTHONWARNINGS="default")
            args = [sys.executable, __file__, "--child", loop_kind] + (["-v"] if verbose else [])
            code = subprocess.run(args, env=env, check=False).returncode
            print(f"== stdlib suite, {loop_kind} loop, {backend}: "
                  f"{'passed' if code == 0 else 'FAILED'} in {time.monotonic() - began:.1f} s")
            if code:
                failed.append(f"{loop_kind}/{backend}")
    if failed:
        print("stdlib suite failed on: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
