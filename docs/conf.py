"""The cxlbench manual: Sphinx with MyST (the pages are Markdown, like README), furo's
theme, sphinx-click for the CLI reference and _ext/cxlbench_reference.py for the
benchmark reference, both made from the code at build time. Built strictly in the tests
(tests/test_docs.py): any warning fails."""
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))

project = "cxlbench"
author = "the cxlbench developers"
copyright = "2026, the cxlbench developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx_click", "cxlbench_reference"]
autodoc_typehints = "none"      # the docstrings say what each argument is
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 4        # README's #section links, as GitHub makes them
html_theme = "furo"
html_title = "cxlbench"
html_static_path = []
nitpicky = True
smartquotes = False     # a CLI manual: -- stays two hyphens, quotes stay as typed
