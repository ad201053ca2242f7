"""Training: what a run is, how it steps, trains, is scored, saved and shipped.

* :mod:`~capsnotes.training.config` — :class:`TrainConfig`, the models a run can name,
  and the profiles;
* :mod:`~capsnotes.training.step` — one training step, the training math's one home;
* :mod:`~capsnotes.training.train` — the trainer, for every model the book trains;
* :mod:`~capsnotes.training.evaluation` — scoring a model on a test set;
* :mod:`~capsnotes.training.checkpoint` — checkpoints as safetensors files;
* :mod:`~capsnotes.training.pretrained` — the trained models shipped in ``weights/``;
* :mod:`~capsnotes.training.cli` — the command line, ``python -m capsnotes``.
"""
