"""Bad input on the saver path, through a real graph and through the saver's methods: each
case raises a Python exception with a clear message, commits nothing half-done, and leaves
the saver (and the interpreter) working."""

from __future__ import annotations

import threading
from typing import Any, TypedDict
from urllib.parse import quote

import pytest
from langgraph.graph import END, START, StateGraph

import agentwal
from agentwal.langgraph import AgentwalSaver


class S(TypedDict):
    """A state with one value of any type."""

    v: Any


def _graph(saver, value_of):
    g = StateGraph(S)
    g.add_node("a", lambda s: {"v": value_of(s["v"])})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def _cfg(thread, ns="", cid=None):
    c = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if cid:
        c["configurable"]["checkpoint_id"] = cid
    return c


def _checkpoint(cid, values, versions):
    return {"v": 4, "id": cid, "ts": "2026-12-01T00:00:00+00:00", "channel_values": values,
            "channel_versions": versions, "versions_seen": {}, "updated_channels": None}


def _works(saver, thread="ok"):
    app = _graph(saver, lambda v: v + 1)
    config = {"configurable": {"thread_id": thread}}
    assert app.invoke({"v": 1}, config, durability="sync") == {"v": 2}


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_value_the_serializer_rejects(tmp_path, durability):
    """A node returns a value the serializer rejects: TypeError, in each durability mode."""
    with AgentwalSaver(tmp_path / "s") as saver:
        app = _graph(saver, lambda v: threading.Lock())  # no serializer takes a lock
        config = {"configurable": {"thread_id": "t"}}
        with pytest.raises(TypeError, match="not msgpack serializable: _thread.lock"):
            app.invoke({"v": 1}, config, durability=durability)
        # What was stored before the failure reads back; nothing holds the lock.
        state = app.get_state(config)
        assert state.values in ({}, {"v": 1})
        _works(saver, f"ok-{durability}")
    with AgentwalSaver(tmp_path / "s") as saver:  # and from disk
        assert _graph(saver, lambda v: v).get_state({"configurable": {"thread_id": "t"}})


def test_put_and_put_writes_with_bad_values_commit_nothing(tmp_path):
    """A bad channel value, metadata value or write: TypeError before anything is committed."""
    with AgentwalSaver(tmp_path / "s", sync="never") as saver:
        v = saver.get_next_version(None, None)
        bad = _checkpoint("1ef0-1", {"a": 1, "b": [1, object()]}, {"a": v, "b": v})
        with pytest.raises(TypeError, match="not msgpack serializable: object"):
            saver.put(_cfg("t"), bad, {}, {"a": v, "b": v})
        with pytest.raises(TypeError, match="not msgpack serializable"):
            saver.put(_cfg("t"), _checkpoint("1ef0-1", {}, {}), {"custom": object()}, {})
        assert saver.store.stats().commits == 0 and saver.get_tuple(_cfg("t")) is None
        good = saver.put(_cfg("t"), _checkpoint("1ef0-1", {"a": 1}, {"a": v}), {}, {"a": v})
        with pytest.raises(TypeError, match="not msgpack serializable"):
            saver.put_writes(good, [("a", 2), ("b", object())], "task-1")
        assert saver.store.stats().commits == 1
        assert saver.get_tuple(good).pending_writes == []
        saver.put_writes(good, [("a", 2)], "task-1")
        assert saver.get_tuple(good).pending_writes == [("task-1", "a", 2)]


def test_thread_ids_too_long_for_a_task_name(tmp_path):
    """The task name limit, at its boundary, with percent-encoding and with a namespace."""
    limit = agentwal.TASK_ID_BYTES_MAX
    fits = "x" * (limit - len("lg:") - len(":"))
    with AgentwalSaver(tmp_path / "s", sync="never") as saver:
        app = _graph(saver, lambda v: v)
        assert app.invoke({"v": 1}, {"configurable": {"thread_id": fits}}) == {"v": 1}
        with pytest.raises(ValueError, match=rf"too long for agentwal.*is {limit + 1} bytes, "
                                             rf"the limit is {limit}"):
            app.invoke({"v": 1}, {"configurable": {"thread_id": fits + "x"}})
        # Percent-encoding counts: 171 slashes are 513 bytes once quoted.
        slashes = "/" * 171
        assert len(quote(slashes, safe="")) == 513
        with pytest.raises(ValueError, match="too long"):
            app.invoke({"v": 1}, {"configurable": {"thread_id": slashes}})
        # A namespace adds to the name.
        with pytest.raises(ValueError, match="thread_id and checkpoint_ns are too long"):
            saver.put(_cfg("t", "n" * limit), _checkpoint("1ef0-1", {}, {}), {}, {})
        with pytest.raises(ValueError, match="too long"):
            saver.put_writes(_cfg("t", "n" * limit, "1ef0-1"), [("a", 1)], "task")
        with pytest.raises(ValueError, match="too long"):
            list(saver.list(_cfg("t", "n" * limit)))
        saver.delete_thread(fits)
        assert app.get_state({"configurable": {"thread_id": fits}}).values == {}
        _works(saver)


def test_thread_id_that_is_not_valid_unicode(tmp_path):
    """A lone surrogate cannot be encoded as UTF-8: a ValueError that says so (it was a
    UnicodeEncodeError from inside URL quoting)."""
    with AgentwalSaver(tmp_path / "s", sync="never") as saver:
        app = _graph(saver, lambda v: v)
        with pytest.raises(ValueError, match="thread_id 'a\\\\ud800' is not valid Unicode text"):
            app.invoke({"v": 1}, {"configurable": {"thread_id": "a\ud800"}})
        with pytest.raises(ValueError, match="checkpoint_ns .* lone surrogate at position 0"):
            saver.get_tuple(_cfg("t", "\udc80"))
        with pytest.raises(ValueError, match="lone surrogate"):
            saver.delete_thread("\ud800")
        _works(saver)


def test_a_value_larger_than_a_segment(tmp_path):
    """A checkpoint larger than a segment gets a segment of its own: it commits, reads
    back (also after a reopen), and the saver goes on."""
    big = b"x" * (2 << 20)
    config = {"configurable": {"thread_id": "big"}}
    with AgentwalSaver(tmp_path / "s", segment_bytes=1 << 20) as saver:
        app = _graph(saver, lambda v: v)
        app.invoke({"v": big}, config, durability="sync")
        assert app.get_state(config).values == {"v": big}
        _works(saver)
    with AgentwalSaver(tmp_path / "s", segment_bytes=1 << 20) as saver:
        assert _graph(saver, lambda v: v).get_state(config).values == {"v": big}


def test_a_saver_over_a_closed_store(tmp_path):
    """A store closed under the saver: ClosedError, not a crash."""
    store = agentwal.Store.open(tmp_path / "s", sync="never")
    saver = AgentwalSaver(store)
    _works(saver)
    store.close()
    app = _graph(saver, lambda v: v)
    with pytest.raises(agentwal.ClosedError):
        app.invoke({"v": 1}, {"configurable": {"thread_id": "new"}})
    with pytest.raises(agentwal.ClosedError):
        list(saver.list(None))
