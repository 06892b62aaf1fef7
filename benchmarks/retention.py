"""Identifier retention of summaries, with and without the identifier ledger.

Run: ``.venv/bin/python benchmarks/retention.py [--segments 8] [--no-llama]``

A fixed corpus of generated coding-agent segments (``contextkit.sim.corpus.agent_segment``) whose
paths, commands, numbers, ports, ids, error codes and names are known in advance. Each segment is
compacted by the real ``Compactor`` (the summary stage forced), once with the simulator's summarizer (through
litellm over HTTP) and, when ``scripts/test.sh`` installed it, once with SmolLM2-135M-Instruct behind
llama-cpp-python's server. Retention is the share of the planted identifiers found verbatim:

* without the ledger: in the model's own prose (its first answer);
* with the ledger: in the summary contextkit applied (prose + ledger, or the extractive fallback).

Bar: >= 95% for paths, commands and numbers with the ledger, for both summarizers. Anchor: a
published study of agent summaries kept 9.8% of paths, 0.2% of commands and 1.9% of numbers.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field

from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.summarizer import LiteLLMSummarizer, SummaryRequest, SummaryResponse
from contextkit.messages import Message
from contextkit.settings import Limits
from contextkit.sim import GatewaySimulator
from contextkit.sim import llama as llama_mod
from contextkit.sim.corpus import CLASSES, agent_segment
from contextkit.sizing import request_bytes

BAR_CLASSES = ("paths", "commands", "numbers")
BAR = 0.95
ANCHOR = {"paths": 0.098, "commands": 0.002, "numbers": 0.019}


class Recording:
    def __init__(self, inner: LiteLLMSummarizer) -> None:
        self.inner = inner
        self.answers: list[str] = []

    def summarize(self, request: SummaryRequest) -> SummaryResponse:
        response = self.inner.summarize(request)
        self.answers.append(response.text)
        return response

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
        return self.summarize(request)


@dataclass
class Tally:
    wanted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    prose: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ledger: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sources: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: int = 0

    def share(self, kept: dict[str, int], cls: str) -> float:
        return kept[cls] / self.wanted[cls] if self.wanted[cls] else 1.0


def measure(name: str, kwargs: dict[str, str], seeds: range, window: int | None) -> Tally:
    tally = Tally()
    for seed in seeds:
        messages, planted = agent_segment(seed)
        history = [Message.system("You are a coding agent."), *messages, Message.user("What next?")]
        model = kwargs["model"]
        rest = {k: v for k, v in kwargs.items() if k != "model"}
        summarizer = Recording(LiteLLMSummarizer(model, timeout=900, **rest))
        compactor = Compactor(archive=Archive.in_memory(), limits=Limits(min_keep_recent=1, summary_timeout=900))
        # manual: the summary stage runs whatever the size, and nothing after it cuts the summary being measured
        result = compactor.compact(history, summarizer=summarizer, trigger="manual", budget=10**6,
                                   measure=request_bytes, summarizer_window=window)  # fmt: skip
        summary = next(m.content for m in result.history if m.is_summary)
        prose = summarizer.answers[0] if summarizer.answers else ""
        tally.calls += len(summarizer.answers)
        tally.sources[result.summary_source or "none"] += 1
        for cls, value in planted.items():
            tally.wanted[cls] += 1
            tally.prose[cls] += value in prose
            tally.ledger[cls] += value in summary
        print(f"  {name} segment {seed}: {result.summary_source}, {len(summarizer.answers)} call(s)", flush=True)
    return tally


def report(name: str, tally: Tally) -> bool:
    print(f"\n{name}: {sum(tally.sources.values())} segments, {tally.calls} summarizer calls, applied summaries: "
          + ", ".join(f"{k} {v}" for k, v in sorted(tally.sources.items())))  # fmt: skip
    print(f"  {'class':<10} {'identifiers':>11} {'without ledger':>15} {'with ledger':>12} {'anchor':>8}")
    ok = True
    for cls in CLASSES:
        without, with_ = tally.share(tally.prose, cls), tally.share(tally.ledger, cls)
        anchor = f"{ANCHOR[cls]:.1%}" if cls in ANCHOR else ""
        flag = ""
        if cls in BAR_CLASSES:
            flag = "  ok" if with_ >= BAR else "  BELOW BAR"
            ok = ok and with_ >= BAR
        print(f"  {cls:<10} {tally.wanted[cls]:>11} {without:>15.1%} {with_:>12.1%} {anchor:>8}{flag}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--no-llama", action="store_true", help="only the simulator's summarizer")
    args = parser.parse_args(argv)
    seeds = range(args.segments)
    results = []
    with GatewaySimulator() as gw:
        results.append(("simulator (extractive)", measure("simulator", gw.litellm_kwargs(), seeds, None)))
    if args.no_llama or not llama_mod.available():
        print("\nSmolLM2 skipped: " + ("--no-llama" if args.no_llama else "llama.cpp server not installed "
                                        "(bash scripts/test.sh installs it)"))  # fmt: skip
    else:
        with llama_mod.LlamaServer(n_ctx=4096) as server:
            results.append(("SmolLM2-135M (llama.cpp)", measure("smollm2", server.litellm_kwargs(), seeds, 4096)))
    print(f"\nbar: >= {BAR:.0%} of {', '.join(BAR_CLASSES)} with the ledger, every summarizer")
    verdicts = [report(name, tally) for name, tally in results]  # every table printed, then the verdict
    ok = all(verdicts)
    print("\nBAR MET" if ok else "\nBAR NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    from contextkit import offline

    offline()  # a benchmark owns its process: litellm's bundled cost map and tokenizers, no network
    raise SystemExit(main())
