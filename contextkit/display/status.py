"""Where status lines show: handlers for the ``contextkit`` logger, attached by their owner.

``Session(status=True)`` (the default) logs each status line on ``logging.getLogger("contextkit")``
and the package gives that logger only a ``NullHandler``: a host that configured no logging sees
nothing. The ones who own the screen attach a handler:

- ``show_status_on_stderr()``: ``[contextkit] ...`` lines on stderr (the ``contextkit`` command);
- ``show_status_in_notebook()``: in a Jupyter kernel, ``NotebookStatus``. Printing there would
  flood every cell's output (and stderr shows as an alarming red box), so while a ``Dashboard`` of
  the session is shown its status-log panel has the lines (it reads them from the events) and
  nothing is printed; otherwise the lines go to one collapsed ``<details>`` block in the running
  cell's output ("contextkit: 12 status lines"), updated in place. It is plain HTML through
  IPython's display machinery, so it also shows in saved notebooks and needs no ipywidgets.

Both set the logger's level to INFO when the host left it unset (the root logger's default,
WARNING, would drop the info lines), and both are idempotent. Only the standard library and
IPython (always present in a kernel) are used.
"""

from __future__ import annotations

import html
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

LOGGER_NAME = "contextkit"

# Status-log panels on screen, each with the session whose lines it shows (weak: a closed
# dashboard's panel goes away with it).
_panels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_panels_lock = threading.Lock()


def show_in_panel(session_id: str, panel: Any) -> None:
    """``panel`` (the dashboard's status log) shows the status lines of ``session_id`` while it is
    on screen; the notebook handler stays quiet for that session meanwhile."""
    with _panels_lock:
        _panels[panel] = session_id


def _on_screen(panel: Any) -> bool:
    return getattr(panel, "comm", None) is not None  # an ipywidget is displayed while its comm is open


def panel_shown(session_id: str) -> bool:
    with _panels_lock:
        shown = [panel for panel, sid in _panels.items() if sid == session_id]
    return any(_on_screen(panel) for panel in shown)


def in_jupyter_kernel() -> bool:
    """True inside an IPython kernel (JupyterLab, Notebook, Voila, nbclient), not in a terminal."""
    ipython: Any = sys.modules.get("IPython")
    if ipython is None:
        return False
    get = getattr(ipython, "get_ipython", None)
    shell = get() if callable(get) else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class NotebookStatus(logging.Handler):
    """Status lines in a notebook: quiet while a dashboard log shows the session's lines, else a
    collapsible block in the current cell's output.

    A ``logging.Handler`` for the ``contextkit`` logger (``show_status_in_notebook()`` attaches
    one); it is also a status sink of its own (``Session(status=NotebookStatus())``).
    """

    def __init__(self, *, max_lines: int = 500) -> None:
        super().__init__(level=logging.INFO)
        self.max_lines = max_lines
        self.lines: list[str] = []
        self._panels: weakref.WeakSet[Any] = weakref.WeakSet()
        self._cell: Any = None
        self._handle: Any = None
        self._lock = threading.Lock()

    def attach(self, panel: Any) -> None:
        """A panel showing this sink's status lines (the dashboard's log) is on screen."""
        self._panels.add(panel)

    def _panel_shown(self) -> bool:
        return any(_on_screen(p) for p in list(self._panels))

    def emit(self, record: logging.LogRecord) -> None:
        session_id = getattr(record, "session_id", None)
        if isinstance(session_id, str) and panel_shown(session_id):
            return
        try:
            self._show(self.format(record))
        except Exception:  # noqa: BLE001 - logging's contract: a failing handler reports, never raises
            self.handleError(record)

    def __call__(self, text: str) -> None:
        if self._panel_shown():
            return
        self._show(text)

    def _show(self, text: str) -> None:
        from IPython import get_ipython
        from IPython.display import HTML, display

        shell = get_ipython()
        cell = getattr(shell, "execution_count", None)
        with self._lock:
            if cell != self._cell or self._handle is None:  # a new cell: a new block in its output
                self._cell, self.lines = cell, []
                self._handle = display(HTML(""), display_id=True)
            self.lines = [*self.lines, text][-self.max_lines :]
            count = len(self.lines)
            body = html.escape("\n".join(self.lines))
            rich = (
                f"<details class='ck-status'><summary style='cursor:pointer;color:#555;font-size:12px'>contextkit: "
                f"{count} status line{'s' if count != 1 else ''} (click to show)</summary><pre style='font-size:11px;"
                f"max-height:240px;overflow:auto;white-space:pre-wrap'>{body}</pre></details>"
            )
            plain = f"contextkit: {count} status line{'s' if count != 1 else ''}\n" + "\n".join(self.lines)
            if self._handle is not None:
                self._handle.update({"text/html": rich, "text/plain": plain}, raw=True)


class StderrStatus(logging.Handler):
    """``[contextkit] ...`` lines on the current ``sys.stderr``, flushed one by one."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"[contextkit] {self.format(record)}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - logging's contract: a failing handler reports, never raises
            self.handleError(record)


def show_status_on_stderr() -> logging.Handler:
    """Print the ``contextkit`` logger's status lines to stderr as ``[contextkit] ...`` (what the
    ``contextkit`` command does). Returns the handler; calling it again adds no second one."""
    return _attach(StderrStatus, StderrStatus)


def show_status_in_notebook(*, max_lines: int = 500) -> logging.Handler:
    """Show the ``contextkit`` logger's status lines in this notebook: in the dashboard's status log
    while a dashboard of the session is shown, else in one collapsible block per cell. Outside a
    Jupyter kernel (a notebook's text source run as a script) they go to stderr instead, as with
    ``show_status_on_stderr()``. Returns the handler; calling it again adds no second one."""
    if not in_jupyter_kernel():
        return show_status_on_stderr()
    return _attach(NotebookStatus, lambda: NotebookStatus(max_lines=max_lines))


_attach_lock = threading.Lock()


def _attach(kind: type[logging.Handler], make: Callable[[], logging.Handler]) -> logging.Handler:
    logger = logging.getLogger(LOGGER_NAME)
    with _attach_lock:
        for handler in logger.handlers:
            if isinstance(handler, kind):
                return handler
        handler = make()
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:  # a level the host chose for this logger stays
            logger.setLevel(logging.INFO)
    return handler
