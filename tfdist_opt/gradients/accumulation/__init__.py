"""Gradient accumulation: k micro-batches per optimizer step.

Pure: `contract` (the batch contract: micro x k x replicas).
Bound to TensorFlow and Keras: `accumulation` (local sums, one all-reduce per k) and
`fit_length` (`grad_accum` against the length of a Keras `fit`).
"""
