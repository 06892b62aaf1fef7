"""``Session``'s constructor arguments: checked, each mistake a ``ConfigError`` that says what to pass
instead (never a failure deep inside a turn), and turned into what the session runs with: litellm's
keyword arguments and the limits they set, the tools, the context window, the status and flush sinks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextkit import backend
from contextkit.archive import is_recall_tool
from contextkit.archive.records import workbench_file
from contextkit.compaction.types import WorkbenchWriter
from contextkit.errors import ConfigError
from contextkit.messages import Message
from contextkit.policy.breakpoints import needs_breakpoints
from contextkit.settings import LIMIT_KWARGS, Limits
from contextkit.tools import Tool, as_tools

DEFAULT_WINDOW = 128_000
StatusSink = Callable[[str], None]
RESERVED_KWARGS = {
    "messages": "send the messages with session.send(...) or session.add_messages(...)",
    "stream": "call session.stream(...) for a streamed reply",
}


def check_model(model: Any) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("model must be a litellm model string such as 'openai/gpt-4o-mini'")


def check_price_as(price_as: Any) -> None:
    if price_as is not None and (not isinstance(price_as, str) or not backend.is_priced(price_as)):
        raise ConfigError(
            f"price_as={price_as!r} is not a model litellm's cost map prices; use one such as "
            "'anthropic/claude-sonnet-4-5' or 'gpt-4.1', or leave it out to price the session's own model"
        )


def cache_breakpoints_for(model: str, cache_breakpoints: Any) -> bool:
    """``cache_breakpoints`` as given, or (None) whether the model's provider needs them."""
    if cache_breakpoints is not None and not isinstance(cache_breakpoints, bool):
        raise ConfigError(f"cache_breakpoints must be True, False or None (automatic), got {cache_breakpoints!r}")
    if cache_breakpoints is None:
        return needs_breakpoints(backend.provider_of(model), model)
    return cache_breakpoints


def session_limits(limits: Any, litellm_kwargs: dict[str, Any]) -> tuple[dict[str, Any], Limits]:
    """(litellm's keyword arguments, the limits in force): the fields set in ``Limits(...)`` and by
    limit-setting keywords win; every other field comes from ``CONTEXTKIT_*``."""
    if limits is not None and not isinstance(limits, Limits):
        raise ConfigError(f"limits must be a contextkit.Limits, got {type(limits).__name__}")
    kwargs, limits = split_kwargs(litellm_kwargs, limits or Limits())
    return kwargs, limits.over_env()


def split_kwargs(kwargs: dict[str, Any], limits: Limits) -> tuple[dict[str, Any], Limits]:
    """litellm's keyword arguments, minus those that set a limit (folded into ``limits``); reserved
    names raise a ``ConfigError`` instead of failing deep inside a turn."""
    for name, advice in RESERVED_KWARGS.items():
        if name in kwargs:
            raise ConfigError(f"Session(..., {name}=...) is not a litellm option here: {advice}")
    passed = dict(kwargs)
    changes: dict[str, Any] = {}
    for name, field_name in LIMIT_KWARGS.items():
        if name not in passed:
            continue
        value = passed.pop(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"{name}={value!r}: pass a number ({'seconds' if 'timeout' in name else 'retries'}); "
                f"it sets Limits.{field_name}"
            )
        explicit = field_name in limits.explicit_fields or field_name in changes
        current = changes.get(field_name, getattr(limits, field_name))
        if explicit and current != value:
            raise ConfigError(
                f"{name}={value!r} conflicts with Limits({field_name}={current!r}); pass only one of them"
            )
        changes[field_name] = int(value) if field_name == "max_retries" else float(value)
    return passed, (limits.with_overrides(**changes) if changes else limits)


def session_tools(tools: Sequence[Callable[..., Any] | Tool] | None) -> dict[str, Tool]:
    registry = as_tools(tools)
    if shadowing := [name for name in registry if is_recall_tool(name)]:
        raise ConfigError(
            f"a tool named {shadowing[0]!r} would shadow the built-in recall tool (it expands <<ccr:KEY>> "
            "markers from the archive); rename your tool, e.g. to 'recall_notes'"
        )
    return registry


def stderr_status(text: str) -> None:
    """A status sink that prints ``[contextkit] text`` to stderr (``Session(status=stderr_status)``)."""
    print(f"[contextkit] {text}", file=sys.stderr, flush=True)


STATUS_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_logger = logging.getLogger("contextkit")


class LogStatus:
    """``status=True``: each status line is a record on the ``contextkit`` logger.

    INFO for information, WARNING for warnings, ERROR for errors; ``record.session_id`` and
    ``record.code`` (the notice code, ``"compaction"`` for a compaction phase) come in ``extra``.
    Where the lines show is the host's logging configuration: nothing by default (the package's
    logger has only a ``NullHandler``); ``contextkit.display.status`` has the handlers the CLI and
    the notebooks attach.
    """

    def __init__(self, session_id: str = "") -> None:
        self.session_id = session_id

    def __call__(self, text: str, *, code: str = "compaction", level: str = "info") -> None:
        extra = {"session_id": self.session_id, "code": code}
        _logger.log(STATUS_LEVELS.get(level, logging.INFO), "%s", text, extra=extra)

    def __repr__(self) -> str:
        return f"LogStatus(session_id={self.session_id!r})"


def default_status(session_id: str = "") -> StatusSink:
    """What ``status=True`` gives: the ``contextkit`` logger, records tagged with ``session_id``."""
    return LogStatus(session_id)


def status_sink(status: StatusSink | bool | None, session_id: str = "") -> StatusSink | None:
    """``status=``: True → the ``contextkit`` logger, False/None → silent, a callable → itself."""
    if status is True:
        return default_status(session_id)
    if status is None or status is False:
        return None
    if not callable(status):
        raise ConfigError(
            f"status must be True (log on the 'contextkit' logger), False or None (silent) or a "
            f"callable taking each status line, got {type(status).__name__}"
        )
    return status


def send_status(sink: StatusSink, text: str, *, code: str, level: str) -> None:
    """One status line to ``sink``: the logger sink also gets the notice code and level; a
    callable of the user's gets the text, as it always has."""
    if isinstance(sink, LogStatus):
        sink(text, code=code, level=level)
    else:
        sink(text)


def context_window(model: str, limits: Limits) -> tuple[int, str]:
    """(the window in tokens, where it comes from: "configured", "model" or "assumed")."""
    known = None if limits.context_window else backend.model_info(model).get("max_input_tokens")
    window = limits.context_window or int(known or DEFAULT_WINDOW)
    source = "configured" if limits.context_window else ("model" if known else "assumed")
    return window, source


def system_message(system: Any) -> Message:
    if not isinstance(system, str):
        raise ConfigError("system must be a string")
    return Message.system(system)


def own_archive(archive: Any, session_id: str) -> tuple[Any, bool]:
    """(the archive this session works on, whether the session opened it and closes it).

    None → the default archive under this session's id. An ``Archive`` without a ``session_id``
    stores under this session's id. An ``Archive`` object another open session already works on
    gives this session a view of its own (``with_scope``: its own scope, the same grants), so each
    session's writes, reads and archive events are its own."""
    from contextkit.archive import Archive

    if archive is None:
        return Archive(session_id=session_id), True
    claim = getattr(archive, "claim", None)
    if callable(claim) and not claim(session_id):
        grants = [s for s in archive.scopes[1:] if s != session_id]
        view = archive.with_scope(session_id, read_scopes=grants)
        view.claim(session_id)
        logging.getLogger("contextkit").info(
            "session %s: the archive passed in is in use by another open session; this session writes to its "
            "own scope %r of the same store", session_id, session_id,
        )
        return view, True
    if not getattr(archive, "scope_chosen", True):
        archive.adopt(session_id)  # Archive(path): store under this session's id, not "default"
    return archive, False


def flush_sink(on_flush: Any, archive: Any, session_id: str) -> Any:
    """Where compaction flushes what it removed: ``"workbench"`` → a markdown file next to a file
    archive (none for an in-memory one), else the callable given, or None."""
    if on_flush == "workbench":
        workbench = workbench_path(archive, session_id)
        flush = WorkbenchWriter(workbench) if workbench is not None else None
    else:
        flush = on_flush
    if flush is not None and not callable(flush):
        raise ConfigError("on_flush must be a callable(segment, info), 'workbench' or None")
    return flush


def workbench_path(archive: Any, session_id: str) -> Path | None:
    """``workbench/<session>.md`` next to a file archive (the session id made a safe file name), else
    None. It goes with the session's archived entries when the archive prunes that session."""
    path = getattr(archive, "path", None)
    if not path:
        return None
    return workbench_file(Path(path), session_id)


def context_engine_for(spec: str | None, summarizer: Any, limits: Limits, status: Any) -> Any:
    """``context_engine=``: None, or the engine that asks an MCP server before ``summarizer``."""
    if spec is None or spec == "provider":
        return None
    from contextkit.context_engines import McpContextEngine

    return McpContextEngine(spec, fallback=summarizer, timeout=limits.context_engine_timeout, status=status)


def session_fallbacks(fallbacks: Any) -> tuple[tuple[str, dict[str, Any], int | None], ...]:
    """``fallbacks=``: model names (the session's litellm arguments apply to them too: another model
    behind the same gateway) or dicts ``{"model": ..., "api_base": ..., "api_key": ...}`` whose
    keys replace the session's for that model. Returns (model, overrides, known window) per entry."""
    if fallbacks is None:
        return ()
    if isinstance(fallbacks, str | dict) or not isinstance(fallbacks, Sequence):
        raise ConfigError(
            f"fallbacks must be a list of models, e.g. ['openai/gpt-4.1-mini'] or [{{'model': ..., 'api_base': ...}}], "
            f"got {fallbacks!r}"
        )
    out = []
    for entry in fallbacks:
        if isinstance(entry, str):
            model, overrides = entry, {}
        elif isinstance(entry, dict) and isinstance(entry.get("model"), str):
            overrides = {k: v for k, v in entry.items() if k != "model"}
            model = entry["model"]
        else:
            raise ConfigError(
                f"each fallback is a model name or a dict with a 'model' key (plus its own api_base, api_key ...), got {entry!r}"
            )
        check_model(model)
        info = backend.model_info(model)
        window = info.get("max_input_tokens") or info.get("max_tokens")
        out.append((model, overrides, int(window) if window else None))
    return tuple(out)


def with_tool_index(tools: dict[str, Tool]) -> dict[str, Tool]:
    """``tool_index=True``: the session's tools plus ``describe_tools``, which answers with their full schemas."""
    from contextkit.policy.tool_index import DESCRIBE_TOOLS, describe, describe_tools_schema

    if DESCRIBE_TOOLS in tools:
        raise ConfigError(
            f"a tool named {DESCRIBE_TOOLS!r} would shadow the tool index's own; rename it, or leave tool_index off"
        )
    full = [t.schema() for t in tools.values()]

    def describe_tools(names: str) -> str:
        return describe(full, names)

    own = describe_tools_schema()["function"]
    return {**tools, DESCRIBE_TOOLS: Tool(DESCRIBE_TOOLS, own["description"], own["parameters"], describe_tools)}
