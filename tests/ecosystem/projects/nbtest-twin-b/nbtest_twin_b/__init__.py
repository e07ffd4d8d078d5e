"""Plugin `twin` again, from another distribution: refused, as nbtest-twin-a has the name."""

from nanobot_core import hookimpl, tool


@tool(name="twin_b", read_only=True)
def twin_b() -> str:
    """Say which plugin kept the name."""
    return "b"


@hookimpl
def nanobot_tools(ctx):
    return [twin_b]
