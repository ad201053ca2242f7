"""Does a capsule turn with its digit while its length holds? (chapter 9)

Chapter 1 says a capsule's length is the probability that its entity is present, the
same wherever the entity sits (*invariant*), while its direction is the entity's pose
and turns when the entity moves (*equivariant*). This package measures that on a trained
model, for the capsule (or the CNN's features) of each digit's true class:
:mod:`~capsbook.equivariance.measure` moves the digits and reads the model,
:mod:`~capsbook.equivariance.fit` fits on the other digits what predicts each one's
movement, :mod:`~capsbook.equivariance.report` summarizes, compares, prints and draws.

::

    steps = transformations(shifts=(-3, -2, -1, 1, 2, 3), angles=(-30, 30))
    before, after = measure(model, images, labels, steps)  # after: one per step
    table = summarize(before, after)  # medians per step: score, angle, ...
"""
