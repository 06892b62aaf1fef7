"""The contextkit exception tree.

::

    ContextkitError
    ├── UsageError (ValueError)            you called something wrongly; fix the call
    │   ├── ConfigError                     a setting or environment variable is invalid
    │   ├── InvalidMessageError             a message or history is malformed
    │   └── RecallValidationError           recall/recall_context arguments out of range
    └── ContextkitRuntimeError              something failed while running
        ├── ArchiveError                    the SQLite archive could not be read or written
        ├── ProviderError                   the provider or a gateway rejected a request
        │   ├── AuthenticationFailed        a real auth error (never retried, never "recovered")
        │   ├── PayloadFloorError           the non-compactable base alone is too big for the gateway
        │   └── RecoveryFailedError         the recovery ladder ran out of levels
        └── SummaryRejected                 a summary failed the quality gate twice

Every message says what was wrong and what to do next.
"""

from __future__ import annotations

from typing import Any


class ContextkitError(Exception):
    """Base of every error contextkit raises on purpose."""


class UsageError(ContextkitError, ValueError):
    """A usage mistake: the caller passed something invalid."""


class ConfigError(UsageError):
    """A configuration value (argument or CONTEXTKIT_* variable) is invalid."""


class InvalidMessageError(UsageError):
    """A message or a history does not have the shape contextkit needs."""


class RecallValidationError(UsageError):
    """Recall arguments are out of range (what an HTTP API would answer with a 422)."""


class ContextkitRuntimeError(ContextkitError):
    """A failure while running, not caused by a wrong call."""


class ArchiveError(ContextkitRuntimeError):
    """The archive could not be opened, read or written."""


class ProviderError(ContextkitRuntimeError):
    """The provider or a middlebox rejected a request; ``failure`` says how it was classified."""

    def __init__(self, message: str, *, failure: Any = None) -> None:
        super().__init__(message)
        self.failure = failure


class AuthenticationFailed(ProviderError):
    """The provider refused the credentials. Recovery never fires on this."""


class PayloadFloorError(ProviderError):
    """The system prompt plus tool schemas alone are at or above the size the gateway rejected."""

    def __init__(self, message: str, *, base_bytes: int, rejected_bytes: int, failure: Any = None) -> None:
        super().__init__(message, failure=failure)
        self.base_bytes = base_bytes
        self.rejected_bytes = rejected_bytes


class RecoveryFailedError(ProviderError):
    """Every recovery level was tried and the request still failed.

    ``history`` is a detached copy of the session history at the time of failure, so the
    caller can inspect it or continue in a new session; ``attempts`` lists what was tried.
    """

    def __init__(
        self,
        message: str,
        *,
        history: list[Any],  # Message values; typed loosely so errors imports nothing
        attempts: list[dict[str, Any]],
        failure: Any = None,
    ) -> None:
        super().__init__(message, failure=failure)
        self.history = list(history)
        self.attempts = list(attempts)


class SummaryRejected(ContextkitRuntimeError):
    """A summary was rejected by the quality gate twice; the pipeline goes on to the truncation stage."""


# Optional parts of contextkit (widgets, analyses, sweeps) check for their extra before importing
# it, so a core install gets one clear sentence instead of a bare ModuleNotFoundError.
NOTEBOOK_MODULES = ("ipywidgets", "traitlets", "anywidget", "altair", "vl_convert", "polars")


def _absent(module: str) -> bool:
    import importlib.util
    import sys

    if module in sys.modules:
        return sys.modules[module] is None  # blocked on purpose (tests do this)
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def missing_modules(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here."""
    return [m for m in modules if _absent(m)]


def require_extra(feature: str, *modules: str, extra: str = "notebook") -> None:
    """Raise ``ImportError`` naming the extra to install when any of ``modules`` is absent."""
    absent = missing_modules(*modules)
    if absent:
        raise ImportError(
            f"{feature} needs {', '.join(absent)}, which the core install does not include: "
            f"pip install 'contextkit[{extra}]'"
        )
