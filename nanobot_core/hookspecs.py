"""Every hook of nanobot-core, with its contract.

Collecting hooks return a list of contributions. The core never uses pluggy's
merged result for them: it calls each implementation on its own, so it knows
which plugin (and distribution, and version) contributed every item, and can
isolate a plugin whose hook raises or returns garbage. Such a plugin is
unregistered and reported as failed; the other plugins still load (unless
strict mode is on, which turns the failure into an error).

Each implementation is called exactly once per call, in the canonical order
(built-ins first, then distribution name, then entry-point name). pluggy's
``tryfirst``, ``trylast``, ``wrapper`` and ``hookwrapper`` markers are refused at
registration: the plugin is reported as failed, naming the hook and the marker.

Every hook receives ``ctx``, a :class:`nanobot_core.PluginContext` with the
workspace path and the loaded configuration. An implementation may declare
only the arguments it needs, as usual with pluggy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from nanobot_core.kernel.context import PluginContext, ToolCallEvent

PROJECT_NAME = "nanobot"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def nanobot_tools(ctx: PluginContext) -> list[Any]:
    """Contribute tools.

    Called once when the tool registry is built. Return a list whose items are
    :class:`nanobot_core.Tool` subclasses, instances, functions decorated with
    :func:`nanobot_core.tool`, or duck-typed classes with ``name``,
    ``description``, ``parameters`` and an async ``execute``. A class is built
    with ``create(ctx)`` when it has one, else with no arguments, and skipped
    when its ``enabled(ctx)`` returns false. A name owned by a built-in tool is
    shadowed (unless config allows this plugin to override it); a clash between
    two plugins is won by the first distribution name, then entry-point name.
    Raising, returning a non-list, or returning an item that cannot become a
    tool marks the whole plugin failed. A tool whose parameters schema is
    invalid is left out alone and listed under the plugin's ``problems``; so is
    anything the plugin itself leaves out and reports with
    :func:`nanobot_core.report_problem` (a remote tool it cannot offer, say).
    A tool whose schema loses a constraint when normalised (a type name
    nobody knows) is kept, and the change listed there too.
    """


@hookspec
def nanobot_governance_stages(ctx: PluginContext) -> list[Any]:
    """Contribute governance stages.

    Called once when the governor is built. Return a list of
    :class:`nanobot_core.Stage`. A stage is a pure function of the messages: it
    builds new dicts for what it changes and never edits what it is handed (a
    whole-list stage that declares ``acts_on`` is handed the history itself,
    not a copy); it is placed by its phase (``repair``, ``transform`` or
    ``budget``; third-party stages default to ``transform``) and optional
    ``before``/``after`` names. Names of built-in stages are protected. Raising
    or returning something other than a list of stages marks the plugin failed.
    A stage that raises *while governing* (any exception, ``SystemExit`` and
    other ``BaseException`` included; only cancellation and a real Ctrl-C go
    on) is skipped for that run and reported, as is one whose prefilter raises;
    the governor's final checks keep the request legal regardless. What makes
    a stage cheap is declared on it, the same way for built-ins and plugins:
    ``acts_on`` (the kinds of work it has; it is skipped when none is present),
    ``widened_by`` (options that make it always run), ``per_message`` (it
    is applied to a copy of one message at a time, only where its work is,
    and remembered per message), ``prefilter`` (a test of one text that
    spares a per-message stage the messages it is false of throughout),
    ``whole_list_with`` (options that make a
    per-message stage need the whole history), ``local`` (its outcome on
    what was governed before is reused when only messages without work were
    appended) and ``cuts_to_watermark`` (a budget stage that, over budget,
    keeps only the newest history within the cut watermark: history older
    than that can hold is left out before the stages run); see
    docs/governance.md, "Declarations". A stage declares what its
    ``[governance.stages.<name>]`` table may hold the same way:
    ``options={name: StageOption(type, description, at_least=None,
    check=None)}``. When the governor is built, the table of every stage that
    declares options is checked once: an unknown key, a wrong type, a number
    below ``at_least`` or a value ``check`` refuses (with ValueError) is a
    ``ConfigError`` naming the key's path, the stage and this plugin's name
    and version (the CLI exits 2). A stage without ``options`` accepts any
    table. A hook that reads the options itself (to build the stage from
    them) should not raise on ones it cannot use, which only leaves the
    plugin out: it returns the stage with its declaration, and the governor
    names the key.
    """


@hookspec
def nanobot_prompt_sections(ctx: PluginContext) -> list[Any]:
    """Contribute system-prompt sections.

    Called once when the prompt builder is built. Return a list of
    :class:`nanobot_core.Section`; each is placed by its order key (ties broken
    by name). Names of built-in sections are protected. A section that raises
    while rendering is left out of the prompt and reported; raising here marks
    the plugin failed.
    """


@hookspec
def nanobot_runtime_context(ctx: PluginContext) -> list[str]:
    """Contribute lines for the runtime-context block of the current user message.

    Called once per user turn. Return a list of strings (metadata such as a
    channel topic or a git branch). The lines are encoded so they cannot close
    or forge the block, and they never reach the system prompt. Returning
    anything but a list of strings (``None`` is no lines) drops this plugin's
    lines for that turn, logged as an error naming the plugin; the plugin
    stays loaded and is asked again the next turn. Raising marks the plugin
    failed, as in any hook: it is unregistered, so none of its hooks is
    called again (in strict mode that failure is raised as ``PluginError``).
    """


@hookspec(firstresult=True)
def nanobot_token_counter(ctx: PluginContext) -> Any:
    """Return the token counter used for the governance budget, or ``None`` to pass.

    First result wins; plugins are asked before the built-in default, which is
    a fast offline estimator. A counter has ``count_text(text: str) -> int``.
    Raising, or returning something without ``count_text``, marks the plugin
    failed and the next implementation is asked. Every count is checked: a
    text the counter raises on, or gets an answer for that is not a whole
    number of at least 0, counts the default estimate instead, and the first
    such failure is logged naming the plugin (a tokenizer that cannot read one
    text must not end governance, nor make a request look free). The hook is
    asked once per plugin manager, and every governor the manager builds (one
    per session) counts with the counter it returned; a count is remembered
    for its text, so equal text is counted once for all those sessions: a
    counter gives a text the same count every time.
    """


@hookspec(firstresult=True)
def nanobot_result_store(ctx: PluginContext) -> Any:
    """Return the offload cache for huge tool results, or ``None`` to pass.

    First result wins; the built-in default is a content-addressed directory in
    the workspace. A store has ``put(content: str) -> str`` (the path to read it
    back, on one line and without ``"``) and may raise ``OSError``, in which
    case governance truncates the result instead, as it does when ``put``
    raises anything else or answers no such path. Raising here, or returning
    something without ``put``, marks the plugin failed.
    """


@hookspec
def nanobot_providers(ctx: PluginContext) -> list[Any]:
    """Contribute model providers.

    Called when ``run`` selects a provider. Return a list of provider classes
    or factories, each with a ``name`` attribute; ``--provider NAME`` picks one.
    The built-in ``openai`` provider speaks the OpenAI chat-completions
    protocol. Raising marks the plugin failed.
    """


@hookspec
def nanobot_before_tool_call(ctx: PluginContext, call: ToolCallEvent) -> str | None:
    """Observe or deny a tool call before it runs.

    Called for every prepared call, in the executor, before the tool's
    ``execute`` is awaited. Return ``None`` to allow it, or a string reason to
    deny it: the call then does not run and the model gets an ``Error`` result
    that quotes the reason and names the plugin. Any other answer denies the
    call too, with a reason naming the plugin and the answer's type (never its
    text), and is logged as an error. A hook that raises is reported and
    treated as allowing the call.
    """


@hookspec
def nanobot_after_tool_call(ctx: PluginContext, call: ToolCallEvent, result: Any) -> None:
    """Observe a finished tool call.

    Called after the awaited execution has finished (or failed, timed out, or
    been denied), with ``call.duration`` set to the wall time of the actual
    async execution, not of creating the coroutine. The return value is
    ignored; a hook that raises is reported and otherwise ignored.
    """


@hookspec
def nanobot_session_stores(ctx: PluginContext) -> list[Any]:
    """Contribute session stores.

    Called once per plugin manager, when a command needs sessions or lists
    plugins. Return a list of stores, each with a string ``name`` and the
    methods of :class:`nanobot_core.sessions.SessionStore` (``describe``,
    ``list_sessions``, ``load``, ``lease``, ``close``; appends go through the
    lease, atomically, with the sequence number the writer expects).
    ``[sessions] store`` picks one by name (default ``jsonl``, the built-in
    file store); an unknown name is a configuration error naming
    the known ones. Names clash as tools' do: ``jsonl`` stays the built-in's
    unless config allows this plugin to override it, a clash between two
    plugins is won by the first distribution name, then entry-point name, and
    the loser is warned about and listed as shadowed. Build stores lazily: a
    store should connect on first use, not here. Raising or returning a
    non-list marks the plugin failed; an item that is not a store with a name
    is left out alone and listed under the plugin's ``problems``.
    """


@hookspec
def nanobot_kept_files(ctx: PluginContext) -> list[Any]:
    """Declare the files this plugin reads or keeps, which no ``--output`` may write over.

    Called when a command writes an ``--output`` file (``govern``, ``sessions
    export``), once per plugin manager. Return a list of paths (``str`` or
    ``os.PathLike``; a relative one is taken from ``ctx.workspace``): a config
    file the plugin reads (nanobot-mcp's ``.nanobot/mcp.toml``), or a folder
    it keeps files in, all of whose files are kept then. An ``--output`` that is
    such a file (as written, through a link, or in any letter case a file system
    that ignores case gives it), or is in such a folder, is refused, exit 2,
    naming the file and this plugin with its version, before any work (the
    command loads its plugins before it checks its ``--output``: ``govern`` runs
    no stage), and nothing is written. The
    core's own files (sessions, locks, config files, prompt files, the tool-result
    cache) are kept without this hook. Raising, or returning anything but a list
    of paths, marks the plugin failed.
    """
