#!/usr/bin/env python3
"""The crate's module graph: which module imports which, the cycles between rooms, and whether
`sys/` stays a leaf.

A "room" is a top-level module of the crate (`dv`, `flow`, `mlx5`, `rx`, `sys`, ...), or one level
deeper where a room holds several (`dv::model`, `sys::rdma`). An edge A -> B means a file of A
names a path of B (`use crate::b::...`, `super::...` that leaves A, or an inline `crate::b::x`).
The crate root (`lib.rs`) re-exports the public API and is left out of the graph.

Usage: scripts/modgraph.py [--src src] [--depth 1|2] [--edges] [--dot]
Exit status: 0 when the room graph has no cycle, `sys` imports nothing from the crate and the
model's device files import nothing of the driver but its formats; 1 otherwise (each cycle, each
upward import of `sys` and each driver import of the device printed on its own line).

The model's device is the `mlx5-model` crate, which cannot import the driver at all (`rawpkt`
depends on it, and Cargo refuses cycles). Inside this crate the `model` room is the `model:`
backend; its glue, `model::port`, hands the device's queues to the driver (DEVICE_GLUE). Any other
file put in `model/` is held to a device's rule: it may take the PRM formats (`dv::prm`), the flow
matcher and header views it steers with (`flow`), memory mappings (`mem::region`), the `sys`
wrappers and the leaf that escapes user input in messages (`text`), but not the driver's rings,
queues or control paths (`dv::ring`, `rx`, `tx`, `mlx5`, ...).
"""

import argparse
import os
import re
import signal
import sys

USE_RE = re.compile(r"\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
INLINE_RE = re.compile(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def module_of(path, src):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip_comments(text):
    """Code without comments and with string literals emptied, in one pass (a `//` inside a
    string is not a comment, a `"` inside a comment is not a string)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif m := re.match(r'(b?r)(#*)"', text[i:]):
            end = text.find('"' + m.group(2), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(2))
        elif text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif m := re.match(r"'(\\.[^']*|[^\\'])'", text[i:]):
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def expand_use(tree):
    """`crate::a::{b, c::{d, e}}` -> [crate::a::b, crate::a::c::d, crate::a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i])
                start = i + 1
        parts.append(s[start:])
        for part in filter(None, parts):
            if "{" in part:
                head, rest = part.split("{", 1)
                walk(prefix + head, rest[: rest.rfind("}")])
            else:
                out.append(prefix + part.split(" as ")[0])

    walk("", tree)
    return out


def resolve(path, here, modules):
    """The longest known module that `path` (as written in module `here`) names."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    else:
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    best = base
    for i in range(1, len(rest) + 1):
        cand = base + tuple(rest[:i])
        if cand in modules:
            best = cand
    return best


def room(mod, depth, dir_rooms):
    """A module's room: its top-level module, or at depth 2 the second-level folder it is in."""
    if not mod:
        return None
    if depth >= 2 and mod[:2] in dir_rooms:
        return "::".join(mod[:2])
    return mod[0]


# The model's files that may reach the driver: the `model:` backend's control path.
DEVICE_GLUE = {("model", "port")}
# What the model's device files may import from outside `model/`.
DEVICE_MAY_USE = [("dv", "prm"), ("flow",), ("mem", "region"), ("sys",), ("text",)]


def device_imports_driver(a, b):
    """Whether edge a -> b is a model device file importing from the driver."""
    if a[:1] != ("model",) or a in DEVICE_GLUE or b[:1] == ("model",):
        return False
    return not any(b[: len(p)] == p for p in DEVICE_MAY_USE)


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    ap.add_argument("--depth", type=int, default=2, choices=(1, 2))
    ap.add_argument("--edges", action="store_true", help="print every file-level edge")
    ap.add_argument("--dot", action="store_true", help="print the room graph as Graphviz dot")
    args = ap.parse_args()
    src = os.path.normpath(args.src)

    files = {}
    for root, _, names in os.walk(src):
        if os.path.relpath(root, src).split(os.sep)[0] == "bin":
            continue
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(path, src)] = path
    modules = set(files)

    file_edges = set()
    for mod, path in files.items():
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        # Inline test modules may reach anywhere; they are not part of the graph.
        text = re.split(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{", text)[0]
        paths = [p for tree in USE_RE.findall(text) for p in expand_use(tree)]
        paths += INLINE_RE.findall(text)
        for p in paths:
            target = resolve(p, mod, modules)
            if target and target != mod and target[: len(mod)] != mod:
                file_edges.add((mod, target))

    dir_rooms = {m[:2] for m in modules if len(m) > 2}
    rooms = {}
    for a, b in file_edges:
        ra, rb = room(a, args.depth, dir_rooms), room(b, args.depth, dir_rooms)
        if ra and rb and ra != rb:
            rooms.setdefault(ra, set()).add(rb)
            rooms.setdefault(rb, set())

    if args.edges:
        for a, b in sorted(file_edges):
            print(f"{'::'.join(a) or 'crate'} -> {'::'.join(b) or 'crate'}")
    if args.dot:
        print("digraph rooms {")
        for a in sorted(rooms):
            for b in sorted(rooms[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")

    bad = 0
    for comp in sccs(rooms):
        bad += 1
        members = set(comp)
        why = sorted(
            f"{'::'.join(a)} -> {'::'.join(b)}"
            for a, b in file_edges
            if room(a, args.depth, dir_rooms) in members
            and room(b, args.depth, dir_rooms) in members
            and room(a, args.depth, dir_rooms) != room(b, args.depth, dir_rooms)
        )
        print(f"cycle: {' <-> '.join(comp)}  ({'; '.join(why)})")
    for a, b in sorted(file_edges):
        if a[:1] == ("sys",) and b[:1] != ("sys",):
            bad += 1
            print(f"sys imports upwards: {'::'.join(a)} -> {'::'.join(b) or 'crate'}")
    for a, b in sorted(file_edges):
        if device_imports_driver(a, b):
            bad += 1
            print(f"model device imports the driver: {'::'.join(a)} -> {'::'.join(b) or 'crate'}")
    n_edges = sum(len(v) for v in rooms.values())
    print(f"{len(rooms)} rooms, {n_edges} edges between them, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    # A closed stdout (`| head`) ends the listing quietly, as it does for coreutils.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
