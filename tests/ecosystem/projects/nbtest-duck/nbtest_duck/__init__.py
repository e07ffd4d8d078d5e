"""A tool written for HKUDS/nanobot: it does not subclass nanobot_core.Tool."""


class QuackTool:
    name = "quack"
    description = "Quack the given number of times."
    parameters = {
        "type": "object",
        "properties": {"times": {"type": "integer", "minimum": 1}},
        "required": ["times"],
    }
    read_only = True

    async def execute(self, times: int, **kwargs) -> str:
        return " ".join(["quack"] * times)
