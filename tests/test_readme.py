"""The README's examples run as written."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from workflow.client import Approver
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_the_quick_start_as_two_command_lines() -> None:
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", quick, flags=re.S)
    assert "headgate serve" in commands[0]
    assert "pytest" in commands[1]
    assert all(len(c.strip().splitlines()) == 1 for c in commands[:2])
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest" in ci


async def test_raw_nats_py_agent_example_runs_to_a_release(tmp_path: Path) -> None:
    """Against the server `headgate serve` starts, with the credentials it writes."""
    (block,) = [b for b in python_blocks() if "nats.connect(url, nkeys_seed=" in b]
    workdir = tmp_path / "agent"
    data = workdir / ".headgate"
    script = workdir / "agent.py"
    data.mkdir(parents=True)
    script.write_text(block)
    service = Service(Settings(data_dir=data, prefix="headgate"))
    await service.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            cwd=workdir,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        async with Approver.connect(name="me", key=data / "approver.seed", data_dir=data) as me:
            inbox = me.inbox()
            item = await asyncio.wait_for(inbox.__anext__(), 10)
            await inbox.aclose()
            assert (await item.approve()).accepted
        out, err = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        await service.stop()
    assert proc.returncode == 0, err.decode()
    assert out.decode().startswith("released")
