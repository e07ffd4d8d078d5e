"""Real-world schemas from SchemaStore: valid instances pass and invalid ones fail `validate`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nanobot_core.schema import validate
from tests.helpers import data_dir

_FORMAT_IS_AN_ANNOTATION = (
    "we never assert `format` (see nanobot_core.schema); upstream's verdict needs it"
)
KNOWN_FAILURES: dict[str, str] = {
    "negative_test/abc-supply-plan-14.0.0/abc-supply-plan-invalid-plan-date.json": (
        _FORMAT_IS_AN_ANNOTATION
    ),
    "negative_test/madge/exclude-regexp-invalid.json": _FORMAT_IS_AN_ANNOTATION,
}

FOLDER = "schemastore-subset"


def _manifest_lines() -> list[str]:
    return (data_dir() / FOLDER / "cases.jsonl").read_text(encoding="utf-8").splitlines()


def _cases() -> Iterator[Any]:
    for line in _manifest_lines():
        case = json.loads(line)
        marks = []
        if case["instance"] in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case["instance"]]))
        yield pytest.param(
            case["schema"],
            case["instance"],
            case["expected_valid"],
            id=case["instance"],
            marks=marks,
        )


def _load(relative: str) -> Any:
    return json.loads((data_dir() / FOLDER / relative).read_text(encoding="utf-8"))


@pytest.mark.parametrize(("schema_path", "instance_path", "expected_valid"), list(_cases()))
def test_schemastore_instance(schema_path: str, instance_path: str, expected_valid: bool) -> None:
    """An instance upstream expects valid has no errors; one it expects invalid has some."""
    errors = validate(_load(schema_path), _load(instance_path))
    assert (errors == []) is expected_valid, errors


def test_known_failures_are_exactly_the_format_assertion_cases() -> None:
    """Every disagreement we accept is one the manifest marks as needing `format` assertion."""
    needing_format = {
        case["instance"]
        for case in map(json.loads, _manifest_lines())
        if case["requires_format_assertion"]
    }
    assert set(KNOWN_FAILURES) == needing_format
