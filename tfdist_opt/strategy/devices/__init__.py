"""The devices a strategy runs on, and how one host's resources are shared.

`cpu_split` (a host's CPUs split between the training tasks on it),
`host_memory` (glibc malloc settings for collective receive buffers),
`virtual_replicas` (a replica count that stays fixed when the worker count
changes), `worker_cpu_replicas` (several CPU replicas per worker under
`MultiWorkerMirroredStrategy`).
"""
