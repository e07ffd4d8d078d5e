"""A plugin whose import raises."""

raise RuntimeError("nbtest-broken cannot be imported")
