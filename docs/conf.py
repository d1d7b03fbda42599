r"""Sphinx configuration of the API reference (``sphinx-build -W -b html docs docs/_build/html``).

The reference is built from the docstrings of the source tree beside this
folder; :mod:`_ext` (in this folder) writes the generated pages (the strategy
table) before reading the sources.
"""
import sys
import tomllib
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))   # document this tree, whatever is installed
sys.path.insert(0, str(HERE))   # _ext

# torch's deprecation of TorchScript, raised by PyG on import, is not the reader's concern.
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*is deprecated",
                        category=FutureWarning)

project = "pyg_fedgraph"
author = "the pyg_fedgraph authors"
copyright = "the pyg_fedgraph authors, MIT licence"
release = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinxarg.ext",
    "myst_parser",
    "_ext",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# _generated/ holds pieces that pages include, not pages.
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# Docstrings follow PyG: Google-style sections, types written in "Args:".
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# "Attributes:" as fields of the class, so that dataclass fields with defaults, which
# autodoc lists as members, are not described twice.
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": True}
# The README and CONTRIBUTING are included as Markdown; their headings get anchors.
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

html_theme = "furo"
html_title = f"pyg_fedgraph {release}"

# Packages that import their names on first use (PEP 562: ``train``, ``simulation``) hold
# them only once touched; touch them all, so that autodoc finds every public name.
import importlib  # noqa: E402

for _package in ("pyg_fedgraph.train", "pyg_fedgraph.simulation"):
    _module = importlib.import_module(_package)
    for _name in getattr(_module, "__all__", ()):
        getattr(_module, _name)
