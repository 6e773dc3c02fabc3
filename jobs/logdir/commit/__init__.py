"""Crash-safe replacement and deletion of segments, on local disk and on S3.

Two modules: :mod:`~jobs.logdir.commit.records`, the on-disk records (intents, the deletion ledger, the names of the
work dirs) that recovery reads, and :mod:`~jobs.logdir.commit.committers`, the commit protocol of each store that
writes them (its docstring describes every step). The names below are what the jobs and recovery use.
"""

from jobs.logdir.commit.committers import (
    Committer,
    CopyCommitter,
    DeleteResult,
    Fault,
    InstallStep,
    PurgeResult,
    RenameCommitter,
    ReplaceRequest,
    ReplaceResult,
    StagedSegment,
    committer_for,
    delete_segments,
    purge_deleted,
    replace_segments,
    staged_uri,
)
from jobs.logdir.commit.records import (
    COMMIT_DIR,
    EXTERNAL_SORT_DIR,
    PRIVATE_STAGING_DIR,
    SEGMENT_DATA_SUFFIXES,
    STAGING_BESIDE_DIR,
    CommitError,
    DeleteIntent,
    RecoveryError,
    ReplaceIntent,
    SegmentFile,
    list_segment_files,
    live_log_bases,
    partition_name,
    partition_work_uri,
    read_ledger,
)

__all__ = [
    "COMMIT_DIR", "EXTERNAL_SORT_DIR", "PRIVATE_STAGING_DIR", "SEGMENT_DATA_SUFFIXES", "STAGING_BESIDE_DIR",
    "CommitError", "Committer", "CopyCommitter", "DeleteIntent", "DeleteResult", "Fault", "InstallStep", "PurgeResult",
    "RecoveryError", "RenameCommitter", "ReplaceIntent", "ReplaceRequest", "ReplaceResult", "SegmentFile",
    "StagedSegment", "committer_for", "delete_segments", "list_segment_files", "live_log_bases", "partition_name",
    "partition_work_uri", "purge_deleted", "read_ledger", "replace_segments", "staged_uri",
]
