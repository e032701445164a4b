#!/usr/bin/env python3
"""Every file a published crate's build reads is in its package, and nothing it compiles
names an unpublished crate.

After a debug build of the workspace (the tests' build), this reads:

* what rustc recorded it read for each crate (the dep-info files, `target/debug/deps/*.d` and
  `target/debug/examples/*.d`: sources, `include_str!`/`include_bytes!` files);
* what build scripts declared they read (`cargo:rerun-if-changed` in
  `target/debug/build/*/output`; a directory stands for every file git tracks below it);

keeps, for each published crate, the files of its own directory that a user's build compiles
(not its integration tests, benches or fuzz workspace, which are not packaged), and checks that
`cargo package --list` lists each of them. A package that lists every file its build reads
builds from its tarball as it builds here; this replaces building each tarball, which resolves
every dependency's features anew and costs minutes.

A tarball's manifest drops the dev-dependencies that are not published, so a packaged example
(of the targets a user builds, the only ones that may use dev-dependencies) must not name one:
that is checked on the examples' text.

Usage: python3 .ci/package-contents.py NAME=DIR [NAME=DIR ...]   (from the repository root)
"""

import glob
import os
import re
import subprocess
import sys

# Crates of the workspace that are never published: packaged code must not use them.
UNPUBLISHED = ("funnel_testkit", "funnel_lab", "funnel_compare")
# Below a crate's directory, what its package leaves out on purpose.
NOT_PACKAGED = ("tests", "benches", "fuzz", "target", "crates")


def dep_info_files(root):
    """Every file a dep-info file of target/debug names, as absolute paths."""
    found = set()
    for d in glob.glob(os.path.join(root, "target/debug/deps/*.d")) + glob.glob(
        os.path.join(root, "target/debug/examples/*.d")
    ):
        with open(d, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("#") or ":" not in line:
                    continue
                # `path:` lines name one input each; escaped spaces stay part of a path.
                head = line.rstrip("\n")
                if not head.endswith(":"):
                    continue
                path = head[:-1].replace("\\ ", " ")
                found.add(os.path.normpath(os.path.join(root, path)))
    return found


def build_script_inputs(root, crates):
    """The files below each crate's `cargo:rerun-if-changed` paths, by crate directory."""
    found = set()
    for output in glob.glob(os.path.join(root, "target/debug/build/*/output")):
        package = re.sub(r"-[0-9a-f]{16}$", "", os.path.basename(os.path.dirname(output)))
        crate_dir = crates.get(package)
        if crate_dir is None:
            continue
        with open(output, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"cargo::?rerun-if-changed=(.*)", line.strip())
                if not m:
                    continue
                path = os.path.normpath(os.path.join(crate_dir, m.group(1)))
                tracked = subprocess.run(
                    ["git", "ls-files", "--", path],
                    cwd=root, check=True, capture_output=True, text=True,
                ).stdout.split()
                found.update(os.path.join(root, t) for t in tracked)
    return found


def packaged(root, name):
    listed = subprocess.run(
        ["cargo", "package", "-q", "-p", name, "--list", "--allow-dirty"],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout.split()
    return set(listed)


def main():
    root = os.getcwd()
    crates = {}
    for arg in sys.argv[1:]:
        name, _, rel = arg.partition("=")
        crates[name] = os.path.normpath(os.path.join(root, rel))
    if not crates:
        sys.exit(__doc__)
    read = dep_info_files(root) | build_script_inputs(root, crates)
    if not any(p.endswith(".rs") for p in read):
        sys.exit("package-contents: no dep-info in target/debug: build the workspace first")
    failed = False
    for name, crate_dir in crates.items():
        nested = [d for d in crates.values() if d != crate_dir and d.startswith(crate_dir + os.sep)]
        needed = set()
        for path in read:
            if not path.startswith(crate_dir + os.sep) or not os.path.isfile(path):
                continue
            if any(path.startswith(d + os.sep) for d in nested):
                continue
            rel = os.path.relpath(path, crate_dir)
            if rel.split(os.sep)[0] in NOT_PACKAGED:
                continue
            needed.add(rel)
        listed = packaged(root, name)
        missing = sorted(needed - listed)
        for rel in missing:
            print(f"package-contents: {name}: {rel} is read by its build but not packaged")
        naming = []
        for rel in sorted(listed):
            if not (rel.startswith("examples" + os.sep) and rel.endswith(".rs")):
                continue
            with open(os.path.join(crate_dir, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            naming += [f"{rel} names {u}" for u in UNPUBLISHED if re.search(rf"\b{u}\b", text)]
        for n in naming:
            print(f"package-contents: {name}: {n}, which is not published")
        failed |= bool(missing or naming)
        print(f"package-contents: {name}: {len(needed)} files its build reads, all packaged"
              if not (missing or naming) else f"package-contents: {name}: FAILED")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
