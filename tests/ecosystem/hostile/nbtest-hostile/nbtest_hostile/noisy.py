"""Prints at import and in its hooks; contributes one good tool and two with invalid schemas."""

from nanobot_core import Tool, hookimpl

print("noisy: printed at import")


class Echo(Tool):
    description = "Echo the text."

    def __init__(self, name, parameters):
        self._name = name
        self._parameters = parameters

    @property
    def name(self):
        return self._name

    @property
    def parameters(self):
        return self._parameters

    async def execute(self, text="", **kwargs):
        print("noisy: printed by the tool")
        return text


@hookimpl
def nanobot_tools(ctx):
    print("noisy: printed in nanobot_tools")
    good = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    bad_pattern = {"type": "object", "properties": {"text": {"type": "string", "pattern": "("}}}
    bad_ref = {"type": "object", "properties": {"text": {"$ref": "#/$defs/nowhere"}}}
    return [
        Echo("hostile_echo", good),
        Echo("hostile_bad_pattern", bad_pattern),
        Echo("hostile_bad_ref", bad_ref),
    ]


@hookimpl
def nanobot_runtime_context(ctx):
    print("noisy: printed in nanobot_runtime_context")
    return []
