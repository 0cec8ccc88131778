"""Placement specs as values: `local`, `bind:N`, `preferred:N`, `interleave:0-3` or
`weighted:0=3,2=1`, parsed and checked without the compiled core, so suites and `--set`
validate where it is not built. Three forms: the text users type; the Placement value,
parsed once per process (by Option.convert where a suite expands, by options.from_json
in the worker) and carried by cases, the pre-run check, place and Buffer; and the C ints
native.Allocation takes (policy, nodes, weights). str() gives the canonical text that
run.json, the journal, the worker's input and the results' `mem` column hold."""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .errors import PlacementError
from .units import MAX_NODES, format_list, parse_list

# Page sizes by name, in bytes (the C side's enum is native.PAGE_KINDS, tested to match).
PAGE_SIZES = {"4k": 4096, "thp": 2 << 20, "2m": 2 << 20, "1g": 1 << 30}


@dataclass(frozen=True)
class Placement:
    policy: str                      # local, bind, preferred, interleave, weighted (native.POLICIES)
    nodes: tuple[int, ...] = ()
    weights: tuple[int, ...] = ()

    @classmethod
    def bind(cls, node: int) -> "Placement":
        """Every page on one node: bind:N."""
        if not 0 <= int(node) < MAX_NODES:
            raise PlacementError(f"node {node} is outside 0..{MAX_NODES - 1}")
        return cls("bind", (int(node),))

    @classmethod
    def of(cls, value: "Placement | str") -> "Placement":
        """A Placement as it is; text (a spec typed, params built by hand) parsed."""
        return value if isinstance(value, Placement) else cls.parse(value)

    @classmethod
    def parse(cls, text: str) -> "Placement":
        spec = str(text).strip()
        if spec == "local":
            return cls("local")
        policy, sep, arg = spec.partition(":")
        if not sep or not arg:
            raise PlacementError(f"malformed placement {text!r}: use local, bind:N, preferred:N, "
                                 "interleave:0-3 or weighted:0=3,2=1")
        try:
            if policy in ("bind", "interleave"):
                return cls(policy, tuple(parse_list(arg, limit=MAX_NODES)))
            if policy == "preferred":
                nodes = parse_list(arg, limit=MAX_NODES)
                if len(nodes) != 1:
                    raise ValueError("preferred takes exactly one node")
                return cls(policy, tuple(nodes))
            if policy == "weighted":
                return cls._parse_weighted(arg)
        except ValueError as e:
            raise PlacementError(f"malformed placement {text!r}: {e}") from None
        raise PlacementError(f"malformed placement {text!r}: unknown policy {policy!r} "
                             "(local, bind, preferred, interleave, weighted)")

    @classmethod
    def _parse_weighted(cls, arg: str) -> "Placement":
        nodes, weights = [], []
        for part in arg.split(","):
            m = re.fullmatch(r"\s*([\d-]+)\s*=\s*(\d+)\s*", part)
            if not m:
                raise ValueError(f"weight {part!r} is not NODES=WEIGHT")
            weight = int(m.group(2))
            if weight < 1 or weight > 255:
                raise ValueError(f"weight {weight} is outside 1..255")
            for node in parse_list(m.group(1), limit=MAX_NODES):
                if node in nodes:
                    raise ValueError(f"node {node} is weighted twice")
                nodes.append(node)
                weights.append(weight)
        return cls("weighted", tuple(nodes), tuple(weights))

    def __str__(self) -> str:
        if self.policy == "local":
            return "local"
        if self.policy == "weighted":
            return "weighted:" + ",".join(f"{n}={w}" for n, w in zip(self.nodes, self.weights))
        return f"{self.policy}:{format_list(self.nodes)}"

    def shares(self, local_nodes) -> dict[int, Fraction]:
        """The fraction of pages each node should hold. `local` spreads over local_nodes
        in any proportion, so it is checked as a set (see Verification)."""
        if self.policy == "local":
            return {n: Fraction(1, len(local_nodes)) for n in local_nodes}
        if self.policy == "weighted":
            total = sum(self.weights)
            return {n: Fraction(w, total) for n, w in zip(self.nodes, self.weights)}
        if self.policy == "interleave":
            return {n: Fraction(1, len(self.nodes)) for n in self.nodes}
        if self.policy == "bind" and len(self.nodes) > 1:
            # bind to several nodes fills them in order: any split among them is right.
            return {n: Fraction(1, len(self.nodes)) for n in self.nodes}
        return {self.nodes[0]: Fraction(1)}

    @property
    def any_split(self) -> bool:
        """True when only the set of nodes matters, not the split among them."""
        return self.policy == "local" or (self.policy == "bind" and len(self.nodes) > 1)
