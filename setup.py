"""cffi reads cffi_modules only from setup.py; everything else is in pyproject.toml.

Two compiled modules: the cffi binding (aioring._liburing, C in src/binding.*,
built by _build_cffi.py) and the core (aioring._core, C in src/; its seam is
src/core.h; src/channel.h is its stream targets', src/fileops.h its page-cache
reads', src/wholefile.h its read of a whole file, src/flush.h its flush of
a loop iteration, src/streamread.h a stream reader's reads that need no coroutine frame,
src/filemethod.h a file's read and seek that need no coroutine frame,
src/awaitable.h what the core's C awaitables share, src/sqtail.h which SQEs
the kernel has not read, shared with the binding).  Every extension module
takes its compile and link arguments from
_build_liburing.extension_args(), so that one setting
(AIORING_LIBURING=static|shared) applies to all of them.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _build_*.py, for cffi's build script too

from setuptools import Extension, setup

from _build_liburing import extension_args

_WARNINGS = ["-Wall", "-Wextra", "-Wno-missing-field-initializers", "-Wno-unused-parameter"]

setup(
    cffi_modules=["_build_cffi.py:ffibuilder"],
    ext_modules=[Extension("aioring._core", sources=["src/core.c", "src/channel.c", "src/fileops.c",
                                                          "src/wholefile.c", "src/flush.c", "src/treecopy.c",
                                                          "src/newfile.c", "src/streamread.c",
                                                          "src/filemethod.c", "src/awaitable.c"],
                           depends=["src/core.h", "src/channel.h", "src/fileops.h", "src/wholefile.h",
                                    "src/flush.h", "src/treecopy.h", "src/newfile.h", "src/streamread.h",
                                    "src/filemethod.h", "src/awaitable.h", "src/sqtail.h"],
                           extra_compile_args=["-O2", *_WARNINGS], **extension_args())],
)
