"""``HistoryGauge``: the dashboard's compact header.

Next request's bytes against the payload cap and tokens against the context window (two thin bars
side by side), the pressure, the learned cap, the cached share of the last request's prompt, and
— while a turn streams — a live token count of the answer so far.

A thin view: its state comes from ``HistoryEvent`` (sizes of the next request, cap, window),
``CapEvent`` (how the cap was set or learned), ``NoticeEvent`` (the last warning), ``RequestEvent``
(``cached_prompt_tokens``/``append_only``: the last prompt's cached share, the session's share so
far and its cache breaks, as in ``SessionStats``) and ``StreamEvent`` (``kind``, ``tokens_so_far``).
Colour follows the pressure, the larger of the two ratios: green below 70%, amber below the
pre-flight ratio (85%), red from it on.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.display.html import AMBER_AT, COLOURS, RED_AT, bar_html, esc, pressure_state, ratio
from contextkit.events import CapEvent, Event, HistoryEvent, NoticeEvent, ProviderEditEvent, RequestEvent, StreamEvent
from contextkit.sizing import format_size
from contextkit.widgets._view import EventFeed, FeedView, call_quietly, events_of
from contextkit.widgets.series import evidence_of, real_cap_of

BYTES_HELP = (
    "Size of the next request body in bytes: what proxies and gateways limit. The dashed line is the "
    "pre-flight point where the session compacts before sending."
)
TOKENS_HELP = "Tokens of the next request: what the model's context window limits."
PRESSURE_HELP = "The fuller of the two bars. Green below 70%; amber below the pre-flight point; red from it."
CACHE_HELP = (
    "How much of the last request's prompt the provider read from its prompt cache (cheaper and faster), "
    "and of all prompts so far. The cache is lost (a cache break) when the start of the history changes, "
    "e.g. after a compaction."
)
CAP_HELP = "The largest request body the gateway accepts, as far as this session knows."
KNOWN_HELP = (
    "What the session knows about the gateway's body limit: the largest body it accepted (known to pass), "
    "the smallest it refused for its size (known to fail), and the send limit the session keeps every "
    "request under (learned from the refusals). The real limit is somewhere between the first two."
)
STREAM_STEP = 8  # tokens between two redraws of the streaming count


class HistoryGauge(FeedView, W.VBox):
    """Live pressure gauge for a session. Read ``state``/``colour`` and the size traits in tests."""

    state = T.Unicode("green", help="green | amber | red")
    colour = T.Unicode(COLOURS["green"])
    pressure = T.Float(0.0, help="max(bytes/cap, tokens/window)")
    bytes_ratio = T.Float(0.0)
    tokens_ratio = T.Float(0.0)
    request_bytes = T.Int(0)
    tokens = T.Int(0)
    messages = T.Int(0)
    cap_bytes = T.Int(None, allow_none=True)
    context_window = T.Int(None, allow_none=True)
    cap_source = T.Unicode(None, allow_none=True, help="configured | learned | assumed")
    cap_detail = T.Unicode("", help="how the current cap was learned")
    notice = T.Unicode("", help="text of the last warning notice")
    streaming = T.Bool(False, help="a streamed answer is arriving right now")
    answer_tokens = T.Int(0, help="tokens of the answer streamed so far (or of the last streamed answer)")
    cached_share = T.Float(None, allow_none=True, help="share of the last request's prompt read from the cache")
    cache_broken = T.Bool(False, help="the last request did not start like the one before (prompt cache lost)")
    prompt_tokens = T.Int(0, help="prompt tokens billed so far (turn requests, as SessionStats counts them)")
    cached_tokens = T.Int(0, help="of which the provider read from its prompt cache")
    cache_breaks = T.Int(0, help="requests whose previous request body was not a prefix")
    provider_cleared_results = T.Int(0, help="tool results the provider cleared server-side (context_engine='provider')")
    provider_cleared_tokens = T.Int(0, help="input tokens those server-side edits freed")
    known_to_pass = T.Int(None, allow_none=True, help="bytes of the largest body the gateway accepted")
    known_to_fail = T.Int(None, allow_none=True, help="bytes of the smallest body it refused for its size")
    real_cap = T.Int(None, allow_none=True, help="the simulator's real cap, when the gateway is one")

    def __init__(self, session: Any, *, gateway: Any = None, **kwargs: Any) -> None:
        events = events_of(session, panel="HistoryGauge")
        self._session = session
        self._gateway = gateway
        limits = getattr(session, "limits", None)
        self.red_at = float(getattr(limits, "preflight_ratio", RED_AT) or RED_AT)
        self.bytes_bar = W.HTML(layout=W.Layout(flex="1 1 300px", margin="0 16px 0 0"))
        self.tokens_bar = W.HTML(layout=W.Layout(flex="1 1 300px"))
        self.info = W.HTML()
        bars = W.HBox([self.bytes_bar, self.tokens_bar], layout=W.Layout(flex_flow="row wrap"))
        super().__init__(children=[bars, self.info], **kwargs)
        self.add_class("ck-gauge")
        self.layout.min_width = "320px"
        self._history_seq = -1
        # read the session before taking the view lock: a session thread may be delivering an
        # event (and waiting for that lock) while holding its own
        snapshot = _snapshot(session)
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._learn()
            if self._history_seq < 0:  # no HistoryEvent yet (a fresh session): use the snapshot
                self._use_snapshot(snapshot)
            self._render()

    # -- state ------------------------------------------------------------------------------------
    def _use_snapshot(self, snap: dict[str, Any]) -> None:
        size = snap["size"]
        if size is not None:
            self.request_bytes = int(getattr(size, "bytes", 0))
            self.tokens = int(getattr(size, "tokens", 0))
            self.messages = int(getattr(size, "messages", 0))
        self.cap_bytes = int(snap["cap"]) if snap["cap"] else None
        self.context_window = int(snap["window"]) if snap["window"] else None
        if self.cap_source is None:
            self.cap_source = snap["source"]

    def _apply(self, event: Event) -> None:
        if isinstance(event, HistoryEvent):
            if event.seq < self._history_seq:
                return  # two threads delivered out of order: keep the newer sizes
            self._history_seq = event.seq
            self.request_bytes, self.tokens, self.messages = event.bytes, event.tokens, event.messages
            self.cap_bytes = event.cap_bytes or None
            if event.context_window:
                self.context_window = event.context_window
        elif isinstance(event, CapEvent):
            self.cap_bytes = event.cap_bytes or None
            self.cap_source = event.source
            self.cap_detail = _cap_detail(event)
        elif isinstance(event, NoticeEvent):
            if event.level in ("warning", "error") or event.code in ("preflight", "learned_cap", "assumed_cap"):
                self.notice = event.text
        elif isinstance(event, RequestEvent):
            if event.purpose == "summary":
                return
            cached = event.cached_prompt_tokens
            prompt = event.prompt_tokens or event.tokens
            reported = cached or event.append_only is not None
            self.cached_share = (cached / prompt if prompt else 0.0) if reported and event.outcome == "ok" else None
            self.cache_broken = event.append_only is False
            self.prompt_tokens += event.prompt_tokens
            self.cached_tokens += cached
            self.cache_breaks += event.append_only is False
        elif isinstance(event, ProviderEditEvent):
            self.provider_cleared_results += event.cleared_results
            self.provider_cleared_tokens += event.cleared_tokens
        elif isinstance(event, StreamEvent):
            kind = event.kind
            if kind in ("delta", "tool_round", "continuation", "retry"):
                was_streaming, shown = self.streaming, self.answer_tokens
                self.streaming = True
                self.answer_tokens = event.tokens_so_far
                if kind == "delta" and was_streaming and 0 <= self.answer_tokens - shown < STREAM_STEP:
                    self.answer_tokens = shown  # one redraw per few tokens, not one per delta
                    return
            elif kind == "voided":
                self.answer_tokens = 0
            elif kind in ("done", "cancelled"):
                self.streaming = False
                self.answer_tokens = event.tokens_so_far or self.answer_tokens
        elif not self._learn():  # the evidence changes after the request event, once the flow judged it
            return
        self._learn()
        if not self._feed.replaying:
            self._render()

    def _learn(self) -> bool:
        known = (*evidence_of(self._session), real_cap_of(self._gateway))
        if known == (self.known_to_pass, self.known_to_fail, self.real_cap):
            return False
        self.known_to_pass, self.known_to_fail, self.real_cap = known
        return True

    # -- view -------------------------------------------------------------------------------------
    def _render(self) -> None:
        self.bytes_ratio = ratio(self.request_bytes, self.cap_bytes)
        self.tokens_ratio = ratio(self.tokens, self.context_window)
        self.pressure = max(self.bytes_ratio, self.tokens_ratio)
        self.state = pressure_state(self.pressure, red_at=self.red_at, amber_at=min(AMBER_AT, self.red_at))
        self.colour = COLOURS[self.state]
        preflight = [(self.red_at, "ck-preflight", f"{self.red_at:.0%} pre-flight: compaction runs before sending")]

        if self.cap_bytes:
            label = (
                f"<span title='{esc(BYTES_HELP)}'>next request <b class='ck-bytes'>{esc(format_size(self.request_bytes))}"
                f"</b> of the {esc(format_size(self.cap_bytes))} {esc(self.cap_source or 'configured')} payload cap "
                f"(<span class='ck-bytes-pct'>{self.bytes_ratio:.0%}</span>)</span>"
            )
            bar = bar_html(self.bytes_ratio, colour=COLOURS[_state_of(self.bytes_ratio, self.red_at)], marks=preflight)
        else:
            label = (
                f"<span title='{esc(BYTES_HELP)}'>next request <b class='ck-bytes'>"
                f"{esc(format_size(self.request_bytes))}</b> (no payload cap known yet)</span>"
            )
            bar = bar_html(None, colour=COLOURS["none"])
        self.bytes_bar.value = f"<div class='ck-bytes-row'>{label}{bar}</div>"

        if self.context_window:
            label = (
                f"<span title='{esc(TOKENS_HELP)}'>tokens <b class='ck-tokens'>{self.tokens:,}</b> of the "
                f"{self.context_window:,}-token window (<span class='ck-tokens-pct'>{self.tokens_ratio:.0%}</span>)</span>"
            )
            bar = bar_html(
                self.tokens_ratio, colour=COLOURS[_state_of(self.tokens_ratio, self.red_at)], marks=preflight
            )
        else:
            label = f"<span title='{esc(TOKENS_HELP)}'>tokens <b class='ck-tokens'>{self.tokens:,}</b> (window unknown)</span>"
            bar = bar_html(None, colour=COLOURS["none"])
        self.tokens_bar.value = f"<div class='ck-tokens-row'>{label}{bar}</div>"

        parts = [
            f"<span class='ck-messages' title='Messages in the history the next request will carry'>{self.messages} "
            f"messages</span>",
            f"<span title='{esc(PRESSURE_HELP)}'>how full <b class='ck-state' style='color:{self.colour}'>"
            f"{self.pressure:.0%} {self.state}</b></span>",
        ]
        if self.cached_share is not None or self.cache_broken or self.prompt_tokens:
            text = "cache lost" if self.cache_broken else f"{self.cached_share or 0:.0%} of the last prompt from cache"
            if self.cached_share is None and not self.cache_broken:
                text = "prompt cache"
            breaks = f", {self.cache_breaks} cache break{'' if self.cache_breaks == 1 else 's'}"
            total = (
                f" (<b>{self.cached_tokens / self.prompt_tokens:.0%}</b> of {self.prompt_tokens:,} prompt tokens so far"
                f"{breaks})"
                if self.prompt_tokens
                else ""
            )
            parts.append(f"<span class='ck-cache' title='{esc(CACHE_HELP)}'>{esc(text)}{total}</span>")
        if self.provider_cleared_results:
            parts.append(
                f"<span class='ck-provider'>provider cleared {self.provider_cleared_results} tool results "
                f"({self.provider_cleared_tokens:,} tokens)</span>"
            )
        if self.streaming or self.answer_tokens:
            what = "answer so far" if self.streaming else "last streamed answer"
            dot = "<span style='color:#f9a825'>●</span> " if self.streaming else ""
            parts.append(
                f"<span class='ck-streaming' title='Tokens of the answer while it streams in'>{dot}{what}: "
                f"<b class='ck-answer-tokens'>{self.answer_tokens:,}</b> tokens</span>"
            )
        lines = [" · ".join(parts)]
        lines.append(
            f"<span class='ck-known' title='{esc(KNOWN_HELP)}'>what the session knows: "
            f"<b class='ck-known-pass' style='color:#2e7d32'>known to pass "
            f"{esc(format_size(self.known_to_pass) if self.known_to_pass else 'nothing yet')}</b> · "
            f"<b class='ck-send-limit'>send limit {esc(format_size(self.cap_bytes) if self.cap_bytes else 'none yet')}</b>"
            f" · <b class='ck-known-fail' style='color:#c62828'>known to fail "
            f"{esc(format_size(self.known_to_fail) if self.known_to_fail else 'nothing refused yet')}</b>"
            + (
                f" · <span class='ck-real-cap' style='color:#6a1b9a'>real cap {esc(format_size(self.real_cap))} "
                "(the simulator's: the truth the session cannot see)</span>"
                if self.real_cap
                else ""
            )
            + "</span>"
        )
        if self.cap_source == "learned" or self.cap_detail:
            lines.append(
                f"<span class='ck-cap' title='{esc(CAP_HELP)}'>cap: {esc(self.cap_detail or self.cap_source)}</span>"
            )
        if self.notice:
            lines.append(f"<span class='ck-notice' style='color:#8d6e00'>last notice: {esc(self.notice)}</span>")
        self.info.value = "<div style='font-size:12px;line-height:1.6'>" + "<br>".join(lines) + "</div>"


def _snapshot(session: Any) -> dict[str, Any]:
    measure = getattr(session, "measure", None)
    return {
        "size": call_quietly(measure) if callable(measure) else None,
        "cap": call_quietly(lambda: session.payload_cap),
        "window": call_quietly(lambda: session.context_window),
        "source": call_quietly(lambda: session.cap_source),
    }


def _state_of(value: float, red_at: float) -> str:
    return pressure_state(value, red_at=red_at, amber_at=min(AMBER_AT, red_at))


def _cap_detail(event: CapEvent) -> str:
    """One line saying where the cap came from, e.g. for a learned cap after a 413/403."""
    cap = format_size(event.cap_bytes) if event.cap_bytes else "none"
    if event.source == "learned":
        seen = f" after a rejected {format_size(event.rejected_bytes)} request" if event.rejected_bytes else ""
        was = f" (was {format_size(event.previous_bytes)})" if event.previous_bytes else ""
        return f"learned {cap}{seen}{was}"
    if event.source == "assumed":
        seen = f" after a rejected {format_size(event.rejected_bytes)} request" if event.rejected_bytes else ""
        return f"assumed {cap}{seen} (no size hint from the gateway)"
    return f"{event.source} {cap}"
