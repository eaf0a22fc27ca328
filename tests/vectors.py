"""Access to the byte-exact vectors captured from real Go nodes."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

VECTOR_DIR = Path(__file__).resolve().parents[2] / "shared" / "vectors" / "ygg05"


@cache
def load(name: str) -> dict:
    return json.loads((VECTOR_DIR / f"{name}.json").read_text())
