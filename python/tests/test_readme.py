"""The LangGraph example of the repository's README.md ("## Python quick start") runs as
written: twice in a fresh directory (the second run is a restart on the store the first one
left), printing what the README says. (test_store.py runs the "## Python" section's example.)"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _blocks(heading):
    text = README.read_text()
    section = text[text.index(f"\n{heading}\n") + 1 :]
    section = section[: section.index("\n## ")]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)


def _run(code, cwd):
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"README block failed:\n{code}\n--- stderr\n{out.stderr}"
    return out.stdout


def test_quick_start_is_one_langgraph_example():
    blocks = _blocks("## Python quick start")
    assert len(blocks) == 1 and "AgentwalSaver(" in blocks[0], blocks
    assert "store.once(" in _blocks("## Python")[0]


def test_quick_start_runs_and_resumes(tmp_path):
    code = _blocks("## Python quick start")[0]
    assert _run(code, tmp_path).strip() == "turn 1: you said: hello"
    assert _run(code, tmp_path).strip() == "turn 2: you said: hello"  # state from the store
    assert (tmp_path / "lg-store").is_dir()
