"""Every async test runs on asyncio's default loop and on uvloop, and every
test on both backends (io_uring, and the thread-pool fallback), unless marked
``backends(...)``; a test fails if the loop's exception handler is called
when the test did not ask for it."""

from __future__ import annotations

import asyncio
import gc
import errno
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvloop

import aioring
from aioring import _loops, _ops

LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.SelectorEventLoop,
    "uvloop": uvloop.new_event_loop,
}

BACKENDS = ("io_uring", "threads")
# AIORING_TEST_BACKEND=auto: run each test once, on the backend aioring
# chooses by itself (a child process where io_uring is refused uses this).
_AUTO = os.environ.get("AIORING_TEST_BACKEND") == "auto"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "aioring_backend" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("backends")
        names = marker.args if marker else BACKENDS
        if _AUTO:
            names = ("auto",) if "threads" in names else ()
        metafunc.parametrize("aioring_backend", names, indirect=True)


@pytest.fixture(autouse=True)
def aioring_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend of the rings the test makes ("io_uring" or "threads")."""
    name: str = request.param
    if name == "auto":
        return _loops.chosen_backend()
    monkeypatch.setattr(_loops, "_backend", name)
    return name


@pytest.fixture(autouse=True)
def _fresh_pace() -> None:
    """Each test starts with aioring's yield counter at zero: whether a call
    lets the loop run first (once every YIELD_EVERY calls) then depends on the
    test alone, not on how many calls the tests before it made.  (Tests that
    want the yield set the counter themselves.)"""
    _ops._unyielded[0] = 0


# Every call of any test loop's exception handler lands here.
_loop_errors: list[dict[str, Any]] = []


def _recording(factory: Callable[[], asyncio.AbstractEventLoop]) -> Callable[[], asyncio.AbstractEventLoop]:
    def make() -> asyncio.AbstractEventLoop:
        loop = factory()
        loop.set_exception_handler(lambda _loop, context: _loop_errors.append(context))
        return loop

    make.__name__ = factory.__name__
    return make


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {name: _recording(factory) for name, factory in LOOP_FACTORIES.items()}


@pytest.fixture(params=list(LOOP_FACTORIES))
def new_loop(request: pytest.FixtureRequest) -> Iterator[Callable[[], asyncio.AbstractEventLoop]]:
    """For synchronous tests that drive loops themselves: a factory of loops of
    each kind, recording their exception handler calls like the async tests."""
    loops: list[asyncio.AbstractEventLoop] = []

    def make() -> asyncio.AbstractEventLoop:
        loop = _recording(LOOP_FACTORIES[request.param])()
        loops.append(loop)
        return loop

    yield make
    for loop in loops:
        if not loop.is_closed():
            loop.close()


@pytest.fixture
def loop_errors() -> list[dict[str, Any]]:
    """The calls of the loop's exception handler a test expects; it must empty the list."""
    return _loop_errors


def pytest_collection_finish(session: pytest.Session) -> None:
    # What imports and collection made lives as long as the session: the
    # collection after every test (below) need not trace it each time.
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    result = yield
    gc.collect()  # "Future exception was never retrieved" and friends are reported at collection
    errors = list(_loop_errors)
    _loop_errors.clear()
    if errors:
        lines = "\n".join(f"  {ctx.get('message')!r}: {ctx.get('exception')!r}" for ctx in errors)
        pytest.fail(f"the loop's exception handler was called unexpectedly:\n{lines}", pytrace=False)
    return result


@pytest.fixture
def disk_dir() -> Iterator[str]:
    """A scratch directory on the real disk (io_uring treats tmpfs differently)."""
    base = os.path.join(os.path.dirname(__file__), ".scratch")
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as path:
        yield path


@pytest.fixture
def python_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core's page-cache reads (aioring._core.read_cached and
    readinto_cached, which call preadv2 themselves) hand every call to
    aioring._ops, whose tries go through _ops._preadv: a test that replaces
    it sees every try.  (aioring.read and readinto try in the core before
    their Python functions run: those functions stand in for them.)"""
    monkeypatch.setattr(_ops, "read_cached", lambda *args: None)
    monkeypatch.setattr(_ops, "readinto_cached", lambda *args: -1)
    for name in ("read", "readinto"):
        python_function = getattr(_ops, name).__wrapped__
        monkeypatch.setattr(_ops, name, python_function)
        monkeypatch.setattr(aioring, name, python_function)


@pytest.fixture
def ring_reads(monkeypatch: pytest.MonkeyPatch, python_tries: None) -> None:
    """Reads at an offset go through the ring, as when the page cache misses
    (they are tried directly first: page-cache hits would never reach it)."""
    from aioring import _file, _ops

    def not_cached(*args: object) -> int:
        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
    monkeypatch.setattr(_ops, "_preadv", not_cached)
    monkeypatch.setattr(_file, "_read_whole_now", lambda *args: None)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.fixture
def socks():
    """keep(*sockets) -> the first: sockets the test makes, all closed at teardown."""
    made: list[socket.socket] = []

    def keep(*sockets: socket.socket) -> socket.socket:
        made.extend(sockets)
        return sockets[0]

    yield keep
    for s in made:
        s.close()


@pytest.fixture
def forked() -> Callable[[Callable[[], Any]], int]:
    """forked(child) -> the exit code of a forked child that runs
    asyncio.run(child()) on a loop of its own: 0 when that returns True, 3
    when it returns anything else, 1 when it raises."""
    def run(child: Callable[[], Any]) -> int:
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test
            status = 1
            try:
                status = 0 if asyncio.run(child()) is True else 3
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    return run


@pytest.fixture
def gated_reads(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.Future[None]]:
    """aioring._ops.read (which the core and the file classes look up at
    each call) waits for a future of the returned list before it reads: a
    test decides when a read completes."""
    gates: list[asyncio.Future[None]] = []
    real = _ops.read

    async def gated(fd: int, size: int, offset: int = -1) -> bytes:
        gate = asyncio.get_running_loop().create_future()
        gates.append(gate)
        await gate
        return await real(fd, size, offset)
    monkeypatch.setattr(_ops, "read", gated)
    return gates
