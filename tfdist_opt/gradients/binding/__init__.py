"""The gradient path bound to Keras 3 optimizers.

`keras_binding` (binds a strategy's options to the optimizers created in
its scope), `hooks` (the per-optimizer subclass whose gradient step calls
the chain), `fused_updates` (SGD and Adam as one fused kernel per
variable), `replica_slots` (saving optimizer variables that differ per
replica). The Keras internals the hooks rely on are checked in
`tfdist_opt.seam.upstream`, with every other private name.
"""
