"""Lines into the host's log, tagged there with the handler and message."""
from wit_world.imports import log as _wit


def trace(message: str) -> None:
    _wit.log(_wit.Level.TRACE, message)


def debug(message: str) -> None:
    _wit.log(_wit.Level.DEBUG, message)


def info(message: str) -> None:
    _wit.log(_wit.Level.INFO, message)


def warn(message: str) -> None:
    _wit.log(_wit.Level.WARN, message)


def error(message: str) -> None:
    _wit.log(_wit.Level.ERROR, message)
