"""A plugin with a section, a stage, runtime lines, and a tool-call observer."""

from nanobot_core import Section, Stage, StageOutcome, hookimpl


def _shout(ctx):
    return "## House rules\nAlways answer in haiku."


def _count(messages, ctx):
    return StageOutcome(messages=messages, changed=False, details=[f"saw {len(messages)} messages"])


@hookimpl
def nanobot_prompt_sections(ctx):
    return [Section(name="house_rules", order=250, render=_shout)]


@hookimpl
def nanobot_governance_stages(ctx):
    return [Stage(name="count_messages", func=_count)]


@hookimpl
def nanobot_runtime_context(ctx):
    return ["branch: main"]
