"""Training: what a run is (``config``), how it steps (``step``), trains (``train``), is
scored (``evaluation``), saved (``checkpoint``) and shipped (``pretrained``), and the
command line, ``python -m capsnotes`` (``cli``).
"""
