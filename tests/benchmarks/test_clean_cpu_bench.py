"""The clean-cpu section's reading of ``perf report --sort dso`` (:func:`benchmarks.clean_cpu_bench.grouped_shares`):
each line's share goes to the group of the file its samples fell in. The lines are perf 6.1's, from a sampled
lz4 task (a few left out, so the shares need not add up to 100)."""

from __future__ import annotations

from benchmarks.clean_cpu_bench import PERF_GROUPS, grouped_shares

REPORT = """\
    48.00%  _block.cpython-311-x86_64-linux-gnu.so
    10.42%  [kernel.kallsyms]
    10.37%  _multiarray_umath.cpython-311-x86_64-linux-gnu.so
    10.30%  [JIT] tid 30784
     9.60%  libpython3.11.so.1.0
     7.52%  libc.so.6
     2.28%  libarrow.so.2600
     2.16%  _crc32c.cpython-311-x86_64-linux-gnu.so
     0.65%  lib.cpython-311-x86_64-linux-gnu.so
     0.17%  _dispatcher.cpython-311-x86_64-linux-gnu.so
     0.03%  [vdso]

"""


def test_each_file_s_samples_count_for_its_group_and_the_rest_for_other() -> None:
    shares = grouped_shares(REPORT)
    assert list(shares) == [name for name, _ in PERF_GROUPS] + ["other"]
    expected = {"codec library": 48.0, "CRC32C (crc32c package)": 2.16, "compiled kernels": 10.30,
                "Python (interpreter, its C modules, numba's dispatch)": 9.77, "numpy": 10.37, "Arrow": 2.93,
                "C library (memcpy, malloc)": 7.52, "OS kernel (page cache writes, page faults)": 10.42, "other": 0.03}
    assert {name: round(share, 2) for name, share in shares.items()} == expected


def test_lines_without_a_share_are_not_counted() -> None:
    assert sum(grouped_shares("# Samples: 38K of event 'cpu-clock'\n\n#\n").values()) == 0
