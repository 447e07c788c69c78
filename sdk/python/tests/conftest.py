"""Runs the SDK (from ../src) over a fake of the `wit_world` bindings
(tests/fake) that records what a handler does and plays the host's answers.

`host` (autouse) is the fake host's fresh state for each test; `load_app`
imports an app.py as componentize-py does, as the module `app`, for a world.
"""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
sys.path[:0] = [str(SDK / "src"), str(HERE / "fake")]

import fakehost  # noqa: E402
import wit_world  # noqa: E402

WORLDS = {"handler": wit_world.WitWorld, "batch-handler": wit_world.BatchWitWorld}


@pytest.fixture(autouse=True)
def host() -> fakehost.Host:
    return fakehost.reset()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Sets the world the "build" is for: `handler` unless a test says."""

    def set_world(name: str) -> None:
        monkeypatch.setattr(wit_world, "WitWorld", WORLDS[name])

    return set_world


@pytest.fixture
def load_app(world: Callable[[str], None]) -> Iterator[Callable[..., ModuleType]]:
    """Imports a file as the module `app` for a world, as componentize-py
    does at build time; the module is forgotten after the test."""

    def load(path: Path, world_name: str = "handler") -> ModuleType:
        world(world_name)
        spec = importlib.util.spec_from_file_location("app", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["app"] = module
        spec.loader.exec_module(module)
        return module

    yield load
    sys.modules.pop("app", None)


@pytest.fixture
def app_module() -> Iterator[ModuleType]:
    """An empty module `app` for handlers defined inside a test."""
    module = ModuleType("app")
    sys.modules["app"] = module
    yield module
    sys.modules.pop("app", None)
