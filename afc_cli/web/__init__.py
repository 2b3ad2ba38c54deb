"""Pictures: ``afc report --html`` (one self-contained file) and ``afc serve`` (the same views,
live, with the review queue).

``sheet.py`` reads what the pages show from the ledger (the spend through
``afc_cli/costs_report.py``, so the figures are the costs report's); ``thumbs.py`` makes the
thumbnails from the stored outputs; ``charts.py`` draws the spend as SVG; ``html.py`` renders
the report file and ``server.py`` the live pages, both from the Jinja templates in
``templates/``. The libraries (Jinja2, Starlette, uvicorn, Pillow, pygal) are the optional
``afc-cli[web]`` extra, imported only by these two commands.
"""

from __future__ import annotations

from afc_cli.errors import UsageError

EXTRA = "pip install 'afc-cli[web]'"


REPORT_MODULES = (("jinja2", "Jinja2"), ("PIL", "Pillow"), ("pygal", "pygal"))
SERVE_MODULES = (
    *REPORT_MODULES,
    ("starlette", "Starlette"),
    ("uvicorn", "uvicorn"),
    ("python_multipart", "python-multipart"),  # its name from 0.0.13 (multipart: deprecated)
)


def require(modules: tuple[tuple[str, str], ...] = REPORT_MODULES) -> None:
    """Refuse, with the fix, when the web extra is not installed (exit 2, nothing written)."""
    missing = []
    for module, package in modules:
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise UsageError(
            f"the pictures need {', '.join(missing)}, which this afc was installed without: {EXTRA}"
        )
