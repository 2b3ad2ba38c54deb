"""afc: a batch renderer for paid AI generation jobs.

The library lives in this package; ``afc_cli.cli`` is a thin command-line layer over it.
"""

__version__ = "0.1.0"
