"""Tests of the built {{name}} batch handler: `./build.sh` builds the
component, then each test calls it once on a batch of messages through
`sluice invoke --json`, in the sandbox `sluice run` uses, and asserts on
what it did.

Run them in the project's folder with `python -m pytest` (pytest installed:
see README.md). They need the sluice binary: set SLUICE to its path, or
put `sluice` on PATH.
"""
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parent.parent
NAME = "{{name}}"
Report = dict[str, Any]


class Handler:
    """The built {{name}}.wasm, called through `sluice invoke --json`."""

    def __init__(self, sluice: str, wasm: Path, scratch: Path) -> None:
        self.sluice = sluice
        self.wasm = wasm
        self.scratch = scratch
        self.calls = 0

    def invoke(self, payloads: list[bytes], *args: str) -> Report:
        """Calls the handler once on a batch of messages with these payloads
        (and `sluice invoke` options such as `--set KEY=VALUE`): the JSON report."""
        command = [self.sluice, "--json", "invoke", str(self.wasm)]
        for payload in payloads:
            # From a file: an argument cannot carry bytes that are not UTF-8.
            self.calls += 1
            file = self.scratch / f"payload-{self.calls}"
            file.write_bytes(payload)
            command += ["--payload", f"@{file}"]
        command += args
        run = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT)
        if run.returncode in (1, 2):
            pytest.fail(f"{' '.join(command)} failed (status {run.returncode}):\n{run.stderr}", pytrace=False)
        report: Report = json.loads(run.stdout)
        # The exit status says how the call ended: 0 every message done, else
        # that of the first one not done (10 retry, 11 reject, 12 snooze), or
        # 20 trap, 21 timeout, 22 memory limit for the whole call.
        assert report["status"] == run.returncode, run.stderr
        return report


def info_lines(report: Report) -> list[str]:
    return [line["message"] for line in report["logs"] if line["level"] == "info"]


@pytest.fixture(scope="session")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Handler:
    """Finds sluice, then builds the component once for all the tests."""
    sluice = os.environ.get("SLUICE") or shutil.which("sluice")
    if sluice is None:
        pytest.fail(
            "sluice not found: set SLUICE to the sluice binary, or put it on PATH "
            "(`cargo install --locked --path .` in a clone of the sluice repository)",
            pytrace=False,
        )
    if not os.access(sluice, os.X_OK):
        pytest.fail(f"SLUICE={sluice} is not an executable file: point it at the sluice binary", pytrace=False)
    build = subprocess.run([str(PROJECT / "build.sh")], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"build.sh failed:\n{build.stdout}{build.stderr}", pytrace=False)
    return Handler(sluice, PROJECT / f"{NAME}.wasm", tmp_path_factory.mktemp("payloads"))


def test_each_message_of_a_batch_is_done_and_logged(handler: Handler) -> None:
    report = handler.invoke([b"one", b"two"])
    assert report["status"] == 0
    assert report["outcomes"] == [{"outcome": "done"}, {"outcome": "done"}]
    first, second = report["ids"]
    assert info_lines(report) == [
        f"{NAME}: 2 messages",
        f"{NAME}: message {first} attempt 1",
        f"{NAME}: message {second} attempt 1",
    ]
    assert report["publishes"] == []


def test_forward_to_publishes_each_payload(handler: Handler) -> None:
    report = handler.invoke([b"one", b"two"], "--set", "forward_to=elsewhere")
    assert report["outcomes"] == [{"outcome": "done"}, {"outcome": "done"}]
    assert [(p["queue"], p["payload"]) for p in report["publishes"]] == [
        ("elsewhere", "one"),
        ("elsewhere", "two"),
    ]
    assert report["publishes_committed"] is True


def test_each_message_is_settled_by_its_own_outcome(handler: Handler) -> None:
    # The second payload is not UTF-8: that message alone is rejected.
    report = handler.invoke([b"one", b"\xff\xfe"], "--set", "forward_to=elsewhere")
    assert report["status"] == 11
    assert report["outcomes"] == [
        {"outcome": "done"},
        {"outcome": "reject", "reason": "payload is not UTF-8"},
    ]
    assert [p["payload"] for p in report["publishes"]] == ["one"]
