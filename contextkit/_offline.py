"""Offline set-up for litellm and tiktoken, applied before either is imported.

litellm fetches its model-cost map from the network at import time unless told not to, and
tiktoken downloads encodings unless pointed at a cache. litellm's wheel ships the encodings we
need, so we point tiktoken there. Every module that imports litellm or tiktoken calls
``ensure_offline()`` first; it only sets variables the user has not set.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

_done = False


def litellm_tokenizers_dir() -> Path | None:
    """The tiktoken cache folder bundled inside the installed litellm wheel, if any."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def ensure_offline() -> None:
    """Set the environment so litellm and tiktoken never reach the network. Idempotent."""
    global _done
    if _done:
        return
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        folder = litellm_tokenizers_dir()
        if folder is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    _done = True
