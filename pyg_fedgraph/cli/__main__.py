r"""``python -m pyg_fedgraph.cli``: the same as the ``pyg-fedgraph`` command."""
from pyg_fedgraph.cli import main

raise SystemExit(main())
