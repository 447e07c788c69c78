from enum import Enum

import fakehost


class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def log(level: Level, message: str) -> None:
    assert isinstance(level, Level) and isinstance(message, str)
    fakehost.HOST.logs.append((level.name.lower(), message))
