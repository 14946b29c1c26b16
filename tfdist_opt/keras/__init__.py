"""Keras 3 bound to our strategies: what makes `compile`/`fit` work unchanged.

Each module changes one Keras behaviour, on the instances our strategies
build (a per-instance class swap or method replacement, never a process-wide
patch): `keras_compat` (the fixes, and the multi-worker strategy subclass
they hang on), `keras_steps` (train, test and predict steps, generators),
`xla_steps` (XLA per replica), `multi_step` (`steps_per_execution`),
`model_registry` (the models built under a strategy), `first_batch` (the
batch a model is built from), `global_batch` (batch sizes `fit` refuses),
`absent_inputs` (`None` input components), `compute_loss` and
`metric_logs` (metric values equal to one device's), `log_packing` (logs
reduced in one collective), `scalar_variables` (`int()` of a mirrored
scalar), `remat_calls` (`RematScope` layers called with keyword
arguments), `plain_iterator` (one CPU replica per worker),
`replica_initial_values` (mirrored variables first created inside an XLA
function start from one liftable initial value).
"""
