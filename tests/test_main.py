"""`python -m aioring`: the backend a process gets, why, and the versions,
checked on both backends and where a seccomp filter refuses io_uring."""

from __future__ import annotations

import errno
import importlib.metadata
import json
import os
import platform
import subprocess
import sys

import pytest

import aioring
from aioring import __main__ as diagnosis

from test_backends import SECCOMP_CHILD

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The child refuses io_uring_setup with argv[1], then runs the diagnosis.
RUN_MAIN = """
import runpy
sys.argv = ["aioring"] + sys.argv[2:]
runpy.run_module("aioring", run_name="__main__")
"""

pytestmark = pytest.mark.backends("io_uring")  # each test picks its backend in a child process


def _run(*args: str, env: dict[str, str] | None = None, refuse: str | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AIORING_")}
    full_env.update(env or {})
    if refuse is None:
        cmd = [sys.executable, "-m", "aioring", *args]
    else:
        cmd = [sys.executable, "-c", SECCOMP_CHILD + RUN_MAIN, refuse, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=120)


def _report(env: dict[str, str] | None = None, refuse: str | None = None) -> dict:
    done = _run("--json", env=env, refuse=refuse)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the report says why; no RuntimeWarning besides
    return json.loads(done.stdout)


def test_the_report_on_io_uring_names_the_versions_and_the_probe():
    report = _report()
    assert report["backend"] == "io_uring"
    assert report["causes"] == []
    assert report["aioring"] == aioring.__version__ == importlib.metadata.version("aioring")
    assert report["python"].startswith(platform.python_version())
    assert report["kernel"] == platform.release()
    assert report["liburing"]["linked"] in ("static", "shared")
    assert report["liburing"]["version"].split(".")[0] >= "2"
    probe = report["io_uring"]
    assert probe["available"] and probe["errno"] is None
    assert "NODROP" in probe["features"]
    for op in ("READ", "WRITE", "FSYNC", "POLL_ADD", "ASYNC_CANCEL"):  # a ring needs them
        assert probe["opcodes"][op] is True


def test_the_text_report_says_the_same():
    done = _run()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "backend:  io_uring"
    assert f"versions: aioring {aioring.__version__}, liburing " in done.stdout
    assert f"kernel:   {platform.release()}" in lines


def test_the_threads_backend_asked_for_is_reported_with_io_uring_still_probed():
    report = _report({"AIORING_BACKEND": "threads"})
    assert report["backend"] == "threads"
    assert report["io_uring"]["available"] is True
    assert "AIORING_BACKEND=threads" in report["causes"][0]["cause"]


@pytest.mark.parametrize("code", ["EPERM", "ENOSYS"])
def test_a_seccomp_refusal_is_named_with_its_errno_and_what_to_do(code):
    report = _report(refuse=code)
    assert report["backend"] == "threads"
    assert report["io_uring"] == {"available": False, "errno": code,
                                  "error": os.strerror(getattr(errno, code))}
    assert report["environment"]["seccomp"] == "filter"
    (cause,) = report["causes"]
    assert "seccomp" in cause["cause"] and code in cause["cause"]
    assert "io_uring_setup" in cause["remedy"]
    text = _run(refuse=code).stdout
    assert text.startswith(f"backend:  threads\nio_uring: refused: io_uring_setup failed with {code}")
    assert "AIORING_BACKEND=threads keeps the fallback without its warning" in text


def test_io_uring_asked_for_where_it_is_refused_exits_1():
    done = _run("--json", env={"AIORING_BACKEND": "io_uring"}, refuse="EPERM")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["backend"] is None
    assert report["backend_error"].startswith("PermissionError: ")


def test_a_bad_aioring_backend_exits_1():
    done = _run(env={"AIORING_BACKEND": "epoll"})
    assert done.returncode == 1
    assert "ValueError: AIORING_BACKEND must be 'io_uring' or 'threads'" in done.stdout


ENV = {"kernel.io_uring_disabled": 0, "kernel.io_uring_group": -1, "seccomp": "none",
       "memlock_bytes": [65536, 65536]}


@pytest.mark.parametrize(("errno_name", "env", "says", "remedy"), [
    ("EPERM", {"kernel.io_uring_disabled": 2}, "io_uring_disabled=2", "sysctl -w kernel.io_uring_disabled=0"),
    ("EPERM", {"kernel.io_uring_disabled": 1, "kernel.io_uring_group": 1234}, "group 1234",
     "add the user to that group"),
    ("ENOMEM", {}, "RLIMIT_MEMLOCK here: 64 KiB", "ulimit -l"),
    ("ENOSYS", {}, "no io_uring", "Linux 5.15"),
    ("EINVAL", {}, "io_uring_setup failed", "io_uring_setup(2)"),
])
def test_each_cause_the_environment_explains_comes_with_its_remedy(errno_name, env, says, remedy):
    probe = {"available": False, "errno": errno_name, "error": "refused"}
    (cause,) = diagnosis._causes(probe, {**ENV, **env})
    assert says in cause["cause"]
    assert remedy in cause["remedy"]
