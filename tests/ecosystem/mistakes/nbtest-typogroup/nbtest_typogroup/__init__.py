"""A tool class whose entry point is in a misspelt group (nanobot.tool): never loaded."""

from nanobot_core import Tool


class Echo(Tool):
    name = "typo_echo"
    description = "Echo the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}
    read_only = True

    async def execute(self, text: str = "") -> str:
        return text
