"""The manual's tutorial (docs/getting-started.md) works as written: every shell block, run in order
in one shell in an empty folder, succeeds, and says what the page shows it saying. And the README's
first taste answers the sample library's questions as the README says it does.

The page is a newcomer's first ten minutes, so it cannot be allowed to rot. Its blocks are run as
they are, with two differences, both said here: the install block (titled "Install") is not run,
since this test already runs inside that install (its `polymath-host` comes first on PATH), and the
port 8080 is replaced by a free one (this machine is shared). A ```text block right after a shell
block is that block's output: each of its lines must appear in what the block printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sample_host import serve_sample

from host.service.harness import child_environment, free_port

PAGE = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
FENCE = re.compile(r"^```(?P<lang>\w+)(?P<attributes>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
SEPARATOR = "@@ end of block {} @@"


@dataclass(frozen=True)
class Block:
    language: str
    attributes: str
    body: str


@dataclass(frozen=True)
class Step:
    commands: str
    expected: list[str]  # lines the commands' output must hold


def blocks(markdown: str) -> list[Block]:
    return [Block(match["lang"], match["attributes"], match["body"]) for match in FENCE.finditer(markdown)]


def steps(markdown: str) -> list[Step]:
    """The shell blocks to run, each with the lines of the text block that follows it."""
    found = blocks(markdown)
    result = []
    for index, block in enumerate(found):
        if block.language != "sh" or 'title="Install' in block.attributes:
            continue
        after = found[index + 1] if index + 1 < len(found) else None
        expected = [line.strip() for line in after.body.splitlines() if line.strip()] \
            if after is not None and after.language == "text" else []
        result.append(Step(block.body, expected))
    return result


def test_the_page_has_an_install_block_and_steps_with_their_answers() -> None:
    markdown = PAGE.read_text()
    assert any('title="Install' in block.attributes for block in blocks(markdown))
    found = steps(markdown)
    assert len(found) >= 6 and sum(bool(step.expected) for step in found) >= 5


def test_every_shell_block_of_getting_started_runs_and_answers_as_shown(tmp_path: Path) -> None:
    port = free_port()
    found = steps(PAGE.read_text())
    script = "set -eu\n" + "".join(
        f"{step.commands}\necho '{SEPARATOR.format(index)}'; echo '{SEPARATOR.format(index)}' >&2\n"
        for index, step in enumerate(found)).replace("8080", str(port))
    environment = child_environment({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    # Its own session: whatever the tutorial leaves running (its `serve &`) is ended with it.
    process = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        stdout, stderr = "", "(it did not end within 240 s)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        more_out, more_err = process.communicate()
        stdout, stderr = stdout + more_out, stderr + more_err
    assert process.returncode == 0, f"the tutorial failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    for index, step in enumerate(found):
        said = _part(stdout, index) + _part(stderr, index)
        for line in step.expected:
            assert line in said, f"block {index + 1} did not say {line!r}; it said:\n{said}"
    assert (tmp_path / "polymath-tutorial" / "libraries" / "access" / "family" / "diary.json").is_file()


def _part(output: str, index: int) -> str:
    start = output.find(SEPARATOR.format(index - 1)) + len(SEPARATOR.format(index - 1)) if index else 0
    return output[start:output.index(SEPARATOR.format(index))]


# ---- the README's first taste, against the sample library ----------------------------------------------


def test_the_readmes_first_taste_answers_as_the_readme_says(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    taste = readme[readme.index("## A first taste"):]
    lines = FENCE.search(taste)["body"].strip().splitlines()  # type: ignore[index]
    assert len(lines) == 4 and all(line.startswith("curl ") for line in lines)
    with serve_sample(tmp_path) as sample:
        port = sample.url.rsplit(":", 1)[1]
        said = [subprocess.run(["bash", "-c", line.replace("8080", port)], capture_output=True, text=True,
                               timeout=60, check=True).stdout for line in lines]
    listed = json.loads(said[0])["libraries"]
    assert [(entry["name"], entry["bits"], entry["embedding_model"]) for entry in listed] \
        == [("sample", 386, "sentence-transformers:all-MiniLM-L6-v2")]
    assert said[1].startswith("[1] Jonah 1:11-17 (King James Version)\nSource: ")
    assert [bit["info"]["title"] for bit in json.loads(said[2])["bits"]] \
        == ["Genesis 5:23-32 (King James Version)", "Genesis 5:11-22 (King James Version)"]
    answer = json.loads(said[3])
    assert answer["bits"] and all("Jonah" in bit["info"]["title"] and "similarity" in bit for bit in answer["bits"])
    assert sum(bit["token_count"] for bit in answer["bits"]) <= 500
    assert [bit["similarity"] for bit in answer["bits"]] == sorted((bit["similarity"] for bit in answer["bits"]),
                                                                   reverse=True)
