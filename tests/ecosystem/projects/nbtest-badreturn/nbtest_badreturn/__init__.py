"""A plugin whose tools hook returns a dict instead of a list."""

from nanobot_core import hookimpl


@hookimpl
def nanobot_tools(ctx):
    return {"not": "a list"}
