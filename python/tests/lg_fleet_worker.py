"""A long-lived worker of the fleet tests (test_langgraph_fleet.py): one process holding ONE
:class:`AgentwalSaver` open for its whole life, as a worker of a fleet does, with one
LangGraph chat graph built on it. Several such workers share one store and take the turns
of a thread in alternation; nothing runs at the same time.

The graph is ``StateGraph(MessagesState)`` with one deterministic fake model node: it
answers the last human message ``m`` with ``AIMessage("echo " + m.content, id="ai-" +
m.id)``, so the exact message list after any sequence of turns is known in advance
(:func:`expected_messages`).

It reads commands on stdin, one per line, and answers each with one line on stdout (one
``os.write``, atomic on a pipe):

- ``turn <thread> <k>``: invokes the graph on ``<thread>`` with the input of turn ``<k>``
  (:func:`turn_input`), ``durability="sync"``; answers ``ok <thread> <k> <checkpoint_id>
  <n> <json>``: the thread's latest checkpoint id as this worker's saver sees it after the
  turn, and the ``n`` messages of the state the graph returned, as the JSON of
  :func:`describe`;
- ``state <thread>``: what this worker's saver would resume ``<thread>`` from: ``state
  <thread> <checkpoint_id or -> <n> <json>``;
- ``history <thread>``: ``history <thread> <count>``, the number of checkpoints this
  worker's saver lists for ``<thread>``;
- ``delete <thread>``: ``delete_thread``; answers ``deleted <thread>``;
- ``prune <thread>``: ``prune([thread], strategy="keep_latest")``; answers ``pruned
  <thread>``;
- ``quit``: closes the saver and exits.

A command that raises answers ``error <command> <exception>`` (the traceback goes to
stderr) and the worker keeps serving, so the test counts a wrong turn instead of hanging.
``ready`` is written once the saver is open and the graph built.

Usage::

    python lg_fleet_worker.py pg <postgresql url> <schema>
    python lg_fleet_worker.py local <store dir>

A local store directory can be opened by one process only (it is locked), so the local
fleet test shares one ``agentwal.Store`` between savers in one process instead, with the
same graph (:func:`build`).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Iterable, List, Optional

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from agentwal.langgraph import AgentwalSaver


def out(line: str) -> None:
    """One line to stdout in one write (atomic on a pipe, so lines never interleave)."""
    os.write(1, (line + "\n").encode())


def config(thread: str) -> dict:
    """The config of ``thread``'s root namespace (the only one the chat graph uses)."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def turn_input(thread: str, k: int) -> dict:
    """The graph input of turn ``k`` of ``thread``: one human message with a fixed id."""
    return {"messages": [HumanMessage(content=f"turn {k}", id=f"h-{thread}-{k}")]}


def model(state: MessagesState) -> dict:
    """The fake chat model: echoes the last human message, with an id derived from its id
    (a re-run of the node would produce the very same message)."""
    human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
    return {"messages": [AIMessage(content=f"echo {human.content}", id=f"ai-{human.id}")]}


def build(checkpointer: Any) -> Any:
    """The chat graph: START -> model -> END, on ``checkpointer``."""
    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_edge(START, "model")
    return g.compile(checkpointer=checkpointer)


def describe(messages: Iterable[BaseMessage]) -> List[List[str]]:
    """The messages as ``[type, content, id]`` triples: what the tests compare."""
    return [[m.type, m.content, m.id] for m in messages]


def expected_messages(thread: str, turns: Iterable[int]) -> List[List[str]]:
    """The :func:`describe` of ``thread``'s state after exactly ``turns`` (in order), with
    nothing lost and nothing else."""
    want = []
    for k in turns:
        want.append(["human", f"turn {k}", f"h-{thread}-{k}"])
        want.append(["ai", f"echo turn {k}", f"ai-h-{thread}-{k}"])
    return want


def _messages_line(cid: Optional[str], messages: List[BaseMessage]) -> str:
    """``<checkpoint_id or -> <n> <json>`` (the JSON has no spaces, so the line splits)."""
    desc = describe(messages)
    return f"{cid or '-'} {len(desc)} {json.dumps(desc, separators=(',', ':'))}"


def run_command(saver: AgentwalSaver, app: Any, cmd: List[str]) -> str:
    """Runs one command (see the module's docstring); returns the answer line."""
    if cmd[0] == "turn" and len(cmd) == 3:
        thread, k = cmd[1], int(cmd[2])
        result = app.invoke(turn_input(thread, k), config(thread), durability="sync")
        cid = app.get_state(config(thread)).config["configurable"].get("checkpoint_id")
        return f"ok {thread} {k} {_messages_line(cid, result['messages'])}"
    if cmd[0] == "state" and len(cmd) == 2:
        t = saver.get_tuple(config(cmd[1]))
        if t is None:
            return f"state {cmd[1]} {_messages_line(None, [])}"
        cid = t.config["configurable"]["checkpoint_id"]
        return f"state {cmd[1]} {_messages_line(cid, t.checkpoint['channel_values'].get('messages', []))}"
    if cmd[0] == "history" and len(cmd) == 2:
        return f"history {cmd[1]} {len(list(saver.list(config(cmd[1]))))}"
    if cmd[0] == "delete" and len(cmd) == 2:
        saver.delete_thread(cmd[1])
        return f"deleted {cmd[1]}"
    if cmd[0] == "prune" and len(cmd) == 2:
        saver.prune([cmd[1]], strategy="keep_latest")
        return f"pruned {cmd[1]}"
    raise ValueError(f"bad command {' '.join(cmd)!r}")


def answer(saver: AgentwalSaver, app: Any, line: str) -> str:
    """The answer line to the command ``line``; ``error ...`` if it raised (the traceback
    goes to stderr), so that a failing command is reported rather than fatal."""
    cmd = line.split()
    try:
        return run_command(saver, app, cmd)
    except Exception as e:  # noqa: BLE001 - reported in the answer, the worker lives on
        traceback.print_exc()
        sys.stderr.flush()
        return f"error {' '.join(cmd)} {type(e).__name__}: {e}".replace("\n", " ")


def serve(saver: AgentwalSaver) -> None:
    """Answers the commands of stdin with ``saver`` until ``quit`` or the end of stdin."""
    app = build(saver)
    out("ready")
    for line in sys.stdin:
        if not line.split():
            continue
        if line.split() == ["quit"]:
            return
        out(answer(saver, app, line))


def main(argv: Optional[list] = None) -> None:
    """Opens the saver on the backend of ``argv`` and serves (see the module's docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "pg":
        saver = AgentwalSaver(argv[1], schema=argv[2])
    elif len(argv) == 2 and argv[0] == "local":
        saver = AgentwalSaver(argv[1])
    else:
        sys.exit(f"usage: {sys.argv[0]} pg <postgresql url> <schema> | local <store dir>")
    with saver:
        serve(saver)


if __name__ == "__main__":
    main()
