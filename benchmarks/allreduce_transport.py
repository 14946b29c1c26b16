"""Transport-level pieces of `benchmarks/allreduce.py`.

- `tcp_stream`: a raw single-stream TCP transfer over loopback (plain
  Python sockets), the denominator of `busbw_fraction_of_loopback`;
- `no_mmap`: the allocator hypothesis for buffers > 32 MiB;
- `apply_rpc_options`: gRPC channels per target for TF's server.
"""

from __future__ import annotations

import socket
import threading
import time


def tcp_stream(
    all_sum, strategy, task: int, num_workers: int, host: str, nbytes: int, trials: int
) -> float:
    """Bytes/s of one TCP stream worker 1 -> worker 0 (0 elsewhere).

    `all_sum(strategy, values)` sums floats over workers (a collective), used
    to share the port and the result.
    """
    listener, port = None, 0.0
    if task == 0:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(1)
        port = float(listener.getsockname()[1])
    port = int(all_sum(strategy, [port])[0])  # share the port via a collective
    rate = 0.0
    chunk = bytearray(4 << 20)
    try:
        if num_workers == 1:  # no peer: a thread plays worker 1
            sender = threading.Thread(target=_send, args=(host, port, nbytes, trials, chunk))
            sender.start()
            rate = _receive(listener, nbytes, trials, chunk)
            sender.join()
        elif task == 0:
            rate = _receive(listener, nbytes, trials, chunk)
        elif task == 1:
            _send(host, port, nbytes, trials, chunk)
    finally:
        if listener is not None:
            listener.close()
    return all_sum(strategy, [rate])[0]


def _receive(listener, nbytes, trials, chunk) -> float:
    conn, _ = listener.accept()
    view = memoryview(chunk)
    best = 0.0
    with conn:
        for _ in range(trials):
            got, t0 = 0, None
            while got < nbytes:
                n = conn.recv_into(view, min(len(view), nbytes - got))
                if n == 0:
                    raise RuntimeError("TCP peer closed early")
                if t0 is None:
                    t0 = time.perf_counter()
                got += n
            best = max(best, nbytes / (time.perf_counter() - t0))
            conn.sendall(b"k")  # one trial at a time
    return best


def _send(host, port, nbytes, trials, chunk) -> None:
    with socket.create_connection((host, port)) as s:
        view = memoryview(chunk)
        for _ in range(trials):
            sent = 0
            while sent < nbytes:
                n = min(len(view), nbytes - sent)
                s.sendall(view[:n])
                sent += n
            s.recv(1)


def no_mmap(on: bool = True) -> bool:
    """Hypothesis: buffers > 32 MiB reused too, by never mmapping (M_MMAP_MAX=0).

    glibc caps M_MMAP_THRESHOLD at 32 MiB, so bigger buffers are mapped and
    unmapped per collective; with M_MMAP_MAX=0 every allocation comes from
    the heap (and, with the raised trim threshold, stays there).
    """
    from tfdist_opt.strategy.devices import host_memory

    fn = host_memory._mallopt()  # pylint: disable=protected-access
    if fn is None:
        return False
    if on:
        host_memory.tune_for_collectives()
    return fn(_M_MMAP_MAX, 0 if on else _M_MMAP_MAX_DEFAULT) == 1


_M_MMAP_MAX = -4  # glibc <malloc.h>
_M_MMAP_MAX_DEFAULT = 65536


def apply_rpc_options(channels: int | None, recv_buf_max_chunk: int | None = None) -> None:
    """gRPC settings for the server MultiWorkerMirroredStrategy starts.

    MWMS copies `context.context().config` into the ServerDef's
    `default_session_config` (collective_all_reduce_strategy.py,
    `_initialize_multi_worker`): its `rpc_options.num_channels_per_target`
    sizes TF's gRPC channel cache, and `experimental.recv_buf_max_chunk` is
    what `GrpcWorker` splits each RecvBuf response (a collective's chunk of
    tensor) into: 0 means 4096-byte pieces, a negative value one piece
    (DTensor's multi-client setup sets -1 and 4 channels). TF has no public
    setter, so the eager context's `_config` is set before the strategy exists.
    """
    if channels is None and recv_buf_max_chunk is None:
        return
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top

    ctx = context.context()
    config = ctx.config
    if channels is not None:
        config.rpc_options.num_channels_per_target = channels
    if recv_buf_max_chunk is not None:
        config.experimental.recv_buf_max_chunk = recv_buf_max_chunk
    ctx._config = config  # pylint: disable=protected-access
