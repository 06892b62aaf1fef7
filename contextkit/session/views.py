"""What a ``Session`` shows without changing anything: its history, counters, the limits in force,
the tool schemas it sends, the size of its next request, and its reprs (mixed into ``Session``)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from contextkit.archive import recall_tool_schema
from contextkit.limits.evidence import CapInterval, EndpointEvidence
from contextkit.limits.state import SessionState, SessionStats
from contextkit.messages import Message
from contextkit.policy.tool_index import DESCRIBE_TOOLS, index_schema
from contextkit.sizing import Measure, RequestMeter, body_params
from contextkit.tools import Tool

if TYPE_CHECKING:
    from contextkit.compaction.compactor import Compactor
    from contextkit.session.config import StatusSink


class SessionViews:
    """Read-only views of a ``Session`` (its state, compactor, tools, archive and meter)."""

    model: str
    session_id: str
    archive: Any
    compactor: Compactor
    _state: SessionState
    _status: StatusSink | None
    _tools: dict[str, Tool]
    _meter: RequestMeter
    _litellm_kwargs: dict[str, Any]

    @property
    def history(self) -> list[Message]:
        return list(self._state.history)

    @property
    def stats(self) -> SessionStats:
        stats = SessionStats.from_dict(self._state.stats.to_dict())
        cstats = self.compactor.stats
        stats.compactions = cstats.compactions
        stats.truncation_falls = cstats.truncation_falls
        stats.summary_calls = cstats.summary_calls
        stats.summarizer_prompt_tokens = cstats.summarizer_prompt_tokens
        stats.summarizer_completion_tokens = cstats.summarizer_completion_tokens
        stats.summarizer_cost = cstats.summarizer_cost
        return stats

    @property
    def status_sink(self) -> StatusSink | None:
        """Where status lines go (``status=`` of the constructor; None when silenced)."""
        return self._status

    @property
    def context_window(self) -> int:
        return self._state.context_window

    @property
    def payload_cap(self) -> int | None:
        return self._state.cap

    @property
    def cap_source(self) -> str | None:
        return self._state.cap_source

    @property
    def interval(self) -> CapInterval:
        """The body limit as the session knows it: known to pass <= send limit < known to fail (the
        session's model endpoint; ``session.limits`` stays the settings it was given)."""
        st = self._state
        ev = st.evidence.endpoints.get(st.model) or EndpointEvidence()
        return CapInterval(ev.known_to_pass, st.cap, ev.known_to_fail)

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tool schemas sent with every request. Decided once (tools lead the cached prompt
        prefix, so any change breaks the whole cache): the ``recall`` tool is offered from the
        first request when the session has tools or its archive already holds content, otherwise
        from the request after the first archive write; once offered it stays, byte-identical."""
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            return list(ctx.tools)
        return self._initial_tools()[0]

    def _initial_tools(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """(schemas offered from the first request, the recall schema held back until content is archived)."""
        schemas = copy.deepcopy([t.schema() for t in self._tools.values()])
        if getattr(self, "tool_index", False):  # one line per tool; describe_tools has the full schemas
            schemas = [s if s["function"]["name"] == DESCRIBE_TOOLS else index_schema(s) for s in schemas]
        if self.archive is None or "recall" in self._tools:
            return schemas, None
        recall = recall_tool_schema()
        if schemas or len(self.archive):
            return [*schemas, recall], None
        return schemas, recall

    def measure(self) -> Measure:
        """Request bytes and tokens of the next request (measured incrementally: only new messages are counted)."""
        return self._meter.measure(
            self._state.history, tools=self.tool_schemas or None, **body_params(self._litellm_kwargs)
        )

    def _repr_html_(self) -> str:
        from contextkit.display.html import session_html

        return session_html(self)

    def __repr__(self) -> str:
        m = self.measure()
        return (
            f"<Session {self.session_id} {self.model} messages={m.messages} bytes={m.bytes} cap={self.payload_cap} "
            f"({self.interval})>"
        )
