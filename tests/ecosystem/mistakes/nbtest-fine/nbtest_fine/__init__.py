"""A correct tool plugin, installed beside the broken ones."""

from nanobot_core import Tool


class Echo(Tool):
    name = "fine_echo"
    description = "Echo the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}
    read_only = True

    async def execute(self, text: str = "") -> str:
        return text
