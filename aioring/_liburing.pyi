# The cffi extension built by _build_cffi.py: its objects are dynamic.
from typing import Any

ffi: Any
lib: Any
