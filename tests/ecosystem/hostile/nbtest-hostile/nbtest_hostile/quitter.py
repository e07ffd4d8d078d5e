"""Raises SystemExit(3) in a hook, as a badly written plugin might."""

from nanobot_core import hookimpl


@hookimpl
def nanobot_tools(ctx):
    raise SystemExit(3)
