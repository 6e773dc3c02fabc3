"""The object-store request counts (``segment_io.storage.traffic``): scopes, threads, pickling, and what
``S3Storage`` counts on a real endpoint."""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from segment_io.storage.base import map_ahead
from segment_io.storage.traffic import StoreTraffic, count, in_context, in_context_iter, metered


def test_a_scope_counts_its_requests_and_the_bytes_they_moved() -> None:
    with metered() as t:
        count("get", 100)
        count("get", 20, requests=0)  # the bytes of a GET already counted
        count("put", 7)
        count("list")
    assert t.to_dict() == {"requests": 3, "get": 1, "get_bytes": 120, "head": 0, "list": 1, "put": 1,
                           "put_bytes": 7, "copy": 0, "delete": 0, "other": 0}


def test_nothing_is_counted_outside_a_scope_and_an_inner_scope_keeps_its_own() -> None:
    count("get", 5)  # no scope: dropped, no error
    with metered() as outer:
        count("head")
        with metered() as inner:
            count("get", 9)
        count("delete")
    assert (outer.head, outer.delete, outer.get) == (1, 1, 0)
    assert (inner.get, inner.get_bytes, inner.requests) == (1, 9, 1)


def test_threads_count_into_the_scope_only_through_in_context() -> None:
    with metered() as t:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(in_context(lambda n: count("get", n)), range(100)))
            list(pool.map(lambda n: count("get", n), range(100)))  # a thread outside the context: not counted
        worker = threading.Thread(target=in_context(lambda: count("put", 3)))
        worker.start()
        worker.join()
        assert list(map_ahead(lambda n: count("head") or n, range(50), 8)) == list(range(50))
    assert (t.get, t.get_bytes, t.put, t.head) == (100, sum(range(100)), 1, 50)


def test_a_stream_pulled_by_another_thread_counts_into_its_creator_s_scope_through_in_context_iter() -> None:
    """A native writer (deltalake's merge) drains a Python stream on a thread of its own, whose context holds no
    scope: the stream's requests count into the scope it was made in only when wrapped, and even when the thread
    pulls its first item (a generator's body runs then)."""

    def stream(n: int):  # type: ignore[no-untyped-def]
        for i in range(n):
            count("get", i)
            yield i

    with metered() as t:
        wrapped, bare = in_context_iter(stream(10)), stream(10)
    got: list[list[int]] = []
    puller = threading.Thread(target=lambda: got.extend([list(wrapped), list(bare)]))
    puller.start()
    puller.join()
    assert got == [list(range(10))] * 2
    assert (t.get, t.get_bytes) == (10, sum(range(10)))  # the wrapped stream's alone


def test_concurrent_scopes_on_threads_stay_apart() -> None:
    barrier = threading.Barrier(4)

    def task(n: int) -> StoreTraffic:
        with metered() as t:
            barrier.wait()
            for _ in range(1000):
                count("get", n)
        return t

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(task, range(1, 5)))
    assert [(t.get, t.get_bytes) for t in results] == [(1000, 1000 * n) for n in range(1, 5)]


def test_counts_pickle_as_a_task_result_and_merge() -> None:
    with metered() as t:
        count("get", 10)
        count("copy")
    back = pickle.loads(pickle.dumps(t))
    assert back.to_dict() == t.to_dict()
    total = StoreTraffic()
    total.merge(back)
    total.merge(t.to_dict())
    assert (total.get, total.get_bytes, total.copy, total.requests) == (2, 20, 2, 4)
    back.add("head")  # the lock came back with it
    assert back.head == 1


@pytest.mark.s3
def test_s3_storage_counts_each_request_and_the_bytes_of_its_body(s3_bucket) -> None:
    from segment_io.storage.s3 import S3Storage

    endpoint, bucket = s3_bucket
    storage = S3Storage(endpoint.storage_options(), part_size=5 << 20)
    uri = f"s3://{bucket}/p/obj.log"
    with metered() as t:
        storage.write_atomic(uri, b"x" * 1000)
        assert storage.read(uri) == b"x" * 1000
        assert storage.read_range(uri, 10, 90) == b"x" * 90
        assert storage.read_range(uri, 2000, 10) == b""  # past the end: still a request
        storage.stat(uri)
        assert [f.name for f in storage.list(f"s3://{bucket}/p")] == ["obj.log"]
        storage.copy(uri, f"s3://{bucket}/p/copy.log")  # a HEAD for the size, then the copy
        with storage.open_write(f"s3://{bucket}/p/big.log") as w:  # two parts: create, 2 part PUTs, complete
            w.write(b"y" * (6 << 20))
        storage.delete(f"s3://{bucket}/p/copy.log")
    assert t.to_dict() == {"requests": 13, "get": 3, "get_bytes": 1090, "head": 2, "list": 1, "put": 3,
                           "put_bytes": 1000 + (6 << 20), "copy": 1, "delete": 1, "other": 2}
