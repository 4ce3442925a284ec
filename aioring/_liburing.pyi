# The cffi extension built by _build_cffi.py from src/binding.*: its objects are
# dynamic.  aioring._binding is its Python side and names them for the rest.
from typing import Any

ffi: Any
lib: Any
