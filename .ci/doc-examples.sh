#!/usr/bin/env bash
# Builds every Rust example of the README, the guide (src/guide/*.md) and the API docs (`//!` and `///` in src/ and
# crates/*/src/) as a user would paste it:
# in a scratch crate OUTSIDE this repository whose only dependencies are the ones the README's Install section names
# (zk-partitioner, tokio, the test kit as a dev-dependency, and `futures` if the Install section names it), with
# zk-partitioner's optional `tls` feature on, as docs.rs documents it.
#
# Doctests cannot catch an example that only compiles inside this crate: rustdoc gives them every dependency of the
# crate (`zookeeper_client::` resolves there, and fails with E0433 in a user's crate).
#
#   bash .ci/doc-examples.sh            # exit 0 when every example builds
#
# Each example becomes examples/<source>_<line>.rs of the scratch crate, wrapped as rustdoc does (hidden `# ` lines
# kept, `fn main` added when missing); examples holding `#[tokio::test]` functions are built as tests, so their
# bodies are checked too. The scratch crate uses this repository through `[patch.crates-io]` and builds in
# target/doc-examples.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/zkp-doc-examples.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

python3 - "$repo" "$scratch" <<'PY'
import os, re, sys

repo, scratch = sys.argv[1], sys.argv[2]
SKIP = {"text", "toml", "sh", "console", "ignore", "compile_fail", "json", "yaml"}

def blocks(lines, origin):
    """Fenced code blocks of `lines` (already stripped of any doc-comment prefix): (origin, line, info, code)."""
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^\s*```(.*)$", lines[i][1])
        if not m:
            i += 1
            continue
        info, start, code = m.group(1).strip(), lines[i][0], []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i][1]):
            code.append(lines[i][1])
            i += 1
        i += 1
        tokens = {t.strip() for t in info.split(",") if t.strip()}
        if tokens & SKIP or (tokens and not tokens & {"rust", "no_run", "should_panic"}):
            continue
        out.append((origin, start, code))
    return out

def doc_lines(path):
    """(line number, text) of the doc comments of a Rust file, prefix removed; a blank separates comment runs."""
    out, previous = [], None
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^\s*//[/!](?!/) ?(.*)$", line.rstrip("\n"))
        if m:
            out.append((number, m.group(1)))
            previous = number
        elif previous == number - 1:
            out.append((number, ""))
    return out

def unhide(line):
    """rustdoc's hidden lines: `# code` and a bare `#` are compiled (and hidden); `##` is a literal `#`."""
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if stripped == "#":
        return ""
    if stripped.startswith("# "):
        return indent + stripped[2:]
    if stripped.startswith("##"):
        return indent + stripped[1:]
    return line

readme = open(os.path.join(repo, "README.md"), encoding="utf-8").read().splitlines()
examples = blocks(list(enumerate(readme, 1)), "README.md")
# The guide's chapters (src/guide/*.md, the `guide` module's docs).
guide = os.path.join(repo, "src", "guide")
for name in sorted(os.listdir(guide)):
    if name.endswith(".md"):
        chapter = open(os.path.join(guide, name), encoding="utf-8").read().splitlines()
        examples += blocks(list(enumerate(chapter, 1)), f"src/guide/{name}")
for root, _, files in [w for top in ("src", "crates/proto/src", "crates/testing/src") for w in os.walk(os.path.join(repo, top))]:
    for name in sorted(files):
        if name.endswith(".rs"):
            path = os.path.join(root, name)
            examples += blocks(doc_lines(path), os.path.relpath(path, repo))

# The dependencies, exactly as the README's Install section gives them.
install = "\n".join(readme)
install = install[install.index("## Install"):]
install = install[: install.index("\n## ", 3)]
toml = "\n".join(m.group(1) for m in re.finditer(r"```toml\n(.*?)```", install, re.S))
# Examples of the optional `tls` feature are built with it, as docs.rs shows them (all features): a user who copies
# one has it on.
if 'zk-partitioner = "0.1"' not in toml:
    sys.exit("doc-examples: the README's Install section no longer says zk-partitioner = \"0.1\"; update this script")
toml = toml.replace('zk-partitioner = "0.1"', 'zk-partitioner = { version = "0.1", features = ["tls"] }', 1)
if 'futures = "0.3"' in install and "futures" not in toml:
    toml = toml.replace("[dependencies]\n", '[dependencies]\nfutures = "0.3"\n', 1)
manifest = f"""[package]
name = "doc-examples-check"
version = "0.0.0"
edition = "2024"
publish = false

{toml}
[patch.crates-io]
zk-partitioner = {{ path = "{repo}" }}
zk-partitioner-testing = {{ path = "{repo}/crates/testing" }}

[workspace]
"""
os.makedirs(os.path.join(scratch, "examples"))
os.makedirs(os.path.join(scratch, "src"))
open(os.path.join(scratch, "Cargo.toml"), "w").write(manifest)
open(os.path.join(scratch, "src", "lib.rs"), "w").write("")
index = []
for origin, line, code in examples:
    body = "\n".join(unhide(l) for l in code)
    if "fn main" in body:
        source = body
    elif "#[tokio::test]" in body or "#[test]" in body:
        source = body + "\n\nfn main() {}\n"  # items only: built with `cargo test`, so the tests are compiled
    else:
        source = "fn main() {\n" + body + "\n}\n"
    stem = re.sub(r"[^A-Za-z0-9]+", "_", origin.removesuffix(".rs").removesuffix(".md")).strip("_").lower()
    file = f"{stem}_{line}"
    open(os.path.join(scratch, "examples", file + ".rs"), "w").write("#![allow(unused)]\n" + source)
    index.append(f"examples/{file}.rs  <-  {origin}:{line}")
open(os.path.join(scratch, "INDEX"), "w").write("\n".join(index) + "\n")
print(f"doc examples: {len(examples)} (README.md, the guide and the crates' src/), dependencies from the README's Install section:")
print("    " + "\n    ".join(l for l in toml.splitlines() if l.strip()))
PY

cp "$repo/Cargo.lock" "$scratch/Cargo.lock"  # the versions this repository is tested with
sed 's/^/    /' "$scratch/INDEX"
# `cargo test --no-run` builds every example as a test too, so `#[tokio::test]` bodies are compiled.
if ! (cd "$scratch" && CARGO_TARGET_DIR="$repo/target/doc-examples" cargo test --examples --no-run --quiet); then
    echo "error: a documentation example does not build in a user's crate (sources above: examples/<file> <- origin)" >&2
    exit 1
fi
echo "every documentation example builds in a crate that depends only on what the README's Install section names"
