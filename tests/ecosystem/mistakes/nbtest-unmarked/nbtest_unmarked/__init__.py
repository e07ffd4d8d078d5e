"""A plugin whose hook was written without @hookimpl: pluggy would never call it."""

from nanobot_core import Section


def nanobot_prompt_sections(ctx):
    return [Section(name="unmarked_rules", order=250, render=lambda c: "unmarked")]
