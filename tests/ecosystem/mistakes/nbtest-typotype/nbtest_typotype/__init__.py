"""A tool whose schema misspells a type ("strng"): the constraint is dropped, a plugin problem."""

from nanobot_core import Tool


class Echo(Tool):
    name = "typotype_echo"
    description = "Echo the text."
    parameters = {"type": "object", "properties": {"text": {"type": "strng"}}}
    read_only = True

    async def execute(self, text: str = "") -> str:
        return text
