"""What observability reads from a node: its public attributes, nothing it must call to change."""

from __future__ import annotations

from typing import Protocol

from axl.budgets import BudgetBoard
from axl.identity import NodeIdentity
from axl.link.connection import Link
from axl.node.inbox import Inbox
from axl.node.stats import ListenerCounts, NodeStats
from axl.tcp.recovery import PathStats


class ObservedNode(Protocol):
    identity: NodeIdentity
    stats: NodeStats
    inbox: Inbox
    links: dict[int, Link]
    budgets: BudgetBoard

    def topology(self) -> dict: ...

    def session_count(self) -> int: ...

    def listener_counts(self) -> ListenerCounts: ...

    def overlay_paths(self) -> list[tuple[str, PathStats]]: ...
