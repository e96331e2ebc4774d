"""Shared fixtures: where the repository and its test data are."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
