"""The reservation tests' builders are in reservation_testkit.py: this conftest puts its folder on the path
(the project's pytest runs in importlib mode)."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
