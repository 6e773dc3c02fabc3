"""``spark-submit jobs/compact.py ARGS``: ``segjobs compact ARGS`` as a Spark application (see
``segjobs compact --help``).

The command itself is :mod:`jobs.commands.compact`; from Python, call :func:`jobs.api.compact`.
"""

if __name__ == "__main__":
    from jobs.commands.cli import submit_main

    submit_main("compact")
