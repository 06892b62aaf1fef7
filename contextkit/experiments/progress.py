"""Sweep progress through tqdm: its notebook bar in Jupyter (``tqdm.auto``), a stderr line elsewhere."""

from __future__ import annotations

from typing import Any

__all__ = ["make_progress"]


def make_progress(total: int, enabled: bool | Any = True, label: str = "runs") -> Any:
    """``True``: a new ``tqdm.auto`` bar; ``False``: a disabled one; or pass your own tqdm bar
    (anything with ``update(n)``, ``set_postfix_str(text)`` and ``close()``)."""
    if enabled is True or enabled is False:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc="sweep", unit=label.rstrip("s") or "run", disable=not enabled, leave=True)
    return enabled
