"""``join.hybrid`` in a job file reaches the operator's spec (docs/hybrid.md)."""

from __future__ import annotations

import pytest
from test_config import _base, _error

from ssbj.config import parse_config
from ssbj.planning import join_spec


@pytest.mark.parametrize("mode", ["off", "auto", "always"])
def test_hybrid_reaches_the_spec(mode: str) -> None:
    cfg = parse_config(_base(join={"stream_key": "k", "hybrid": mode}))
    settings = cfg.join_settings()
    assert settings.hybrid == mode
    assert join_spec(settings, 1000).hybrid == mode


def test_hybrid_defaults_to_off_and_rejects_other_values() -> None:
    assert join_spec(parse_config(_base()).join_settings(), 1000).hybrid == "off"
    assert "join.hybrid" in _error(_base(join={"stream_key": "k", "hybrid": "sometimes"}))
