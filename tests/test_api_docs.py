"""The docs cannot drift from the code: docs/api.md lists exactly each package's `__all__` and its
examples run, and no doc cites a file that is not in the repository.

docs/api.md's format, kept simple so the check is simple: a package's section starts with a heading
`## planner` (or `## rl`, `## verifiers`), and each public name is a line `- `name`: what it is`
anywhere in that section (under `###` group headings too). The section's ```python block is its
example, run here as written.

A cited path is a word, in backticks, in a Markdown link or in prose, that contains a '/' and either
starts with one of the repository's top-level folders or ends with a file extension below. Backticked
and prose paths are read from the repository root; a link's target from the linking file's folder
(as GitHub renders it). Absolute paths, home paths and URLs are not repository paths and are not
checked; the prefixes in `EXEMPT` are not checked either, each for the reason given there.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api.md"
PACKAGES = ("planner", "rl", "verifiers")
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

TOP_FOLDERS = ("planner", "rl", "verifiers", "scripts", "tests", "docs", "runs", ".ci")
EXTENSIONS = (".py", ".md", ".png", ".svg", ".json", ".jsonl", ".csv", ".toml", ".txt", ".html", ".yaml", ".yml",
              ".sh", ".cfg", ".ini")
EXEMPT = {
    "runs/": "outputs of the commands the docs show: they exist once those commands have run",
    "../shared/": "the datasets folder laid beside the checkout (verifiers.tasks.DATA_DIR), not part of the repository",
}

FENCE = re.compile(r"^```")
NAME_LINE = re.compile(r"^- `([A-Za-z_][A-Za-z0-9_]*)`")


# ---- docs/api.md -----------------------------------------------------------------------------------
def api_sections(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per package heading: (the names listed as "- `name`" lines, the ```python blocks)."""
    sections: dict[str, tuple[list[str], list[str]]] = {}
    current, block = None, None
    for line in text.splitlines():
        if block is not None:  # inside a fenced block
            if FENCE.match(line):
                if current and block[0] == "python":
                    sections[current][1].append("\n".join(block[1:]) + "\n")
                block = None
            else:
                block.append(line)
            continue
        if FENCE.match(line):
            block = [line[3:].strip()]
        elif line.startswith("## "):
            title = line[3:].strip().strip("`")
            current = title if title in PACKAGES else None
            if current is not None:
                if current in sections:
                    raise AssertionError(f"docs/api.md has two '## {current}' sections")
                sections[current] = ([], [])
        elif current is not None and (match := NAME_LINE.match(line)):
            sections[current][0].append(match.group(1))
    return sections


def test_api_sections_parse_names_and_examples():
    text = "# x\n## rl\n### Group\n- `alpha`: a\n- `beta` b\n```python\nprint(1)\n```\n## Other\n- `gamma`: c\n"
    assert api_sections(text) == {"rl": (["alpha", "beta"], ["print(1)\n"])}


@pytest.mark.parametrize("package", PACKAGES)
def test_api_doc_lists_exactly_the_public_names(package):
    sections = api_sections(API.read_text())
    assert package in sections, f"docs/api.md has no '## {package}' section"
    listed = sections[package][0]
    public = list(importlib.import_module(package).__all__)
    twice = sorted({n for n in listed if listed.count(n) > 1})
    missing = sorted(set(public) - set(listed))
    unknown = sorted(set(listed) - set(public))
    assert not (twice or missing or unknown), (
        f"docs/api.md '## {package}' drifted from {package}.__all__: not documented {missing}; documented but "
        f"not public {unknown}; listed twice {twice}. Add a line '- `name`: what it is' or remove it.")


@pytest.mark.parametrize("package", PACKAGES)
def test_api_doc_example_runs(package, tmp_path, monkeypatch, capsys):
    examples = api_sections(API.read_text()).get(package, ([], []))[1]
    assert len(examples) == 1, f"docs/api.md '## {package}' needs one ```python example; has {len(examples)}"
    monkeypatch.chdir(tmp_path)
    exec(compile(examples[0], f"docs/api.md ({package} example)", "exec"), {"__name__": "__api_example__"})
    assert capsys.readouterr().out.strip(), f"the {package} example printed nothing"


# ---- cited paths -----------------------------------------------------------------------------------
def _is_path(word: str) -> bool:
    if "/" not in word or "://" in word or word.startswith(("/", "~")):
        return False
    return word.split("/")[0] in TOP_FOLDERS or word.endswith(EXTENSIONS) or word.startswith("../")


def _clean(word: str) -> str:
    word = word.split("::")[0].split("#")[0]  # pytest node ids, anchors
    return word.lstrip("(\"'[").rstrip(".,;:)\"'")


def cited_paths(text: str, doc_dir: Path) -> list[tuple[str, Path]]:
    """(the path as written, where it points) for every path `text` cites; see the module docstring."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):  # links: relative to the linking file
        word = _clean(target)
        if word and "://" not in target and not target.startswith(("#", "mailto:")):
            found.append((word, doc_dir / word))
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in map(_clean, span.split()):
            if _is_path(word):
                found.append((word, REPO / word))
    prose = re.sub(r"`[^`\n]*`|\]\([^)]*\)", " ", text)
    for word in re.findall(r"(?<![\w/.\-])(?:%s)/[\w./*-]*[\w*]" % "|".join(map(re.escape, TOP_FOLDERS)), prose):
        found.append((word, REPO / word))
    return found


def _exists(path: Path) -> bool:
    if any(ch in str(path) for ch in "*?["):
        return any(path.parent.glob(path.name))
    return path.exists()


def test_cited_paths_finds_every_kind_of_citation():
    text = ("see `rl/nope.py --help`, `docs/x.md#part`, [plot](img/a.png), [web](https://x.org/a.py), "
            "(scripts/lab/none.py, \"A\") and `Qwen/Qwen2.5-0.5B`, `/tmp/x/y.json`, `~/.cache/x`")
    assert [w for w, _ in cited_paths(text, REPO / "docs")] == ["img/a.png", "rl/nope.py", "docs/x.md",
                                                               "scripts/lab/none.py"]
    assert cited_paths("[p](img/a.png)", REPO / "docs")[0][1] == REPO / "docs" / "img" / "a.png"


def test_every_cited_path_exists():
    broken, checked = [], 0
    for doc in DOCS:
        for word, path in cited_paths(doc.read_text(), doc.parent):
            if any(word.startswith(prefix) for prefix in EXEMPT):
                continue
            checked += 1
            if not _exists(path):
                broken.append(f"{doc.relative_to(REPO)}: {word}")
    assert checked > 100, f"only {checked} cited paths found: the extraction broke"
    assert not broken, "docs cite paths that are not in the repository (fix the path or the sentence):\n" + \
        "\n".join(broken)


def test_no_doc_names_the_team_design_note():
    """DESIGN.md is a team note outside the repository: a reader cannot follow a citation of it."""
    named = [f"{doc.relative_to(REPO)}:{i}" for doc in DOCS
             for i, line in enumerate(doc.read_text().splitlines(), 1) if re.search(r"\bDESIGN\b", line)]
    assert not named, f"these lines cite DESIGN.md, which is not in the repository: {named}"
