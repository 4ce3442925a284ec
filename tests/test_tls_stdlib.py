"""The stdlib's own TLS stream tests (test.test_asyncio.test_streams), with
asyncio's stream functions routed to aioring's.  Skipped where the Python
at hand ships without its test package."""

from __future__ import annotations

import asyncio
import unittest

import pytest

import aioring

test_streams = pytest.importorskip("test.test_asyncio.test_streams")

TLS_TESTS = ("test_open_connection_no_loop_ssl", "test_open_unix_connection_no_loop_ssl", "test_start_tls")


@pytest.mark.parametrize("name", [n for n in TLS_TESTS if hasattr(test_streams.StreamTests, n)])
def test_stdlib_tls_stream_test(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for func in ("open_connection", "open_unix_connection", "start_server", "start_unix_server"):
        monkeypatch.setattr(asyncio, func, getattr(aioring, func))
    result = unittest.TestResult()
    test_streams.StreamTests(name).run(result)
    assert result.testsRun == 1
    assert not result.skipped, result.skipped
    assert result.wasSuccessful(), result.errors + result.failures
