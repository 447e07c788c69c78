from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

@dataclass
class Message:
    id: str
    key: str
    queue: str
    payload: bytes
    headers: List[Tuple[str, str]]
    attempt: int
    enqueued_at_ms: int

@dataclass
class Outcome_Done: ...

@dataclass
class Outcome_Retry:
    value: Optional[int]

@dataclass
class Outcome_Reject:
    value: str

@dataclass
class Outcome_Snooze:
    value: int

Outcome = Union[Outcome_Done, Outcome_Retry, Outcome_Reject, Outcome_Snooze]
