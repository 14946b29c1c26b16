"""A real SLURM cluster on emulated hosts: one controller, N compute nodes.

Debian's `slurm-wlm` (`slurmctld`, `slurmd`, `sbatch`, `srun`, ...) and
`munge`, unmodified, on the test bed of `benchmarks/testbed_lib.py`:

- host 0 (`tfctl`, 198.18.0.10) runs `slurmctld`; hosts 1..N (`tfn1`,
  `tfn2`, ... at 198.18.0.11, .12, ...) each run one `slurmd`
  (`NodeName=tfnK NodeAddr=198.18.0.1K`), all in partition `debug`.
  Every daemon runs in its own UTS namespace with its node's hostname, so a
  task's `hostname` is its node's name, as on real nodes.
- Names resolve through `/etc/netns/<namespace>/hosts`, which `ip netns exec`
  mounts over `/etc/hosts` inside each host: a task resolves `tfn2` to
  198.18.0.12 as a cluster's DNS would.
- One `munged` (a fresh key) in the root namespace: its socket is a file,
  which every namespace sees (`AuthInfo=socket=...`).
- Config that needs neither systemd nor cgroups: `proctrack/linuxproc`,
  `task/none`, `select/cons_tres`, no accounting, every state, spool, pid and
  log file under one temporary directory, `SlurmUser=root`. Nodes declare 8
  CPUs (`SlurmdParameters=config_overrides`: the machine may have fewer), so
  jobs may ask for `--cpus-per-task=8` as on real nodes. `JobRequeue=0`:
  a batch job goes back in the queue (node failure, `scontrol requeue`)
  only when it asks (`--requeue`), as at sites that set it so.
  `cred_expire=20`: a requeued job waits that long before it starts again
  (SLURM's default is 120 s); starting it sooner (`scontrol update
  StartTime=now`) races the revocation of its previous run's credential
  on the nodes, and the relaunch then fails at once ("Job credential
  revoked": the job ends FAILED, exit 1, no output).

Clients (`sbatch`, `scontrol`, `srun`, ...) run inside the controller's host
(`SlurmCluster.client`) with `SLURM_CONF` pointing at the cluster's config;
jobs inherit it. `close()` stops the daemons (process groups, then anything
left in the namespaces), deletes the namespaces, the `/etc/netns` files and
the temporary directory; the pytest fixture (`tests/slurm/conftest.py`) calls
it even when a test fails, and `atexit` does for a process that exits.

For people: `python -m tests.slurm.cluster [--nodes N]` (as root, from the
repository root) starts a cluster, prints how to submit to it, and stops it
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from tests.hosts import testbed as testbed_lib

PACKAGES = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "munged")
CONTROLLER = "tfctl"
PARTITION = "debug"
NODE_CPUS = 8
CRED_EXPIRE_S = 20
_OPEN: list["SlurmCluster"] = []


def unavailable_reason() -> str | None:
    """Why a SLURM cluster cannot be started here, or None when it can."""
    reason = testbed_lib.unavailable_reason()
    if reason:
        return reason
    missing = [p for p in PACKAGES if shutil.which(p) is None]
    if missing:
        return (
            f"a SLURM cluster needs Debian's slurm-wlm and munge packages "
            f"(`apt-get install slurm-wlm munge`, as root); missing: {', '.join(missing)}"
        )
    if shutil.which("unshare") is None:
        return "a SLURM cluster needs `unshare` (util-linux) for each node's hostname"
    return None


def node_name(k: int) -> str:
    """The k-th compute node's name (k from 1)."""
    return f"tfn{k}"


class SlurmCluster:
    """A controller and `nodes` compute nodes on a fresh test bed.

    Args:
        nodes: int. Compute nodes in partition `debug` (1 to 9).
        slurmd_timeout_s: int. `SlurmdTimeout`: how long before the
            controller marks a silent node DOWN (and requeues its jobs).
        kill_wait_s: int. `KillWait`: the grace between SIGTERM and SIGKILL
            when a job ends (time limit, scancel, requeue).
    """

    def __init__(self, nodes: int = 2, slurmd_timeout_s: int = 60, kill_wait_s: int = 30):
        if not isinstance(nodes, int) or not 1 <= nodes <= 9:
            raise ValueError(
                f"Invalid value for `nodes`: expected an int in [1, 9]. Received: nodes={nodes!r}"
            )
        self.nodes = [node_name(k) for k in range(1, nodes + 1)]
        self.dir = tempfile.mkdtemp(prefix="tfdist-slurm-")
        os.chmod(self.dir, 0o755)  # slurmd runs job scripts from its spool dir
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.bed = None
        self._daemons: list[subprocess.Popen] = []
        self._netns_dirs: list[str] = []
        self._closed = False
        _OPEN.append(self)
        try:
            self.bed = testbed_lib.TestBed(nodes + 1, rate=None)
            self._write_hosts()
            self._write_conf(slurmd_timeout_s, kill_wait_s)
            self._start_munged()
            self._start(0, CONTROLLER, ["slurmctld", "-D", "-i", "-f", self.conf])
            self._wait_for(
                lambda: self.client(["scontrol", "ping"], check=False).returncode == 0,
                60,
                "slurmctld to answer `scontrol ping`",
            )
            for k in range(1, len(self.nodes) + 1):
                self.start_node(k)
            self.wait_nodes_idle(self.nodes)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------- set-up
    def address(self, k: int) -> str:
        """Host k's address (0: the controller, k >= 1: node tfnK)."""
        return self.bed.hosts[k].address

    def _write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost", f"{self.address(0)} {CONTROLLER}"]
        lines += [f"{self.address(k)} {n}" for k, n in enumerate(self.nodes, start=1)]
        for host in self.bed.hosts:
            d = os.path.join("/etc/netns", host.ns)
            os.makedirs(d, exist_ok=True)
            self._netns_dirs.append(d)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")

    def _write_conf(self, slurmd_timeout_s: int, kill_wait_s: int) -> None:
        d = self.dir
        for sub in ["state", "log"] + [f"spool/{n}" for n in self.nodes]:
            os.makedirs(os.path.join(d, sub), mode=0o755, exist_ok=True)
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={self.address(k)} CPUs={NODE_CPUS} RealMemory=4000 "
            "State=UNKNOWN"
            for k, n in enumerate(self.nodes, start=1)
        )
        text = f"""\
ClusterName=tfdist
SlurmctldHost={CONTROLLER}({self.address(0)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket,cred_expire={CRED_EXPIRE_S}
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout={slurmd_timeout_s}
KillWait={kill_wait_s}
MessageTimeout=30
MinJobAge=3600
InactiveLimit=0
JobRequeue=0
{nodes}
PartitionName={PARTITION} Nodes={",".join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as f:
            f.write(text)

    def _start_munged(self) -> None:
        d = self.dir
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        proc = subprocess.Popen(
            [
                "munged", "--foreground", "--force",
                f"--socket={d}/munge.socket", f"--key-file={key}",
                f"--log-file={d}/log/munged.log", f"--pid-file={d}/munged.pid",
                f"--seed-file={d}/munged.seed",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self._daemons.append(proc)
        self._wait_for(lambda: os.path.exists(f"{d}/munge.socket"), 30, "munged's socket")

    def _start(self, host: int, hostname: str, argv: list[str]) -> subprocess.Popen:
        # Not `ip netns exec`: it remounts /sys, hiding /sys/fs/cgroup, and
        # slurmd refuses to start without a cgroup file system even when no
        # cgroup plugin is configured. nsenter keeps the mounts; a private
        # mount namespace gets the host's /etc/hosts bound in.
        ns = self.bed.hosts[host].ns
        hosts = os.path.join("/etc/netns", ns, "hosts")
        script = f'mount --bind {hosts} /etc/hosts && hostname {hostname} && exec "$@"'
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount",
             "sh", "-c", script, "sh", *argv],
            env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=self.dir, start_new_session=True,
        )  # fmt: skip
        self._daemons.append(proc)
        return proc

    def start_node(self, k: int) -> subprocess.Popen:
        """Starts node tfnK's `slurmd` (k from 1), in host k."""
        return self._start(k, node_name(k), ["slurmd", "-D", "-N", node_name(k), "-f", self.conf])

    def kill_node(self, k: int) -> None:
        """SIGKILLs everything in host k: its `slurmd` and every task on it."""
        self.bed.kill_processes(k)

    # ---------------------------------------------------------- clients
    def env(self, extra: dict | None = None) -> dict:
        """An environment for clients and jobs: `SLURM_CONF`, this venv first on PATH."""
        env = testbed_lib.TestBed.env(extra)
        env["SLURM_CONF"] = self.conf
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        return env

    def client(
        self,
        argv: list[str],
        timeout: float = 60,
        check: bool = True,
        cwd: str | None = None,
        env: dict | None = None,
    ) -> subprocess.CompletedProcess:
        """Runs a SLURM client command on the controller's host."""
        p = self.bed.run(0, argv, timeout=timeout, env=env or self.env(), cwd=cwd or self.dir)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stdout}")
        return p

    def sbatch(self, argv: list[str], cwd: str, env: dict | None = None) -> str:
        """Submits a batch job (`sbatch --parsable ARGV` in `cwd`); returns its id."""
        p = self.client(["sbatch", "--parsable", *argv], cwd=cwd, env=env)
        return p.stdout.strip().splitlines()[-1].split(";")[0]

    def job(self, job_id: str) -> dict:
        """`scontrol show job -o ID` as a dict (JobState, ExitCode, Restarts, ...)."""
        out = self.client(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout: float) -> dict:
        """Waits until the job is in one of `states`; returns its fields."""
        found: list[dict] = []

        def check():
            found[:] = [self.job(job_id)]
            return found[0].get("JobState") in states

        self._wait_for(
            check,
            timeout,
            f"job {job_id} to reach {states}",
            lambda: f"; last: {found and found[0]}\n{self.logs()}",
        )
        return found[0]

    def node_states(self) -> dict[str, str]:
        out = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def wait_nodes_idle(self, nodes: list[str], timeout: float = 90) -> None:
        self._wait_for(
            lambda: all(self.node_states().get(n) == "idle" for n in nodes),
            timeout,
            f"nodes {nodes} to be idle",
            lambda: f"; states: {self.node_states()}\n{self.logs()}",
        )

    def logs(self, tail: int = 30) -> str:
        """The last lines of every daemon's log, for failure messages."""
        out = []
        log_dir = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
            with open(os.path.join(log_dir, name), errors="replace") as f:
                lines = f.read().splitlines()[-tail:]
            out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)

    @staticmethod
    def _wait_for(cond, timeout: float, what: str, detail=lambda: "") -> None:
        deadline = time.monotonic() + timeout
        while True:
            if cond():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail()}")
            time.sleep(0.5)

    # ---------------------------------------------------------- cleanup
    def close(self) -> None:
        """Stops every daemon and job, deletes namespaces, /etc/netns files, files."""
        if self._closed:
            return
        self._closed = True
        for proc in reversed(self._daemons):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self._daemons):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        if self.bed is not None:
            self.bed.close()  # SIGKILLs whatever is left in the hosts (slurmstepd, tasks)
        for d in self._netns_dirs:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in _OPEN:
            _OPEN.remove(self)

    def __enter__(self) -> "SlurmCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for cluster in list(_OPEN):
        cluster.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Start a real SLURM cluster on emulated hosts; Ctrl-C stops it."
    )
    parser.add_argument("--nodes", type=int, default=2, help="compute nodes (default: 2)")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"cannot start a SLURM cluster: {reason}", file=sys.stderr)
        return 1
    with SlurmCluster(args.nodes) as cluster:
        ns = cluster.bed.hosts[0].ns
        print(
            f"SLURM cluster up: controller {CONTROLLER} ({cluster.address(0)}), "
            f"nodes {', '.join(cluster.nodes)}; files in {cluster.dir}"
        )
        print("Submit from the controller's host, e.g. from the repository root:")
        print(
            f"  sudo ip netns exec {ns} env SLURM_CONF={cluster.conf} "
            "sbatch docs/examples/slurm_job.sh"
        )
        print(f"  sudo ip netns exec {ns} env SLURM_CONF={cluster.conf} squeue")
        print("Ctrl-C stops the cluster and removes everything it made.", flush=True)
        try:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
