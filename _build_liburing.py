"""How every compiled extension of aioring finds and links liburing.

One build setting, read once here, applies to every extension module that
links liburing (the cffi binding of ``_build_cffi.py`` and any other):

``AIORING_LIBURING``
    ``static``: link ``liburing.a`` into each extension, so that the installed
    package needs no liburing at run time (what ``make wheel`` asks for); the
    build fails when no ``liburing.a`` is found.
    ``shared``: link ``liburing.so``.
    unset (or ``auto``): ``static`` where ``liburing.a`` is installed (Debian's
    liburing-dev ships it), else ``shared``.

``extension_args()`` gives the keyword arguments of a setuptools
``Extension`` (and of cffi's ``set_source``) that apply the setting: include
and library paths, the archive or the library, and the macros
``AIOR_LIBURING_MAJOR``, ``AIOR_LIBURING_MINOR`` (the version built against,
0 where unknown) and ``AIOR_LIBURING_STATIC`` (1 when linked statically).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

HEADER_MISSING = """\
aioring needs liburing's headers to build, and they were not found
(looked for liburing.h in: {dirs}).
Install them, then build again:
    Debian/Ubuntu:  apt-get install liburing-dev
    Fedora/RHEL:    dnf install liburing-devel
    Alpine:         apk add liburing-dev
    Arch:           pacman -S liburing
or point CPATH (headers) and LIBRARY_PATH (library) at a liburing install."""

ARCHIVE_MISSING = """\
AIORING_LIBURING=static, but no liburing.a was found (looked in: {dirs}).
Install the static library (Debian/Ubuntu: apt-get install liburing-dev), point
LIBRARY_PATH at it, or build with AIORING_LIBURING=shared."""

LINK = os.environ.get("AIORING_LIBURING", "").strip().lower() or "auto"
if LINK not in ("auto", "static", "shared"):
    raise SystemExit(f"aioring: AIORING_LIBURING must be 'static', 'shared' or unset, not {LINK!r}")


def _pkg_config(*args: str) -> list[str]:
    if shutil.which("pkg-config") is None:
        return []
    try:
        out = subprocess.run(
            ["pkg-config", *args, "liburing"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return out.split()


def _env_dirs(name: str) -> list[str]:
    return [d for d in os.environ.get(name, "").split(os.pathsep) if d]


def _multiarch() -> list[str]:
    arch = sysconfig.get_config_var("MULTIARCH")
    return [arch] if arch else []


def include_dirs() -> list[str]:
    """Where liburing.h may be, in the order searched."""
    dirs = [f[2:] for f in _pkg_config("--cflags-only-I") if f.startswith("-I")]
    dirs += _env_dirs("CPATH") + _env_dirs("C_INCLUDE_PATH")
    dirs += ["/usr/local/include", "/usr/include"]
    return dirs


def library_dirs() -> list[str]:
    """Where liburing.a / liburing.so may be, in the order searched."""
    dirs = [f[2:] for f in _pkg_config("--libs-only-L") if f.startswith("-L")]
    dirs += _env_dirs("LIBRARY_PATH")
    for prefix in ("/usr/local/lib", "/usr/lib"):
        dirs += [os.path.join(prefix, a) for a in _multiarch()] + [prefix]
    dirs += ["/usr/lib64", "/lib64"]
    return dirs


def find(dirs: list[str], name: str) -> str | None:
    """The first `dirs` entry holding `name`, joined with it, or None."""
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    return None


def version(lib_dirs: list[str]) -> tuple[int, int]:
    """liburing's (major, minor) from its pkg-config file, (0, 0) if none says."""
    found = _pkg_config("--modversion")
    text = found[0] if found else ""
    if not text:
        pc = find([os.path.join(d, "pkgconfig") for d in lib_dirs], "liburing.pc")
        if pc is not None:
            with open(pc, encoding="utf-8") as f:
                m = re.search(r"^Version:\s*(\S+)", f.read(), re.MULTILINE)
            text = m.group(1) if m else ""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def extension_args() -> dict[str, list[Any]]:
    """Keyword arguments for an Extension (or cffi's set_source) linking liburing
    as AIORING_LIBURING says.  Exits with what to install when the headers (or,
    for a static build, the archive) are missing."""
    incs = include_dirs()
    header = find(incs, "liburing.h")
    if header is None:
        sys.stderr.write(HEADER_MISSING.format(dirs=", ".join(incs)) + "\n")
        raise SystemExit("aioring: liburing.h not found (apt-get install liburing-dev)")
    libs = library_dirs()
    archive = None if LINK == "shared" else find(libs, "liburing.a")
    if archive is None and LINK == "static":
        sys.stderr.write(ARCHIVE_MISSING.format(dirs=", ".join(libs)) + "\n")
        raise SystemExit("aioring: liburing.a not found (AIORING_LIBURING=static)")
    major, minor = version(libs)
    args: dict[str, list[Any]] = {
        "include_dirs": [os.path.dirname(header)],
        "define_macros": [("AIOR_LIBURING_MAJOR", str(major)), ("AIOR_LIBURING_MINOR", str(minor)),
                          ("AIOR_LIBURING_STATIC", "1" if archive else "0")],
    }
    if archive is not None:
        args["extra_objects"] = [archive]
    else:
        args["libraries"] = ["uring"]
        args["library_dirs"] = [d for d in libs if os.path.isdir(d)]
    return args
