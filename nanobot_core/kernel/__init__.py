"""The kernel: plugin discovery, the manager and its records, hook calling, contributions.

One module per job: `records` (what a plugin is and contributed), `discovery` (the built-in
plugins and the entry points, allow/block), `calling` (the one isolated way every hook is
called), `contributions` (adapting and resolving tools, stages, sections and providers),
`manager` (`PluginManager`: register, fail, query) and `context` (what hooks receive).
Nothing is imported here, so that ``nanobot_core.kernel.context`` stays cheap to import.
"""
