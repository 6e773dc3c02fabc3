"""The collector during a run (jobs.engine.runtime.collector): the heap built before the work is frozen for the work's
duration, and the caller's collector is given back as it was."""

from __future__ import annotations

import gc
from pathlib import Path

from jobs import api
from jobs.engine.runtime.collector import frozen_heap
from jobs.engine.runtime.tasks import InProcessTasks
from segment_io.generate import GenerateSpec, generate_log_dir

SPEC = GenerateSpec(topics=("orders",), partitions=2, records=200, segment_bytes=4 << 10, batch_records=10,
                    superseded_share=0.5, seed=3)
NOW = SPEC.start_ms + SPEC.span_ms + 24 * 3600 * 1000


def test_the_heap_is_frozen_within_the_block_and_given_back_after() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        young = [[i] for i in range(10)]  # allocated within: collected as usual
        assert any(gc.is_tracked(y) for y in young) and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_freeze_of_the_caller_and_a_disabled_collector_are_left_alone() -> None:
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        after_the_callers_freeze = [[i] for i in range(5_000)]  # tracked, young: frozen only by a second freeze
        with frozen_heap():
            pass
        # Frozen objects that die (a thread of py4j or Spark dropping one) leave the count, so it can only shrink:
        # the block neither unfroze the caller's heap (0) nor froze anew (it would have grown by the 5,000 lists).
        assert 0 < gc.get_freeze_count() <= mine
        assert len(after_the_callers_freeze) == 5_000
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_runs_work_runs_over_a_frozen_heap_and_gives_it_back(tmp_path: Path) -> None:
    generate_log_dir(SPEC, str(tmp_path / "logs"))
    during: list[int] = []

    def progress(line: str) -> None:
        if "selected for compaction" in line:  # said by the compaction's work
            during.append(gc.get_freeze_count())

    result = api.compact(tmp_path / "logs", api.CompactOptions(overrides=("*:cleanup.policy=compact",),
                                                               progress=progress),
                         now=NOW, seams=api.Seams(runner=InProcessTasks()))
    assert result.exit_code == 0 and result.partitions_compacted == 2
    assert during and during[0] > 0
    assert gc.get_freeze_count() == 0
