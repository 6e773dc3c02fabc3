"""Which partitions a run covers (--topic globs and --partition names), checked against a log dir's listing."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.rules.config import topic_matches
from segment_io.errors import UsageError
from segment_io.layout import closest_topics_hint, parse_partition_dir


@dataclass(frozen=True)
class Scope:
    """Which partitions a run covers: topic globs and explicit partitions (both empty: everything)."""

    topic_globs: tuple[str, ...] = ()
    partitions: tuple[tuple[str, int], ...] = ()

    @property
    def everything(self) -> bool:
        return not self.topic_globs and not self.partitions

    def explicit(self, topic: str, partition: int) -> bool:
        """True when the user named this partition (or its topic glob) on the command line."""
        return (topic, partition) in self.partitions or any(topic_matches(g, topic) for g in self.topic_globs)

    def includes(self, topic: str, partition: int) -> bool:
        return self.everything or self.explicit(topic, partition)

    def check_against(self, present: set[tuple[str, int]]) -> None:
        """Fail before any work when the scope names something the log dir does not hold, saying what it
        does hold: the partitions of a named topic, or the topics closest to a name that matches none."""
        topics = {t for t, _ in present}
        missing = [(t, p) for t, p in self.partitions if (t, p) not in present]
        if missing:
            hints = []
            for t in dict.fromkeys(t for t, _ in missing):
                numbers = sorted(p for pt, p in present if pt == t)
                hints.append(f"{t} has partitions {_number_ranges(numbers)}" if numbers
                             else f"no topic {t!r}; {closest_topics_hint(t, topics)}")
            raise UsageError(f"--partition names partitions not in the log dir: "
                             f"{', '.join(f'{t}-{p}' for t, p in missing)} ({'; '.join(hints)})")
        unmatched = [g for g in self.topic_globs if not any(topic_matches(g, t) for t in topics)]
        if unmatched:
            glob_hints = "; ".join(f"{g}: {closest_topics_hint(g, topics)}" for g in unmatched)
            raise UsageError(f"--topic matches no topic in the log dir: {', '.join(unmatched)} ({glob_hints})")


def _number_ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_scope(topic_globs: list[str], partitions: list[str]) -> Scope:
    """The Scope of --topic and --partition options (``UsageError`` for a partition not named TOPIC-N)."""
    parsed = []
    for item in partitions:
        tp = parse_partition_dir(item)  # a partition is named as its directory is
        if tp is None:
            raise UsageError(f"--partition {item!r}: expected TOPIC-N, e.g. orders-3")
        parsed.append(tp)
    return Scope(tuple(topic_globs), tuple(parsed))
