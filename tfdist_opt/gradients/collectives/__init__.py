"""The collective layer and the policies it follows.

Pure: `packing` (bucket policy), `piece_plan` (equal pieces for streamed
collectives), `precision` (what compression touches and its error bound).
TensorFlow binding: `collectives` (every all-reduce, reduce-scatter and
all-gather the gradient path issues, in the replica and the cross-replica
context, with one wire dtype and one packing or streaming policy).
"""
