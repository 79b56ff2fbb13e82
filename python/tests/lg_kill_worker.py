"""The child of the kill -9 tests (test_langgraph_kill.py): a LangGraph tool loop on
AgentwalSaver with ``durability="sync"``, whose tool appends a line to an outbox file
through agentwal's call journal (``Store.once``).

One *round* opens the store, resumes the thread (or starts it) and runs it to the end,
unless it is killed first. It writes to stdout, one line per ``os.write`` (atomic on a
pipe):

- ``ready``: the store is open and the round is about to run the graph;
- ``ack <checkpoint_id> <step>``: ``put`` of that root checkpoint returned (it is durable:
  the store syncs every commit);
- ``pending <call_id> done-before|redo``: the journal showed a call begun and never
  finished (a kill between its begin and its finish); the outbox told whether the side
  effect had happened (then the call is finished with the receipt, no second line) or not
  (then it runs again);
- ``done``: the run is complete.

Usage::

    python lg_kill_worker.py run <store dir> <outbox> <thread> <steps>
    python lg_kill_worker.py serve     # a fork server: reads "run ..." lines on stdin

``serve`` imports LangGraph once and forks one child per ``run`` line (a fresh
interpreter would spend about a second importing, which is most of a round); it writes
``pid <pid>`` for each child and ``exit <pid> <wait status>`` once the child is gone, so
the parent can kill the child and knows when all of its output is in the pipe.

``AGENTWAL_LG_CRASH=<point>:<step>`` (or ``crash=<point>:<step>`` after the ``run``
arguments) makes a round kill itself with SIGKILL inside the tool of step ``<step>``:
``begun`` (after the journal's begin, before the side effect) or ``effect`` (after the
side effect, before the journal's finish). The tool waits ``LATENCY`` seconds on each side
of the append, as a tool that talks to a service would, so that random kills land inside
it now and then.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Annotated, Any, Callable, Optional

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import agentwal
from agentwal.langgraph import AgentwalSaver

RECURSION_LIMIT = 10_000
LATENCY = 0.002  # seconds the tool waits before and after its side effect
_crash_point = os.environ.get("AGENTWAL_LG_CRASH", "")


def out(line: str) -> None:
    """One line to stdout in one write (atomic on a pipe, so lines never interleave)."""
    os.write(1, (line + "\n").encode())


def receipt(call_id: str) -> str:
    """What the outbox tool returns for ``call_id`` (and the journal records)."""
    return f"sent {call_id}"


def outbox_line(thread: str, call_id: str, step: int) -> str:
    """The outbox line of one call (the side effect)."""
    return f"{thread} {call_id} {step}"


def fake_model(steps: int) -> Callable[[MessagesState], Any]:
    """A chat model as a node: one ``outbox`` tool call per round, ``steps`` rounds, then
    an answer. Its tool-call ids are deterministic (``call-<k>``), so a re-run of the
    node after a kill asks for the same call, which the journal recognizes."""

    def model(state: MessagesState):
        k = sum(isinstance(m, ToolMessage) for m in state["messages"])
        if k < steps:
            return {"messages": [AIMessage(content="", id=f"ai-{k}", tool_calls=[
                {"id": f"call-{k}", "name": "outbox", "args": {"step": k}}])]}
        return {"messages": [AIMessage(content=f"done after {k} steps", id="ai-final")]}

    return model


def build(checkpointer: Any, steps: int, send: Callable[[int, str], str]) -> Any:
    """The tool loop: model -> (tools -> model)* -> END; ``send(step, call_id)`` is the
    outbox tool's body and returns its receipt."""

    @tool
    def outbox(step: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Sends the message of ``step`` (appends it to the outbox)."""
        return send(step, tool_call_id)

    g = StateGraph(MessagesState)
    g.add_node("model", fake_model(steps))
    g.add_node("tools", ToolNode([outbox]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile(checkpointer=checkpointer)


def first_input() -> dict:
    """The run's input."""
    return {"messages": [HumanMessage(content="send the messages", id="human-0")]}


def journal_task(thread: str) -> str:
    """The agentwal task whose call journal records the outbox calls of ``thread``."""
    return f"outbox:{thread}"


class AckingSaver(AgentwalSaver):
    """AgentwalSaver that reports each root checkpoint once ``put`` returned."""

    def put(self, config, checkpoint, metadata, new_versions):
        """:meth:`AgentwalSaver.put`, then ``ack <id> <step>`` on stdout."""
        cfg = super().put(config, checkpoint, metadata, new_versions)
        if not cfg["configurable"]["checkpoint_ns"]:
            out(f"ack {checkpoint['id']} {metadata.get('step')}")
        return cfg


def _crash_here(point: str, step: int) -> None:
    if _crash_point == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def _read_lines(path: str) -> list:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return data.decode().split("\n")


def make_send(store: agentwal.Store, outbox_path: str, thread: str) -> Callable[[int, str], str]:
    """The outbox tool's body: ``Store.once`` around an append to the outbox file.

    A call found pending (begun, never finished: a kill came in between) is resolved by
    looking at the outbox, which is keyed by call id: if the line is there the side
    effect happened, so the call is finished with its receipt; if not, it runs again. A
    kill during the append itself can leave a line without its newline: it did not
    happen, and is cut off before the next append."""
    task = journal_task(thread)

    def effect(step: int, call_id: str) -> bytes:
        time.sleep(LATENCY)
        _crash_here("begun", step)
        fd = os.open(outbox_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size:
                data = os.pread(fd, size, 0)
                if not data.endswith(b"\n"):  # a torn append: never happened
                    os.ftruncate(fd, data.rfind(b"\n") + 1)
            os.write(fd, (outbox_line(thread, call_id, step) + "\n").encode())
        finally:
            os.close(fd)
        # Only a process crash is tested (the page cache survives it): no fsync.
        _crash_here("effect", step)
        time.sleep(LATENCY)
        return receipt(call_id).encode()

    def send(step: int, call_id: str) -> str:
        args = json.dumps({"step": step}).encode()
        try:
            return store.once(task, call_id, "outbox", args, lambda: effect(step, call_id)).decode()
        except agentwal.PendingCallError as e:
            if e.in_flight:
                raise
        if outbox_line(thread, call_id, step) in _read_lines(outbox_path):
            out(f"pending {call_id} done-before")
            store.finish_call(task, call_id, receipt(call_id).encode())
            return receipt(call_id)
        out(f"pending {call_id} redo")
        return store.once(
            task, call_id, "outbox", args, lambda: effect(step, call_id), retry_pending=True
        ).decode()

    return send


def run_round(store_dir: str, outbox_path: str, thread: str, steps: int) -> None:
    """Opens the store, resumes (or starts) ``thread`` and runs it to its end."""
    with agentwal.Store.open(store_dir) as store:  # sync="always"
        saver = AckingSaver(store)
        app = build(saver, steps, make_send(store, outbox_path, thread))
        config = {"configurable": {"thread_id": thread}, "recursion_limit": RECURSION_LIMIT}
        state = app.get_state(config)
        out("ready")
        if state.config["configurable"].get("checkpoint_id") is None:
            app.invoke(first_input(), config, durability="sync")
        elif state.tasks:
            # Not ``state.next``: it leaves out the tasks whose writes are saved, and a kill
            # between the last task's put_writes and the next put leaves only such tasks.
            app.invoke(None, config, durability="sync")
        out("done")


def serve() -> None:
    """The fork server: one forked child per ``run ...`` line of stdin."""
    global _crash_point
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            return
        if cmd[0] != "run" or len(cmd) not in (5, 6):
            out(f"error bad command {line.strip()!r}")
            continue
        if threading.active_count() != 1:  # forking a threaded process is unsafe
            out(f"error {threading.active_count()} threads in the fork server")
            return
        pid = os.fork()
        if pid == 0:
            _crash_point = cmd[5][len("crash="):] if len(cmd) == 6 else ""
            status = 0
            try:
                run_round(cmd[1], cmd[2], cmd[3], int(cmd[4]))
            except BaseException:  # noqa: BLE001 - reported, then a failing exit status
                import traceback

                traceback.print_exc()
                status = 1
            finally:
                sys.stderr.flush()
                os._exit(status)
        out(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        out(f"exit {pid} {status}")


def main(argv: Optional[list] = None) -> None:
    """``run`` one round or ``serve`` rounds (see the module's docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"] and len(argv) == 5:
        run_round(argv[1], argv[2], argv[3], int(argv[4]))
    elif argv == ["serve"]:
        serve()
    else:
        sys.exit(f"usage: {sys.argv[0]} run <store dir> <outbox> <thread> <steps> | serve")


if __name__ == "__main__":
    main()
