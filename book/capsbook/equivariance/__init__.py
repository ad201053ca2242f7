"""Does a capsule turn with its digit while its length holds? (chapter 9)

Measured on a trained model, for the capsule (or the CNN's features) of each digit's
true class: :mod:`~capsbook.equivariance.measure` moves the digits and reads the model,
:mod:`~capsbook.equivariance.fit` fits on the other digits what predicts each one's
movement, :mod:`~capsbook.equivariance.report` summarizes, compares, prints and draws.
"""
