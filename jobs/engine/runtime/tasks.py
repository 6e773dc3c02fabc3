"""Task runners: how a job's per-partition tasks (scans, cleaning, inspection, external-sort's stages) run.

:class:`SparkTasks` runs them as Spark tasks (production; :class:`LazySparkTasks` starts the session only when a
task must run); :class:`InProcessTasks` runs them one after another in this process (tests: the drivers' commit
loops without a Spark session; a test passes one as ``Seams.runner``, see :mod:`jobs.engine.runtime.seams`). Besides
``map`` (all results at once, in order), a runner streams (``stream``): items bin-packed by bytes into tasks, each
item's result (or its :class:`TaskFailure`) handed back as soon as its task finishes. What a job needs from the
cluster beyond running tasks is a capability of the runner (:meth:`TaskRunner.executor_memory_bytes`), never a
question about which runner it is.
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence, TypeVar

from jobs.engine.runtime.spark_session import early_start_seconds, would_launch_local_jvm
from jobs.rules.binpack import pack_in_order
from jobs.rules.scope import Scope
from segment_io.errors import ConfigError
from segment_io.layout import LogDirListing
from segment_io.storage.base import Storage
from segment_io.storage.traffic import StoreTraffic, in_context, metered
from segment_io.units import parse_size

T = TypeVar("T")
R = TypeVar("R")


class TaskRunner(Protocol):
    """Runs a job's per-partition tasks and collects their (small) results in order."""

    @property
    def parallelism(self) -> int:
        """How many tasks can run at once (header scans are batched into a few tasks per slot)."""
        ...

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
            description: str | None = None) -> list[R]:
        """``[fn(item) for item in items]``, run as ``tasks`` tasks (default: one per item). ``description``
        says what they do (``segjobs compact: scan 8 partition(s)``): on Spark, the job's name in the UI."""
        ...

    def stream(self, fn: Callable[[T], R], items: Sequence[T], *, sizes: Sequence[int] | None = None,
               description: str | None = None) -> Iterator[tuple[int, "R | TaskFailure"]]:
        """``(index, fn(items[index]))`` for every item, in the order the tasks finish (``description`` as for
        :meth:`map`). Items are bin-packed by
        ``sizes`` (bytes; default: one each) into tasks of consecutive items, submitted in order
        (:func:`jobs.rules.binpack.pack_in_order`). An item whose
        ``fn`` raised, or whose task died, comes back as a :class:`TaskFailure`: its neighbours in the bin
        are not affected."""
        ...

    def stream_bins(self, bin_fn: Callable[[list[T]], Sequence["R | TaskFailure"]], items: Sequence[T], *,
                    sizes: Sequence[int] | None = None,
                    description: str | None = None) -> Iterator[list[tuple[int, "R | TaskFailure"]]]:
        """As :meth:`stream`, but each bin is one call of ``bin_fn`` with the bin's items (it returns their
        results in order, an item's own failure as its :class:`TaskFailure`: :class:`BinTask` makes such a
        function of a per-item one), and each bin's ``(index, result)`` pairs come back together. A bin whose
        task died is run again item by item (one-item bins), so only the culprit comes back as ``TaskDied``."""
        ...

    def executor_memory_bytes(self) -> int | None:
        """The memory of one task's process as the cluster is configured (Spark:
        ``spark.executor.pyspark.memory``, else ``spark.executor.memory``); None when the runner sets none."""
        ...

    def store_traffic(self) -> dict[str, StoreTraffic]:
        """The object-store requests the tasks of every :meth:`map` and :meth:`stream` call made so far, by the
        call's description (see :mod:`segment_io.storage.traffic`; a task that died took its count with it)."""
        ...


@dataclass(frozen=True)
class TaskFailure:
    """What became of a streamed item whose function raised (``kind`` is the exception's class name) or
    whose whole task died (``kind`` ``TaskDied``: a killed Python worker, a result that would not pickle)."""

    kind: str
    detail: str


#: Input bytes per streamed task (see :mod:`jobs.rules.binpack`): a task's own cost, tens of milliseconds,
#: stays a few percent of its work, and results come back every second or so.
STREAM_TARGET_BYTES = 16 << 20
#: Most items per streamed task: a bin's results come back together (and its partitions commit in lockstep).
#: Each bin is a Spark job of its own, which costs the JVM about 30 ms of CPU: over thousands of small partitions
#: (2,000 x 127 KB: 16 bins at 256, 32 at 64) the bytes target, not this cap, should set the count.
STREAM_MAX_ITEMS = 256


class BinTask:
    """The function of one streamed task: ``fn`` over a bin of items, each item's exception caught and
    returned as its :class:`TaskFailure` (a module-level class, so it pickles by reference with ``fn``)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, items: list) -> list:
        out: list = []
        for item in items:
            try:
                out.append(self.fn(item))
            except Exception as exc:  # noqa: BLE001 - one item's failure must not take its bin down
                out.append(TaskFailure(type(exc).__name__, str(exc)))
        return out


def stream_bins(items: Sequence[Any], sizes: Sequence[int] | None, parallelism: int) -> list[list[int]]:
    """The bins (lists of item indices) :meth:`TaskRunner.stream` runs ``items`` in, one task each."""
    if sizes is not None and len(sizes) != len(items):
        raise ValueError(f"{len(sizes)} sizes for {len(items)} items")
    # Consecutive items (results are used in item order: see jobs.engine.compact.streaming), at least two bins per core:
    # a core that finishes early finds work, and the first results come early.
    return pack_in_order(list(sizes) if sizes is not None else [1] * len(items), target_bytes=STREAM_TARGET_BYTES,
                         max_items=STREAM_MAX_ITEMS, min_bins=max(1, parallelism) * 2)


class Metered:
    """The function of a task that counts its object-store requests: ``fn``'s result and the task's
    :class:`~segment_io.storage.traffic.StoreTraffic` (a module-level class: it pickles by reference with ``fn``)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: Any) -> tuple[Any, StoreTraffic]:
        with metered() as traffic:
            result = self.fn(item)
        return result, traffic


class _StreamsInBins:
    """``stream`` of a runner that runs bins of items (``stream_bins``): each item a :class:`BinTask` of ``fn``;
    and the store traffic of its tasks, which the runner adds up as their results come back (:meth:`counted`)."""

    def store_traffic(self) -> dict[str, StoreTraffic]:
        return dict(self.__dict__.get("_traffic", {}))

    def counted(self, description: str | None, result: tuple[R, StoreTraffic]) -> R:
        """The result of a :class:`Metered` task, its traffic added to the count of ``description``'s calls."""
        value, traffic = result
        by_stage: dict[str, StoreTraffic] = self.__dict__.setdefault("_traffic", {})
        by_stage.setdefault(description or "tasks", StoreTraffic()).merge(traffic)
        return value

    def stream_bins(self, bin_fn: Callable[[list[T]], Sequence[R | TaskFailure]], items: Sequence[T], *,
                    sizes: Sequence[int] | None = None,
                    description: str | None = None) -> Iterator[list[tuple[int, R | TaskFailure]]]:
        raise NotImplementedError

    def stream(self, fn: Callable[[T], R], items: Sequence[T], *, sizes: Sequence[int] | None = None,
               description: str | None = None) -> Iterator[tuple[int, R | TaskFailure]]:
        for pairs in self.stream_bins(BinTask(fn), items, sizes=sizes, description=description):
            yield from pairs


class SparkTasks(_StreamsInBins):
    """Tasks on Spark: ``parallelize(items).map(fn).collect()``. ``fn`` and the items must pickle.

    Every Spark job it starts belongs to the job group ``job_group`` (one per segjobs run:
    ``segjobs-<command>-<run id>``, the run id of the report and the ledger) and carries the ``description``
    of its :meth:`map` call, so the Spark UI and the history server list ``segjobs compact: scan 8
    partition(s)`` rather than ``collect at seams.py:NN``, and ``sc.statusTracker().getJobIdsForGroup(group)``
    (or ``sc.cancelJobGroup``) finds a run's jobs. The session's previous group and description (a notebook's,
    say) are restored after each job; they are per thread, as Spark's local properties are."""

    def __init__(self, spark: Any, *, job_group: str | None = None) -> None:
        from segment_io.spark.workers import use_this_python_for_local_workers

        self.spark = spark
        self.job_group = job_group
        use_this_python_for_local_workers(spark)  # a user's own local session: its workers import segjobs

    @property
    def parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
            description: str | None = None) -> list[R]:
        if not items:
            return []
        sc = self.spark.sparkContext
        with spark_job_labels(sc, self.job_group, description):
            results = sc.parallelize(list(items), min(len(items), tasks or len(items))).map(Metered(fn)).collect()
        return [self.counted(description, r) for r in results]

    def stream_bins(self, bin_fn: Callable[[list[T]], Sequence[R | TaskFailure]], items: Sequence[T], *,
                    sizes: Sequence[int] | None = None,
                    description: str | None = None) -> Iterator[list[tuple[int, R | TaskFailure]]]:
        # One Spark job per bin, submitted from as many driver threads as there are cores: a job's results
        # reach the driver as soon as it ends (collect() of a single job returns only when all of its tasks
        # have, and toLocalIterator runs its partitions' jobs one after another). Spark accepts jobs from
        # several threads at once; the jobs share the run's group.
        #
        # If the caller stops early (the run is stopping: a lost lease, an error), nothing may keep it waiting:
        # the threads are daemons (never joined, not even at interpreter exit), they submit no further job once
        # `stop` is set (and do not retry a cancelled bin item by item), and the group is cancelled now and
        # again shortly after, for a job a thread submitted just as the first cancel ran (Spark then logs
        # "Failed to cancel job group": it had no active job yet).
        if not items:
            return
        sc = self.spark.sparkContext
        group = self.job_group or f"segjobs-stream-{uuid.uuid4().hex[:12]}"
        task = Metered(bin_fn)
        stop = threading.Event()

        def run(indices: list[int]) -> list[tuple[int, Any]]:
            if stop.is_set():
                return []
            try:
                with spark_job_labels(sc, group, description):  # every job of the stream: one stage of the run
                    results = self.counted(description, sc.parallelize([[items[i] for i in indices]], 1)
                                           .map(task).collect()[0])
                return list(zip(indices, results))
            except Exception as exc:  # noqa: BLE001 - the task died: find out which item it was
                if stop.is_set():
                    return []  # cancelled because the run is stopping: nobody waits for these results
                if len(indices) == 1:
                    return [(indices[0], TaskFailure("TaskDied", _first_line(exc)))]
            # Run the bin's items one task each: every item but the culprit comes back.
            return [pair for i in indices for pair in run([i])]

        bins = stream_bins(items, sizes, self.parallelism)
        todo: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        for b in bins:
            todo.put(b)
        done: queue.SimpleQueue[tuple[list[tuple[int, Any]], BaseException | None]] = queue.SimpleQueue()

        def worker() -> None:
            while not stop.is_set():
                try:
                    indices = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((run(indices), None))
                except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
                    done.put(([], exc))

        for n in range(min(len(bins), max(1, self.parallelism))):
            threading.Thread(target=worker, name=f"segjobs-tasks-{n}", daemon=True).start()
        remaining = len(bins)
        try:
            while remaining:
                pairs, error = done.get()
                remaining -= 1
                if error is not None:
                    raise error
                if pairs:
                    yield pairs
        finally:
            if remaining:  # the caller stopped early: no more work, and nothing to wait for
                stop.set()
                _cancel_group(sc, group)
                for delay in (0.5, 2.0):
                    timer = threading.Timer(delay, _cancel_group, (sc, group))
                    timer.daemon = True
                    timer.start()

    def executor_memory_bytes(self) -> int | None:
        """See :meth:`TaskRunner.executor_memory_bytes` (asking starts a lazy session: the setting is its)."""
        conf = self.spark.sparkContext.getConf()
        setting = conf.get("spark.executor.pyspark.memory") or conf.get("spark.executor.memory")
        if not setting:
            return None
        try:
            return java_size(setting)
        except ValueError:
            return None  # Spark itself refuses a malformed setting at start-up


def java_size(text: str) -> int:
    """Bytes of a JVM memory setting (``1g``, ``512m``, ``4096k``, ``2048``: mebibytes without a unit, as Spark
    reads ``spark.executor.memory``)."""
    text = text.strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text)) << 20


def _cancel_group(sc: Any, group: str) -> None:
    """Cancel the Spark jobs of ``group``; quietly, as the session may be stopping or stopped meanwhile."""
    try:
        sc.cancelJobGroup(group)
    except Exception:  # noqa: BLE001 - best effort: a stopped session has no jobs left to cancel
        pass


class LazySparkTasks(SparkTasks):
    """:class:`SparkTasks` whose session is built (``build()``) the first time a task must run or the session is
    asked for (:attr:`parallelism`, :attr:`spark`): a run whose selection finds nothing due starts no JVM at
    all. ``on_start(waited, took)`` is told how long the run waited for the session and how long its start took
    from its beginning: the same for a session started at need; for one started ahead of need (see
    :class:`jobs.engine.runtime.spark_session.EarlySession`) the start overlapped the run's own work, and what the run
    waited is only its rest (often nothing)."""

    def __init__(self, build: Callable[[], Any], *, job_group: str | None = None,
                 on_start: Callable[[float, float], None] | None = None) -> None:
        self._build = build
        self._session: Any = None
        self._on_start = on_start
        self._lock = threading.Lock()
        self.job_group = job_group

    @property
    def started(self) -> bool:
        """Whether the session has been built."""
        return self._session is not None

    @property
    def spark(self) -> Any:
        with self._lock:  # stream's threads may ask at once: one start
            if self._session is None:
                from segment_io.spark.workers import use_this_python_for_local_workers

                t0 = time.monotonic()
                session = self._build()
                use_this_python_for_local_workers(session)
                self._session = session
                if self._on_start is not None:
                    waited = time.monotonic() - t0
                    took = early_start_seconds(session)
                    self._on_start(waited, max(waited, took) if took is not None else waited)
            return self._session


#: The most bytes of segments a run's partitions may hold for the run to do its tasks on the driver
#: (:func:`small_run_on_driver`). Below this a local Spark session costs more than the work: its JVM, its Python
#: workers' start (imports and kernels) and its shutdown are seconds, while one core cleans such a log dir in about
#: as long (a 28 MiB log dir of four partitions compacted 4x faster end to end on the driver than on a local
#: session, on the 2-core machine; benchmarks/fixed_cost_parts.py measures the tiny case). Small enough that the
#: driver's memory is no concern, and that ``make demo`` (51 MB) still shows Spark. $SEGJOBS_DRIVER_RUN_MAX_BYTES
#: overrides it (a size; ``0``: every run that has tasks starts Spark).
DRIVER_RUN_MAX_BYTES = 32 << 20
DRIVER_RUN_ENV = "SEGJOBS_DRIVER_RUN_MAX_BYTES"
#: The log segments of a partition directory (``00000000000000000000.log``): what :func:`small_run_on_driver`
#: counts.
_SEGMENT_SUFFIX = ".log"


def driver_run_max_bytes() -> int:
    """:data:`DRIVER_RUN_MAX_BYTES`, or $SEGJOBS_DRIVER_RUN_MAX_BYTES when set (a malformed one is a
    :class:`~segment_io.errors.ConfigError`: exit code 2, nothing done)."""
    raw = os.environ.get(DRIVER_RUN_ENV, "").strip()
    if not raw:
        return DRIVER_RUN_MAX_BYTES
    try:
        return parse_size(raw)
    except ValueError as exc:
        raise ConfigError(f"{DRIVER_RUN_ENV}: {exc}") from None


def small_run_on_driver(storage: Storage, top: LogDirListing, scope: Scope, master: str | None) -> bool:
    """Whether a run does its tasks on the driver (:class:`DriverTasks`) rather than start Spark: a local run with
    the default master that this process would launch the JVM for
    (:func:`jobs.engine.runtime.spark_session.would_launch_local_jvm`), whose log dir (``top``: its listing's top
    level) is small (:func:`fits_on_driver`, up to :func:`driver_run_max_bytes`). Which runner runs the tasks
    never changes what they decide or write."""
    limit = driver_run_max_bytes()
    return limit > 0 and would_launch_local_jvm(master) and fits_on_driver(storage, top, scope, limit)


def fits_on_driver(storage: Storage, top: LogDirListing, scope: Scope, limit: int) -> bool:
    """Whether the partitions in ``scope`` of the log dir whose top level ``top`` lists hold at most ``limit``
    bytes of segments, on a local disk. From file sizes alone, before any file is read: the partition
    directories are listed one by one, and the count stops as soon as it passes the limit. An object store's
    log dir is never taken as small (its listing costs requests; the early start of Spark covers it)."""
    if storage.local_path(top.root) is None:
        return False
    total = 0
    for key, partition in sorted(top.partitions.items()):
        if not scope.includes(*key):
            continue
        total += sum(f.size for f in storage.list(partition.uri) if f.name.endswith(_SEGMENT_SUFFIX))
        if total > limit:
            return False
    return True


def local_parallelism() -> int:
    """The cores this process may run on (its CPU affinity; a container's CPU quota is not read): what a
    ``local[*]`` session's default parallelism is where no quota is set."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class DriverTasks(_StreamsInBins):
    """A small run's tasks on the driver, one after another, as a ``local[*]`` session would run them but without
    starting one (see :func:`small_run_on_driver`): items and results make the same pickle round trip as to and
    from a Python worker (a task never shares an object with the driver), the parallelism is that of
    ``local[*]`` (so streamed tasks are packed into the same bins), and a streamed item whose task raises past
    :class:`BinTask` comes back as a ``TaskDied`` :class:`TaskFailure`, its bin's other items run again one by
    one, as :class:`SparkTasks` does."""

    parallelism: int = field(default_factory=local_parallelism)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
            description: str | None = None) -> list[R]:
        task = Metered(fn)
        return [self.counted(description, _round_trip(task(_round_trip(item)))) for item in items]

    def stream_bins(self, bin_fn: Callable[[list[T]], Sequence[R | TaskFailure]], items: Sequence[T], *,
                    sizes: Sequence[int] | None = None,
                    description: str | None = None) -> Iterator[list[tuple[int, R | TaskFailure]]]:
        if not items:
            return
        for indices in stream_bins(items, sizes, self.parallelism):
            yield self._run_bin(Metered(bin_fn), items, indices, description)

    def _run_bin(self, task: Metered, items: Sequence[T], indices: list[int],
                 description: str | None) -> list[tuple[int, R | TaskFailure]]:
        try:
            return list(zip(indices, self.counted(description, _round_trip(task(_round_trip([items[i] for i in
                                                                                             indices]))))))
        except Exception as exc:  # noqa: BLE001 - what a Python worker's death is on Spark: find the item
            if len(indices) == 1:
                return [(indices[0], TaskFailure("TaskDied", _first_line(exc)))]
        return [pair for i in indices for pair in self._run_bin(task, items, [i], description)]

    def executor_memory_bytes(self) -> int | None:
        return None  # a local session's default: neither setting is set


#: The driver's threads for scans that overlap their reads (see :func:`driver_scan_threads`).
DRIVER_SCAN_THREADS = 8
#: On local disk, the segment bytes from which a partition's header scan is worth a thread of its own: a header scan
#: runs on :data:`DRIVER_SCAN_THREADS` threads when at least half of its bytes are in such partitions (partitions of
#: 8 and 32 MB were scanned as fast on one thread; of 250 MB, faster on eight).
THREADED_HEADER_SCAN_BYTES = 64 << 20


def driver_scan_threads(io_concurrency: int, scan_depth: str, partition_bytes: Sequence[int]) -> int:
    """How many of the driver's threads scan partitions of ``partition_bytes`` segment bytes each, at ``scan_depth``,
    in a store that overlaps ``io_concurrency`` reads (:attr:`Storage.io_concurrency`).

    On an object store that overlaps requests: as many threads as it overlaps round trips with, at least
    :data:`DRIVER_SCAN_THREADS` (``SEGJOBS_S3_CONCURRENCY=1`` asks for one request at a time: one thread). On
    local disk a size scan is a few small reads a partition, Python work that holds the GIL, so threads only
    contend for it (2,000 small partitions were scanned 0.6-1.0 s slower on 8 threads than on one, on 2 cores);
    Kafka, too, loads a log dir on one thread by default (``num.recovery.threads.per.data.dir``). A header scan
    of large partitions is mostly page faults and compiled walks that release the GIL, where threads win: when at
    least half of the bytes are in partitions of :data:`THREADED_HEADER_SCAN_BYTES` or more."""
    if io_concurrency > 1:
        return max(DRIVER_SCAN_THREADS, io_concurrency)
    large_bytes = sum(b for b in partition_bytes if b >= THREADED_HEADER_SCAN_BYTES)
    threaded = scan_depth == "headers" and large_bytes > 0 and 2 * large_bytes >= sum(partition_bytes)
    return DRIVER_SCAN_THREADS if threaded else 1


def map_in_driver(fn: Callable[[T], R], items: Sequence[T], *, threads: int = 8) -> list[R]:
    """``[fn(item) for item in items]`` on up to ``threads`` threads of this process (one: in the calling thread): for
    tasks that take milliseconds each (header and size scans), where a Spark job's overhead, or starting Spark at
    all, would cost more than the work (the threads overlap their reads, on S3 above all)."""
    if not items:
        return []
    if threads <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="segjobs-scan") as pool:
        # (a failed item, or a Ctrl-C while waiting, cancels the queued items as pool.map's results close)
        return list(pool.map(in_context(fn), items))


def _first_line(exc: BaseException) -> str:
    """The gist of a failed Spark job (its Java stack trace is long): the first line naming the cause."""
    text = str(exc)
    for line in text.splitlines():
        if "Error" in line or "Exception" in line:
            return line.strip()[:500]
    return text.strip().splitlines()[0][:500] if text.strip() else type(exc).__name__


#: The SparkContext local properties that name a job (what ``setJobGroup`` / ``setJobDescription`` set).
JOB_GROUP_PROPERTY = "spark.jobGroup.id"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"


@contextmanager
def spark_job_labels(sc: Any, group: str | None, description: str | None) -> Iterator[None]:
    """The Spark jobs started in this thread within the block belong to ``group`` and carry ``description``
    (either may be None: left as it is); the thread's previous values are restored after it."""
    wanted = {JOB_GROUP_PROPERTY: group, JOB_DESCRIPTION_PROPERTY: description}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    saved = {k: sc.getLocalProperty(k) for k in wanted}
    for key, value in wanted.items():
        sc.setLocalProperty(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            sc.setLocalProperty(key, value)  # None removes the property


@dataclass
class InProcessTasks(_StreamsInBins):
    """Tasks run one after another in this process, for tests of the drivers without Spark (and for ``segjobs
    warm-up``). Every item and result makes a pickle round trip, as it would to and from an executor, so a task
    that could not be shipped fails here too. Storage objects alone pass by reference: their pickling is tested
    on its own, and a copy would cost a new S3 client (a second or so) per task."""

    parallelism: int = 1
    #: how many tasks ran (tests check the runner was used)
    calls: int = 0
    #: the description of every :meth:`map` and :meth:`stream` call with items, in order: the Spark jobs
    #: :class:`SparkTasks` would have started (none for no items; a stream's jobs, one per bin, share it)
    descriptions: list[str | None] = field(default_factory=list)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, tasks: int | None = None,
            description: str | None = None) -> list[R]:
        if items:
            self.descriptions.append(description)
        task = Metered(ship_function(fn) if items else fn)
        out = []
        for item in items:
            self.calls += 1
            out.append(self.counted(description, _round_trip(task(_round_trip(item)))))
        return out

    def stream_bins(self, bin_fn: Callable[[list[T]], Sequence[R | TaskFailure]], items: Sequence[T], *,
                    sizes: Sequence[int] | None = None,
                    description: str | None = None) -> Iterator[list[tuple[int, R | TaskFailure]]]:
        # the same bins as on Spark, one after another, each bin's results handed back as it ends
        if not items:
            return
        self.descriptions.append(description)
        task = Metered(ship_function(bin_fn))
        for indices in stream_bins(items, sizes, self.parallelism):
            self.calls += 1
            results = self.counted(description, _round_trip(task(_round_trip([items[i] for i in indices]))))
            yield list(zip(indices, results))

    def executor_memory_bytes(self) -> int | None:
        return None  # this process: no executor setting


class NumbaKernelInTask(pickle.PicklingError):
    """A task function would carry a compiled (numba) kernel by value (a closure, lambda or ``partial`` over
    one): each worker would then compile the kernel again (seconds per kernel) instead of loading the cached
    code its module finds. Tasks reach kernels through module-level functions, which pickle by reference."""


def ship_function(fn: T) -> T:
    """``fn`` pickled as Spark ships a task function (PySpark's cloudpickle: module-level functions and classes
    by reference, closures and lambdas by value) and unpickled, as an executor gets it. Raises
    :class:`NumbaKernelInTask` when that would carry a numba dispatcher."""
    from numba.core.dispatcher import Dispatcher
    from pyspark import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, Dispatcher):
                raise NumbaKernelInTask(
                    f"the task function {getattr(fn, '__qualname__', type(fn).__qualname__)} carries the compiled "
                    f"kernel {obj.py_func.__module__}.{obj.py_func.__qualname__} by value: every worker would "
                    f"compile it again; call it from a module-level function instead")
            return super().reducer_override(obj)

    buf = io.BytesIO()
    Pickler(buf).dump(fn)
    return pickle.loads(buf.getvalue())


def _round_trip(value: T) -> T:
    """``value`` pickled and unpickled, storage objects kept as they are (see :class:`InProcessTasks`)."""
    kept: list[Any] = []

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> int | None:
            if isinstance(obj, Storage):
                kept.append(obj)
                return len(kept) - 1
            return None

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            return kept[pid]

    buf = io.BytesIO()
    Pickler(buf).dump(value)
    buf.seek(0)
    return Unpickler(buf).load()


__all__ = ["DRIVER_RUN_ENV", "DRIVER_RUN_MAX_BYTES", "DRIVER_SCAN_THREADS", "THREADED_HEADER_SCAN_BYTES",
           "STREAM_MAX_ITEMS", "STREAM_TARGET_BYTES", "BinTask", "DriverTasks", "InProcessTasks", "LazySparkTasks",
           "NumbaKernelInTask", "SparkTasks", "TaskFailure", "TaskRunner", "driver_run_max_bytes",
           "driver_scan_threads", "fits_on_driver", "java_size", "local_parallelism", "map_in_driver", "ship_function",
           "small_run_on_driver", "spark_job_labels", "stream_bins"]
