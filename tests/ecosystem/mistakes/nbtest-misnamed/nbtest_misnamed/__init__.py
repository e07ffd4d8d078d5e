"""A plugin whose @hookimpl function has a misspelt name: no hook has it."""

from nanobot_core import Section, hookimpl


@hookimpl
def nanobot_prompt_section(ctx):
    return [Section(name="misnamed_rules", order=250, render=lambda c: "misnamed")]


@hookimpl
def nanobt_tools(ctx):
    return []
