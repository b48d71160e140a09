"""A run's task DAG laid out for SVG on the server: a task's column is the length of its longest
chain of dependencies, its row its place among its column's tasks in plan order; an edge runs
from each dependency to the task. Geometry only: the template draws it and escapes the text."""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.shared.task_records import TaskState

NODE_W = 170
NODE_H = 46
GAP_X = 60
GAP_Y = 18
MARGIN = 10


@dataclass(frozen=True)
class Node:
    x: int
    y: int
    task: TaskState

    @property
    def w(self) -> int:
        return NODE_W

    @property
    def h(self) -> int:
        return NODE_H


@dataclass(frozen=True)
class Edge:
    path: str
    """An SVG path made of numbers only (a cubic curve from the dependency to the task)."""
    source: str
    target: str


@dataclass(frozen=True)
class Dag:
    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]


def depths(tasks: list[TaskState]) -> dict[str, int]:
    """Each task's longest chain of dependencies on the board (a dependency not on the board,
    or a cycle, counts as none: the board refuses both, but the drawing must not hang)."""
    by_id = {t.task_id: t for t in tasks}
    depth: dict[str, int] = {}

    def of(task_id: str, seen: frozenset[str]) -> int:
        if task_id in depth:
            return depth[task_id]
        deps = [d for d in by_id[task_id].depends_on if d in by_id and d not in seen]
        value = 1 + max((of(d, seen | {task_id}) for d in deps), default=-1)
        depth[task_id] = value
        return value

    for task in tasks:
        of(task.task_id, frozenset())
    return depth


def lay_out(tasks: list[TaskState]) -> Dag:
    """The DAG of `tasks` (plan order) as nodes and edges."""
    depth = depths(tasks)
    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for task in tasks:
        column = depth[task.task_id]
        row = rows.get(column, 0)
        rows[column] = row + 1
        nodes[task.task_id] = Node(x=MARGIN + column * (NODE_W + GAP_X),
                                   y=MARGIN + row * (NODE_H + GAP_Y), task=task)
    edges = []
    for task in tasks:
        for dep in task.depends_on:
            if dep in nodes:
                edges.append(edge(nodes[dep], nodes[task.task_id]))
    columns = max(depth.values(), default=0) + 1
    height = max(rows.values(), default=1)
    return Dag(width=2 * MARGIN + columns * NODE_W + (columns - 1) * GAP_X,
               height=2 * MARGIN + height * NODE_H + (height - 1) * GAP_Y,
               nodes=list(nodes.values()), edges=edges)


def edge(source: Node, target: Node) -> Edge:
    x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
    x2, y2 = target.x, target.y + NODE_H // 2
    middle = (x1 + x2) // 2
    return Edge(path=f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2},{y2}",
                source=source.task.task_id, target=target.task.task_id)
