"""A plugin whose hook asks for an argument the hook does not pass."""

from nanobot_core import hookimpl


@hookimpl
def nanobot_before_tool_call(ctx, call, session_secret):
    return None
