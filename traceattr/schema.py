"""Every column name, category name and arrow schema, defined once.

Conventions for all tables:
* times are int64 nanoseconds since the Unix epoch (`*_ns`), durations int64 ns;
* a missing integer is -1 (never null), a missing string is "", a file's missing window NO_TIME (times may
  be negative);
* `rank` and `window` identify one trace file: window W is the W-th file of that rank in time order.
"""

from __future__ import annotations

import pyarrow as pa

# --- column names -----------------------------------------------------------------------------
RANK = "rank"
WINDOW = "window"
DEVICE = "device"            # device index (the pid of the device rows in the trace)
STREAM = "stream"            # stream id (the tid of the device rows)
PID = "pid"
TID = "tid"
NAME = "name"
CATEGORY = "category"
START_NS = "start_ns"
END_NS = "end_ns"
DURATION_NS = "duration_ns"
CORRELATION = "correlation"
EXTERNAL_ID = "external_id"
BYTES = "bytes"
SEQUENCE_NUMBER = "sequence_number"      # autograd `Sequence number` on cpu ops
FWD_THREAD_ID = "fwd_thread_id"          # `Fwd thread id`: a profiler-internal thread counter, not an OS tid
PYTHON_ID = "python_id"                  # python_function `Python id`
PYTHON_PARENT_ID = "python_parent_id"    # python_function `Python parent id`
PYTHON_MODULE_ID = "python_module_id"    # only on `nn.Module: ...` frames
COLLECTIVE = "collective"                # `Collective name` on NCCL kernels
# collective facts of a communication kernel (its own args, else its record_param_comms op's; see io/comm_rules.py)
PROCESS_GROUP = "process_group"          # `Process Group Name` ("" unknown)
GROUP_RANKS = "group_ranks"              # `Process Group Ranks` as written ("[0, 1]"; "" unknown)
SEQ = "seq"                              # `Seq`: the collective's sequence number in its group (-1 unknown)
COMM_BYTES = "comm_bytes"                # message bytes: max(In, Out msg nelems) x dtype size (-1 unknown)
SRC_RANK = "src_rank"                    # `Src Rank` of point-to-point (-1 unknown)
DST_RANK = "dst_rank"                    # `Dst Rank` of point-to-point (-1 unknown)
GROUP_SIZE = "group_size"                # `Group size`: ranks in the collective's process group (-1 unknown)
# cuda_sync markers (kineto-format.md 2.3): `Stream Wait Event` / `Event Sync` name the event record they wait on
WAIT_ON_STREAM = "wait_on_stream"        # `wait_on_stream`: the stream the awaited event was recorded on (-1)
WAIT_ON_CORRELATION = "wait_on_correlation"  # `wait_on_cuda_event_record_corr_id`: its cudaEventRecord (-1)
# record_shapes args of a cpu op as compact JSON text (io/shapes.py; "" absent or over-long); docs/roofline.md
INPUT_DIMS = "input_dims"                # `Input Dims`: "[[4, 3, 224, 224], [768], []]"
INPUT_TYPES = "input_types"              # `Input type`: "[\"c10::BFloat16\", \"Scalar\"]"
CONCRETE_INPUTS = "concrete_inputs"      # `Concrete Inputs`: "[\"\", \"[16, 16]\", \"False\"]"
# CUDA/HIP graphs (attribution/graphs.py)
GRAPH_ID = "graph_id"                    # `graph id` of a replayed kernel (-1 unknown)
GRAPH_NODE_ID = "graph_node_id"          # `graph node id` of a replayed kernel (-1 unknown)
LAUNCHED_KERNEL = "launched_kernel"      # a runtime launch's `kernel` arg: the kernel it launched ("" unknown)

# analysis outputs
SELF_NS = "self_ns"
SOLO_NS = "solo_ns"
SELF_PCT = "self_pct"
COUNT = "count"
BUSY_NS = "busy_ns"
IDLE_NS = "idle_ns"
WINDOW_NS = "window_ns"
DEVICE_SPAN_NS = "device_span_ns"        # first device activity's start to the last one's end (HTA's idle span)
OVERLAP_NS = "overlap_ns"
ACTIVITIES = "activities"
EXPOSED_COMMUNICATION_NS = "exposed_communication_ns"   # communication runs and no compute does
EXPOSED_NS = "exposed_ns"    # --by category: time that category runs with no activity of another category
# `traceattr check --clip-outliers` (analysis/check.py): busy_ns and idle_ns beside their clipped_ twins
CLIPPED_PREFIX = "clipped_"               # the figure with every outlier activity clipped
CLIPPED_ACTIVITIES = "clipped_activities"  # outlier activities clipped per (rank, device)
# multi-rank (analysis/collectives.py, analysis/straggler.py; docs/collectives.md)
COMMUNICATION_WAIT_NS = "communication_wait_ns"          # comm self time before the last participant arrived
COMMUNICATION_TRANSFER_NS = "communication_transfer_ns"  # comm self time after it (wait + transfer == comm)
LATE_ARRIVALS = "late_arrivals"          # collectives where the rank arrived last
WAIT_CAUSED_NS = "wait_caused_ns"        # waiting the rank imposed on the others when it arrived last
CLOCK_OFFSET_NS = "clock_offset_ns"      # estimated clock offset of the rank against the reference rank
KIND = "kind"                            # a communication activity's collective kind: allreduce, sendrecv, ...
COMM_ANNOTATION = "comm_annotation"      # the `nccl:<kind>` / `gloo:<kind>` user_annotation around its launch ("")
INSTANCE = "instance"                    # index of one collective instance (the same collective on every rank)
RANKS = "ranks"                          # participating ranks, as text "0,1,2"
MISSING_RANKS = "missing_ranks"          # expected participants with no matching activity ("" none)
MATCHED_BY = "matched_by"                # "group+seq", "order", "p2p", "unmatched" (group not told: comm_groups)
FIRST_START_NS = "first_start_ns"
LAST_START_NS = "last_start_ns"
ITERATION_START_NS = "iteration_start_ns"   # an engine iteration's range (--by iteration), epoch ns
ITERATION_END_NS = "iteration_end_ns"
INSTANT_COLUMNS = (FIRST_START_NS, LAST_START_NS, ITERATION_START_NS, ITERATION_END_NS)   # absolute epoch ns
# (points in time), not durations
ARRIVAL_SKEW_NS = "arrival_skew_ns"      # last_start_ns - first_start_ns
LAST_RANK = "last_rank"                  # the rank that arrived last (-1: alone, or all arrived at once)
TRANSFER_NS = "transfer_ns"              # max end - last start: the part where every participant was there
WAIT_NS = "wait_ns"                      # Σ over participants of (last start - own start), clipped to own kernel
ALGBW_GBPS = "algbw_gbps"                # nccl-tests algorithm bandwidth, bytes / transfer_ns (GB/s)
BUSBW_GBPS = "busbw_gbps"                # nccl-tests bus bandwidth (algbw x the collective's factor)

# file table
PATH = "path"
RUN = "run"                  # a run's folder under the path given ("." the path itself): tables over several runs
WORLD_SIZE = "world_size"
ERA = "era"
BASE_TIME_NS = "base_time_ns"
RANK_SOURCE = "rank_source"
DEVICE_PROPERTIES = "device_properties"  # JSON text of `deviceProperties`
METADATA = "metadata"                    # JSON text of the other small header keys
EVENTS = "events"                        # events read from the file (all phases)
NEGATIVE_DURATIONS = "negative_durations"  # durations < 0 clamped to 0
ABSURD_DURATIONS = "absurd_durations"      # events dropped for impossible times (over a day, beyond int64 ns)

# --- categories -------------------------------------------------------------------------------
# device activities (the only rows that count as device busy time)
COMPUTE = "compute"
COMMUNICATION = "communication"
MEMCPY = "memcpy"
MEMSET = "memset"
DEVICE_CATEGORIES = (COMPUTE, COMMUNICATION, MEMCPY, MEMSET)

# host events (the trace's own `cat`, lower-cased)
CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
PYTHON_FUNCTION = "python_function"
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"

# device-row markers that are not device work
GPU_USER_ANNOTATION = "gpu_user_annotation"
CUDA_SYNC = "cuda_sync"

# eras of timestamps (kineto-format.md 3.1)
ERA_A = "A"          # integer epoch µs
ERA_B = "B"          # absolute epoch µs with ns decimals
ERA_C = "C"          # µs relative to baseTimeNanoseconds
ERA_RELATIVE = "relative"  # relative µs with no base: not alignable with other ranks

# rank sources
RANK_FROM_JSON = "distributedInfo"
RANK_FROM_NAME = "file name"
RANK_FROM_MAP = "rank map"
RANK_FROM_FOLDER = "folder name"  # a folder named rank{R} above the file
RANK_ASSUMED = "assumed 0"

# --- schemas ----------------------------------------------------------------------------------
DEVICE_SCHEMA = pa.schema([
    (RANK, pa.int32()), (WINDOW, pa.int32()), (DEVICE, pa.int64()), (STREAM, pa.int64()),
    (NAME, pa.string()), (CATEGORY, pa.string()),
    (START_NS, pa.int64()), (END_NS, pa.int64()),
    (CORRELATION, pa.int64()), (EXTERNAL_ID, pa.int64()), (BYTES, pa.int64()),
    (COLLECTIVE, pa.string()),
    (PROCESS_GROUP, pa.string()), (GROUP_RANKS, pa.string()), (SEQ, pa.int64()), (COMM_BYTES, pa.int64()),
    (SRC_RANK, pa.int64()), (DST_RANK, pa.int64()), (GROUP_SIZE, pa.int32()),
    (GRAPH_ID, pa.int64()), (GRAPH_NODE_ID, pa.int64()),
])

HOST_SCHEMA = pa.schema([
    (RANK, pa.int32()), (WINDOW, pa.int32()), (PID, pa.int64()), (TID, pa.int64()),
    (NAME, pa.string()), (CATEGORY, pa.string()),
    (START_NS, pa.int64()), (END_NS, pa.int64()),
    (CORRELATION, pa.int64()), (EXTERNAL_ID, pa.int64()),
    (SEQUENCE_NUMBER, pa.int64()), (FWD_THREAD_ID, pa.int64()),
    (PYTHON_ID, pa.int64()), (PYTHON_PARENT_ID, pa.int64()), (PYTHON_MODULE_ID, pa.int64()),
    (INPUT_DIMS, pa.string()), (INPUT_TYPES, pa.string()), (CONCRETE_INPUTS, pa.string()),
    (LAUNCHED_KERNEL, pa.string()),
])

# gpu_user_annotation, cuda_sync, cuda_event and unknown device-row categories: kept, never busy
MARKER_SCHEMA = pa.schema([
    (RANK, pa.int32()), (WINDOW, pa.int32()), (DEVICE, pa.int64()), (STREAM, pa.int64()),
    (NAME, pa.string()), (CATEGORY, pa.string()),
    (START_NS, pa.int64()), (END_NS, pa.int64()), (EXTERNAL_ID, pa.int64()),
    (CORRELATION, pa.int64()), (WAIT_ON_STREAM, pa.int64()), (WAIT_ON_CORRELATION, pa.int64()),
])


def unplaced(schema: pa.Schema) -> pa.Schema:
    """`schema` without rank and window: a decoded file's table (where it belongs depends on every file).
    Made once for the three table schemas (25 us a call; the decoder asks three times a file)."""
    found = _UNPLACED.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    return pa.schema([f for f in schema if f.name not in (RANK, WINDOW)])


_UNPLACED = {id(schema): (schema, pa.schema([f for f in schema if f.name not in (RANK, WINDOW)]))
             for schema in (DEVICE_SCHEMA, HOST_SCHEMA, MARKER_SCHEMA)}

FILE_SCHEMA = pa.schema([
    (RANK, pa.int32()), (WINDOW, pa.int32()), (PATH, pa.string()),
    (WORLD_SIZE, pa.int32()), (RANK_SOURCE, pa.string()), (ERA, pa.string()),
    (BASE_TIME_NS, pa.int64()),
    (START_NS, pa.int64()), (END_NS, pa.int64()),   # the window: first start to last end of its timed events
    # (both NO_TIME when it has none)
    (EVENTS, pa.int64()), (NEGATIVE_DURATIONS, pa.int64()), (ABSURD_DURATIONS, pa.int64()),
    (DEVICE_PROPERTIES, pa.string()), (METADATA, pa.string()),
])

NO_INT = -1
# A file's start_ns/end_ns (and host span) when it holds no timed event. Not -1: a trace without
# baseTimeNanoseconds writes ts relative to the profiler's start, and events before it are negative, ordinary
# times. Below every time a trace can hold (io/limits.TIME_LIMIT_NS, ±3e18), and 2**62 from int64's ends, so
# its difference with any kept time still fits in int64 (an untimed file's span, NO_TIME - NO_TIME, is 0).
NO_TIME = -(2**62)
