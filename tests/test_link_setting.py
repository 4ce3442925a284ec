"""AIORING_LIBURING, the one build setting that says how every extension
module links liburing: static (make wheel), shared, or static where
liburing.a is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Prints the Extension arguments _build_liburing gives, optionally on a
# machine where no liburing.a exists.
ARGS = """
import json, os.path, sys
if sys.argv[1] == "no-archive":
    exists = os.path.exists
    os.path.exists = lambda p: False if str(p).endswith("liburing.a") else exists(p)
import _build_liburing
print(json.dumps(_build_liburing.extension_args()))
"""

pytestmark = pytest.mark.backends("io_uring")  # a build setting: one run is enough


def _args(setting: str | None, archive: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIORING_LIBURING"}
    if setting is not None:
        env["AIORING_LIBURING"] = setting
    return subprocess.run([sys.executable, "-c", ARGS, "archive" if archive else "no-archive"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _archive_here() -> bool:
    sys.path.insert(0, ROOT)
    try:
        import _build_liburing
    finally:
        sys.path.remove(ROOT)
    return _build_liburing.find(_build_liburing.library_dirs(), "liburing.a") is not None


def _macros(args: dict) -> dict[str, str]:
    return dict(args["define_macros"])


@pytest.mark.parametrize("setting", [None, "auto", "static", " Static "])
def test_static_links_the_archive_into_the_extension(setting):
    if not _archive_here():
        pytest.skip("no liburing.a here")
    done = _args(setting)
    assert done.returncode == 0, done.stderr
    args = json.loads(done.stdout)
    assert [os.path.basename(p) for p in args["extra_objects"]] == ["liburing.a"]
    assert "libraries" not in args
    assert _macros(args)["AIOR_LIBURING_STATIC"] == "1"


def test_shared_links_the_shared_library():
    done = _args("shared")
    assert done.returncode == 0, done.stderr
    args = json.loads(done.stdout)
    assert args["libraries"] == ["uring"]
    assert "extra_objects" not in args
    assert _macros(args)["AIOR_LIBURING_STATIC"] == "0"


def test_unset_falls_back_to_shared_without_the_archive():
    done = _args(None, archive=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["libraries"] == ["uring"]


def test_static_without_the_archive_stops_the_build_and_says_why():
    done = _args("static", archive=False)
    assert done.returncode != 0
    assert "liburing.a not found (AIORING_LIBURING=static)" in done.stderr
    assert "AIORING_LIBURING=shared" in done.stderr


def test_a_bad_setting_stops_the_build():
    done = _args("dynamic")
    assert done.returncode != 0
    assert "AIORING_LIBURING must be 'static', 'shared' or unset, not 'dynamic'" in done.stderr


def test_the_version_built_against_is_recorded():
    done = _args("shared")
    macros = _macros(json.loads(done.stdout))
    from aioring._liburing import lib
    assert (int(macros["AIOR_LIBURING_MAJOR"]), int(macros["AIOR_LIBURING_MINOR"])) == (
        lib.AIOR_LIBURING_MAJOR, lib.AIOR_LIBURING_MINOR)
    assert lib.AIOR_LIBURING_MAJOR >= 2
