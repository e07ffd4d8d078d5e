"""Second in sorted order: its `clash` tool must lose to nbtest-clash-a."""

from nanobot_core import hookimpl, tool


@tool(name="clash")
def clash_b() -> str:
    """Say which plugin won."""
    return "b"


@hookimpl
def nanobot_tools(ctx):
    return [clash_b]
