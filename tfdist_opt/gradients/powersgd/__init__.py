"""PowerSGD low-rank gradient compression.

Pure: `powersgd` (which matrices it compresses, bytes per step).
TensorFlow binding: `lowrank` (the stage: state variables, the
replica-context entry, the cross-replica factor step) and `factor_ops`
(its dense kernels).
"""
