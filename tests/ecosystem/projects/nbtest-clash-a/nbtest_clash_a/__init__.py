"""First in sorted order: wins the `clash` name although it is installed last."""

from nanobot_core import hookimpl, tool


@tool(name="clash")
def clash_a() -> str:
    """Say which plugin won."""
    return "a"


@hookimpl
def nanobot_tools(ctx):
    return [clash_a]
