"""The paper's experiments beyond the MNIST model, and the mistakes the book compares.

* :mod:`~capsnotes.experiments.convnet` — the baseline CNN;
* :mod:`~capsnotes.experiments.multimnist` — two overlapping digits: the pairs, the
  CapsNet and the CNN that read them, their objectives;
* :mod:`~capsnotes.experiments.affine` — affine-warped digits, and how well a model
  reads them;
* :mod:`~capsnotes.experiments.mistakes` — the popular mistakes, written out.
"""
