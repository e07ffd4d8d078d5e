"""A copy of the built-in `sanitize_content` under another name, with the same declarations."""

from nanobot_core import Stage, hookimpl
from nanobot_core.governance.stages import sanitize_content


@hookimpl
def nanobot_governance_stages(ctx):
    return [
        Stage(
            name="sanitize_copy",
            func=sanitize_content,
            phase="repair",
            after="backfill_results",
            acts_on=("dirty_text", "empty_results", "result_links"),
            per_message=True,
        )
    ]
