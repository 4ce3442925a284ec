"""Run aiofiles' own test suite against aioring, on asyncio's loop and on uvloop,
once on each backend (io_uring, threads).

The suite ships in aiofiles' sdist (25.1.0).  It is downloaded once into
.cache/, checked against its pinned SHA-256, unpacked into build/, and every
`aiofiles` in it becomes `aioring`; then pytest runs it there.  Deselected,
as the API checklist says: test_slow_file (it patches aiofiles' internal
opener and needs the fixed port 30001) and, as root, test_access (root
ignores permission bits; aiofiles fails it as root too).

Usage: python tests/aiofiles_suite.py [pytest arguments]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "25.1.0"
SHA256 = "a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2"
ROOT = Path(__file__).resolve().parent.parent
SDIST = ROOT / ".cache" / f"aiofiles-{VERSION}.tar.gz"
WORK = ROOT / "build" / "aiofiles-suite"

CONFTEST = '''\
import asyncio

import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"asyncio": asyncio.SelectorEventLoop, "uvloop": uvloop.new_event_loop}
'''

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def fetch() -> None:
    if SDIST.exists() and hashlib.sha256(SDIST.read_bytes()).hexdigest() == SHA256:
        return
    SDIST.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "-d", str(SDIST.parent), f"aiofiles=={VERSION}"], check=True)
    digest = hashlib.sha256(SDIST.read_bytes()).hexdigest()
    if digest != SHA256:
        SDIST.unlink()
        sys.exit(f"aiofiles-{VERSION}.tar.gz: SHA-256 {digest}, expected {SHA256}")


def unpack() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    prefix = f"aiofiles-{VERSION}/tests/"
    with tarfile.open(SDIST) as tar:
        for member in tar.getmembers():
            if not member.name.startswith(prefix) or not member.isfile():
                continue
            target = WORK / "tests" / member.name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            if target.suffix == ".py":
                data = data.replace(b"aiofiles", b"aioring")
            target.write_bytes(data)
    (WORK / "conftest.py").write_text(CONFTEST)
    (WORK / "pytest.ini").write_text(PYTEST_INI)


def main() -> int:
    fetch()
    unpack()
    deselect = ["--deselect", "tests/threadpool/test_concurrency.py::test_slow_file"]
    if os.geteuid() == 0:
        deselect += ["--deselect", "tests/test_os.py::test_access"]
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *deselect, *sys.argv[1:], "tests"]
    for backend in ("io_uring", "threads"):  # once on each backend
        print(f"aiofiles' suite on aioring's {backend} backend", flush=True)
        ret = subprocess.run(cmd, cwd=WORK, env={**os.environ, "AIORING_BACKEND": backend}).returncode
        if ret:
            return ret
    return 0


if __name__ == "__main__":
    sys.exit(main())
