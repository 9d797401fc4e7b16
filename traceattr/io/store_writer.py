"""`convert`'s work on a worker: write one decoded file's store partitions straight into the store's
temporary folder (on the shared output storage), hashed, and send back only the file's header facts
(engine/convert.py runs it on the engine's runner: the driver then places every file, renames each staged
partition to its `rank=R/window=W` place and seals the store).

Each staged partition is written under a temporary name and renamed, so a worker killed halfway leaves
no partition that looks complete; the whole temporary folder is removed when anything fails. The worker
hashes each partition it wrote (sha256, read back from its page cache) and sends the digest with the row
counts: the driver reads no partition to seal the store (io/store.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traceattr import schema as S
from traceattr.io.decode import DecodedFile
from traceattr.io.failure import FileFailure
from traceattr.io.runs import SeveralRunsError, describe_runs, split_runs
from traceattr.io.store import TABLE_SCHEMAS, file_sha256

STAGING = "_staging"


def hollow(decoded: DecodedFile) -> DecodedFile:
    """A decoded file's header facts for the trip to the driver: no tables, but one host row per process
    (io/runs.py tells runs apart by their processes)."""
    pid = np.asarray(decoded.host.column(S.PID).to_numpy(), dtype=np.int64)
    first = np.unique(pid, return_index=True)[1]          # each process's first row, in pid order
    # filter, then take from those few rows: a take on the chunked host table concatenated all of it first
    keep = np.zeros(len(pid), bool)
    keep[first] = True
    rows = decoded.host.filter(pa.array(keep))
    return dataclasses.replace(decoded, device=None, markers=None,
                               host=rows.take(pa.array(np.searchsorted(np.sort(first), first))))


def check_one_run(facts: list[DecodedFile], path, rank_map) -> None:
    """SeveralRunsError, as load() raises it, when the files under `path` are several runs."""
    runs = split_runs(facts, path, rank_map)
    if len(runs) > 1:
        raise SeveralRunsError(f"{path} holds {len(runs)} separate runs, never merged: "
                               f"{describe_runs(runs, facts)}; point at one run's folder or file", [r.name for r in runs],
                               split=runs, paths=[tuple(facts[i].path for i in r.members) for r in runs])


@dataclasses.dataclass(frozen=True)
class StagedFile:
    """What a worker sends back: the decoded file without its tables, and where their rows went."""
    facts: DecodedFile
    folder: str            # staging folder of this file, holding <table>.parquet
    rows: dict             # table -> row count
    digests: dict          # table -> sha256 of its staged parquet file


def stage_file(decoded: DecodedFile, *, staging: str) -> StagedFile | FileFailure:
    """In a worker: write a decoded file's device/host/markers tables under `staging`."""
    folder = Path(staging) / hashlib.sha256(decoded.path.encode()).hexdigest()[:24]
    try:
        # never parents=True: a task still running after a failed convert removed its temporary folder
        # (cancelling does not stop a running Dask task) would create that folder again, left for good
        folder.mkdir(exist_ok=True)
    except FileNotFoundError:
        return FileFailure(decoded.path, f"the convert's staging folder {staging} is gone (the convert failed, "
                                         "was stopped, or another process removed it)", False)
    rows, digests = {}, {}
    for name in TABLE_SCHEMAS:
        table = getattr(decoded, name)
        rows[name] = table.num_rows
        tmp = folder / f".{name}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        digests[name] = file_sha256(tmp)
        os.replace(tmp, folder / f"{name}.parquet")       # atomic per partition
    return StagedFile(hollow(decoded), str(folder), rows, digests)
