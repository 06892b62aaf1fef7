"""The answer of one model round, built across continuations (``Answer``, a part of the turn flow).

Parts cut at ``max_tokens`` or by a failed stream are continued, never restarted; an interrupted
answer the provider refuses to continue is voided and asked for again from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contextkit.engine.effects import StreamNote
from contextkit.failures.classify import Failure
from contextkit.limits.context import Flow, FlowContext
from contextkit.limits.state import INTERRUPTED
from contextkit.messages import Message


@dataclass
class Answer:
    """The current model round's text, built across continuations.

    ``parts`` are pieces already received (cut at ``max_tokens``, or delivered by a stream before
    it failed); each sits in the history as an assistant message followed by a continuation
    prompt (``partials``) until the round ends, when they are folded into one message. ``voided``
    is text a stream reader saw that could not be continued, with its marker line.
    """

    parts: list[str] = field(default_factory=list)
    partials: list[Message] = field(default_factory=list)
    voided: str = ""
    interrupted: str = ""  # why the last part was cut by a failure ("" when it was not)
    voids: int = 0

    def keep(self, ctx: FlowContext, text: str, prompt: str) -> None:
        st = ctx.state
        self.parts.append(text)
        # Verbatim: a recovery must not shorten the text the model is asked to continue.
        pair = [
            Message.assistant(text, turn=st.turn, preserve_verbatim=True),
            Message.user(prompt, preserve_verbatim=True, synthetic=True),
        ]
        self.partials += pair
        st.history = [*st.history, *pair]

    def resume(self, ctx: FlowContext, partial: str, reason: str, level: int, stream: bool) -> Flow:
        """After a failed request: continue from the text it delivered, or retry from the start."""
        if partial:
            self.keep(ctx, partial, INTERRUPTED)
            self.interrupted = reason
        if stream:
            # "continuation": the next request resumes from text already shown; "retry": from the start
            yield StreamNote("continuation" if self.parts else "retry", reason=reason, level=level)

    def void(self, ctx: FlowContext, failure: Failure, stream: bool) -> Flow:
        """The provider refused to continue an interrupted answer: drop its parts, ask again from the start."""
        text = "".join(self.parts)
        line = (
            f"\n\n[contextkit: the answer above was interrupted ({self.interrupted}) and the provider refused to "
            f"continue it ({failure.reason}); it is void - the answer starts again below]\n\n"
        )
        ctx.notify("voided", line.strip(), "warning")
        self.voided += text + line
        self.voids += 1
        self.parts, self.interrupted = [], ""
        self._fold(ctx)
        if stream:
            yield StreamNote("voided", text, reason=failure.reason, show=line)

    def finish(self, ctx: FlowContext, content: str) -> tuple[str, str]:
        """End the round: (the text a reader saw, the text the history keeps)."""
        kept = "".join(self.parts) + content
        shown = self.voided + kept
        self._fold(ctx)
        self.parts, self.voided, self.interrupted = [], "", ""
        return shown, kept

    def _fold(self, ctx: FlowContext) -> None:
        if self.partials:
            # By identity, not position: a recovery in between may have added a notice after them.
            folded = {id(m) for m in self.partials}
            ctx.state.history = [m for m in ctx.state.history if id(m) not in folded]
            self.partials = []
