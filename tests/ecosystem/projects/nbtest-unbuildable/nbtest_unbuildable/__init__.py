"""A tool class whose create(ctx) raises."""

from nanobot_core import Tool


class Unbuildable(Tool):
    name = "unbuildable"
    description = "Cannot be built."
    parameters = {"type": "object", "properties": {}}

    @classmethod
    def create(cls, ctx):
        raise OSError("missing credentials file")

    async def execute(self) -> str:
        return "unreachable"
