"""The Python examples of the repository's README.md run as written: each ```python block of
its "## Python" section is run twice in a fresh directory (the second run is a restart on
the store the first one left), and must succeed and print what the README says."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _blocks():
    text = README.read_text()
    section = text[text.index("\n## Python\n"):]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)


def _run(code, cwd):
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"README block failed:\n{code}\n--- stderr\n{out.stderr}"
    return out.stdout


def test_readme_has_the_examples():
    blocks = _blocks()
    assert len(blocks) == 2, blocks
    assert "AgentwalSaver(" in blocks[0] and "store.once(" in blocks[1]


def test_langgraph_example_runs_and_resumes(tmp_path):
    code = _blocks()[0]
    assert _run(code, tmp_path).strip() == "turn 1: you said: hello"
    assert _run(code, tmp_path).strip() == "turn 2: you said: hello"  # state from the store


def test_store_example_runs_and_resumes(tmp_path):
    code = _blocks()[1]
    first, second = _run(code, tmp_path), _run(code, tmp_path)
    assert first.split()[0] == "1" and "'step': 1" in first, first
    assert second.split()[0] == "2" and "'step': 2" in second, second
