"""JSON Schema: validation with short path-prefixed errors, schema repair, argument casting.

One module per job: `validation` (compile and validate, draft by ``$schema``), `normalise`
(repair the schema quirks tool authors write) and `casting` (fix what a model wrote loosely).
"""

from __future__ import annotations

from nanobot_core.schema.casting import cast_arguments
from nanobot_core.schema.normalise import SchemaChange, normalise_schema, normalise_schema_changes
from nanobot_core.schema.validation import (
    MAX_MESSAGE_CHARS,
    InvalidSchemaError,
    Retriever,
    SchemaValidator,
    compile_schema,
    format_instance_path,
    json_pointer,
    validate,
)

__all__ = [
    "MAX_MESSAGE_CHARS",
    "InvalidSchemaError",
    "Retriever",
    "SchemaChange",
    "SchemaValidator",
    "cast_arguments",
    "compile_schema",
    "format_instance_path",
    "json_pointer",
    "normalise_schema",
    "normalise_schema_changes",
    "validate",
]
