"""How many examples a property test tries, relative to the hypothesis profile (registered in tests/conftest.py:
"dev" for local runs, "ci" for .ci/run)."""

from __future__ import annotations

from hypothesis import settings


def examples(share: float) -> int:
    """``share`` of the loaded profile's ``max_examples`` (at least 1), for a test whose examples cost far more
    or far less than most; the test says why next to the call."""
    return max(1, round(settings.default.max_examples * share))
