"""Cluster description: TF_CONFIG build/validate, cluster sources, launcher.

Pure Python: nothing here imports TensorFlow (the launcher runs TF only in
its child processes).

The launcher contract (`tfdist-opt launch`): given N (or MIN:MAX) workers
and a command, place them, hand each its TF_CONFIG, stream `[worker i]`
output, return one exit code (`LaunchResult`), restart the whole group up
to R times, leave nothing running. Two backends keep it:
`launcher.run_local` (local process groups) and `ray_launch.run_ray` (Ray
Train workers, `--ray`; imports Ray, so it is not imported here). SLURM and
Kubernetes (`slurm`, `k8s`) stay generators.
"""

from tfdist_opt.cluster.launcher import LaunchResult
from tfdist_opt.cluster.launcher import PortInUseError
from tfdist_opt.cluster.launcher import check_own_port
from tfdist_opt.cluster.launcher import run_local
from tfdist_opt.cluster.sources import expand_nodelist
from tfdist_opt.cluster.sources import parse_host_list
from tfdist_opt.cluster.sources import parse_hostfile
from tfdist_opt.cluster.sources import slurm_cluster
from tfdist_opt.cluster.sources import statefulset_cluster
from tfdist_opt.cluster.tf_config import TFConfigError
from tfdist_opt.cluster.tf_config import apply_tf_config
from tfdist_opt.cluster.tf_config import build_all_tf_configs
from tfdist_opt.cluster.tf_config import build_tf_config
from tfdist_opt.cluster.tf_config import parse_tf_config
from tfdist_opt.cluster.tf_config import tf_config_from_env
from tfdist_opt.cluster.tf_config import tf_config_from_file
from tfdist_opt.cluster.tf_config import validate_tf_config

__all__ = [
    "LaunchResult",
    "PortInUseError",
    "TFConfigError",
    "apply_tf_config",
    "build_all_tf_configs",
    "build_tf_config",
    "check_own_port",
    "expand_nodelist",
    "parse_host_list",
    "parse_hostfile",
    "parse_tf_config",
    "run_local",
    "slurm_cluster",
    "statefulset_cluster",
    "tf_config_from_env",
    "tf_config_from_file",
    "validate_tf_config",
]
