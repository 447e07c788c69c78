"""A fake of the bindings componentize-py generates, for tests. The export
protocol is the world `handler`'s; tests switch it for `batch-handler`."""
from typing import List, Protocol

from .imports import types


class WitWorld(Protocol):
    def handle(self, message: types.Message) -> types.Outcome: ...


class BatchWitWorld(Protocol):
    def handle_batch(self, messages: List[types.Message]) -> List[types.Outcome]: ...

