"""TraceSet: every rank and window of one run, as four arrow tables (schemas in traceattr.schema)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from traceattr import schema as S


# eq=False: identity hashing, so analyses can cache derived results (the sweep) per TraceSet
@dataclass(frozen=True, eq=False)
class TraceSet:
    device: pa.Table                 # S.DEVICE_SCHEMA: kernels, memcpy, memset (device busy time)
    host: pa.Table                   # S.HOST_SCHEMA: cpu ops, annotations, python frames, runtime calls
    markers: pa.Table                # S.MARKER_SCHEMA: gpu_user_annotation, cuda_sync, ... (never busy)
    files: pa.Table                  # S.FILE_SCHEMA: one row per (rank, window) file
    notes: tuple[str, ...] = field(default=())   # things the user should know (skipped files, assumed ranks)

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.files.column(S.RANK).to_pylist()))

    @property
    def source(self) -> str:
        """Where the tables came from, for report headers."""
        return "traces"

    @classmethod
    def empty(cls) -> "TraceSet":
        return cls(S.DEVICE_SCHEMA.empty_table(), S.HOST_SCHEMA.empty_table(),
                   S.MARKER_SCHEMA.empty_table(), S.FILE_SCHEMA.empty_table())
