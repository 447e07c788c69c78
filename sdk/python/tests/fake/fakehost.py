"""The state behind the fake `wit_world`: what a test sets up for the
handler (config, kv, failures) and what the handler did (logs, publishes)."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass
class Published:
    topic: Optional[str]  # None for a publish to a queue
    target: str  # the queue, or the route of a topic publish
    payload: bytes
    headers: List[Tuple[str, str]]
    key: Optional[str]
    delay_ms: Optional[int]


@dataclass
class Host:
    config: Dict[str, str] = field(default_factory=dict)
    kv: Dict[str, bytes] = field(default_factory=dict)
    kv_ttl_ms: Dict[str, Optional[int]] = field(default_factory=dict)
    # When set, every kv call fails with this reason.
    kv_error: Optional[str] = None
    # When set, every publish fails with this reason.
    publish_error: Optional[str] = None
    topic_copies: int = 2
    time_left_ms: int = 5000
    # The deadline cannot move past this many ms from now.
    max_left_ms: int = 60000
    logs: List[Tuple[str, str]] = field(default_factory=list)
    published: List[Published] = field(default_factory=list)

    def lines(self, level: str) -> List[str]:
        return [text for lvl, text in self.logs if lvl == level]


HOST = Host()


def reset() -> Host:
    global HOST
    HOST = Host()
    return HOST
