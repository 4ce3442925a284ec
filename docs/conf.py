"""Sphinx configuration of aioring's documentation (make docs builds it, warnings as errors)."""

import aioring

project = "aioring"
author = "aioring's authors"
copyright = "aioring's authors"  # noqa: A001
version = release = aioring.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
default_role = "code"  # `name` in a docstring reads as code, as in the source

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options: dict[str, object] = {}

html_theme = "alabaster"
html_title = f"aioring {release}"
html_theme_options = {"description": "io_uring for asyncio", "fixed_sidebar": True}
