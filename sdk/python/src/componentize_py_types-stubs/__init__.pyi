# Types of the module componentize-py generates at build time, as far as the
# sluice SDK uses it (a WIT `result` error is raised as `Err`).
from dataclasses import dataclass
from typing import Generic, TypeVar

E = TypeVar("E")

@dataclass(frozen=True)
class Err(Generic[E], Exception):
    value: E
