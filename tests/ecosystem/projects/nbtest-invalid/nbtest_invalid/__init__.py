"""A plugin whose hook asks for an argument no hook has: pluggy rejects it."""

from nanobot_core import hookimpl


@hookimpl
def nanobot_tools(ctx, session_secret):
    return []
