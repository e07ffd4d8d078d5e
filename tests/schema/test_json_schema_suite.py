"""The official JSON-Schema-Test-Suite (required tests of 2020-12 and draft 7) through `validate`.

Remote references (``http://localhost:1234/<path>``) resolve offline to the suite's ``remotes/``
folder, as the suite's README asks. Draft-7 test schemas carry no ``$schema`` (the suite picks
the draft by folder), so the draft-7 URI is added to each one: that is how our API selects it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.schema import validate
from tests.helpers import data_dir

KNOWN_FAILURES: dict[str, str] = {
    # id -> reason. Empty: jsonschema-rs passes every required 2020-12 and draft-7 test here.
}

SUITE_FOLDER = "json-schema-test-suite"
REMOTES_PREFIX = "http://localhost:1234/"
DRAFT_URIS = {
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
    "draft7": "http://json-schema.org/draft-07/schema#",
}


def _cases() -> Iterator[Any]:
    tests_root = data_dir() / SUITE_FOLDER / "tests"
    for draft, uri in DRAFT_URIS.items():
        for path in sorted((tests_root / draft).glob("*.json")):
            groups = json.loads(path.read_text(encoding="utf-8"))
            for group_index, group in enumerate(groups):
                schema = _with_dialect(group["schema"], uri)
                for test in group["tests"]:
                    case_id = (
                        f"{draft}/{path.stem}#{group_index}: {group['description']}: "
                        + (test["description"])
                    )
                    marks = []
                    if case_id in KNOWN_FAILURES:
                        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case_id]))
                    yield pytest.param(schema, test["data"], test["valid"], id=case_id, marks=marks)


def _with_dialect(schema: Any, uri: str) -> Any:
    if isinstance(schema, dict) and "$schema" not in schema:
        return {"$schema": uri, **schema}
    return schema


def _remote(uri: str) -> Any:
    """Serve ``http://localhost:1234/<path>`` from ``remotes/<path>``; nothing else exists."""
    if not uri.startswith(REMOTES_PREFIX):
        raise LookupError(f"no offline copy of {uri}")
    relative = uri[len(REMOTES_PREFIX) :].split("#", 1)[0]
    path: Path = data_dir() / SUITE_FOLDER / "remotes" / relative
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("schema", "instance", "valid"), list(_cases()))
def test_suite_case(schema: Any, instance: Any, valid: bool) -> None:
    """`validate` returns no errors exactly when the suite says the instance is valid."""
    errors = validate(schema, instance, retriever=_remote)
    assert (errors == []) is valid, errors


def test_every_known_failure_names_a_real_case() -> None:
    """The known-failure table only lists ids that exist, so a renamed case cannot hide."""
    ids = {param.id for param in _cases()}
    assert set(KNOWN_FAILURES) <= ids


def test_case_ids_are_unique() -> None:
    """Each suite case has its own id, so an xfail marks exactly one case."""
    ids = [param.id for param in _cases()]
    assert len(ids) == len(set(ids)) == 2226
