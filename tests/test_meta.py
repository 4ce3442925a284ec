"""The suite's own guarantees: both loops, and loud unexpected loop errors."""

from __future__ import annotations

import asyncio

import uvloop


async def test_runs_on_each_loop_kind(request):
    loop = asyncio.get_running_loop()
    kind = request.node.callspec.params["_asyncio_loop_factory"].__name__
    if kind == "new_event_loop":
        assert isinstance(loop, uvloop.Loop)
    else:
        assert type(loop) is asyncio.SelectorEventLoop


async def test_loop_exception_handler_calls_are_recorded(loop_errors):
    loop = asyncio.get_running_loop()
    loop.call_exception_handler({"message": "boom"})
    assert [ctx["message"] for ctx in loop_errors] == ["boom"]
    loop_errors.clear()


def test_import_aioring_leaves_tempfile_until_it_is_used():
    import subprocess
    import sys
    code = ("import sys, aioring; assert 'tempfile' not in sys.modules, 'imported at once'; "
            "assert aioring.tempfile.TemporaryFile and 'tempfile' in sys.modules; "
            "from aioring import tempfile; import aioring as aiofiles; "
            "assert aiofiles.tempfile is tempfile")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_aioring_leaves_sockets_and_streams_until_they_are_used():
    import subprocess
    import sys
    code = ("import sys, aioring; "
            "assert not {'aioring._streams', 'aioring._net'} & set(sys.modules), 'imported at once'; "
            "from aioring import open_connection; from aioring._streams import open_connection as oc; "
            "assert open_connection is oc and aioring.sock_recv is sys.modules['aioring._net'].sock_recv; "
            "assert set(aioring.__all__) <= set(dir(aioring)); "
            "ns = {}; exec('from aioring import *', ns); "
            "assert all(ns[name] is getattr(aioring, name) for name in aioring.__all__); "
            "import pytest; "
            "pytest.raises(AttributeError, getattr, aioring, 'no_such_name')")
    subprocess.run([sys.executable, "-c", code], check=True)
