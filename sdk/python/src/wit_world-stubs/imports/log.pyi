from enum import Enum

class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4

def log(level: Level, message: str) -> None: ...
