"""The one search-tree type that every strategy builds and the learner reads.

Layout follows mctx's `Tree` (DeepMind): nodes live in one flat list and refer to each other by
integer index, with named sentinels `ROOT` (the prompt) and `NO_PARENT`. A node stores the token ids
its step added exactly as the engine sampled them, with their behaviour log-probabilities; text is
decoded from ids and kept only for reading. A child's prompt is its parent's prefix ids plus the
step's ids (never re-encoded text), which also keeps the serving engine's prefix cache effective.

Statistics per node (AlphaZero / PUCT vocabulary): `prior`, `visits`, `value_sum` (so the
visit-mean value is `value_sum / visits`), the scorer's own `score`, and for finished responses a
`terminal` flag and an optional `reward` (from a verifier, training only).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["ROOT", "NO_PARENT", "Node", "SearchTree", "Trajectory"]

ROOT = 0
"""Index of the root node, which holds the prompt's token ids."""
NO_PARENT = -1
"""Parent index of the root."""


@dataclass
class Node:
    """One step of a response: the token ids it appended to its parent's prefix, and its statistics."""

    parent: int
    """Index of the parent node; `NO_PARENT` for the root."""
    token_ids: list[int]
    """Ids this step added (the prompt's ids for the root), exactly as sampled."""
    logprobs: list[float]
    """Behaviour log-probability of each id in `token_ids` (0.0 for forced ids; empty for the root)."""
    text: str = ""
    """Decoded `token_ids`, for reading only."""
    finish_reason: str | None = None
    """How sampling of this step ended: "stop" (EOS), "step" (delimiter), "length"; None for the root."""
    depth: int = 0
    """Steps from the root (root = 0)."""
    children: list[int] = field(default_factory=list)
    prior: float = 1.0
    """Prior probability of choosing this step among its siblings (PUCT's P(s, a))."""
    visits: int = 0
    """Times a backup passed through this node (PUCT's N(s, a))."""
    value_sum: float = 0.0
    """Sum of backed-up values; `value` is its mean over visits."""
    score: float | None = None
    """The scorer's value of the prefix ending at this node, in [0, 1]; None until scored."""
    terminal: bool = False
    """True when the response ends here (EOS, or a strategy's step/token limit)."""
    reward: float | None = None
    """Terminal reward from a verifier (training only); None when not known."""
    forced: bool = False
    """True when the strategy appended these ids itself (budget forcing's "Wait"); not sampled."""
    pruned: bool = False
    """True when early termination cut this branch (its value fell below the threshold)."""

    @property
    def value(self) -> float | None:
        """Visit-mean value, or None for an unvisited node."""
        return self.value_sum / self.visits if self.visits else None


@dataclass
class Trajectory:
    """One root-to-leaf path, in the shape the learner trains on."""

    prompt_ids: list[int]
    response_ids: list[int]
    """All step ids along the path, concatenated."""
    logprobs: list[float]
    """Behaviour log-probability per response id."""
    sampled_mask: list[bool]
    """False for ids the strategy forced (no policy gradient through them)."""
    nodes: list[int]
    """Node indices from the first step to the leaf (the root excluded)."""
    step_spans: list[tuple[int, int]]
    """`(start, end)` of each node's ids inside `response_ids`, to spread step values onto tokens."""
    values: list[float | None]
    """Visit-mean value of each node on the path."""
    scores: list[float | None]
    """Scorer value of each node on the path."""
    reward: float | None
    """The leaf's terminal reward (None when not known or the leaf is not terminal)."""
    terminal: bool
    finish_reason: str | None
    text: str
    """Decoded response (the concatenated step texts)."""


@dataclass
class SearchTree:
    """A search tree over token-id steps. Build with `SearchTree.new(prompt_ids)`."""

    nodes: list[Node]
    meta: dict = field(default_factory=dict)
    """Free-form facts about the search (strategy, seed, config), saved with the tree."""

    @classmethod
    def new(cls, prompt_ids: list[int], prompt_text: str = "", **meta) -> "SearchTree":
        root = Node(parent=NO_PARENT, token_ids=[int(t) for t in prompt_ids], logprobs=[], text=prompt_text)
        return cls(nodes=[root], meta=dict(meta))

    # ---- structure ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    @property
    def prompt_ids(self) -> list[int]:
        return self.nodes[ROOT].token_ids

    def add_child(self, parent: int, token_ids: list[int], logprobs: list[float], text: str = "",
                  finish_reason: str | None = None, *, terminal: bool = False, forced: bool = False) -> int:
        """Append a node under `parent` and return its index. Ids are stored as given."""
        if len(token_ids) != len(logprobs):
            raise ValueError(f"token_ids and logprobs differ in length: {len(token_ids)} vs {len(logprobs)}")
        index = len(self.nodes)
        self.nodes.append(Node(parent=parent, token_ids=list(token_ids), logprobs=[float(x) for x in logprobs],
                               text=text, finish_reason=finish_reason, depth=self.nodes[parent].depth + 1,
                               terminal=terminal, forced=forced))
        self.nodes[parent].children.append(index)
        return index

    def path(self, index: int) -> list[int]:
        """Node indices from the root to `index`, both included."""
        out = []
        while index != NO_PARENT:
            out.append(index)
            index = self.nodes[index].parent
        return out[::-1]

    def leaves(self) -> list[int]:
        """Indices of nodes without children (the root too, while it has none)."""
        return [i for i, n in enumerate(self.nodes) if not n.children]

    def terminal_nodes(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.terminal]

    def prefix_ids(self, index: int) -> list[int]:
        """Prompt ids plus every step's ids down to `index`: the prompt for expanding that node."""
        return [t for i in self.path(index) for t in self.nodes[i].token_ids]

    def response_ids(self, index: int) -> list[int]:
        return [t for i in self.path(index)[1:] for t in self.nodes[i].token_ids]

    def response_text(self, index: int) -> str:
        return "".join(self.nodes[i].text for i in self.path(index)[1:])

    def trajectory(self, leaf: int) -> Trajectory:
        """The root-to-`leaf` path as token ids, log-probabilities, step spans and node values."""
        path = self.path(leaf)[1:]
        response, logprobs, mask, spans = [], [], [], []
        for i in path:
            node = self.nodes[i]
            spans.append((len(response), len(response) + len(node.token_ids)))
            response += node.token_ids
            logprobs += node.logprobs
            mask += [not node.forced] * len(node.token_ids)
        node = self.nodes[leaf]
        return Trajectory(
            prompt_ids=list(self.prompt_ids), response_ids=response, logprobs=logprobs, sampled_mask=mask,
            nodes=path, step_spans=spans, values=[self.nodes[i].value for i in path],
            scores=[self.nodes[i].score for i in path], reward=node.reward if node.terminal else None,
            terminal=node.terminal, finish_reason=node.finish_reason, text=self.response_text(leaf))

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"meta": self.meta, "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict) -> "SearchTree":
        return cls(nodes=[Node(**n) for n in data["nodes"]], meta=dict(data.get("meta", {})))

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, default=str))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SearchTree":
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ---- views ----------------------------------------------------------------------------------
    def to_networkx(self):
        """A `networkx.DiGraph` with one vertex per node (all node fields as attributes) and parent->child edges."""
        import networkx as nx

        graph = nx.DiGraph(**self.meta)
        for i, node in enumerate(self.nodes):
            attrs = asdict(node)
            attrs.pop("children")
            graph.add_node(i, **attrs, value=node.value)
            if node.parent != NO_PARENT:
                graph.add_edge(node.parent, i)
        return graph

    def _label(self, index: int) -> str:
        node = self.nodes[index]
        parts = [f"#{index}", f"N={node.visits}"]
        if node.value is not None:
            parts.append(f"Q={node.value:.3f}")
        if node.score is not None:
            parts.append(f"score={node.score:.3f}")
        if index != ROOT:
            parts.append(f"P={node.prior:.3f}")
        if node.reward is not None:
            parts.append(f"reward={node.reward:g}")
        if node.terminal:
            parts.append("terminal")
        if node.pruned:
            parts.append("pruned")
        return " ".join(parts)

    def to_dot(self, max_text: int = 60) -> str:
        """Graphviz DOT source: one box per step with its text (shortened), visits and values."""
        lines = ["digraph search_tree {", '  node [shape=box, fontname="monospace"];']
        for i, node in enumerate(self.nodes):
            text = node.text if len(node.text) <= max_text else node.text[: max_text - 3] + "..."
            label = (self._label(i) + "\n" + text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            style = ', style=filled, fillcolor="#d8f0d8"' if node.terminal else ""
            lines.append(f'  n{i} [label="{label}"{style}];')
            if node.parent != NO_PARENT:
                lines.append(f"  n{node.parent} -> n{i};")
        return "\n".join(lines + ["}"]) + "\n"

    def to_html(self, title: str = "search tree") -> str:
        """A self-contained HTML page: nested, collapsible steps with their text, values and visits."""

        def render(index: int) -> str:
            node = self.nodes[index]
            body = f"<pre>{html.escape(node.text)}</pre>"
            kids = "".join(render(c) for c in node.children)
            cls = "terminal" if node.terminal else "pruned" if node.pruned else ""
            return (f'<li><details open><summary class="{cls}">{html.escape(self._label(index))}</summary>'
                    f"{body}<ul>{kids}</ul></details></li>")

        meta = html.escape(json.dumps(self.meta, default=str))
        return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
                f"<title>{html.escape(title)}</title><style>"
                "body{font-family:sans-serif} ul{list-style:none;border-left:1px solid #ccc;padding-left:1em}"
                "pre{white-space:pre-wrap;background:#f6f6f6;margin:2px 0;padding:2px}"
                "summary{font-family:monospace} .terminal{color:#070} .pruned{color:#a00}"
                f"</style></head><body><h3>{html.escape(title)}</h3><p><code>{meta}</code></p>"
                f"<ul>{render(ROOT)}</ul></body></html>\n")
