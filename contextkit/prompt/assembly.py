"""Prompt assembly from named blocks.

A prompt is built from *blocks*: the persona, the tool rules, a project memory file, the running
conversation, today's date, a retrieved snippet. Each block answers one question before it
enters: **when does it NOT enter?** (``skip_when``). Blocks are laid out by an explicit
*stability rank*, most stable first, so everything that does not change between calls forms a
byte-identical prefix that a provider's prompt cache can reuse; volatile blocks go last.

::

    from contextkit.prompt.assembly import Assembler, Block

    asm = Assembler([
        Block("persona", "You are a careful coding agent.", stability=0),
        Block("memory", lambda ctx: ctx["notes"], stability=1, skip_when=lambda ctx: not ctx.get("notes") and "no notes"),
        Block("history", lambda ctx: ctx["history"], stability=5),
        Block("clock", lambda ctx: f"Now: {ctx['now']}", stability=9, role="user"),
    ])
    result = asm.assemble(notes="", history=[...], now="10:02")
    result.messages        # list[Message] in stable -> volatile order
    print(result.log)      # which blocks entered, which were skipped and why, tokens each

Pure: no IO, no clock. Tokens come from ``contextkit.sizing.text_tokens`` (offline tiktoken).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.errors import ConfigError
from contextkit.markers import ArchiveSink
from contextkit.messages import Message, from_wire, to_wire
from contextkit.policy.aging import aged_stub
from contextkit.sizing import dumps, message_bytes, text_tokens

__all__ = ["Assembler", "Assembly", "AssemblyLog", "Block", "BlockLog"]

Context = Mapping[str, Any]
Rendered = str | Message | Mapping[str, Any] | Sequence[Message | Mapping[str, Any]] | None
_ROLES = ("system", "user", "assistant")
MIN_INSTRUCTION_TOKENS = 16  # below this an instruction says too little: skip it rather than cut it


@dataclass(frozen=True)
class Block:
    """One named piece of a prompt.

    ``render``: a string, or ``callable(ctx)`` returning a string (one message of ``role``), a
    ``Message``/dict, or a list of them (e.g. the conversation history); ``None``/``""`` means
    "nothing to add" and the block is skipped.
    ``stability``: lower is more stable and goes first (0 = never changes).
    ``skip_when(ctx)``: the entry condition, asked the way it matters — *when does this block NOT
    enter?* Return a reason string (or ``True``) to skip, a falsy value to let it in.
    ``enter_when(ctx)``: the positive form, for convenience; ``False`` skips with reason
    ``"enter_when is false"``. ``max_tokens``: a text block longer than this is cut (and logged).
    ``instruction``: an injected instruction or skill body; such blocks share the assembler's
    ``instruction_budget``. ``age_out_after``: after entering this many calls with the same text,
    the block enters as a one-line stub whose original is in the assembler's ``archive`` (recallable).
    """

    name: str
    render: str | Callable[[Context], Rendered]
    stability: int = 0
    role: str = "system"
    skip_when: Callable[[Context], bool | str | None] | None = None
    enter_when: Callable[[Context], bool] | None = None
    max_tokens: int | None = None
    description: str = ""
    instruction: bool = False
    age_out_after: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError("a Block needs a non-empty name, e.g. Block('persona', 'You are ...')")
        if self.role not in _ROLES:
            raise ConfigError(f"Block {self.name!r}: role must be one of {', '.join(_ROLES)}, got {self.role!r}")
        if isinstance(self.stability, bool) or not isinstance(self.stability, int):
            raise ConfigError(f"Block {self.name!r}: stability must be an int rank (0 = most stable)")
        if not (isinstance(self.render, str) or callable(self.render)):
            raise ConfigError(f"Block {self.name!r}: render must be a string or a callable(ctx)")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise ConfigError(f"Block {self.name!r}: max_tokens must be a positive int or None")
        if self.age_out_after is not None and (not isinstance(self.age_out_after, int) or self.age_out_after < 1):
            raise ConfigError(f"Block {self.name!r}: age_out_after must be a positive number of calls or None")

    def skip_reason(self, ctx: Context) -> str | None:
        """Why this block does not enter for ``ctx`` (``None``: it enters)."""
        if self.skip_when is not None:
            verdict = self.skip_when(ctx)
            if verdict:
                return verdict if isinstance(verdict, str) else "skip_when is true"
        if self.enter_when is not None and not self.enter_when(ctx):
            return "enter_when is false"
        return None


@dataclass(frozen=True)
class BlockLog:
    """One line of the assembly log."""

    name: str
    stability: int
    role: str
    entered: bool
    reason: str = ""  # why it was skipped (or how it was changed, e.g. "cut to 200 tokens")
    messages: int = 0
    tokens: int = 0
    bytes: int = 0
    first_message: int | None = None  # index in the assembled messages

    def to_dict(self) -> dict[str, Any]:
        return {
            "block": self.name,
            "stability": self.stability,
            "role": self.role,
            "entered": self.entered,
            "reason": self.reason,
            "messages": self.messages,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "first_message": self.first_message,
        }


@dataclass(frozen=True)
class AssemblyLog:
    """The log of one ``assemble`` call: every block, in layout order, entered or not."""

    entries: tuple[BlockLog, ...]
    call: int = 0
    block_of_message: tuple[tuple[str, ...], ...] = ()  # for each message, the blocks it carries

    @property
    def entered(self) -> list[str]:
        return [e.name for e in self.entries if e.entered]

    @property
    def skipped(self) -> dict[str, str]:
        return {e.name: e.reason for e in self.entries if not e.entered}

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.entries)

    def tokens_by_block(self) -> dict[str, int]:
        return {e.name: e.tokens for e in self.entries if e.entered}

    def to_dicts(self) -> list[dict[str, Any]]:
        return [{"call": self.call, **e.to_dict()} for e in self.entries]

    def __str__(self) -> str:
        rows = [("block", "rank", "role", "entered", "tokens", "bytes", "note")]
        for e in self.entries:
            rows.append(
                (e.name, str(e.stability), e.role, "yes" if e.entered else "no", str(e.tokens), str(e.bytes), e.reason)
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                c.ljust(w) if i in (0, 2, 3, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(
            f"call {self.call}: {len(self.entered)} of {len(self.entries)} blocks entered, {self.tokens} tokens"
        )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        head = "".join(f"<th>{h}</th>" for h in ("block", "rank", "role", "entered", "tokens", "bytes", "note"))
        body = "".join(
            "<tr{style}><td>{n}</td><td>{s}</td><td>{r}</td><td>{e}</td><td>{t}</td><td>{b}</td><td>{why}</td></tr>".format(
                style="" if e.entered else " style='color:#888'",
                n=escape(e.name),
                s=e.stability,
                r=e.role,
                e="yes" if e.entered else "no",
                t=e.tokens,
                b=e.bytes,
                why=escape(e.reason),
            )
            for e in self.entries
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><p>{escape(str(self).splitlines()[-1])}</p>"


@dataclass(frozen=True)
class Assembly:
    """The result of one ``assemble`` call: the messages and their log."""

    messages: list[Message]
    log: AssemblyLog

    def wire(self) -> list[dict[str, Any]]:
        """The messages as litellm/OpenAI dicts."""
        return [to_wire(m) for m in self.messages]


@dataclass
class Assembler:
    """Lays blocks out stable → volatile and keeps one ``AssemblyLog`` per call in ``logs``.

    Consecutive text blocks of role ``system`` are merged into one system message (joined by a
    blank line) when ``merge_system`` is true: one system message is what most providers expect,
    and the merged text is still byte-stable as long as its blocks are.

    Floor shrinkers: ``instruction_budget`` bounds the tokens all ``instruction=True`` blocks take
    together (in layout order: a block that does not fit is cut to what is left, or skipped when
    less than ``MIN_INSTRUCTION_TOKENS`` is left); blocks with ``age_out_after`` need an ``archive``
    (any ``ArchiveSink``, e.g. the session's) to keep their originals once they age into stubs.
    """

    blocks: Sequence[Block]
    model: str = ""
    merge_system: bool = True
    separator: str = "\n\n"
    logs: list[AssemblyLog] = field(default_factory=list)
    instruction_budget: int | None = None
    archive: ArchiveSink | None = None
    _ages: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.blocks = list(self.blocks)
        for b in self.blocks:
            if not isinstance(b, Block):
                raise ConfigError(f"Assembler takes Block values, got {type(b).__name__}")
        names = [b.name for b in self.blocks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"block names must be unique; repeated: {', '.join(dup)}")
        aging = [b.name for b in self.blocks if b.age_out_after is not None]
        if aging and self.archive is None:
            raise ConfigError(
                f"blocks {', '.join(aging)} age out into recallable stubs: pass Assembler(..., archive=...) "
                "(e.g. the session's archive) to keep their originals"
            )
        if self.instruction_budget is not None and (
            not isinstance(self.instruction_budget, int) or self.instruction_budget < 0
        ):
            raise ConfigError(f"instruction_budget must be a number of tokens >= 0 or None, got {self.instruction_budget!r}")

    @property
    def layout(self) -> list[Block]:
        """Blocks in the order they are laid out: by stability rank, then declaration order."""
        return sorted(self.blocks, key=lambda b: b.stability)  # sorted() is stable

    def assemble(self, ctx: Context | None = None, /, **values: Any) -> Assembly:
        """Build the messages for one call; ``ctx`` and keyword values are what blocks read."""
        context: dict[str, Any] = {**(ctx or {}), **values}
        messages: list[Message] = []
        owners: list[list[str]] = []
        entries: list[BlockLog] = []
        merge_open = False  # the last message is a merged system message that may take more text
        left = self.instruction_budget  # instruction tokens still allowed in this call
        for block in self.layout:
            reason = block.skip_reason(context)
            if reason is not None:
                entries.append(BlockLog(block.name, block.stability, block.role, False, reason))
                continue
            rendered = block.render if isinstance(block.render, str) else block.render(context)
            shaped = ""
            if isinstance(rendered, str) and rendered:
                rendered, shaped = self._age(block, rendered)
                if block.instruction and left is not None:
                    rendered, shaped, left = self._budget(block, rendered, shaped, left)
                    if rendered is None:
                        entries.append(BlockLog(block.name, block.stability, block.role, False, shaped))
                        continue
            produced, note = self._messages(block, rendered)
            note = "; ".join(n for n in (shaped, note) if n)
            if not produced:
                entries.append(BlockLog(block.name, block.stability, block.role, False, "rendered empty"))
                continue
            tokens = sum(_tokens(m, self.model) for m in produced)
            size = sum(message_bytes(m) for m in produced)
            text_block = isinstance(rendered, str)
            if self.merge_system and text_block and block.role == "system" and merge_open:
                last = messages[-1]
                messages[-1] = last.with_content(last.content + self.separator + produced[0].content)
                owners[-1].append(block.name)
                # what the merge added to the body: the separator and the text, JSON-escaped
                size = len(dumps(self.separator + produced[0].content).encode("utf-8", "surrogatepass")) - 2
                entries.append(
                    BlockLog(block.name, block.stability, block.role, True, note, 0, tokens, size, len(messages) - 1)
                )
                continue
            role = block.role if text_block else "/".join(dict.fromkeys(m.role for m in produced))
            entries.append(
                BlockLog(block.name, block.stability, role, True, note, len(produced), tokens, size, len(messages))
            )
            messages.extend(produced)
            owners.extend([block.name] for _ in produced)
            merge_open = self.merge_system and text_block and block.role == "system"
        log = AssemblyLog(tuple(entries), call=len(self.logs) + 1, block_of_message=tuple(tuple(o) for o in owners))
        self.logs.append(log)
        return Assembly(messages, log)

    def _age(self, block: Block, text: str) -> tuple[str, str]:
        """The block's text, or its stub once it entered ``age_out_after`` calls unchanged."""
        if block.age_out_after is None or self.archive is None:
            return text, ""
        seen, count = self._ages.get(block.name, ("", 0))
        count = count + 1 if seen == text else 1
        self._ages[block.name] = (text, count)
        if count <= block.age_out_after:
            return text, ""
        stub = aged_stub(
            text, label=block.name, after=block.age_out_after, unit="calls" if block.age_out_after > 1 else "call",
            archive=self.archive, kind="block", origin={"block": block.name},
        )  # fmt: skip
        if stub is None:  # the archive refused: the block stays whole rather than lose its text
            return text, ""
        return stub, f"aged out after {block.age_out_after} calls (original archived)"

    def _budget(self, block: Block, text: str, note: str, left: int) -> tuple[str | None, str, int]:
        """(text cut to the instruction tokens ``left``, or None to skip; the note; what is left after)."""
        tokens = text_tokens(text, self.model)
        if tokens <= left:
            return text, note, left - tokens
        budget = self.instruction_budget
        if left < MIN_INSTRUCTION_TOKENS:
            return None, f"over the instruction budget ({budget} tokens)", left
        from contextkit.sizing import truncate_to_tokens

        cut = truncate_to_tokens(text, left, self.model)
        return cut, "; ".join(n for n in (note, f"cut to {left} tokens (instruction budget {budget})") if n), 0

    def _messages(self, block: Block, rendered: Rendered) -> tuple[list[Message], str]:
        if rendered is None:
            return [], ""
        if isinstance(rendered, str):
            if not rendered:
                return [], ""
            text, note = rendered, ""
            if block.max_tokens is not None and text_tokens(text, self.model) > block.max_tokens:
                from contextkit.sizing import truncate_to_tokens

                text = truncate_to_tokens(text, block.max_tokens, self.model)
                note = f"cut to {block.max_tokens} tokens"
            return [Message(block.role, text)], note  # type: ignore[arg-type]
        items: Iterable[Any] = [rendered] if isinstance(rendered, Message | Mapping) else rendered
        try:
            return [from_wire(m, index=i) for i, m in enumerate(items)], ""
        except TypeError:
            raise ConfigError(
                f"Block {block.name!r} rendered {type(rendered).__name__}; return a str, a Message/dict or a list of them"
            ) from None


def _tokens(message: Message, model: str) -> int:
    return text_tokens(message.content, model) + sum(
        text_tokens(c.name, model) + text_tokens(c.arguments, model) for c in message.tool_calls
    )
