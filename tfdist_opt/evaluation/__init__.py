"""Side-car evaluation: the `evaluator` task of TF_CONFIG.

`checkpoints` (pure) decides which checkpoints are new and complete, `loop`
(pure) runs the evaluation loop and learns when training has ended, and
`sidecar` holds `SidecarEvaluator`, the Keras binding
(`tfdist_opt.SidecarEvaluator`). Importing this package does not import
TensorFlow.
"""
