"""host_memory: the malloc policy, and that it stops per-step page faults.

The mechanism is checked by counting minor page faults (not by timing):
freeing and re-allocating a 16 MiB buffer, as each collective step does,
faults every page again under glibc's defaults and almost none once tuned.
Runs in a subprocess so the policy change cannot leak into other tests.
"""

import json
import subprocess
import sys

from tfdist_opt.strategy.devices import host_memory
from tests.multiworker.harness import REPO_ROOT

_PROBE = r"""
import ctypes, json, resource, sys
from tfdist_opt.strategy.devices import host_memory
getattr(host_memory, sys.argv[1])()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
SIZE = 16 << 20
def step():  # allocate, write, free: what each collective does with its buffers
    ptr = libc.malloc(SIZE)
    ctypes.memset(ptr, 1, SIZE)
    libc.free(ptr)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
before = faults()
for _ in range(10):
    step()
print(json.dumps({"faults_per_alloc": (faults() - before) / 10}))
"""


def _faults_per_alloc(policy):
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, policy],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["faults_per_alloc"]


def test_tuning_stops_refaulting_freed_buffers():
    pages = (16 << 20) // 4096
    default = _faults_per_alloc("restore_defaults")
    tuned = _faults_per_alloc("tune_for_collectives")
    assert default > 0.9 * pages, default  # every page faulted again
    assert tuned < 0.05 * pages, tuned  # buffers reused


def test_mallopt_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(host_memory, "_mallopt", lambda: lambda p, v: calls.append((p, v)) or 1)
    assert host_memory.tune_for_collectives()
    assert dict(calls) == {
        host_memory.M_MMAP_THRESHOLD: 32 << 20,
        host_memory.M_TRIM_THRESHOLD: 1 << 30,
    }
    calls.clear()
    assert host_memory.restore_defaults()
    assert dict(calls) == {
        host_memory.M_MMAP_THRESHOLD: 128 << 10,
        host_memory.M_TRIM_THRESHOLD: 128 << 10,
    }


def test_no_glibc_is_a_no_op(monkeypatch):
    monkeypatch.setattr(host_memory, "_mallopt", lambda: None)
    assert host_memory.tune_for_collectives() is False
