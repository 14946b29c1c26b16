"""Manifest entries of the tools around training: benchmark binaries and Ray.

Part of the manifest (`tfdist_opt.seam.manifest.ENTRIES` joins the areas);
the reasons and checks are described there.
"""

from __future__ import annotations

from tfdist_opt.seam.private_name import PrivateName

ENTRIES: tuple[PrivateName, ...] = (
    # ------------------------------------------------ benchmarks/ binaries
    PrivateName(
        "tensorflow.python.eager.context.context()",
        "_config",
        "benchmarks.allreduce_transport",
        "ConfigProto.rpc_options (num_channels_per_target) of the "
        "ServerDef MultiWorkerMirroredStrategy builds from "
        "context.context().config; TF has no public setter for it",
    ),
    PrivateName(
        "tensorflow.tsl.profiler.protobuf.xplane_pb2",
        "XSpace",
        "benchmarks.train_lib.overlap",
        "reads the TF profiler's trace (overlap_fraction); the proto "
        "module is not exported under tf.*",
    ),
    # ---------------------------------------------------------------- Ray
    PrivateName(
        "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator."
        "_AutoscalingCoordinatorActor",
        "get_reserved_resources",
        "tfdist_opt.launch.ray_elastic",
        "the detached actor `AutoscalingCoordinator` Ray Train V2's elastic "
        "policy sizes groups from re-reads the nodes every 20 s; "
        "`recompute=True` after a lost node restarts at the size alive now "
        "instead of the old size (then a 60 s start timeout). Ray has no "
        "public refresh (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.callback",
        "ControllerCallback.before_controller_execute_failure_decision",
        "tfdist_opt.launch.ray_elastic",
        "the controller hook run before a failed group is restarted "
        "(a DeveloperAPI kept under _internal): after a lost node the "
        "restart waits there until Ray declares the node dead, so it "
        "is sized from the nodes left (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.failure_handling",
        "FailureDecision.RETRY",
        "tfdist_opt.launch.ray_elastic",
        "the decision the hook above receives; compared by name, `RETRY` (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.controller.state",
        "RunningState",
        "tfdist_opt.launch.ray_elastic",
        "the state a running group is in, compared by class name in "
        "`after_controller_state_update` (a DeveloperAPI hook): the "
        "elastic view is refreshed only while a group runs "
        "(ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.util",
        "TrainingFramework.TENSORFLOW",
        "tfdist_opt.launch.ray_backend",
        "the `framework` Ray's own TensorflowConfig reports (run state, "
        "dashboard); deriving from that config instead would import "
        "TensorFlow (`ray.train.tensorflow`'s package __init__) in the "
        "launcher and in Ray's train controller (ray[train] 2.60)",
    ),
)
