"""Other holders of a log dir's lock or lease: a segjobs lock or a foreign one held by a subprocess, and the S3
lease of a process that was killed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from segment_io.storage import S3Storage

NOW = 1_700_000_000_000

#: Holds the .lock as segjobs does (with a holder file), run by a named holder, until its stdin closes.
HOLD_SCRIPT = textwrap.dedent(f"""
    import sys
    from jobs.logdir.lock import Holder, acquire
    from segment_io.storage import LocalStorage
    with acquire(LocalStorage(), sys.argv[1], now_ms={NOW}, holder=Holder.this_process("held-run")):
        print("held", flush=True)
        sys.stdin.read()  # hold until the parent closes our stdin
""")


#: Holds the .lock as a broker would: an fcntl lock and nothing else (no holder file).
FOREIGN_HOLD_SCRIPT = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1] + "/.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("held", flush=True)
    sys.stdin.read()
""")


def hold_in_subprocess(log_dir: Path, script: str = HOLD_SCRIPT) -> subprocess.Popen:
    """Start ``script`` on ``log_dir`` in a child process; returns once it holds the lock."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(log_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert proc.stdout.readline().strip() == "held"
    return proc


def release_holder(proc: subprocess.Popen) -> None:
    """Let the holder started by :func:`hold_in_subprocess` go, and check it exited cleanly."""
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def lease_of_a_killed_process(storage: S3Storage, log_dir: str, ttl_ms: int, now_ms: int = NOW) -> int:
    """A lease taken by another process on this host, which was then killed (SIGKILL: no release)."""
    import pickle

    script = textwrap.dedent(f"""
        import pickle, sys
        from jobs.logdir.lock import acquire
        storage = pickle.loads(sys.stdin.buffer.read())
        cm = acquire(storage, {log_dir!r}, now_ms={now_ms}, ttl_ms={ttl_ms})
        cm.__enter__()
        print("held", flush=True)
        import time; time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=os.getcwd()))
    proc.stdin.write(pickle.dumps(storage))
    proc.stdin.close()
    assert proc.stdout.readline().strip() == b"held"
    proc.kill()
    proc.wait(timeout=30)  # reaped: a zombie would still answer kill(pid, 0)
    return proc.pid
