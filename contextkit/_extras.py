"""Clear errors when an optional part of contextkit is used without its extra installed."""

from __future__ import annotations

import importlib.util
import sys

NOTEBOOK_MODULES = ("ipywidgets", "traitlets", "anywidget", "altair", "vl_convert", "polars")


def _absent(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is None  # blocked on purpose (tests do this)
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def missing(*modules: str) -> list[str]:
    return [m for m in modules if _absent(m)]


def require(feature: str, *modules: str, extra: str = "notebook") -> None:
    """Raise ``ImportError`` naming the extra to install when any of ``modules`` is absent."""
    absent = missing(*modules)
    if absent:
        raise ImportError(
            f"{feature} needs {', '.join(absent)}, which the core install does not include: "
            f"pip install 'contextkit[{extra}]'"
        )
