"""``spark-submit jobs/retain.py ARGS``: ``segjobs retain ARGS`` as a Spark application (see ``segjobs retain --help``).

The command itself is :mod:`jobs.commands.retain`; from Python, call :func:`jobs.api.retain`.
"""

if __name__ == "__main__":
    from jobs.commands.cli import submit_main

    submit_main("retain")
