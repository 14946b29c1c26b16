"""The one seam between tfdist_opt and TF/Keras internals.

`manifest` lists every private TF/Keras name the package uses, with its
upstream reason (joining the area modules `entries_*`); `access` holds the
only `keras.src` / `tensorflow.python` imports, one function per use;
`upstream` checks the private Keras methods the optimizer hooks override
(their signatures) before a strategy uses them. The rest of the package imports neither:
it sees public Keras and TF plus `tfdist_opt.private_api`, which
re-exports both (tests/test_private_api.py checks all three rules).
"""
