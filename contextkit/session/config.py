"""``Session``'s constructor arguments: checked, each mistake a ``ConfigError`` that says what to pass
instead (never a failure deep inside a turn), and turned into what the session runs with: litellm's
keyword arguments and the limits they set, the tools, the context window, the status and flush sinks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contextkit import backend
from contextkit.archive import is_recall_tool
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
    print(f"[contextkit] {text}", file=sys.stderr, flush=True)


def default_status() -> StatusSink:
    """stderr in a terminal; in a Jupyter kernel the dashboard's log or one collapsible output per cell."""
    from contextkit.display.status import NotebookStatus, in_jupyter_kernel

    return NotebookStatus() if in_jupyter_kernel() else stderr_status


def status_sink(status: StatusSink | bool | None) -> StatusSink | None:
    """``status=``: True → the default sink, False/None → silent, a callable → itself."""
    return default_status() if status is True else (status or None)  # type: ignore[return-value]


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
    path = getattr(archive, "path", None)
    if not path:
        return None
    return Path(path).parent / "workbench" / f"{session_id}.md"
