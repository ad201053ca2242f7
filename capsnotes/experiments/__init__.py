"""The paper's experiments beyond the MNIST model: the baseline CNN (``convnet``), two
overlapping digits (``multimnist``) and affine-warped digits (``affine``); and the
popular mistakes the book compares, written out (``mistakes``).
"""
