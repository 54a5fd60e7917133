"""The web UI's static files: plain HTML, CSS and JavaScript modules, no build step.

The pages call only engram's public HTTP API (``/v1/...``); :mod:`engram.server.ui` serves them at ``/``
and ``/ui/``. Nothing here is Python logic: this package only locates the files.
"""

from __future__ import annotations

from pathlib import Path

#: The directory holding ``index.html``, ``app.css`` and the ``js/`` modules.
ASSETS = Path(__file__).resolve().parent / "static"

__all__ = ["ASSETS"]
