"""The governance boundary: hostile histories in, strict UTF-8 JSON out (body and report)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import dumps
from nanobot_core.config import GovernanceConfig, ProviderConfig
from nanobot_core.providers.openai import OpenAIProvider
from tests.boundary.strict import strict_loads
from tests.governance.strategies import DirtyRequest, build_builtin_governor, dirty_requests

GOVERNANCE = settings(
    max_examples=2_000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# What a lenient decoder or a careless plugin leaves in a message: values JSON cannot carry.
poison = st.sampled_from(
    [math.nan, math.inf, -math.inf, "\ud800", "a\udfffb", "\ud83d", ["\udc80", math.nan]]
)


def _poisoned(request: DirtyRequest, data: st.DataObject) -> list[Any]:
    messages: list[Any] = [dict(m) if isinstance(m, dict) else m for m in request.messages]
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        dicts = [m for m in messages if isinstance(m, dict)]
        if not dicts:
            break
        target = data.draw(st.sampled_from(dicts))
        key = data.draw(st.sampled_from(["content", "extra", "name"]))
        target[key] = data.draw(poison)
    return messages


_GOVERNORS: dict[str, Any] = {}


@GOVERNANCE
@given(dirty_requests(), st.data())
def test_governed_hostile_histories_go_out_as_strict_json(
    request: DirtyRequest, data: st.DataObject
) -> None:
    """Governing any dirty, poisoned history never raises; its request body is strict JSON."""
    messages = _poisoned(request, data)
    governor = _GOVERNORS.get("default")
    if governor is None:
        workspace = Path(tempfile.mkdtemp(prefix="sanitising-"))
        governor = _GOVERNORS["default"] = build_builtin_governor(GovernanceConfig(), workspace)
    result = governor.govern(messages, system=request.system, tools=list(request.tools))
    provider = OpenAIProvider(ProviderConfig(base_url="http://127.0.0.1:9", api_key="k"))
    body = provider.request_body(result.messages, list(request.tools))
    sent = strict_loads(dumps(body, separators=(",", ":")).encode("utf-8"))
    assert len(sent["messages"]) == len(result.messages)
    strict_loads(dumps(result.report.to_json()))
