"""Cluster description: TF_CONFIG build/validate, cluster sources, ports.

Pure Python: nothing here imports TensorFlow. What the cluster is (its
tasks, their addresses, where they come from: host lists, hostfiles,
SLURM, Kubernetes) lives here; running it is `tfdist_opt.launch`, and what
a task does beside TensorFlow to coordinate with its peers is
`tfdist_opt.coordination`. This is the lowest of the three layers: it
imports neither.
"""

from tfdist_opt.cluster.ports import LaunchError
from tfdist_opt.cluster.ports import PortInUseError
from tfdist_opt.cluster.ports import check_own_port
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
    "LaunchError",
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
    "slurm_cluster",
    "statefulset_cluster",
    "tf_config_from_env",
    "tf_config_from_file",
    "validate_tf_config",
]
