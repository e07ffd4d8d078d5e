"""`nanobot-core plugins` warns once of each piece of config that names nothing it has."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_cli

# Config naming a stage, sections and a tool no plugin has: each is a warning when the
# governor, the prompt builder or the tool registry is built.
STALE = """\
[tools]
disabled = ["gone_tool"]

[governance]
disabled = ["no_such_stage"]

[governance.stages.gone_stage]
limit = 3

[prompt]
disabled = ["gone_section"]

[prompt.order]
moved_section = 5
"""

WARNINGS = {
    ("unknown stage name in governance.disabled", "no_such_stage"),
    ("options for an unknown stage in governance.stages", "gone_stage"),
    ("unknown section name in prompt config", "gone_section"),
    ("unknown section name in prompt config", "moved_section"),
    ("unknown tool name in tools.disabled", "gone_tool"),
}


@pytest.mark.parametrize("as_json", [False, True])
def test_each_stale_config_warning_is_logged_once(tmp_path: Path, as_json: bool) -> None:
    """A real `plugins` run (text or --json) logs each stale-config warning exactly once."""
    (tmp_path / "nanobot.toml").write_text(STALE, encoding="utf-8")
    args = ["--log-format", "json", "plugins", *(["--json"] if as_json else [])]
    result = run_cli(*args, cwd=tmp_path, env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    said = Counter(
        (record["event"], record["name"])
        for record in records
        if record["level"] == "warning" and "name" in record
    )
    assert said == dict.fromkeys(WARNINGS, 1)
    if not as_json:
        assert "governance pipeline: strip_placeholders -> " in result.stdout
