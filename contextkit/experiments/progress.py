"""A small progress bar for sweeps: an ipywidgets bar inside a Jupyter kernel, else one stderr line."""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO

__all__ = ["NullProgress", "Progress", "StderrProgress", "WidgetProgress", "make_progress"]


class Progress(Protocol):
    def update(self, done: int, note: str = "") -> None: ...
    def close(self) -> None: ...


class NullProgress:
    def update(self, done: int, note: str = "") -> None:
        pass

    def close(self) -> None:
        pass


class StderrProgress:
    """``[#####.....] 12/40 runs  30 s  contextkit seed 3`` rewritten in place."""

    def __init__(self, total: int, label: str = "runs", stream: TextIO | None = None, width: int = 24) -> None:
        self.total, self.label, self.width = total, label, width
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.done = 0
        self.update(0)

    def update(self, done: int, note: str = "") -> None:
        self.done = done
        filled = int(self.width * done / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.started
        line = f"\r[{bar}] {done}/{self.total} {self.label}  {elapsed:.0f} s  {note}"[:160]
        self.stream.write(line.ljust(80))
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class WidgetProgress:
    """An ``ipywidgets.IntProgress`` plus a label, displayed once in the notebook."""

    def __init__(self, total: int, label: str = "runs") -> None:
        import ipywidgets as widgets
        from IPython.display import display

        self.total, self.label = total, label
        self.bar = widgets.IntProgress(value=0, min=0, max=max(total, 1), description="sweep")
        self.text = widgets.Label(value=f"0/{total} {label}")
        self.box = widgets.HBox([self.bar, self.text])
        display(self.box)

    def update(self, done: int, note: str = "") -> None:
        self.bar.value = done
        self.text.value = f"{done}/{self.total} {self.label}  {note}"

    def close(self) -> None:
        self.bar.bar_style = "success"


def _in_kernel() -> bool:
    ipython: Any = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def make_progress(total: int, enabled: bool | Progress = True, label: str = "runs") -> Progress:
    """``True``: a widget in a Jupyter kernel, else stderr; ``False``: silent; or pass your own."""
    if enabled is False:
        return NullProgress()
    if enabled is not True:
        return enabled
    if _in_kernel():
        try:
            return WidgetProgress(total, label)
        except ImportError:
            pass
    return StderrProgress(total, label)
