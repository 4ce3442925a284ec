"""The build explains what to install when liburing's headers are missing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs _build_cffi.py as cffi would, on a machine where no liburing.h exists.
WITHOUT_HEADERS = """
import os.path, runpy
exists = os.path.exists
os.path.exists = lambda p: False if str(p).endswith("liburing.h") else exists(p)
runpy.run_path("_build_cffi.py")
"""


def test_missing_liburing_headers_name_the_package_to_install():
    proc = subprocess.run([sys.executable, "-c", WITHOUT_HEADERS], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "liburing.h not found" in proc.stderr
    assert "apt-get install liburing-dev" in proc.stderr


def test_the_extensions_need_no_liburing_at_run_time():
    sys.path.insert(0, ROOT)
    try:
        import _build_liburing
    finally:
        sys.path.remove(ROOT)
    if _build_liburing.LINK == "shared" or _build_liburing.find(_build_liburing.library_dirs(),
                                                                  "liburing.a") is None:
        pytest.skip("no liburing.a here: the build links liburing dynamically")
    from aioring import _core, _liburing

    for module in (_liburing, _core):
        maps = subprocess.run(["ldd", module.__file__], capture_output=True, text=True).stdout
        assert "liburing" not in maps, module.__name__  # linked statically from liburing.a
