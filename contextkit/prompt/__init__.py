"""What the model is shown: the prompt assembler, the per-call trace, the prefix-cache probe.

* ``assembly`` - named blocks with entry conditions, stable to volatile, an assembly log per call;
* ``trace`` - a per-call trace of what the model received (sizes, origins, mechanisms);
* ``prefix`` - the shared prefix of consecutive request bodies (what a provider's cache can reuse).

May import: the vocabulary modules and ``policy``.
"""
