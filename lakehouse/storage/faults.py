"""Storage faults, named: a full disk, a damaged Delta commit, a log file that vanished while a job
read it, a stream checkpoint that is damaged or missing, and a request to an S3 store that failed.
Each ends the job with one line that says what is wrong, that nothing committed was lost, and how
to resume (docs/operations.md, "Storage faults"). Delta commits are atomic and every write of a
micro-batch or a backfill chunk is repeatable, so a job that stops on any of them resumes cleanly
once the storage is put right.
"""

from __future__ import annotations

import enum
import json
import re

from lakehouse.errors import LakehouseError
from lakehouse.location import Location
from lakehouse.storage.log_files import LocalFiles, ObjectFiles


class StorageFault(enum.StrEnum):
    DISK_FULL = "disk full"
    DAMAGED_COMMIT = "damaged Delta commit"
    VANISHED_FILE = "file vanished while read"
    DAMAGED_CHECKPOINT = "damaged stream checkpoint"
    MISSING_CHECKPOINT = "missing stream checkpoint"
    S3_REQUEST_FAILED = "S3 request failed"


# What Java and Python say, through Py4J, in the chain of a failed job.
_DISK_FULL = re.compile(r"No space left on device")
_COMMIT_FILE = re.compile(r"(?:file:)?(/\S+?)/_delta_log/(\d{20})\.json")
_UNREADABLE = re.compile(r"Checksum error|FAILED_READ_FILE|JsonParseException|Unexpected end-of-input|MALFORMED")
# "[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file file:///...", or Java's own.
_VANISHED = re.compile(r"(?:FileNotFoundException|FILE_NOT_EXIST)[^\n]*?((?:file:)?/[^\s,]+)")
# delta-rs's failed request to an object store: "Error performing GET http://... in 5ms - <why>", then
# its causes one a line (coloured): the status ("403 Forbidden") and the S3 error's XML, or the
# connection's failure ("Connection refused (os error 111)").
_S3_REQUEST = re.compile(r"Error performing (\w+) (\S+) in \S+ - (.*)")
_S3_STATUS = re.compile(r"^\d{3} [A-Z][\w ]*$")
_S3_CODE = re.compile(r"<Code>(\w+)</Code>")
_COLOURS_AND_ARROWS = re.compile(r"\x1b\[[0-9;]*m|↳")


def _chain_text(error: BaseException) -> str:
    texts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        texts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return "\n".join(texts)


def explain(error: BaseException) -> LakehouseError | None:
    """The one-line error for a storage fault behind ``error``, None for any other error."""
    text = _chain_text(error)
    if _DISK_FULL.search(text):
        return LakehouseError(
            f"{StorageFault.DISK_FULL}: no space left on the device the job writes to. Nothing it had not "
            "committed is visible (Delta commits are atomic); free space and run it again: a stream "
            "resumes at the micro-batch that failed, a backfill recomputes its unfinished chunks"
        )
    commit = _COMMIT_FILE.search(text)
    if commit and _UNREADABLE.search(text):
        table, version = commit.group(1), int(commit.group(2))
        return LakehouseError(
            f"{StorageFault.DAMAGED_COMMIT}: commit {version} of the table at {table} cannot be read "
            f"({table}/_delta_log/{commit.group(2)}.json). Its data files are intact; restore the commit file "
            "from a backup (with its .crc file, if any) and run the job again. Nothing was written past it"
        )
    vanished = _VANISHED.search(text)
    if vanished and "_delta_log" not in vanished.group(1):
        return LakehouseError(
            f"{StorageFault.VANISHED_FILE}: {vanished.group(1).rstrip('.')} was deleted while the job read "
            "it (by hand, or by the log's expiry). Nothing of the failed read was written; restore the "
            "file and run the job again, or run it again to compute from what the storage now holds"
        )
    return _s3_request_failed(text)


def _s3_request_failed(text: str) -> LakehouseError | None:
    """The line for a request delta-rs made to an S3 store that failed after its retries: the
    request, then the store's status and S3 error code, or else the last of the causes."""
    request = _S3_REQUEST.search(text)
    if request is None:
        return None
    method, url, why = request.groups()
    causes = [_COLOURS_AND_ARROWS.sub("", line).strip() for line in text[request.end() :].splitlines()]
    causes = [cause for cause in causes if cause]
    status = next((cause for cause in causes if _S3_STATUS.match(cause)), None)
    code = _S3_CODE.search(text)
    answer = f"{status} ({code.group(1)})" if status and code else status or (causes[-1] if causes else why)
    return LakehouseError(
        f"{StorageFault.S3_REQUEST_FAILED}: {method} {url}: {answer}. Nothing the job had not committed is "
        "visible (Delta commits are atomic); put the store, its keys or its permissions right and run it again"
    )


def check_checkpoint(files: LocalFiles | ObjectFiles, committed_batches: int) -> None:
    """Refuse to start a stream whose checkpoint is damaged, or missing while batches have committed.

    Spark reads the newest offsets and commit files of a checkpoint when a query starts, and fails
    on a damaged one with a bare parse error; a checkpoint that is gone would make a new query read
    the whole log again, every record a second time.

    Args:
        files: the stream's checkpoint, a local folder or an S3 prefix (``log_files``).
        committed_batches: micro-batches of this pipeline that ops.stream_progress records.
    """
    try:
        missing = files.read("metadata") is None
    except ValueError:  # there, but not text: _require_json says so
        missing = False
    if missing:
        if committed_batches:
            raise LakehouseError(
                f"{StorageFault.MISSING_CHECKPOINT}: {_shown(files)} holds no query, but {committed_batches} "
                "micro-batches of this pipeline have committed: a new query would read the whole log again. "
                "Restore the checkpoint folder from a backup (to start over instead, use a new home)"
            )
        return
    _require_json(files, "metadata", header=False)
    for folder, (advice, with_checksum) in _ADVICE.items():
        for batch in sorted(int(name) for name in files.names(folder) if name.isdigit())[-1:]:
            try:
                _require_json(files, f"{folder}/{batch}", header=True)
            except LakehouseError as damaged:
                # Hadoop keeps a checksum beside each local file (none in object storage): it goes too.
                checksum = f"{folder}/.{batch}.crc"
                also = with_checksum.format(_shown(files, checksum)) if files.read(checksum) is not None else ""
                raise LakehouseError(f"{damaged}; {advice.format(also=also)}") from None


def drop_abandoned_first_offsets(files: LocalFiles | ObjectFiles) -> list[str]:
    """Delete what a query killed while planning its first micro-batch left in ``offsets/``; the
    names deleted.

    Hadoop writes a checkpoint file as ``.N.<uuid>.tmp`` and then renames it (in S3, a copy and a
    delete), so a kill in between leaves the temporary file. Spark skips such files when it reads the
    log, but refuses to start a query whose ``offsets/`` holds anything while no batch is planned
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). With no batch planned, the file records nothing.

    Args:
        files: the stream's checkpoint, a local folder or an S3 prefix (``log_files``).
    """
    names = files.names("offsets")
    if any(name.isdigit() for name in names):
        return []
    abandoned = [name for name in names if name.startswith(".") and name.endswith(".tmp")]
    for name in abandoned:
        files.remove(f"offsets/{name}")
    return abandoned


FILE_SOURCE_LOG = "sources/0"  # the file source's log of the files each source offset added
COMPACT_SUFFIX = ".compact"  # Spark's name for an entry that repeats the entries before it


def drop_unplanned_file_entries(files: LocalFiles | ObjectFiles) -> list[str]:
    """Delete the file source's log entries that no planned micro-batch covers; the names deleted.

    Spark's file source records the files it picked for the next batch (``sources/0/K``) just before
    the query writes the batch's offsets. A kill in between leaves entry K, which no offsets file
    names; on restart Spark takes its files as read already, picks the next ones as entry K+1, and
    the batch reads entries K and K+1 together: two batches' files in one, so a stream killed there
    cut its batches, and its watermark's steps, unlike one that was not. Without the entry, the
    restarted query picks the same files again, as its first attempt did. A compacted entry
    (``K.compact``, every tenth) repeats the entries since the compaction before it; Spark deletes
    those only long after, so it goes too while they are all there, and is otherwise left.

    Args:
        files: the checkpoint of a stream reading the file log, a local folder or an S3 prefix
            (``log_files``); a Kafka stream's ``sources/0`` holds its starting offsets instead.
    """
    planned = sorted(int(name) for name in files.names("offsets") if name.isdigit())
    covered = _file_source_offset(files, planned[-1]) if planned else -1
    if covered is None:  # not a file source (Kafka), or an offsets file it cannot read: leave it
        return []
    entries = {batch: name for name in files.names(FILE_SOURCE_LOG) if (batch := _entry_batch(name)) is not None}
    unplanned = [name for batch, name in sorted(entries.items()) if batch > covered and _restorable(entries, batch)]
    for name in unplanned:
        files.remove(f"{FILE_SOURCE_LOG}/{name}")
        files.remove(f"{FILE_SOURCE_LOG}/.{name}.crc")  # Hadoop's checksum beside a local file
    return unplanned


def _entry_batch(name: str) -> int | None:
    """The batch of a file source log entry's name (``7``, ``9.compact``), or None for other files."""
    stem = name.removesuffix(COMPACT_SUFFIX)
    return int(stem) if stem.isdigit() else None


def _restorable(entries: dict[int, str], batch: int) -> bool:
    """Whether deleting entry ``batch`` loses no earlier entry: a compacted one repeats the entries
    since the compaction before it (or since the first), which must all still be there."""
    if not entries[batch].endswith(COMPACT_SUFFIX):
        return True
    compactions = [earlier for earlier, name in entries.items() if earlier < batch and name.endswith(COMPACT_SUFFIX)]
    return all(earlier in entries for earlier in range(max(compactions, default=0), batch))


def _file_source_offset(files: LocalFiles | ObjectFiles, batch: int) -> int | None:
    """The file source's offset (``{"logOffset": K}``) that offsets file ``batch`` plans to, or None."""
    lines = (files.read(f"offsets/{batch}") or "").splitlines()
    try:
        offset = json.loads(lines[2]) if len(lines) == 3 else None
    except ValueError:
        return None
    return offset.get("logOffset") if isinstance(offset, dict) else None


# What to do about the newest file of each log: an offsets file names the files of the micro-batch
# in flight, which must not change; the batch a commit file marks done may simply run again.
_ADVICE = {
    "offsets": ("restore it from a backup{also}", " (with {})"),
    "commits": ("delete it{also}: the micro-batch it marks runs again and writes each table once", " and {}"),
}


def _shown(files: LocalFiles | ObjectFiles, name: str = "") -> str:
    """A checkpoint file's location as a user finds it: a local path, or its s3a:// URI."""
    return (Location.parse(files.uri) / name).display


def _require_json(files: LocalFiles | ObjectFiles, name: str, header: bool) -> None:
    """A checkpoint file: a version line (``v1``) then JSON lines, or one JSON object."""
    try:
        lines = (files.read(name) or "").splitlines()
        if header and (not lines or not re.fullmatch(r"v\d+", lines[0])):
            raise ValueError("no version line")
        for line in lines[1:] if header else ["\n".join(lines)]:
            if line != "-":  # a source without an offset yet
                json.loads(line)
    except ValueError as error:  # a UnicodeDecodeError too
        raise LakehouseError(
            f"{StorageFault.DAMAGED_CHECKPOINT}: {_shown(files, name)} cannot be read ({error})"
        ) from None
