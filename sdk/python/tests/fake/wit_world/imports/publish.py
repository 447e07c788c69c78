from dataclasses import dataclass
from typing import List, Optional, Tuple

import fakehost
from componentize_py_types import Err


@dataclass
class PublishOptions:
    headers: List[Tuple[str, str]]
    key: Optional[str]
    delay_ms: Optional[int]


def _hold(topic: Optional[str], target: str, payload: bytes, options: PublishOptions) -> None:
    if fakehost.HOST.publish_error is not None:
        raise Err(fakehost.HOST.publish_error)
    assert isinstance(payload, bytes)
    assert all(isinstance(h, tuple) and len(h) == 2 for h in options.headers)
    fakehost.HOST.published.append(
        fakehost.Published(topic, target, payload, options.headers, options.key, options.delay_ms)
    )


def publish(queue: str, payload: bytes, options: PublishOptions) -> None:
    _hold(None, queue, payload, options)


def publish_to_topic(topic: str, route: str, payload: bytes, options: PublishOptions) -> int:
    _hold(topic, route, payload, options)
    return fakehost.HOST.topic_copies
