from setuptools import setup; setup(cffi_modules=["_build_cffi.py:ffibuilder"])  # noqa: E702
