"""Reading a refusal: what a provider's or a gateway's error says, and what kind of failure it is.

* ``phrases`` - the wording tables (overflow, gateway pages, WAF pages, rate limits ...): add a
  provider's or a middlebox's wording here;
* ``reading`` - what an exception says, gathered over its cause chain (texts, status, headers, the
  annotated request size); decides nothing;
* ``classify`` - ``classify_failure`` -> ``Failure(kind, reason, ...)``.

May import: the vocabulary modules at the package root. Never imports litellm.
"""
