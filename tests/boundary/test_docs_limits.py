"""The bounds docs/limits.md states are the code's: each named constant and each default."""

from __future__ import annotations

import re
import sys

from nanobot_core import Config, _clip, _json_boundary, _json_repair
from nanobot_core.schema import casting, validation
from nanobot_core.tools import _glob, builtin, registry
from tests.helpers import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "limits.md").read_text(encoding="utf-8")


def test_each_named_limit_has_the_value_the_doc_gives() -> None:
    """Every "N ... (`MAX_...`)" of the doc is the value of that constant of the core."""
    stated = re.findall(r"([\d,]+)[^`(\d]*?\(`(MAX_[A-Z_]+)`", DOC)
    names = {name for _, name in stated}
    assert names == {
        "MAX_DEPTH",
        "MAX_ENCODED_DEPTH",
        "MAX_INT_DIGITS",
        "MAX_VALUES",
        "MAX_ARGUMENT_VALUES",
        "MAX_REPAIR_CHARS",
        "MAX_EDIT_FILE_BYTES",
        "MAX_GREP_FILE_BYTES",
        "MAX_LISTED_ENTRIES",
        "MAX_OPEN_SCANS",
        "MAX_QUOTED_CHARS",
        "MAX_LISTED_ERRORS",
        "MAX_CAST_STEPS",
        "MAX_UNION_WORK",
        "MAX_CHECKS_PER_VALUE",
        "MAX_SCHEMA_VALUES",
    }
    modules = (_json_boundary, _json_repair, builtin, _glob, _clip, registry, casting, validation)
    for number, name in stated:
        [value] = {getattr(module, name) for module in modules if hasattr(module, name)}
        assert int(number.replace(",", "")) == value, name


def test_the_defaults_the_doc_gives_are_the_config_defaults() -> None:
    """The reply-size and calls-per-reply defaults the doc states are `Config`'s."""
    config = Config()
    assert "(default 67,108,864, 64 MiB;" in DOC
    assert config.provider.max_reply_bytes == 67_108_864 == 64 * 2**20
    assert "`tools.max_calls_per_reply` (default 128; 0: no" in " ".join(DOC.split())
    assert config.tools.max_calls_per_reply == 128


def test_an_empty_object_is_two_bytes_of_text_and_a_dict_of_64() -> None:
    """The memory arithmetic of the doc: `{}` as text and as the dict it decodes to."""
    assert "`{}`, is 2 bytes of text and a dict of 64)" in " ".join(DOC.split())
    assert len(b"{}") == 2 and sys.getsizeof({}) == 64
