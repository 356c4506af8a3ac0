"""TSC (Two-Step Convert): binary join trees of a plan become multi-way join nodes.

The two steps of the UMJoin paper (seed 000, Sec. 3.2, Algorithms 1-3):

1. ``create_groups``: visit the plan breadth-first from the root; a node that can be a
   group member (a join, or a projection whose input is a join: the paper's enhanced
   pattern for Flink's plans, where projections sit between joins) joins the group of its
   outputs when all its outputs belong to one group; a join that joins no group starts one.
2. ``multi_join``: rebuild the plan bottom-up; the root of each group is replaced by one
   MultiJoin node whose inputs are the inputs of the members that are not members
   themselves, in left-to-right order, and whose output columns are the root's (the
   absorbed projections only dropped columns on the way).

Two restrictions keep the converted plan equivalent: only inner and left equi-joins are
members (a multi-way operator probes by key), and a join on the null-supplying (right)
side of a LEFT JOIN starts its own group (``a LEFT JOIN (b JOIN c)`` is not
``(a LEFT JOIN b) JOIN c``). The conversion builds new nodes; the input plan is unchanged.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace

from ssbj.sql.plan import Node, walk

__all__ = ["Group", "check_conversion", "convert", "create_groups"]


@dataclass(eq=False)
class Group:
    """Nodes that together form one binary join tree pattern, rooted at a join."""

    root: Node
    members: list[Node] = field(default_factory=list)


def _can_be_member(node: Node) -> bool:
    return node.convertible() or (node.op == "Project" and bool(node.inputs) and node.inputs[0].convertible())


def _parents(root: Node) -> dict[int, list[Node]]:
    parents: dict[int, list[Node]] = {}
    for n in walk(root):
        for i in n.inputs:
            parents.setdefault(id(i), []).append(n)
    return parents


def _ordered(root: Node) -> list[Node]:
    """Breadth-first order from the root (the paper's getOrderedNodes)."""
    seen: set[int] = set()
    out: list[Node] = []
    queue = deque([root])
    while queue:
        n = queue.popleft()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        queue.extend(n.inputs)
    return out


def create_groups(root: Node) -> dict[int, Group]:
    """Step 1: the group of every member node, by ``id(node)``."""
    parents = _parents(root)
    group_of: dict[int, Group] = {}
    for node in _ordered(root):
        if not _can_be_member(node):
            continue
        outs = parents.get(id(node), [])
        group = group_of.get(id(outs[0])) if outs else None
        # the null-supplying side of a LEFT JOIN cannot merge into it
        null_side = any(o.op == "Join" and o.kind == "left" and o.inputs[1] is node for o in outs)
        if group is not None and all(group_of.get(id(o)) is group for o in outs) and not null_side:
            group.members.append(node)
            group_of[id(node)] = group
            continue
        if node.convertible():
            group = Group(node, [node])
            group_of[id(node)] = group
    return group_of


def convert(root: Node) -> Node:
    """Step 2: the plan with each group replaced by a MultiJoin node (Algorithm 3)."""
    group_of = create_groups(root)
    done: dict[int, Node] = {}

    def get(node: Node) -> Node:
        if id(node) in done:
            return done[id(node)]
        new = replace(node, inputs=[get(i) for i in node.inputs])
        ret = new
        group = group_of.get(id(node))
        if group is not None and group.root is node:
            members = {id(m) for m in group.members}
            inputs: list[Node] = []
            joins: list[Node] = []

            def collect(m: Node) -> None:
                for i in m.inputs:
                    if id(i) in members:
                        collect(i)
                    else:
                        inputs.append(done[id(i)])
                if m.op == "Join":
                    joins.append(m)

            collect(node)
            ret = Node("MultiJoin", inputs, node.columns, role=node.role, members=tuple(joins))
        done[id(node)] = ret
        return ret

    return get(root)


def _join_key(n: Node) -> tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]:
    return n.kind, n.equi, n.residual


def check_conversion(original: Node, converted: Node) -> list[str]:
    """List what (if anything) the conversion lost: empty when the converted plan is consistent.

    The same scans and the same non-join operators; every binary join of the original either
    still there or a member of exactly one MultiJoin; no convertible binary join left; at least
    one MultiJoin when the original had a convertible join.
    """
    problems: list[str] = []
    orig = list(walk(original))
    conv = list(walk(converted))
    leaves = Counter((n.op, n.detail, n.columns) for n in orig if not n.inputs)
    if leaves != Counter((n.op, n.detail, n.columns) for n in conv if not n.inputs):
        problems.append("the scans differ")
    joins_before = Counter(_join_key(n) for n in orig if n.op == "Join")
    joins_after = Counter(_join_key(n) for n in conv if n.op == "Join")
    joins_after += Counter(_join_key(m) for n in conv if n.op == "MultiJoin" for m in n.members)
    if joins_before != joins_after:
        problems.append("the join conditions differ")
    others = ("Join", "Project", "MultiJoin")
    if Counter((n.op, n.detail) for n in orig if n.op not in others) != Counter(
        (n.op, n.detail) for n in conv if n.op not in others
    ):
        problems.append("the other operators differ")
    left = [n for n in conv if n.convertible()]
    if left:
        problems.append(f"{len(left)} convertible binary join(s) left: {left[0].condition()}")
    if any(n.convertible() for n in orig) and not any(n.op == "MultiJoin" for n in conv):
        problems.append("no MultiJoin node")
    for n in conv:
        if n.op == "MultiJoin" and len(n.inputs) != len(n.members) + 1:
            problems.append(f"a MultiJoin of {len(n.members)} joins has {len(n.inputs)} inputs")
    return problems
