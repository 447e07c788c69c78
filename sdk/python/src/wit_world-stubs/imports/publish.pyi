# Both calls raise componentize_py_types.Err(str) on failure.
from dataclasses import dataclass
from typing import List, Optional, Tuple

@dataclass
class PublishOptions:
    headers: List[Tuple[str, str]]
    key: Optional[str]
    delay_ms: Optional[int]

def publish(queue: str, payload: bytes, options: PublishOptions) -> None: ...
def publish_to_topic(
    topic: str, route: str, payload: bytes, options: PublishOptions
) -> int: ...
