"""Local HTTP services: an HTTP server in a daemon thread (``LocalService``) and the writes its
handlers share (``ServiceHandler``). The gateway simulator (``sim/``) and ``contextkit proxy``
(``integrations/``) both serve this way; the common part lives here, below both, so the proxy does not
depend on the simulator."""

from __future__ import annotations

from contextkit.serving.service import LocalService, ServiceHandler

__all__ = ["LocalService", "ServiceHandler"]
