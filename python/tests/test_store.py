"""Tests of the Python bindings: every Store method, value round trips, the errors, the GIL
released around disk work (group commit across Python threads), and Store.once across a
SIGKILL."""

from __future__ import annotations

import math
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import agentwal
from agentwal import Store


@pytest.fixture
def store_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A path for a new store (not created yet)."""
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: pathlib.Path):
    """A writable store that is closed after the test."""
    with Store.open(store_dir) as s:
        yield s


def segments(d: pathlib.Path) -> list:
    """The store's segment files, oldest first."""
    return sorted(p for p in d.iterdir() if p.suffix == ".wal")


def flip_byte_of(d: pathlib.Path, marker: bytes) -> None:
    """Flips one byte of `marker` inside the segment file that holds it."""
    for seg in segments(d):
        data = bytearray(seg.read_bytes())
        at = data.find(marker)
        if at >= 0:
            data[at] ^= 0x20
            seg.write_bytes(bytes(data))
            return
    raise AssertionError(f"{marker!r} not found in any segment")


# ---- values ----------------------------------------------------------------------------


ROUND_TRIPS = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.0,
    float("inf"),
    "",
    "héllo ✓ 🎉",
    b"",
    b"\x00\xffbytes",
    [],
    [1, "two", 3.0, None, [b"x"]],
    {},
    {"a": {"b": {"c": [1, {"d": None}]}}, "": 0},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=repr)
def test_values_round_trip_through_a_commit(store: Store, value) -> None:
    store.commit("t", {"set": {"v": value}, "metadata": {"m": value}})
    state = store.load_latest("t").state
    assert state["vars"]["v"] == value
    assert type(state["vars"]["v"]) is type(value)
    assert state["metadata"]["m"] == value
    assert agentwal.round_trip(value) == value


def test_nan_and_lossy_types_round_trip(store: Store) -> None:
    store.commit("t", {"set": {"nan": float("nan"), "tuple": (1, (2,)), "ba": bytearray(b"q")}})
    v = store.load_latest("t").state["vars"]
    assert math.isnan(v["nan"])
    assert v["tuple"] == [1, [2]]
    assert v["ba"] == b"q" and type(v["ba"]) is bytes


def test_int_and_str_subclasses_are_accepted() -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 1

    assert agentwal.round_trip({"c": Color.RED}) == {"c": 1}


def test_unsupported_types_raise_type_error(store: Store) -> None:
    with pytest.raises(TypeError, match=r'delta\["set"\]\[\'x\'\]\[1\]: unsupported type object'):
        store.commit("t", {"set": {"x": [1, object()]}})
    with pytest.raises(TypeError, match="set"):
        store.commit("t", {"set": {"x": {1, 2}}})
    with pytest.raises(TypeError, match="str keys"):
        store.commit("t", {"set": {"x": {1: "a"}}})
    with pytest.raises(TypeError, match="expected a dict"):
        store.commit("t", {"set": [1]})
    with pytest.raises(TypeError, match="expected a dict"):
        store.commit("t", "not a delta")
    with pytest.raises(TypeError, match="expected a str"):
        store.commit("t", {"messages": [{"content": 3}]})
    with pytest.raises(TypeError, match="expected a list"):
        store.commit("t", {"unset": "x"})
    with pytest.raises(OverflowError, match="64-bit"):
        store.commit("t", {"set": {"big": 2**64}})
    # Nothing of the failed commits was written.
    assert store.load_latest("t") is None
    assert store.tasks() == []


def test_malformed_deltas_raise_invalid_argument(store: Store) -> None:
    with pytest.raises(agentwal.InvalidArgumentError, match="unknown key 'sett'"):
        store.commit("t", {"sett": {}})
    with pytest.raises(ValueError, match='unknown role "robot"'):
        store.commit("t", {"messages": [{"role": "robot"}]})
    with pytest.raises(agentwal.InvalidArgumentError, match="unknown key 'extra'"):
        store.commit("t", {"messages": [{"role": "user", "extra": 1}]})
    loop: list = []
    loop.append(loop)
    with pytest.raises(agentwal.InvalidArgumentError, match="nested deeper"):
        store.commit("t", {"set": {"loop": loop}})


# ---- deltas, messages, state ------------------------------------------------------------


def test_commit_and_load_messages_and_vars(store: Store) -> None:
    seq = store.commit(
        "t",
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"content": "hi"},  # role defaults to user
                {
                    "role": "assistant",
                    "content": "calling",
                    "tool_calls": [{"id": "c1", "name": "search", "args": {"q": "x"}}],
                },
                {"role": "tool", "content": "found", "tool_call_id": "c1", "data": {"n": 3}},
            ],
            "set": {"phase": "start", "scratch": 1},
            "metadata": {"model": "m1"},
        },
    )
    assert seq == 1
    assert store.commit("t", {"unset": ["scratch"], "set": {"phase": "next"}}) == 2
    cp = store.load_latest("t")
    assert isinstance(cp, agentwal.Checkpoint)
    assert (cp.task, cp.seq) == ("t", 2)
    assert cp.created_at_ms > 1_600_000_000_000
    assert cp.state["vars"] == {"phase": "next"}
    assert cp.state["metadata"] == {"model": "m1"}
    msgs = cp.state["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[1] == {
        "role": "user",
        "content": "hi",
        "tool_calls": [],
        "tool_call_id": None,
        "data": None,
    }
    assert msgs[2]["tool_calls"] == [{"id": "c1", "name": "search", "args": {"q": "x"}}]
    assert msgs[3]["tool_call_id"] == "c1" and msgs[3]["data"] == {"n": 3}
    # Checkpoint 1 exactly as it was.
    first = store.load("t", 1)
    assert first.state["vars"] == {"phase": "start", "scratch": 1}
    assert "Checkpoint(" in repr(cp)


def test_empty_delta_is_a_checkpoint(store: Store) -> None:
    assert store.commit("t", {}) == 1
    assert store.load_latest("t").state == {"messages": [], "vars": {}, "metadata": {}}


def test_reopen_recovers_and_reports(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir) as s:
        for i in range(5):
            s.commit("t", {"set": {"i": i}})
    with Store.open(store_dir) as s:
        assert s.load_latest("t").state["vars"] == {"i": 4}
        r = s.recovery_report()
        assert r.records == 5 and r.tasks == 1 and r.torn_bytes == 0
        assert r.skipped == [] and r.lost == []
        assert "RecoveryReport(" in repr(r)


def test_commit_if(store: Store) -> None:
    assert store.commit_if("t", 0, {"set": {"a": 1}}) == 1
    assert store.commit_if("t", 1, {"set": {"a": 2}}) == 2
    with pytest.raises(agentwal.ConflictError) as e:
        store.commit_if("t", 1, {"set": {"a": 3}})
    assert (e.value.task, e.value.expected, e.value.actual) == ("t", 1, 2)
    assert isinstance(e.value, agentwal.AgentwalError)


def test_load_unknown_and_out_of_range(store: Store) -> None:
    assert store.load_latest("nope") is None
    assert store.load("nope", 1) is None
    store.commit("t", {})
    with pytest.raises(agentwal.UnknownSeqError) as e:
        store.load("t", 5)
    assert (e.value.seq, e.value.latest) == (5, 1)
    with pytest.raises(agentwal.UnknownSeqError):
        store.load("t", 0)


def test_list_checkpoints_tasks_fork_delete(store: Store) -> None:
    for i in range(3):
        store.commit("a", {"set": {"i": i}})
    store.commit("b", {})
    infos = store.list_checkpoints("a")
    assert [c.seq for c in infos] == [1, 2, 3]
    assert infos[0].snapshot in (True, False) and infos[0].bytes > 0
    assert infos[0].forked_from is None
    assert "CheckpointInfo(seq=1" in repr(infos[0])
    assert store.list_checkpoints("nope") == []
    assert store.tasks() == ["a", "b"]

    assert store.fork("a", 2, "a2") == 1
    assert store.load_latest("a2").state["vars"] == {"i": 1}
    assert store.list_checkpoints("a2")[0].forked_from == ("a", 2)
    with pytest.raises(agentwal.TaskExistsError):
        store.fork("a", 1, "b")

    store.delete_task("a")
    assert store.tasks() == ["a2", "b"]
    assert store.load_latest("a") is None
    with pytest.raises(agentwal.UnknownTaskError) as e:
        store.delete_task("a")
    assert e.value.task == "a"


def test_load_latest_matching(store: Store) -> None:
    for healthy in (True, True, False):
        store.commit("t", {"set": {"healthy": healthy}})
    cp = store.load_latest_matching("t", lambda s: s["vars"]["healthy"])
    assert cp.seq == 2
    assert store.load_latest_matching("t", lambda s: False) is None

    def boom(_state):
        raise KeyError("from the predicate")

    with pytest.raises(KeyError, match="from the predicate"):
        store.load_latest_matching("t", boom)


def test_compact_stats_flush_verify(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir, segment_bytes=1 << 16, keep_checkpoints=2, sync="never") as s:
        # Random bytes: compression cannot shrink them, so 300 commits fill several segments.
        for i in range(300):
            s.commit(f"t{i % 3}", {"set": {"blob": os.urandom(500), "i": i}})
        s.delete_task("t0")
        s.flush()
        before = s.stats()
        assert before.commits == 300 and before.segments > 1 and before.tasks == 2
        report = s.compact()
        assert isinstance(report, agentwal.CompactionReport)
        assert report.segments_deleted >= 1 and report.bytes_reclaimed > 0
        assert all(isinstance(p, str) for p in report.removed)
        after = s.stats()
        assert after.compactions >= 1 and after.segments < before.segments
        assert [c.seq for c in s.list_checkpoints("t1")] == [99, 100]
        v = s.verify()
        assert v.tasks == 2 and v.checkpoints >= 4 and v.bodies_decoded >= 4
        assert "Stats(commits=300" in repr(before)
    with Store.open(store_dir, keep_checkpoints=2) as s:
        assert s.load_latest("t2").state["vars"]["i"] == 299


def test_periodic_sync_and_options(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir, sync="periodic", periodic_ms=5, cache_bytes=0, snapshot_every=2) as s:
        for i in range(5):
            s.commit("t", {"set": {"i": i}})
        s.flush()
        assert s.load("t", 3).state["vars"] == {"i": 2}
        assert sum(c.snapshot for c in s.list_checkpoints("t")) >= 2
    with Store.open(store_dir, max_age_s=3600.0, recovery="strict") as s:
        assert s.load_latest("t").seq == 5


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sync": "sometimes"},
        {"recovery": "hope"},
        {"periodic_ms": 10},  # without sync="periodic"
        {"sync": "periodic", "periodic_ms": 0},
        {"max_age_s": -1.0},
        {"snapshot_every": 0},
        {"keep_checkpoints": 0},
        {"segment_bytes": 10},
    ],
    ids=repr,
)
def test_bad_options_raise_invalid_argument(store_dir: pathlib.Path, kwargs) -> None:
    with pytest.raises(agentwal.InvalidArgumentError):
        Store.open(store_dir, **kwargs)


def test_close_and_context_manager(store_dir: pathlib.Path) -> None:
    s = Store.open(store_dir)
    assert not s.closed and pathlib.Path(s.path) == store_dir
    with pytest.raises(agentwal.LockedError) as e:
        Store.open(store_dir)
    assert isinstance(e.value.dir, str)
    s.close()
    s.close()
    assert s.closed and "closed" in repr(s)
    with pytest.raises(agentwal.ClosedError):
        s.commit("t", {})
    with Store.open(store_dir) as s2:  # the lock went with close()
        s2.commit("t", {})
    assert s2.closed


# ---- errors -------------------------------------------------------------------------------


def test_exception_hierarchy() -> None:
    names = [
        "CorruptionError",
        "ConflictError",
        "LockedError",
        "ReadOnlyError",
        "NotAStoreError",
        "UnknownTaskError",
        "InvalidArgumentError",
        "RecordTooLargeError",
        "SchemaMismatchError",
        "StoreChangedError",
        "IoError",
        "PendingCallError",
        "ClosedError",
        "TaskExistsError",
        "UnknownSeqError",
        "UnsupportedFormatError",
        "PoisonedError",
        "BodyDecodeError",
    ]
    for name in names:
        cls = getattr(agentwal, name)
        assert issubclass(cls, agentwal.AgentwalError), name
        assert cls.__module__ == "agentwal"
        assert cls.__doc__, name
    assert issubclass(agentwal.InvalidArgumentError, ValueError)
    assert issubclass(agentwal.IoError, OSError)
    e = agentwal.IoError("reading x: boom", errno=5, context="reading x")
    assert e.errno == 5 and e.context == "reading x" and str(e) == "reading x: boom"


def test_ids_too_long_or_empty(store: Store) -> None:
    long = "t" * (agentwal.TASK_ID_BYTES_MAX + 1)
    with pytest.raises(agentwal.InvalidArgumentError, match="513 bytes; the limit is 512"):
        store.commit(long, {})
    with pytest.raises(ValueError, match="empty"):
        store.load_latest("")
    with pytest.raises(agentwal.InvalidArgumentError):
        store.begin_call("t", "c" * (agentwal.CALL_ID_BYTES_MAX + 1), "tool", b"")
    store.commit("t" * agentwal.TASK_ID_BYTES_MAX, {})  # the limit itself is fine


def test_not_a_store(tmp_path: pathlib.Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(agentwal.NotAStoreError) as e:
        Store.open(foreign)
    assert e.value.dir == str(foreign) and "notes.txt" in e.value.reason
    assert (foreign / "notes.txt").read_text() == "mine"  # never taken over
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(agentwal.NotAStoreError, match="not a directory"):
        Store.open(a_file)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(agentwal.NotAStoreError):
        Store.open_read_only(empty)


def test_read_only_store_refuses_writes(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir) as w:
        w.commit("t", {"set": {"a": 1}})
        w.begin_call("t", "c1", "tool", b"args")
        with Store.open_read_only(store_dir) as r:  # also while the writer runs
            assert r.load_latest("t").state["vars"] == {"a": 1}
            assert [p.call_id for p in r.pending_calls("t")] == ["c1"]
            for write in (
                lambda: r.commit("t", {}),
                lambda: r.commit_if("t", 1, {}),
                lambda: r.fork("t", 1, "u"),
                lambda: r.delete_task("t"),
                lambda: r.begin_call("t", "c2", "tool", b""),
                lambda: r.finish_call("t", "c1", b""),
                lambda: r.flush(),
                lambda: r.compact(),
                lambda: r.once("t", "c3", "tool", b"", lambda: b"never"),
            ):
                with pytest.raises(agentwal.ReadOnlyError):
                    write()
            assert r.verify().checkpoints == 1


def test_corrupt_store(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir) as s:
        s.commit("t", {"messages": [{"content": "MARKER-ONE"}]})
        s.commit("t", {"messages": [{"content": "two"}]})
    flip_byte_of(store_dir, b"MARKER-ONE")
    for recovery in ("strict", "tolerate_torn_tail"):
        with pytest.raises(agentwal.CorruptionError) as e:
            Store.open(store_dir, recovery=recovery)
        assert e.value.segment.endswith(".wal") and e.value.offset > 0 and e.value.reason
        assert "corruption in segment" in str(e.value)
    # Salvage reads around the damage and says what it skipped.
    with Store.open_read_only(store_dir, recovery="salvage") as s:
        r = s.recovery_report()
        assert len(r.skipped) == 1 and r.skipped[0].offset == e.value.offset
        assert r.skipped[0].segment == e.value.segment and "checksum" in r.skipped[0].reason
        assert all(isinstance(lc, agentwal.LostCheckpoints) for lc in r.lost)


def test_verify_finds_damage_under_an_open_store(store_dir: pathlib.Path) -> None:
    with Store.open(store_dir, cache_bytes=0) as s:
        s.commit("t", {"messages": [{"content": "MARKER-TWO"}]})
        s.commit("t", {})
        assert s.verify().checkpoints == 2
        flip_byte_of(store_dir, b"MARKER-TWO")
        with pytest.raises(agentwal.CorruptionError) as e:
            s.verify()
        assert e.value.offset > 0


def test_a_record_larger_than_a_segment(store_dir: pathlib.Path) -> None:
    # It gets a segment of its own; only the format's limit (2 GiB) is real.
    blob = b"x" * (1 << 17)
    with Store.open(store_dir, segment_bytes=1 << 16) as s:
        s.commit("t", {"set": {"blob": blob}})
        s.commit("t", {"set": {"n": 1}})
    with Store.open(store_dir, segment_bytes=1 << 16) as s:
        assert s.load_latest("t").state["vars"] == {"blob": blob, "n": 1}


# ---- the call journal and once() ----------------------------------------------------------


def test_call_journal(store: Store) -> None:
    assert store.call_result("t", "c1") is None
    store.begin_call("t", "c1", "send_email", b"to=ops")
    store.begin_call("t", "c1", "send_email", b"to=ops")  # again, same args: a no-op
    with pytest.raises(agentwal.InvalidArgumentError):
        store.begin_call("t", "c1", "send_email", b"to=someone-else")
    pending = store.pending_calls("t")
    assert [(p.call_id, p.tool, p.args) for p in pending] == [("c1", "send_email", b"to=ops")]
    assert "PendingCall(" in repr(pending[0])
    assert store.call_result("t", "c1") is None
    store.finish_call("t", "c1", b"sent")
    assert store.call_result("t", "c1") == b"sent"
    assert store.pending_calls("t") == []
    with pytest.raises(agentwal.InvalidArgumentError):
        store.begin_call("t", "c1", "send_email", b"to=ops")  # after it finished
    with pytest.raises(TypeError):
        store.begin_call("t", "c2", "tool", "a str is not bytes")


def test_once_runs_fn_once(store_dir: pathlib.Path) -> None:
    runs = []

    def send() -> bytes:
        runs.append(1)
        return b"receipt-1"

    with Store.open(store_dir) as s:
        assert s.once("t", "c1", "send_email", b"to=ops", send) == b"receipt-1"
        assert s.once("t", "c1", "send_email", b"to=ops", send) == b"receipt-1"
    with Store.open(store_dir) as s:
        assert s.once("t", "c1", "send_email", b"to=ops", send) == b"receipt-1"
    assert len(runs) == 1


def test_once_after_an_exception_is_pending(store: Store) -> None:
    def fails() -> bytes:
        raise ConnectionError("smtp down")

    with pytest.raises(ConnectionError):
        store.once("t", "c1", "send_email", b"a", fails)
    with pytest.raises(agentwal.PendingCallError) as e:
        store.once("t", "c1", "send_email", b"a", lambda: b"never")
    err = e.value
    assert (err.task, err.call_id, err.tool, err.call_args, err.in_flight) == (
        "t",
        "c1",
        "send_email",
        b"a",
        False,
    )
    assert store.once("t", "c1", "send_email", b"a", lambda: b"ok", retry_pending=True) == b"ok"
    assert store.call_result("t", "c1") == b"ok"
    with pytest.raises(TypeError, match="expected bytes"):
        store.once("t", "c2", "tool", b"", lambda: "a str")
    assert [p.call_id for p in store.pending_calls("t")] == ["c2"]


def test_once_in_flight_on_another_thread(store: Store) -> None:
    entered, release = threading.Event(), threading.Event()
    out = []

    def slow() -> bytes:
        entered.set()
        release.wait(10)
        return b"done"

    t = threading.Thread(target=lambda: out.append(store.once("t", "c", "tool", b"", slow)))
    t.start()
    assert entered.wait(10)
    with pytest.raises(agentwal.PendingCallError) as e:
        store.once("t", "c", "tool", b"", lambda: b"twice", retry_pending=True)
    assert e.value.in_flight
    release.set()
    t.join(10)
    assert out == [b"done"]
    assert store.once("t", "c", "tool", b"", lambda: b"twice") == b"done"


CRASHING_CHILD = textwrap.dedent(
    """
    import sys, time, agentwal
    store = agentwal.Store.open(sys.argv[1])
    def side_effect():
        print("in-side-effect", flush=True)
        time.sleep(60)   # killed here, between begin_call and finish_call
        return b"unreachable"
    store.once("t", "email-1", "send_email", b"to=ops", side_effect)
    """
)


def test_once_after_sigkill_between_begin_and_finish(store_dir: pathlib.Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_CHILD, str(store_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "in-side-effect"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    with Store.open(store_dir) as s:
        assert [p.call_id for p in s.pending_calls("t")] == ["email-1"]
        with pytest.raises(agentwal.PendingCallError) as e:
            s.once("t", "email-1", "send_email", b"to=ops", lambda: b"again")
        assert e.value.call_args == b"to=ops" and not e.value.in_flight
    with Store.open(store_dir) as s:  # still pending across another reopen
        assert s.once("t", "email-1", "send_email", b"to=ops", lambda: b"sent", retry_pending=True) == b"sent"
    with Store.open(store_dir) as s:
        assert s.once("t", "email-1", "send_email", b"to=ops", lambda: b"never") == b"sent"
        assert s.pending_calls("t") == []


# ---- the GIL and group commit --------------------------------------------------------------


def test_threads_share_fsyncs_through_group_commit(store_dir: pathlib.Path) -> None:
    """8 Python threads committing to 8 tasks with sync="always": the GIL is released while
    a commit waits for its fsync, so commits of other threads join the same batch."""
    threads_n, commits_n = 8, 40
    barrier = threading.Barrier(threads_n)
    errors = []
    with Store.open(store_dir, sync="always") as s:

        def worker(i: int) -> None:
            try:
                barrier.wait(10)
                for n in range(commits_n):
                    s.commit(f"task-{i}", {"set": {"n": n}, "messages": [{"content": f"step {n}"}]})
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        stats = s.stats()
        assert stats.commits == threads_n * commits_n
        for i in range(threads_n):
            assert s.load_latest(f"task-{i}").seq == commits_n
        # Group commit: fewer batches than records, so more than one record per fsync.
        assert stats.mean_batch_records > 1.0, stats
        assert stats.batches < stats.commits, stats


# ---- the README's example ------------------------------------------------------------------


def test_readme_python_example_runs(tmp_path: pathlib.Path) -> None:
    """The "Python" section's example runs as written (twice: the second run resumes)."""
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    text = readme.read_text()
    section = text[text.index("\n## Python\n") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")]
    for expected in ("1 {'step': 1}", "2 {'step': 2}"):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected
