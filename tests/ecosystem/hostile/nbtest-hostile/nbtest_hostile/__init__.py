"""Hostile test plugins: output on stdout, SystemExit in a hook, tools with broken schemas."""
