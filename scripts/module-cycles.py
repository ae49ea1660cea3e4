#!/usr/bin/env python3
"""Checks that no module of a crate imports a module that imports it back, and that no
module imports the crate root (`crate::Name`, `crate::{Name, ...}` for a name that is not a
module): a root re-export is the crate's face to its users, not a path inside it.

For each source file (one module), collects the modules it names through `crate::a::b`
and `super::...` paths, resolves each to the module file it reaches, and reports every
pair of modules that are not one inside the other and that name each other. A parent and
its own children may name each other (a folder's mod.rs is its children's context).

Usage: scripts/module-cycles.py CRATE_SRC ...   (default: every crates/*/src)
Exits 1 if a pair or a root import is found. A program's modules (a crate with
its program's main.rs beside a lib.rs, as sb-sim) may import its root, where its shared
types live.
"""
import re
import sys
from pathlib import Path


def module_path(src: Path, file: Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def resolve(modules: set, path: tuple) -> tuple:
    """The longest prefix of `path` that is a module."""
    for n in range(len(path), 0, -1):
        if path[:n] in modules:
            return path[:n]
    return ()


def root_imports(modules: dict, module: tuple, text: str) -> list:
    """The names a non-root module imports from the crate root."""
    if module == ():
        return []
    found = []
    for m in re.finditer(r"(?<![$\w])crate::(\w+)", text):
        if (m.group(1),) not in modules:
            found.append(m.group(1))
    for m in re.finditer(r"(?<![$\w])crate::\{([^}]*)\}", text):
        for name in re.findall(r"(?:^|,)\s*(\w+)", m.group(1)):
            if (name,) not in modules and name != "self":
                found.append(name)
    return found


def check(src: Path) -> list:
    files = [f for f in src.rglob("*.rs")]
    modules = {module_path(src, f): f for f in files}
    edges = {m: set() for m in modules}
    library = (src / "lib.rs").exists() and not (src / "main.rs").exists()
    rooted = []
    for module, file in modules.items():
        text = re.sub(r"//[^\n]*", "", file.read_text())
        if library:
            for name in root_imports(modules, module, text):
                rooted.append(f"{file}: imports the crate root (crate::{name})")
        is_dir_module = file.name in ("mod.rs", "lib.rs", "main.rs")
        for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
            names = tuple(m.group(2).strip(":").split("::"))
            if m.group(1) == "crate":
                target = resolve(modules.keys(), names)
            else:
                base = module if is_dir_module else module[:-1]
                # `super` from a non-dir module is its parent; each further super goes up
                base = base[:-1] if is_dir_module else base
                target = resolve(modules.keys(), base + names)
            if target and target != module:
                edges[module].add(target)
        for m in re.finditer(r"^\s*use\s+(\w+)::", text, re.M):
            pass
    pairs = []
    for a in edges:
        for b in edges[a]:
            if a < b and a in edges.get(b, ()):
                nested = a == b[: len(a)] or b == a[: len(b)]
                if not nested:
                    pairs.append(f'{"::".join(a) or "crate"} and {"::".join(b) or "crate"} import each other')
    return pairs + rooted


roots = [Path(p) for p in sys.argv[1:]] or sorted(Path("crates").glob("*/src"))
found = False
for src in roots:
    for problem in check(src):
        print(f"{src}: {problem}")
        found = True
if found:
    sys.exit(1)
print(f"no module imports one that imports it back or the crate root ({len(roots)} crates)")
