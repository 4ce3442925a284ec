"""aioring.open against builtin open: random sequences of operations on two
copies of one file, every result and the final contents compared."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import aioring
from aioring import _rawfile

# AIORING_EXAMPLES=2000 explores further (make soak).
SETTINGS = settings(max_examples=int(os.environ.get("AIORING_EXAMPLES", "120")), deadline=None,
                    suppress_health_check=list(HealthCheck))

BINARY_MODES = ["rb", "rb+", "wb", "wb+", "ab", "ab+", "xb", "xb+"]
TEXT_MODES = ["r", "r+", "w", "w+", "a", "a+", "x", "x+"]
NEWLINES = [None, "", "\n", "\r", "\r\n"]
ENCODINGS = ["utf-8", "latin-1", "utf-16"]

sizes = st.one_of(st.integers(-1, 40), st.integers(0, 20000), st.none())
binary_data = st.one_of(st.binary(max_size=50),
                        st.binary(max_size=9000),
                        st.lists(st.sampled_from([b"ab", b"\n", b"\r\n", b"xyz\n"]),
                                 max_size=30).map(b"".join))
text_data = st.text(alphabet=st.sampled_from(list("ab\n\r€é\u00ff")), max_size=300)

binary_ops = st.lists(st.one_of(
    st.tuples(st.just("read"), sizes),
    st.tuples(st.just("read1"), sizes),
    st.tuples(st.just("readinto"), st.integers(0, 10000)),
    st.tuples(st.just("peek"), st.integers(0, 100)),
    st.tuples(st.just("readline"), sizes),
    st.tuples(st.just("readlines"), st.integers(-1, 200)),
    st.tuples(st.just("write"), binary_data),
    st.tuples(st.just("writelines"), st.lists(binary_data, max_size=3)),
    st.tuples(st.just("seek"), st.integers(-5, 20000), st.sampled_from([0, 1, 2])),
    st.tuples(st.just("tell")),
    st.tuples(st.just("truncate"), st.one_of(st.none(), st.integers(-1, 20000))),
    st.tuples(st.just("flush")),
), max_size=25)

text_ops = st.lists(st.one_of(
    st.tuples(st.just("read"), sizes),
    st.tuples(st.just("readline"), sizes),
    st.tuples(st.just("readlines"), st.integers(-1, 200)),
    st.tuples(st.just("write"), text_data),
    st.tuples(st.just("seek_start")),
    st.tuples(st.just("seek_end")),
    st.tuples(st.just("seek_told")),
    st.tuples(st.just("tell")),
    st.tuples(st.just("truncate"), st.one_of(st.none(), st.integers(0, 2000))),
    st.tuples(st.just("flush")),
), max_size=25)


def _outcome(func: Any, *args: Any) -> Any:
    try:
        return ("ok", func(*args))
    except Exception as exc:  # compared with the other side's
        return ("raised", type(exc), str(exc))


async def _aoutcome(coro: Any) -> Any:
    try:
        return ("ok", await coro)
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def _copies(tmp: str, content: bytes, mode: str) -> tuple[str, str]:
    a, b = os.path.join(tmp, "stdlib"), os.path.join(tmp, "ring")
    for p in (a, b):
        if os.path.exists(p):
            os.unlink(p)
        if "x" not in mode:
            Path(p).write_bytes(content)
    return a, b


@SETTINGS
@given(content=binary_data, mode=st.sampled_from(BINARY_MODES),
       buffering=st.sampled_from([-1, 0, 2, 16, 4096]), ops=binary_ops)
# A pending write replaces the newline the line would otherwise end at.
@example(content=b"\n", mode="rb+", buffering=2, ops=[("truncate", 4), ("write", b"\x00"), ("readline", -1)])
@example(content=b"\nab\n\n" * 8, mode="rb+", buffering=16,
         ops=[("read", 1), ("seek", 0), ("write", b"xxxxx"), ("readline", -1), ("readlines", 3)])
async def test_binary_files_behave_as_builtin_open(disk_dir: str, content: bytes, mode: str, buffering: int,
                                                   ops: list[tuple[Any, ...]]) -> None:
    a, b = _copies(disk_dir, content, mode)
    sync_reads = _rawfile.SYNC_READS[0]
    expected = open(a, mode, buffering=buffering)
    actual = await aioring.open(b, mode, buffering=buffering)
    try:
        for op in ops:
            name, args = op[0], op[1:]
            if name in ("read1", "peek") and buffering == 0:
                continue
            if name == "readinto":
                buf_e, buf_a = bytearray(args[0]), bytearray(args[0])
                e = _outcome(expected.readinto, buf_e)
                r = await _aoutcome(actual.readinto(buf_a))
                assert (r, buf_a) == (e, buf_e), op
                continue
            if name == "peek" and not hasattr(expected, "peek"):
                continue
            e = _outcome(getattr(expected, name), *args)
            r = await _aoutcome(getattr(actual, name)(*args))
            assert r == e, op
            assert actual.closed == expected.closed
    finally:
        e_close = _outcome(expected.close)
        r_close = await _aoutcome(actual.close())
    assert r_close == e_close
    assert Path(b).read_bytes() == Path(a).read_bytes()
    assert _rawfile.SYNC_READS[0] == sync_reads


@SETTINGS
@given(content=text_data, mode=st.sampled_from(TEXT_MODES), newline=st.sampled_from(NEWLINES),
       encoding=st.sampled_from(ENCODINGS), errors=st.sampled_from(["strict", "replace"]),
       buffering=st.sampled_from([-1, 1, 2, 64]), ops=text_ops)
async def test_text_files_behave_as_builtin_open(disk_dir: str, content: str, mode: str, newline: str | None,
                                                 encoding: str, errors: str, buffering: int,
                                                 ops: list[tuple[Any, ...]]) -> None:
    a, b = _copies(disk_dir, content.encode(encoding, "replace"), mode)
    sync_reads = _rawfile.SYNC_READS[0]
    kwargs = {"buffering": buffering, "encoding": encoding, "errors": errors, "newline": newline}
    expected = open(a, mode, **kwargs)
    actual = await aioring.open(b, mode, **kwargs)
    told_e: Any = 0
    told_a: Any = 0
    try:
        for op in ops:
            name, args = op[0], op[1:]
            if name == "seek_start":
                e = _outcome(expected.seek, 0)
                r = await _aoutcome(actual.seek(0))
            elif name == "seek_end":
                e = _outcome(expected.seek, 0, 2)
                r = await _aoutcome(actual.seek(0, 2))
            elif name == "seek_told":
                e = _outcome(expected.seek, told_e)
                r = await _aoutcome(actual.seek(told_a))
            elif name == "tell":
                e = _outcome(expected.tell)
                r = await _aoutcome(actual.tell())
                if e[0] == "ok":
                    told_e = e[1]
                if r[0] == "ok":
                    told_a = r[1]
            else:
                e = _outcome(getattr(expected, name), *args)
                r = await _aoutcome(getattr(actual, name)(*args))
            assert r == e, op
            assert actual.newlines == expected.newlines
    finally:
        e_close = _outcome(expected.close)
        r_close = await _aoutcome(actual.close())
    assert r_close == e_close
    assert Path(b).read_bytes() == Path(a).read_bytes()
    if encoding != "utf-16":  # its newline bytes may match at odd offsets: a rare sync read is allowed
        assert _rawfile.SYNC_READS[0] == sync_reads
