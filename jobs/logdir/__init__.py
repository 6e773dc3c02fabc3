"""The log dir's protocol: the lock (local) and lease (S3), crash-safe commits, recovery, location checks."""
