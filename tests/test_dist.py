"""What users install: the wheel `make wheel` built, installed into a fresh
virtualenv away from the source tree, passes a smoke subset of the suite; the
sdist holds everything a source build needs.  (Marked `dist`: `make wheel`
runs these after building the wheel.)"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import venv

import pytest

import aioring

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
# What the smoke run needs besides aioring (conftest imports uvloop; test_ops, hypothesis).
TEST_DEPS = ["pytest>=8", "pytest-asyncio>=1.5,<2", "uvloop>=0.19", "hypothesis>=6"]
SMOKE = ["tests/test_ops.py", "tests/test_files.py", "tests/test_pipes.py", "tests/test_sockets.py",
         "tests/test_main.py",
         "tests/test_streams.py::test_echo_checked_byte_for_byte",
         "tests/test_streams.py::test_cancelled_reads_reassemble_the_stream_exactly"]

pytestmark = [pytest.mark.dist, pytest.mark.backends("io_uring")]  # one run; the smoke run has both


def _fresh_venv(where: str) -> str:
    venv.create(where, with_pip=True)
    return os.path.join(where, "bin", "python")


def _pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                   check=True, timeout=600)


def _installed(python: str, cwd: str) -> dict:
    """`python -m aioring --json` as the installed package answers it, with
    where that package was imported from and the version its metadata says."""
    code = ("import aioring, importlib.metadata, runpy, sys; print(aioring.__file__); "
            "print(importlib.metadata.version('aioring')); "
            "sys.argv = ['aioring', '--json']; runpy.run_module('aioring', run_name='__main__')")
    done = subprocess.run([python, "-c", code],
                          capture_output=True, text=True, cwd=cwd, timeout=120, env=_clean_env())
    assert done.returncode == 0, done.stderr
    where, metadata_version, report = done.stdout.split("\n", 2)
    return {"file": where, "metadata_version": metadata_version, **json.loads(report)}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIORING_", "PYTHON"))}


def test_the_wheel_works_from_a_fresh_virtualenv(tmp_path):
    pattern = f"aioring-{aioring.__version__}-{TAG}-*manylinux*.whl"
    wheels = sorted(glob.glob(os.path.join(ROOT, "dist", pattern)))
    if not wheels:
        pytest.skip("no wheel of this version in dist/ for this Python: make wheel builds it")
    python = _fresh_venv(str(tmp_path / "venv"))
    _pip(python, wheels[-1], *TEST_DEPS)
    # The tests and pytest's settings, copied away from the source tree.
    shutil.copytree(os.path.join(ROOT, "tests"), tmp_path / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", ".scratch"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")

    report = _installed(python, str(tmp_path))
    assert report["file"].startswith(str(tmp_path / "venv")), report["file"]
    assert report["aioring"] == report["metadata_version"] == aioring.__version__
    assert report["liburing"]["linked"] == "static"
    assert report["backend"] == "io_uring"
    done = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *SMOKE],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900, env=_clean_env())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def test_the_sdist_builds_and_installs(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path / "sdist"), ROOT],
                   check=True, capture_output=True, timeout=600)
    (sdist,) = glob.glob(str(tmp_path / "sdist" / f"aioring-{aioring.__version__}.tar.gz"))
    python = _fresh_venv(str(tmp_path / "venv"))
    _pip(python, sdist)
    report = _installed(python, str(tmp_path))
    assert report["file"].startswith(str(tmp_path / "venv")), report["file"]
    assert report["aioring"] == report["metadata_version"] == aioring.__version__
    assert report["backend"] == "io_uring"
