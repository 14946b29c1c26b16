"""faults.explain(): one line from TF's collective-failure text."""

from tfdist_opt.coordination import faults

CFG = {
    "cluster": {"worker": ["localhost:5000", "localhost:5001"]},
    "task": {"type": "worker", "index": 0},
}

UNAVAILABLE = """Graph execution error:
Detected at node sgd/CollectiveReduceV2 defined at (most recent call last):
Collective ops is aborted by: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}
The error could be from a previous operation. Restart your program to reset.
	 [[{{node sgd/CollectiveReduceV2}}]] [Op:__inference_multi_step_on_iterator_535]"""


def test_explains_lost_peer():
    assert faults.explain("UnavailableError", UNAVAILABLE, CFG) == (
        "tfdist_opt: training stopped: a peer became unreachable; lost task: "
        "worker:1 (localhost:5001); in collective sgd/CollectiveReduceV2; "
        "cause: Connection reset by peer."
    )


def test_timeout_without_task_names():
    line = faults.explain("DeadlineExceededError", "Collective timed out", None, 30)
    assert line == (
        "tfdist_opt: training stopped: a collective timed out "
        "(collective_timeout_s=30); cause: timed out."
    )
    line = faults.explain("DeadlineExceededError", "Collective timed out", None)
    assert "no collective_timeout_s was set" in line


# What worker 1 printed when worker 0 (the chief) was SIGSTOPped mid-training
# (TF 2.21, no collective_timeout_s): no task named anywhere.
FROZEN_CHIEF = """Graph execution error:
Collective ops is aborted by: Deadline Exceeded

RPC: /tensorflow.CoordinationService/Heartbeat
The error could be from a previous operation. Restart your program to reset.
	 [[{{node CollectiveReduceV2}}]] [Op:__inference_multi_step_on_iterator_527]"""


def test_frozen_chief_names_the_coordination_service_task_not_a_timeout():
    cfg = dict(CFG, task={"type": "worker", "index": 1})
    line = faults.explain("DeadlineExceededError", FROZEN_CHIEF, cfg)
    assert line.startswith(
        "tfdist_opt: training stopped: the coordination service stopped "
        "answering (its heartbeat timed out): worker:0 (localhost:5000), which "
        "hosts it, is frozen"
    ), line
    assert "collective_timeout_s" not in line
    chief_cfg = {
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1"]},
        "task": {"type": "worker", "index": 0},
    }
    assert "chief:0 (h0:1), which hosts it" in faults.explain(
        "DeadlineExceededError", FROZEN_CHIEF, chief_cfg
    )


def test_other_errors_untouched():
    assert faults.explain("ValueError", UNAVAILABLE, CFG) is None
