"""conftest.py - shared pytest setup: makes python/ importable without installing the package,
and gives the paths the tests use (repository root, ../shared data, the ./strata CLI)."""
import os
import sys
from pathlib import Path

import pytest

PY_DIR = Path(__file__).resolve().parent.parent
REPO = PY_DIR.parent
SHARED = REPO.parent / "shared"
if str(PY_DIR) not in sys.path:
    sys.path.insert(0, str(PY_DIR))


def shared_file(rel: str) -> Path:
    """A file under ../shared, or a pytest skip naming what is missing."""
    p = SHARED / rel
    if not p.is_file():
        pytest.skip(f"{p} not present (../shared data is optional)")
    return p


@pytest.fixture
def tiny_model() -> Path:
    return shared_file("models/strata-tiny-moe-q8_0.gguf")
