#!/usr/bin/env python3
"""The workspace's graph: which crate depends on which, and inside each crate which module imports
which; cycles and layering mistakes are problems.

Crates: the path dependencies of each workspace member's `[dependencies]` (dev-dependencies are
the tests' and may point anywhere). Besides having no cycle, the layering says:
- `rawpkt-sys` (syscalls and FFI) and the formats (`mlx5-prm`, `rawpkt-wire`) depend on no
  crate of the workspace but rdma-core's types (`rdma-abi`);
- the device model (`mlx5-model`) does not depend on the driver (`rawpkt`): it is a device;
- the library (`rawpkt`) depends on none of its users (the tools, the model library, the tests'
  support);
- no crate's normal dependency turns on `rawpkt`'s `internals` feature.

Rooms: a top-level module of a crate (`dv`, `flow`, `mlx5`, `rx`, ...; the model library is one
room, `ONE_ROOM`), or one level deeper
where a folder holds several (`rx::dv`). An edge A -> B means a file of A names a path of B
(`use crate::b::...`, `super::...` that leaves A, or an inline `crate::b::x`). The crate root
(`lib.rs`) re-exports the public API and is left out of the graph.

Usage: scripts/modgraph.py [--depth 1|2] [--edges] [--dot]
Exit status: 0 when there is no problem; 1 otherwise (each on its own line).
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


# Workspace crates that depend on nothing of the workspace but these.
LEAVES = {
    "rawpkt-sys": {"rdma-abi"},
    "mlx5-prm": set(),
    "rawpkt-wire": {"rdma-abi"},
    "rdma-abi": set(),
}
# Crates that are one room: the model library is a C ABI whose files are the verbs it exports,
# calling each other as libibverbs' and libmlx5's files do.
ONE_ROOM = {"rawpkt-model-verbs"}
# (crate, crate it must not depend on, why)
FORBIDDEN = [
    ("mlx5-model", "rawpkt", "the device model is a device, not a part of the driver"),
    ("rawpkt", "rawpkt-tools", "the library depends on none of its users"),
    ("rawpkt", "rawpkt-model-verbs", "the library depends on none of its users"),
    ("rawpkt", "rawpkt-test-support", "the library depends on none of its users"),
]


def workspace(root):
    """{crate name: (src dir, {path dependency name: features})} of the workspace's members."""
    import tomllib

    with open(os.path.join(root, "Cargo.toml"), "rb") as f:
        top = tomllib.load(f)
    out = {}
    for member in top["workspace"]["members"]:
        d = os.path.normpath(os.path.join(root, member))
        with open(os.path.join(d, "Cargo.toml"), "rb") as f:
            man = tomllib.load(f)
        deps = {}
        for name, spec in man.get("dependencies", {}).items():
            if isinstance(spec, dict) and "path" in spec:
                deps[spec.get("package", name)] = spec.get("features", [])
        out[man["package"]["name"]] = (os.path.join(d, "src"), deps)
    return out


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


def rooms_of(src, depth):
    """(file edges, room graph) of one crate's sources (binaries left out)."""
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
        ra, rb = room(a, depth, dir_rooms), room(b, depth, dir_rooms)
        if ra and rb and ra != rb:
            rooms.setdefault(ra, set()).add(rb)
            rooms.setdefault(rb, set())
    return file_edges, rooms, dir_rooms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--depth", type=int, default=2, choices=(1, 2))
    ap.add_argument("--edges", action="store_true", help="print every file-level edge")
    ap.add_argument("--dot", action="store_true", help="print the crate and room graphs as Graphviz dot")
    args = ap.parse_args()
    crates = workspace(os.path.normpath(args.root))

    bad = 0
    crate_graph = {c: set(d for d in deps if d in crates) for c, (_, deps) in crates.items()}
    for comp in sccs(crate_graph):
        bad += 1
        print(f"crate cycle: {' <-> '.join(comp)}")
    for c, allowed in LEAVES.items():
        for d in sorted(crate_graph.get(c, ())):
            if d not in allowed:
                bad += 1
                print(f"{c} depends on {d}: it depends on nothing of the workspace but {sorted(allowed) or 'nothing'}")
    for c, d, why in FORBIDDEN:
        if d in crate_graph.get(c, ()):
            bad += 1
            print(f"{c} depends on {d}: {why}")
    for c, (_, deps) in crates.items():
        if "internals" in deps.get("rawpkt", []):
            bad += 1
            print(f"{c} turns on rawpkt's internals in a normal dependency (tests only)")
    if args.dot:
        print("digraph crates {")
        for a in sorted(crate_graph):
            for b in sorted(crate_graph[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")

    n_rooms = n_edges = 0
    for c in sorted(crates):
        src = crates[c][0]
        if not os.path.isdir(src) or c in ONE_ROOM:
            continue
        file_edges, rooms, dir_rooms = rooms_of(src, args.depth)
        n_rooms += len(rooms)
        n_edges += sum(len(v) for v in rooms.values())
        if args.edges:
            for a, b in sorted(file_edges):
                print(f"{c}: {'::'.join(a) or 'crate'} -> {'::'.join(b) or 'crate'}")
        if args.dot:
            print(f'digraph "{c}" {{')
            for a in sorted(rooms):
                for b in sorted(rooms[a]):
                    print(f'  "{a}" -> "{b}";')
            print("}")
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
            print(f"{c}: cycle: {' <-> '.join(comp)}  ({'; '.join(why)})")
    n_crate_edges = sum(len(v) for v in crate_graph.values())
    print(
        f"{len(crates)} crates, {n_crate_edges} dependencies between them; "
        f"{n_rooms} rooms, {n_edges} edges between them; {bad} problem(s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    # A closed stdout (`| head`) ends the listing quietly, as it does for coreutils.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
