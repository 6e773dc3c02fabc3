"""Run the benchmarks: ``make bench`` (or ``python -m benchmarks.run [--quick] [--only NAME,...]``).

Every section measures segjobs and its baseline in the same run on the same data and prints the ratio, so
numbers from different machines are comparable by their ratios. Results are also written to
``benchmarks/results-<section>.json``; docs/performance.md quotes them with the command that produced them.
Heavy: the end-to-end sections generate gigabytes under ./bench-data (removed afterwards).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

SECTIONS = {
    "codec": "benchmarks.codec_bench",
    "many-partitions": "benchmarks.many_partitions_bench",
    "compact": "benchmarks.compact_bench",
    "e2e": "benchmarks.e2e_bench",
    "external-sort": "benchmarks.external_sort_bench",
    "retain": "benchmarks.retain_bench",
    "source": "benchmarks.source_bench",
    "costs": "benchmarks.fixed_cost_bench",
    "cost-parts": "benchmarks.fixed_cost_parts",
    "s3-planning": "benchmarks.s3_planning_bench",
    "s3-reads": "benchmarks.s3_reads_bench",
    "table": "benchmarks.table_bench",
    "clean-cpu": "benchmarks.clean_cpu_bench",
    "tiered-audit": "benchmarks.tiered_audit_bench",
    "cluster": "benchmarks.cluster_bench",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller data: a smoke run, numbers less stable")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {list(SECTIONS)}")
    parser.add_argument("--data-dir", default="bench-data", help="scratch directory for generated data")
    parser.add_argument("--huge", action="store_true",
                        help="external-sort: also 50 M and 100 M keys (14 and 28 GB of input, about twice that "
                             "free in --data-dir, which should be outside the repository)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="e2e, cost-parts, cluster: runs of each case (default 3; 1 for a single look at the 4 GB "
                             "cases)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="clean-cpu, source: another checkout of segjobs (e.g. git archive of an earlier commit, "
                             "extracted) measured in the same run on the same data, for after/before ratios")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import importlib

    print(f"# segjobs benchmarks on {platform.machine()} with {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        if name not in SECTIONS:
            parser.error(f"unknown section {name!r}; choose from {list(SECTIONS)}")
        module = importlib.import_module(SECTIONS[name])
        print(f"\n## {name}", flush=True)
        # only the parameters a section's run() declares (co_varnames would also list its local variables)
        parameters = inspect.signature(module.run).parameters
        kwargs: dict[str, Any] = {"quick": args.quick}
        if "data_dir" in parameters:
            kwargs["data_dir"] = Path(args.data_dir)
        if "repeat" in parameters:
            kwargs["repeat"] = args.repeat
        if "baseline" in parameters:
            kwargs["baseline"] = args.baseline
        if "huge_cases" in parameters:
            kwargs["huge_cases"] = args.huge
        rows = module.run(**kwargs)
        for row in rows:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        out = Path(__file__).parent / f"results-{name}{'-quick' if args.quick else ''}.json"
        out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
