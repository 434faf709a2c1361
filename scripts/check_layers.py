#!/usr/bin/env python3
"""Holds src/ to its layering (docs/architecture.md): derives which rooms (folders of src/)
each room's files include, and fails on

  - a room that LAYERS below does not place (every new room is given its place on purpose),
  - an include that runs upward: a room may include only rooms placed below it,
  - a cycle among the rooms' includes (shown as the chain that closes it),
  - a CMake link with nothing behind it, or an include with no link: each library qs_ROOM
    (qs_layer in CMakeLists.txt) links exactly the rooms its files include, and the
    quantserve executable (src/apps) likewise.

Tests, fuzz targets and the kernel lab link what their includes name (qs_link_by_includes in
CMakeLists.txt), so they need no check here. Run by scripts/test.sh; `--self-test` runs it on
small made-up trees, one per rule, and fails unless each rule fires.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

# Lowest first. A room includes only rooms before it in this list.
LAYERS = [
    "core",
    "dist",
    "formats",
    "kernels",
    "ops",
    "io",
    "template",
    "tokenizer",
    "importers",
    "models",
    "engine",
    "diffusion",
    "audio",
    "vision",
    "bench_client",
    "server",
    "quant",
    "eval",
    "apps",
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/[^"]+"', re.MULTILINE)
QS_LAYER = re.compile(r"^qs_layer\(([^)]*)\)", re.MULTILINE)
APP_LINK = re.compile(r"target_link_libraries\(quantserve\s+PRIVATE([^)]*)\)")
SOURCE_SUFFIXES = {".h", ".cc", ".cu", ".cuh"}


def include_graph(src: Path) -> dict[str, dict[str, list[str]]]:
    """room -> {included room -> files of room that include it}."""
    rooms = sorted(p.name for p in src.iterdir() if p.is_dir())
    graph: dict[str, dict[str, list[str]]] = {r: {} for r in rooms}
    for room in rooms:
        for f in sorted((src / room).rglob("*")):
            if f.suffix not in SOURCE_SUFFIXES:
                continue
            for target in INCLUDE.findall(f.read_text(errors="replace")):
                if target != room and target in graph:
                    graph[room].setdefault(target, []).append(str(f.relative_to(src.parent)))
    return graph


def cmake_links(cmake: Path) -> dict[str, set[str]]:
    """room -> the qs_ rooms its library (or, for apps, the quantserve executable) links."""
    text = cmake.read_text()
    links: dict[str, set[str]] = {}
    for body in QS_LAYER.findall(text):
        words = body.split()
        name, deps, dirs, mode = words[0], set(), [], None
        for w in words[1:]:
            if w in ("DEPS", "DIRS", "COVERAGE"):
                mode = w
            elif mode == "DEPS" and w.startswith("qs_"):
                deps.add(w[3:])
            elif mode == "DIRS":
                dirs.append(w)
        for room in {d.split("/")[0] for d in dirs} or {name}:
            links.setdefault(room, set()).update(deps)
    m = APP_LINK.search(text)
    if m:
        links["apps"] = {w[3:] for w in m.group(1).split() if w.startswith("qs_")}
    return links


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(r: str) -> list[str] | None:
        state[r] = 1
        stack.append(r)
        for t in sorted(graph.get(r, {})):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if state.get(t) is None:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[r] = 2
        return None

    for r in sorted(graph):
        if state.get(r) is None:
            found = visit(r)
            if found:
                return found
    return None


def check(root: Path, layers: list[str]) -> list[str]:
    src = root / "src"
    graph = include_graph(src)
    links = cmake_links(root / "CMakeLists.txt")
    errors = []
    rank = {r: i for i, r in enumerate(layers)}
    for room in sorted(graph):
        if room not in rank:
            errors.append(f"src/{room}: a room that scripts/check_layers.py LAYERS does not place")
    for room, targets in sorted(graph.items()):
        for target, files in sorted(targets.items()):
            if room in rank and target in rank and rank[target] > rank[room]:
                errors.append(f"upward include: {room} -> {target} in {', '.join(files[:3])}")
            if target not in links.get(room, set()):
                errors.append(f"{room} includes {target} ({files[0]}) but does not link qs_{target}")
        for dep in sorted(links.get(room, set()) - set(targets)):
            errors.append(f"{room} links qs_{dep} but no file of src/{room} includes {dep}/")
    cycle = find_cycle(graph)
    if cycle:
        errors.append("include cycle: " + " -> ".join(cycle))
    return errors


def describe(root: Path) -> str:
    graph = include_graph(root / "src")
    order = {r: i for i, r in enumerate(LAYERS)}
    lines = []
    for room in sorted(graph, key=lambda r: (order.get(r, 99), r)):
        lines.append(f"{room}: {' '.join(sorted(graph[room], key=lambda r: order.get(r, 99)))}")
    return "\n".join(lines)


def self_test() -> int:
    """Each rule on a made-up tree: the clean tree passes, each breakage is reported."""
    layers = ["core", "ops", "apps"]
    base_cmake = (
        "qs_layer(core DIRS core DEPS Threads::Threads)\n"
        "qs_layer(ops DIRS ops DEPS qs_core)\n"
        "target_link_libraries(quantserve PRIVATE qs_ops)\n"
    )
    base_files = {
        "core/a.h": "#pragma once\n",
        "ops/b.cc": '#include "core/a.h"\n',
        "apps/main.cc": '#include "ops/b.h"\n',
    }
    cases = [
        ("clean", {}, base_cmake, None),
        ("upward include", {"core/c.cc": '#include "ops/b.h"\n'},
         base_cmake.replace("DEPS Threads::Threads", "DEPS qs_ops"), "upward include: core -> ops"),
        ("include cycle", {"core/c.cc": '#include "ops/b.h"\n'},
         base_cmake.replace("DEPS Threads::Threads", "DEPS qs_ops"), "include cycle"),
        ("link without include", {}, base_cmake.replace("PRIVATE qs_ops", "PRIVATE qs_ops qs_core"),
         "apps links qs_core but no file"),
        ("include without link", {"apps/x.cc": '#include "core/a.h"\n'}, base_cmake,
         "apps includes core"),
        ("unplaced room", {"extra/y.cc": '#include "core/a.h"\n'}, base_cmake,
         "src/extra: a room"),
    ]
    failed = 0
    for name, extra, cmake, expect in cases:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            for rel, text in {**base_files, **extra}.items():
                (root / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / "src" / rel).write_text(text)
            (root / "CMakeLists.txt").write_text(cmake)
            errors = check(root, layers)
            ok = not errors if expect is None else any(expect in e for e in errors)
            print(f"self-test {name}: {'ok' if ok else 'FAILED'}" + (f" ({errors})" if not ok else ""))
            failed += not ok
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--graph", action="store_true", help="print each room's included rooms")
    ap.add_argument("--self-test", action="store_true", help="check the checker on made-up trees")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.graph:
        print(describe(args.root))
        return 0
    errors = check(args.root, LAYERS)
    for e in errors:
        print(f"check_layers: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"check_layers: {len(LAYERS)} layers, every include downward, every link used")
    return 0


if __name__ == "__main__":
    sys.exit(main())
