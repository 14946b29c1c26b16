"""Gradient stages: the interface users write, the built-ins, their composition.

Pure: `stage` (`GradientStage`, `Bucket`), `builtin_stages` (`Accumulate`,
`Cast`, `Pack`, `AllReduce`, `PowerSGD`, `ZeRO`: what the `StrategyConfig`
strings stand for), `combine` (`chain(*stages)` and the combination rules).
TensorFlow binding: `chain_binding` (runs a chain in a hooked optimizer).
"""
