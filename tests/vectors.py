"""Access to the byte-exact vectors captured from real Go nodes."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

# Kept inside the repository (tests/data/ygg05/README.md says how they were captured),
# so the suite runs from any checkout with nothing beside it.
VECTOR_DIR = Path(__file__).resolve().parent / "data" / "ygg05"


@cache
def load(name: str) -> dict:
    return json.loads((VECTOR_DIR / f"{name}.json").read_text())
