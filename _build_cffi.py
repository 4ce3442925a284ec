"""cffi build script: aioring's C surface over liburing (out-of-line API mode).

liburing's ``io_uring_prep_*`` helpers are ``static inline``, so only API mode
reaches them.  One call per operation gets, prepares and tags an SQE;
harvesting CQEs and handing them to their targets is the compiled core's
(src/core.c).  Python never touches an SQE or a CQE.

The C is in src/ (src/binding.h says which file holds what):
``src/binding.cdef`` (types, liburing's functions, constants) and
``src/binding_api.h`` (every ``aior_*`` prototype, also included by the C)
are the cdef; the generated module includes ``src/binding.h`` and is linked
with ``src/binding.c``.
"""

from __future__ import annotations

import os

from cffi import FFI

from _build_liburing import extension_args

MODULE_NAME = "aioring._liburing"

HERE = os.path.dirname(os.path.abspath(__file__))
COMPILE_ARGS = ["-O2", "-fvisibility=hidden", "-Wall", "-Wextra",
                "-Wno-missing-field-initializers", "-Wno-unused-parameter"]


def make_ffi(src: str = "src") -> FFI:
    """The binding's builder; `src` is the C's directory, relative to the
    directory of setup.py as setuptools wants it (or absolute)."""
    def read(name: str) -> str:
        with open(os.path.join(HERE, src, name), encoding="utf-8") as f:
            return f.read()

    args = extension_args()
    args["include_dirs"] = [src, *args["include_dirs"]]
    ffi = FFI()
    ffi.cdef(read("binding.cdef"))
    ffi.cdef(read("binding_api.h"))
    ffi.set_source(MODULE_NAME, '#include "binding.h"', sources=[f"{src}/binding.c"],
                   depends=[f"{src}/{name}"
                            for name in ("binding.h", "binding_api.h", "binding.cdef", "sqtail.h")],
                   extra_compile_args=COMPILE_ARGS, **args)
    return ffi


ffibuilder = make_ffi()

if __name__ == "__main__":  # a build of the binding alone, into build/cffi
    make_ffi(os.path.join(HERE, "src")).compile(tmpdir=os.path.join(HERE, "build", "cffi"), verbose=True)
