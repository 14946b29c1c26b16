"""faults.explain(): one line from TF's collective-failure text."""

from tfdist_opt.cluster import faults

CFG = {"cluster": {"worker": ["localhost:5000", "localhost:5001"]},
       "task": {"type": "worker", "index": 0}}

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
        "cause: Connection reset by peer.")


def test_timeout_without_task_names():
    line = faults.explain("DeadlineExceededError", "Collective timed out", None)
    assert line == ("tfdist_opt: training stopped: a collective timed out "
                    "(collective_timeout_s); cause: timed out.")


def test_other_errors_untouched():
    assert faults.explain("ValueError", UNAVAILABLE, CFG) is None
