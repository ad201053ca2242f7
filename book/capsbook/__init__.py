"""capsbook: the book's helpers, beside the book they draw for.

The figures, diagrams, analyses and notebook displays of the chapters of capsnotes'
book. They read the ``capsnotes`` package and are no part of it: the package is the
paper and its training; this is what the book needs to show them. Installed with
``capsnotes`` (so that a chapter opened in Colab finds it), from ``book/capsbook``.
"""
