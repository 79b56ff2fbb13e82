"""How the LangGraph saver names its agentwal tasks and checks LangGraph's ids.

One agentwal task per ``(thread_id, checkpoint_ns)``, named
``lg:<quote(thread_id)>:<quote(checkpoint_ns)>`` (percent-encoding, so ``:`` never appears
inside a part and the name decodes back). Task names are UTF-8 and at most
``TASK_ID_BYTES_MAX`` bytes; what breaks either gets a ValueError or TypeError here, before
the store sees it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple
from urllib.parse import quote, unquote

from ._agentwal import TASK_ID_BYTES_MAX

_TASK_PREFIX = "lg:"


def task_name(thread_id: str, checkpoint_ns: str) -> str:
    """The agentwal task of a thread namespace; ValueError if the name is too long."""
    name = f"{_TASK_PREFIX}{quote(thread_id, safe='')}:{quote(checkpoint_ns, safe='')}"
    if len(name.encode()) > TASK_ID_BYTES_MAX:
        raise ValueError(
            f"thread_id and checkpoint_ns are too long for agentwal: the task name "
            f"{name[:60]!r}... is {len(name.encode())} bytes, the limit is {TASK_ID_BYTES_MAX}"
        )
    return name


def thread_prefix(thread_id: Optional[str] = None) -> str:
    """The prefix every task name of ``thread_id`` starts with (of every saver task for
    None): what ``tasks_with_prefix`` lists."""
    if thread_id is None:
        return _TASK_PREFIX
    return f"{_TASK_PREFIX}{quote(thread_id, safe='')}:"


def parse_task_name(name: str) -> Optional[Tuple[str, str]]:
    """``(thread_id, checkpoint_ns)`` of a saver task; None for any other task of the store."""
    if not name.startswith(_TASK_PREFIX):
        return None
    parts = name[len(_TASK_PREFIX) :].split(":")
    if len(parts) != 2:
        return None
    return unquote(parts[0]), unquote(parts[1])


def thread_id_of(config: Any, what: str = "config") -> str:
    """The checked ``thread_id`` of a LangGraph config."""
    if not isinstance(config, dict) or not isinstance(config.get("configurable"), dict):
        raise ValueError(f"{what} must be a dict with a 'configurable' dict, got {config!r}")
    thread_id = config["configurable"].get("thread_id")
    if thread_id is None:
        raise ValueError(f"{what}['configurable'] has no 'thread_id'")
    return check_thread_id(thread_id)


def check_thread_id(thread_id: Any) -> str:
    """``thread_id`` as a non-empty UTF-8 str (an int is taken as its decimal text)."""
    if isinstance(thread_id, bool) or not isinstance(thread_id, (str, int)):
        raise TypeError(f"thread_id must be a str (or an int), got {type(thread_id).__name__}")
    thread_id = str(thread_id)
    if not thread_id:
        raise ValueError("thread_id is empty")
    _check_utf8("thread_id", thread_id)
    return thread_id


def _check_utf8(what: str, text: str) -> None:
    """Task names are UTF-8: a str with a lone surrogate gets a clear ValueError here
    instead of a UnicodeEncodeError from deep inside quoting."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{what} {text[:60]!r} is not valid Unicode text (a lone surrogate at "
            f"position {e.start}): agentwal names its tasks in UTF-8"
        ) from None


def ns_of(config: Dict[str, Any]) -> str:
    """The checked ``checkpoint_ns`` of a LangGraph config ('' if absent or None)."""
    ns = config["configurable"].get("checkpoint_ns", "")
    if ns is None:
        ns = ""
    if not isinstance(ns, str):
        raise TypeError(f"checkpoint_ns must be a str, got {type(ns).__name__}")
    _check_utf8("checkpoint_ns", ns)
    return ns
