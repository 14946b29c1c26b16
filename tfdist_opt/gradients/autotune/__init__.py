"""Measured choices: pack sizes and `compression="auto"`.

Pure: `auto_compression` (which compression pays on this link).
TensorFlow binding: `timing` (time a collective, agree across workers),
`autotune` (pack-size search on the real shapes), `auto_fit` (time the
first steps of a `fit`, pick, apply).
"""
