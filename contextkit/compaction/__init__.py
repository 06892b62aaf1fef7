"""The compaction pipeline: its three phases (trim, summary, truncation) run for a trigger.

* ``compactor`` - ``Compactor``: runs the phases as a sans-IO generator; hooks, undo, counters;
* ``summary_phase`` - the summary phase (mixed into ``Compactor``): segment plan, quality gate,
  identifier ledger, the extractive fallback, back-off;
* ``summarizer`` - the ``Summarizer`` protocol, ``LiteLLMSummarizer`` and a scripted fake;
* ``types`` - value types (``CompactionInfo``, ``CompactionResult``, ``CompactionStats``) and the
  markdown ``WorkbenchWriter``.

The pure history policies each phase applies live in ``contextkit.policy``.
May import: the vocabulary modules, ``failures``, ``policy``.
"""
