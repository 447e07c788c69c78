"""The errors the host's calls report (a WIT `result`'s error string)."""


class PublishError(Exception):
    """`publish` or `publish_to_topic` failed; `reason` says why (an invalid
    name, a message over the size limit, no queue bound for the route)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KvError(Exception):
    """A key-value call failed; `reason` says why (the handler is not granted
    the store, a bad key or value, the store cannot be reached)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
