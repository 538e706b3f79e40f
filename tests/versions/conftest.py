"""Fixtures the tests of versions share."""

from __future__ import annotations

import pytest


@pytest.fixture
def rows(version_rows) -> list[tuple[str, str, str]]:
    """90 rows (30 per label, all three splits) with absolute URIs, in URI order."""
    return version_rows()
