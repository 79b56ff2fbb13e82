"""The LangGraph saver's async methods: each runs its sync twin in a worker thread
(``asyncio.to_thread``), so that an fsync or a round trip to PostgreSQL never blocks the
event loop; the store releases the GIL while it waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

if TYPE_CHECKING:
    from .langgraph import AgentwalSaver


class AsyncTwins:
    """The async methods of :class:`agentwal.langgraph.AgentwalSaver`, over the sync ones
    it defines."""

    async def aget_tuple(
        self: AgentwalSaver, config: RunnableConfig
    ) -> Optional[CheckpointTuple]:
        """:meth:`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def aget_delta_channel_history(
        self: AgentwalSaver, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Dict[str, Dict[str, Any]]:
        """:meth:`get_delta_channel_history` in a worker thread."""
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )

    async def alist(
        self: AgentwalSaver,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` in a worker thread (the whole result at once), then yielded."""
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self: AgentwalSaver,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self: AgentwalSaver,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self: AgentwalSaver, thread_id: str) -> None:
        """:meth:`delete_thread` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(
        self: AgentwalSaver, source_thread_id: str, target_thread_id: str
    ) -> None:
        """:meth:`copy_thread` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self: AgentwalSaver, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(
        self: AgentwalSaver, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
    ) -> None:
        """:meth:`prune` in a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
