"""A run's task DAG laid out for SVG on the server: a task's column is the length of its longest
chain of dependencies, its row its place among its column's tasks in plan order; an edge runs
from each dependency to the task. Geometry only: the template draws it and escapes the text.
Nothing here recurses: a plan may be a chain of ten thousand tasks."""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.shared.task_records import TaskState

NODE_W = 170
NODE_H = 46
GAP_X = 60
GAP_Y = 18
MARGIN = 10
BAND_COLUMNS = 20
"""Columns side by side: a deeper plan (a chain of thousands of tasks) wraps into bands of
this many, one below the other, so its drawing grows down the page, not millions of pixels
across it."""


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
    """Each task's longest chain of dependencies on the board, found without recursion (a
    plan may be a chain of thousands). A dependency not on the board counts as none; so does,
    in a cycle, the edge into the cycle's first task in plan order: the board refuses both,
    but the drawing must not hang."""
    on_board = {t.task_id for t in tasks}
    deps = {t.task_id: set(t.depends_on) & on_board for t in tasks}
    dependents: dict[str, list[str]] = {t.task_id: [] for t in tasks}
    for task_id, its_deps in deps.items():
        for dep in its_deps:
            dependents[dep].append(task_id)
    waiting = {task_id: len(its_deps) for task_id, its_deps in deps.items()}
    reached = dict.fromkeys(on_board, 0)  # longest chain into each, from its placed deps
    depth: dict[str, int] = {}
    ready = [t.task_id for t in tasks if not deps[t.task_id]]
    unplaced = iter(tasks)  # where a cycle is broken: the first task not placed, plan order
    while len(depth) < len(on_board):
        if not ready:
            ready.append(next(t.task_id for t in unplaced if t.task_id not in depth))
        task_id = ready.pop()
        if task_id in depth:
            continue
        depth[task_id] = reached[task_id]
        for dependent in dependents[task_id]:
            reached[dependent] = max(reached[dependent], depth[task_id] + 1)
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    return depth


def lay_out(tasks: list[TaskState]) -> Dag:
    """The DAG of `tasks` (plan order) as nodes and edges; a plan deeper than BAND_COLUMNS
    is drawn in bands of that many columns, one below the other."""
    depth = depths(tasks)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for task in tasks:
        column = depth[task.task_id]
        place[task.task_id] = column, rows.get(column, 0)
        rows[column] = place[task.task_id][1] + 1
    columns = max(depth.values(), default=0) + 1
    tops = band_tops(rows, columns)
    nodes: dict[str, Node] = {}
    for task in tasks:
        column, row = place[task.task_id]
        nodes[task.task_id] = Node(
            x=MARGIN + (column % BAND_COLUMNS) * (NODE_W + GAP_X),
            y=tops[column // BAND_COLUMNS] + row * (NODE_H + GAP_Y),
            task=task,
        )
    edges = []
    for task in tasks:
        band = place[task.task_id][0] // BAND_COLUMNS
        for dep in task.depends_on:
            if dep in nodes:
                dep_band = place[dep][0] // BAND_COLUMNS
                edges.append(
                    edge(
                        nodes[dep],
                        nodes[task.task_id],
                        None if dep_band == band else tops[dep_band + 1] - GAP_X // 2,
                    )
                )
    shown = min(columns, BAND_COLUMNS)
    wraps = GAP_X // 2 if columns > BAND_COLUMNS else 0  # the last column's edges turn down
    return Dag(
        width=2 * MARGIN + shown * NODE_W + (shown - 1) * GAP_X + wraps,
        height=tops[-1] - GAP_X + MARGIN,
        nodes=list(nodes.values()),
        edges=edges,
    )


def band_tops(rows: dict[int, int], columns: int) -> list[int]:
    """Where each band of BAND_COLUMNS columns starts (y), and last where the next would: a
    band is as tall as its fullest column, and GAP_X apart from the next (room for the edges
    that wrap round to it)."""
    tops = [MARGIN]
    for first in range(0, columns, BAND_COLUMNS):
        tall = max([1, *(rows.get(c, 0) for c in range(first, first + BAND_COLUMNS))])
        tops.append(tops[-1] + tall * NODE_H + (tall - 1) * GAP_Y + GAP_X)
    return tops


def edge(source: Node, target: Node, gap_y: int | None = None) -> Edge:
    """A curve from the dependency's right side to the task's left; to a task in a later band,
    a line that turns down beside the dependency, runs along the gap below its band (`gap_y`)
    and drops onto the task from above, so it crosses no box on the way."""
    x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
    if gap_y is not None:
        path = f"M{x1},{y1} H{x1 + GAP_X // 2} V{gap_y} H{target.x + NODE_W // 2} V{target.y}"
    else:
        x2, y2 = target.x, target.y + NODE_H // 2
        middle = (x1 + x2) // 2
        path = f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2},{y2}"
    return Edge(path=path, source=source.task.task_id, target=target.task.task_id)
