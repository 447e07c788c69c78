"""The values of the `[config]` table of the handler's sidecar NAME.toml."""
from typing import Dict, Optional, overload

from wit_world.imports import config as _wit


@overload
def get(key: str) -> Optional[str]: ...
@overload
def get(key: str, default: str) -> str: ...
def get(key: str, default: Optional[str] = None) -> Optional[str]:
    """The value of `key`, or `default` when it is not set."""
    value = _wit.get(key)
    return default if value is None else value


def get_all() -> Dict[str, str]:
    """Every key set for this handler, with its value."""
    return dict(_wit.get_all())
