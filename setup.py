"""cffi reads cffi_modules only from setup.py; everything else is in pyproject.toml.

Every extension module that links liburing takes its compile and link
arguments from _build_liburing.extension_args(), so that one setting
(AIORING_LIBURING=static|shared) applies to all of them.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _build_*.py, for cffi's build script too

from setuptools import setup

setup(cffi_modules=["_build_cffi.py:ffibuilder"])
