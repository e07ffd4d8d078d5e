"""A nanobot-ai tool that HKUDS/nanobot gives to subagents only: nanobot-core must not load it."""

from __future__ import annotations

from nanobot.agent.tools.filesystem import ListDirTool


class SubagentOnlyTool(ListDirTool):
    """ListDirTool under another name, in the subagent scope alone."""

    _scopes = {"subagent"}

    @property
    def name(self) -> str:
        return "subagent_list_dir"
