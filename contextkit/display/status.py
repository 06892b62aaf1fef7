"""Status lines in a notebook: into the dashboard's log panel, else one collapsible output per cell.

``Session(status=True)`` (the default) prints status lines to stderr in a terminal. In a Jupyter
kernel that would flood every cell's output (and stderr shows as an alarming red box), so the
session uses ``NotebookStatus`` instead:

- while a ``Dashboard`` of the session is shown, its status-log panel has the lines (it reads them
  from the events) and nothing is printed;
- otherwise the lines go to one collapsed ``<details>`` block in the running cell's output
  ("contextkit: 12 status lines"), updated in place. It is plain HTML through IPython's display
  machinery, so it also shows in saved notebooks and needs no ipywidgets.

Only the standard library and IPython (always present in a kernel) are used.
"""

from __future__ import annotations

import html
import sys
import threading
import weakref
from typing import Any


def in_jupyter_kernel() -> bool:
    """True inside an IPython kernel (JupyterLab, Notebook, Voila, nbclient), not in a terminal."""
    ipython: Any = sys.modules.get("IPython")
    if ipython is None:
        return False
    get = getattr(ipython, "get_ipython", None)
    shell = get() if callable(get) else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class NotebookStatus:
    """A status sink for notebooks: quiet while a dashboard log shows the lines, else a
    collapsible block in the current cell's output."""

    def __init__(self, *, max_lines: int = 500) -> None:
        self.max_lines = max_lines
        self.lines: list[str] = []
        self._panels: weakref.WeakSet[Any] = weakref.WeakSet()
        self._cell: Any = None
        self._handle: Any = None
        self._lock = threading.Lock()

    def attach(self, panel: Any) -> None:
        """A panel showing this session's status lines (the dashboard's log) is on screen."""
        self._panels.add(panel)

    def _panel_shown(self) -> bool:
        return any(getattr(p, "comm", None) is not None for p in list(self._panels))

    def __call__(self, text: str) -> None:
        if self._panel_shown():
            return
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
