"""Unit tests (no sockets). `fakes` holds the stand-ins for sockets and clients; make it importable whatever
pytest's import mode."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
