"""A real S3 HTTP endpoint for tests: moto_server started as a subprocess on 127.0.0.1 (or another address),
through moto_launcher.py, which spares it a directory listing per request."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

from tests.support.moto_launcher import SLOW_GETS, SLOW_PUTS

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class MotoServer:
    """A running moto_server; ``endpoint_url`` is where S3 clients should point."""

    process: subprocess.Popen
    endpoint_url: str
    _buckets: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, timeout_s: float = 30.0, log_path: str | None = None, host: str = "127.0.0.1",
              slow_puts: str | None = None, slow_gets: str | None = None) -> "MotoServer":
        """Start moto_server on a free port of ``host``; ``log_path``: a file for its request log (one line per
        request); ``slow_puts``, ``slow_gets``: which PUTs and GETs wait, ``BUCKET_PREFIX:MARK:SECONDS[,...]`` (see
        ``moto_launcher``)."""
        port = _free_port(host)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION)
        for name, rules in ((SLOW_PUTS, slow_puts), (SLOW_GETS, slow_gets)):
            if rules is not None:
                env[name] = rules
        cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "moto_launcher.py")]
        out = subprocess.DEVNULL if log_path is None else open(log_path, "ab")
        proc = subprocess.Popen(cmd + ["-H", host, "-p", str(port)], env=env, stdout=out, stderr=out)
        if log_path is not None:
            out.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {proc.returncode} before it listened")
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return cls(proc, f"http://{host}:{port}")
            except OSError:
                time.sleep(0.1)
        proc.kill()
        raise RuntimeError(f"moto_server did not listen on {host}:{port} within {timeout_s}s")

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def create_bucket(self, hint: str = "b") -> str:
        name = re.sub(r"[^a-z0-9-]", "-", hint.lower())[:40].strip("-") or "b"
        name = f"{name}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        self._buckets.append(name)
        return name

    def storage_options(self):
        """The segjobs storage options that reach this endpoint."""
        from segment_io.storage import StorageOptions

        return StorageOptions(endpoint_url=self.endpoint_url, region=REGION,
                              access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
