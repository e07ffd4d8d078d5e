"""Plugin `twin`, first by distribution: keeps its name although it is installed last."""

from nanobot_core import hookimpl, tool


@tool(name="twin_a", read_only=True)
def twin_a() -> str:
    """Say which plugin kept the name."""
    return "a"


@hookimpl
def nanobot_tools(ctx):
    return [twin_a]
