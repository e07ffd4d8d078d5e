"""The built-in governance plugin: stages, default counter and default store through the hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanobot_core.builtins import governance as plugin
from nanobot_core.governance import DirectoryResultStore, EstimateCounter, Stage, StageOutcome
from nanobot_core.governance.ordering import BUILTIN_ORDER
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import PluginContext
from nanobot_core.kernel.manager import PluginManager
from tests.governance.builders import call, calls, result, user


def test_hooks_return_the_builtin_stages_counter_and_store(tmp_path: Path) -> None:
    """The plugin contributes the nine stages, the estimate counter and the workspace store."""
    ctx = PluginContext.default(tmp_path)
    assert [s.name for s in plugin.nanobot_governance_stages(ctx)] == list(BUILTIN_ORDER)
    assert isinstance(plugin.nanobot_token_counter(ctx), EstimateCounter)
    store = plugin.nanobot_result_store(ctx)
    assert isinstance(store, DirectoryResultStore)
    assert store.root == tmp_path.resolve() / ".nanobot" / "cache" / "tool-results"


def test_plugin_manager_builds_a_governor_from_the_builtins(nanobot_manager: PluginManager) -> None:
    """`pm.governor()` runs the built-in pipeline with the built-in counter and store."""
    governor = nanobot_manager.governor()
    assert governor.stage_names() == list(BUILTIN_ORDER)
    assert isinstance(governor.counter, EstimateCounter)
    healed = governor.govern([user(), calls(call("c"))])
    assert [m["role"] for m in healed.messages] == ["user", "assistant", "tool"]


def test_plugin_stage_runs_in_the_transform_phase(
    nanobot_manager: PluginManager, nanobot_register: Any
) -> None:
    """A registered plugin's stage lands between the repairs and the budget stages."""

    def shout(messages: list[Any], ctx: Any) -> StageOutcome:
        louder = [
            {**m, "content": m["content"].upper()} if m.get("role") == "user" else m
            for m in messages
        ]
        return StageOutcome(louder, changed=True, details=["shouted"])

    class Plugin:
        @hookimpl
        def nanobot_governance_stages(self, ctx: PluginContext) -> list[Stage]:
            return [Stage(name="shout", func=shout)]

    nanobot_register(Plugin())
    governor = nanobot_manager.governor()
    names = governor.stage_names()
    assert names.index("sanitize_content") < names.index("shout") < names.index("offload_results")
    governed = governor.govern([user("hi"), calls(call("c")), result("c")])
    assert governed.messages[0]["content"] == "HI"
    assert governed.report.entry("shout").details == ["shouted"]  # type: ignore[union-attr]
