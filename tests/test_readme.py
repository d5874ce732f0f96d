"""The README's examples run as written."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.service.helpers import decision, running_service, send_decision
from workflow.service.embedded import EmbeddedNats

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


async def test_raw_nats_py_agent_example_runs_to_a_release(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    (block,) = [b for b in python_blocks() if "nats.connect(url)" in b]
    workdir = tmp_path / "agent"
    (workdir / ".headgate").mkdir(parents=True)
    (workdir / ".headgate" / "nats.url").write_text(fresh_nats.url + "\n")
    script = workdir / "agent.py"
    script.write_text(block)
    async with running_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            cwd=workdir,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        (item,) = await h.observer.wait_for("inbox", timeout=10)
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        out, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0, err.decode()
    assert out.decode().startswith("released")
