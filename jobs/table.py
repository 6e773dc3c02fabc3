"""``spark-submit jobs/table.py ARGS``: ``segjobs table ARGS`` as a Spark application (see ``segjobs table --help``).

The command itself is :mod:`jobs.commands.table`; from Python, call :func:`jobs.api.table`.
"""

if __name__ == "__main__":
    try:
        from jobs.commands.cli import submit_main
    except ImportError as missing:  # spark-submit chose a Python without segjobs: see jobs.submit_python
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from jobs.submit_python import reexec_in_spark_python

        reexec_in_spark_python(__file__, missing)
    submit_main("table")
