"""The standard-library-only display pieces the core uses: ``_repr_html_`` tables and the
notebook status sink. The live widgets (``contextkit.widgets``) build on them.

May import: the vocabulary modules only.
"""
