//! The workspace's shape, checked: the limits a newcomer relies on to find their way (ARCHITECTURE.md is the map).
//! Reads the sources of every crate (`src/`, `crates/proto/src/`, `crates/testing/src/`, `crates/cli/src/`) and their
//! manifests as text; no ZooKeeper needed.
//!
//! - no source file is longer than 800 lines, the decision core's `mod.rs` than 600, the driver's loop than 250;
//! - within each crate, no cycle of imports, of any length, among modules (top-level modules, and siblings inside
//!   one), test-only code aside; every name after `crate::` or `super::` resolves to a module, a re-export or an item
//!   of the crate root (one that does not is reported: the check could not see a cycle through it), and a fixture
//!   shows the check finding cycles of two and three modules and an import of nothing (between crates, cargo itself
//!   refuses a cycle);
//! - kazoo's lock-name rule (`__lock__`) is written once, in `crates/proto/src/layout.rs`, and each rule
//!   ARCHITECTURE.md gives one home is written there alone, in every crate (the loop body, the update loop, the
//!   chunked record, the rendezvous prefix, the delays derived from `time_boundary`, the match on `Rebalance`);
//! - no two files of a crate have the same name, but `mod.rs`, `lib.rs`, `tests.rs` and the files of a `tests/`
//!   folder (named for what they test);
//! - the protocol depends on `thiserror` and `tracing` alone, and no manifest depends on the test kit;
//! - the decision core has at most twelve fields, none public, and its parts keep their state private: no struct under
//!   `decision/` has a visible field but the protocol's messages (`protocol.rs`) and the core's configuration;
//! - ARCHITECTURE.md, the one map of the source, names every module of every crate (tests aside), and no other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module path (`driver::step`, `proto::decision::locks`; the crate root is ``) and its text,
/// test-only code removed.
struct Module {
    file: PathBuf,
    path: String,
    lines: usize,
    code: String,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The crates whose sources the checks read: the module path's first part for each (`proto::decision`), and its
/// `src/`.
const CRATES: [(&str, &str); 4] =
    [("", "src"), ("proto", "crates/proto/src"), ("testing", "crates/testing/src"), ("cli", "crates/cli/src")];

fn src_dir(krate: &str) -> PathBuf {
    let (_, dir) = CRATES.iter().find(|(name, _)| *name == krate).expect("a known crate");
    repo().join(dir)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `file`'s module path: as its crate names it, or (`prefixed`) starting with the crate's name.
fn module_path(krate: &str, file: &Path, prefixed: bool) -> String {
    let rel = file.strip_prefix(src_dir(krate)).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod" || last == "lib" || last == "main") {
        parts.pop();
    }
    if prefixed && !krate.is_empty() {
        parts.insert(0, krate.to_owned());
    }
    parts.join("::")
}

/// The text without comments and without the items behind `#[cfg(test)]` (a `mod … { }` block, a `mod …;`, a `use`,
/// a function): what the library itself is made of.
fn library_code(text: &str) -> String {
    let without_comments: String = text
        .lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string (a URL) is rare in code that names modules; good enough here.
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::with_capacity(without_comments.len());
    let mut rest = without_comments.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        rest = skip_item(&rest[at + "#[cfg(test)]".len()..]);
    }
    out.push_str(rest);
    out
}

/// Skips one item: up to its `;` or through its balanced `{ }` block, whichever comes first.
fn skip_item(text: &str) -> &str {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            ';' if depth == 0 => return &text[at + 1..],
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &text[at + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// The modules declared behind `#[cfg(test)]` (`sim`, `decision::tests`...): test code, left out of the graph.
fn test_only_modules(modules: &[Module], raw: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut test_only = BTreeSet::new();
    for module in modules {
        let text = &raw[&module.path];
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let item = item.strip_prefix("pub(crate) ").unwrap_or(item);
            if let Some(name) = item.strip_prefix("mod ") {
                let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                let child = if module.path.is_empty() { name } else { format!("{}::{name}", module.path) };
                test_only.insert(child);
            }
        }
    }
    test_only
}

/// Every path named after `crate::` or `super::` in `code`, expanded (`crate::{a, b::{c, d}}` gives `a`, `b::c`,
/// `b::d`), made absolute.
fn named_paths(module: &str, code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (anchor, base) in [("crate::", String::new()), ("super::", parent(module).unwrap_or_default())] {
        let mut rest = code;
        while let Some(at) = rest.find(anchor) {
            let before = rest[..at].chars().last();
            rest = &rest[at + anchor.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `zk_crate::`
            }
            let mut base = base.clone();
            let mut tail = rest;
            // `super::super::`
            while let Some(next) = tail.strip_prefix("super::") {
                base = parent(&base).unwrap_or_default();
                tail = next;
            }
            tree(&base, tail, &mut found);
        }
    }
    found
}

fn parent(module: &str) -> Option<String> {
    if module.is_empty() {
        return None;
    }
    Some(module.rsplit_once("::").map_or(String::new(), |(parent, _)| parent.to_owned()))
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() { name.to_owned() } else { format!("{base}::{name}") }
}

/// Parses a use-tree at the start of `text` (`a::b`, `a::{b, c::d}`), pushing each full path.
fn tree<'a>(base: &str, text: &'a str, found: &mut Vec<String>) -> &'a str {
    let text = text.trim_start();
    if let Some(mut rest) = text.strip_prefix('{') {
        loop {
            rest = rest.trim_start();
            if let Some(after) = rest.strip_prefix('}') {
                return after;
            }
            if rest.is_empty() {
                return rest;
            }
            rest = tree(base, rest, found);
            rest = rest.trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let name: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if name.is_empty() {
        found.push(base.to_owned());
        return text;
    }
    let path = join(base, &name);
    let rest = &text[name.len()..];
    match rest.strip_prefix("::") {
        Some(rest) => tree(&path, rest, found),
        None => {
            found.push(path);
            rest
        }
    }
}

/// Every source file of every crate.
fn load() -> Vec<(Module, String)> {
    CRATES.iter().flat_map(|(krate, _)| load_crate(krate, true)).collect()
}

/// The source files of one crate; `prefixed`: module paths start with the crate's name (`proto::decision`), else
/// they are as the crate itself names them (`decision`).
fn load_crate(krate: &str, prefixed: bool) -> Vec<(Module, String)> {
    let mut paths = Vec::new();
    files(&src_dir(krate), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|file| {
            let raw = std::fs::read_to_string(&file).expect("read source");
            let path = module_path(krate, &file, prefixed);
            let module = Module { path, lines: raw.lines().count(), code: library_code(&raw), file };
            (module, raw)
        })
        .collect()
}

#[test]
fn no_file_is_too_long_to_read() {
    let mut too_long = Vec::new();
    for (module, _) in load() {
        let limit = match module.path.as_str() {
            "proto::decision" => 600,
            "driver" => 250,
            _ => 800,
        };
        if module.lines > limit {
            too_long.push(format!("{} has {} lines (at most {limit})", module.file.display(), module.lines));
        }
    }
    assert!(too_long.is_empty(), "split these by concern:\n{}", too_long.join("\n"));
}

/// What the import check found: cycles among modules (each as `a -> b -> a`, of any length) and names after
/// `crate::` or `super::` that resolve to no module and no re-export of the crate root (the check cannot follow
/// them, so it must say so rather than skip them).
#[derive(Debug, Default)]
struct ImportReport {
    cycles: Vec<String>,
    unresolved: Vec<String>,
}

/// The import graph of `modules` (`raw` is each module's text, test-only code included, to find the modules declared
/// behind `#[cfg(test)]`): imports between distinct top-level modules, and between siblings inside one, test-only
/// code aside; then its cycles and what could not be resolved.
fn check_imports(modules: &[Module], raw: &BTreeMap<String, String>) -> ImportReport {
    let known: BTreeSet<String> = modules.iter().map(|m| m.path.clone()).collect();
    let test_only = test_only_modules(modules, raw);
    let is_test = |path: &str| test_only.iter().any(|t| path == t || path.starts_with(&format!("{t}::")));
    let root = modules.iter().find(|m| m.path.is_empty()).expect("the crate root");
    // What the crate root re-exports, and from where (`crate::Item` is `item`'s).
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for path in named_paths("", &root.code.replace("pub use ", "pub use crate::")) {
        if let Some((module, item)) = path.rsplit_once("::") {
            reexports.insert(item.to_owned(), module.to_owned());
        }
    }
    // What the crate root defines itself (`crate::SOMETHING` with no module in between).
    let own = root_items(&root.code);
    let resolve = |path: &str| -> Option<String> {
        let mut candidate = path.to_owned();
        loop {
            if known.contains(&candidate) {
                return Some(candidate);
            }
            if let Some(module) = reexports.get(&candidate) {
                return Some(module.clone());
            }
            match candidate.rsplit_once("::") {
                Some((parent, _)) => candidate = parent.to_owned(),
                None => return own.contains(&candidate).then(String::new),
            }
        }
    };
    let mut report = ImportReport::default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in modules.iter().filter(|m| !m.path.is_empty() && !is_test(&m.path)) {
        for named in named_paths(&module.path, &module.code) {
            let Some(target) = resolve(&named) else {
                report.unresolved.push(format!("{} names `{named}`", module.file.display()));
                continue;
            };
            if target.is_empty() || is_test(&target) {
                continue;
            }
            let (from_top, to_top) = (top(&module.path), top(&target));
            if from_top != to_top {
                edges.entry(from_top.to_owned()).or_default().insert(to_top.to_owned());
            } else if let (Some(a), Some(b)) =
                (sibling_under(&module.path, &target), sibling_under(&target, &module.path))
            {
                edges.entry(a).or_default().insert(b);
            }
        }
    }
    report.unresolved.sort();
    report.unresolved.dedup();
    report.cycles = cycles(&edges);
    report
}

/// The names the crate root's own code defines (functions, types, constants, macros, modules), which
/// `crate::<name>` may name.
fn root_items(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in code.lines() {
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub") || *w == "async" || *w == "unsafe");
        let (Some(kind), Some(name)) = (words.next(), words.next()) else { continue };
        if ["fn", "struct", "enum", "const", "static", "type", "trait", "mod", "macro_rules!", "union"].contains(&kind)
        {
            let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            names.insert(name);
        }
    }
    names
}

/// Every cycle of the graph, one per strongly connected component of more than one module (Tarjan's algorithm), each
/// shown as a path through the component from its first module back to it: `a -> b -> c -> a`.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top);
                    if top == node {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in edges.keys() {
        if !tarjan.index.contains_key(node.as_str()) {
            tarjan.visit(node);
        }
    }
    let mut found: Vec<String> = tarjan
        .components
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let members: BTreeSet<&str> = component.into_iter().collect();
            cycle_through(edges, &members).join(" -> ")
        })
        .collect();
    found.sort();
    found
}

/// A shortest cycle from the first of `members` (a strongly connected component) back to it, inside the component.
fn cycle_through<'a>(edges: &'a BTreeMap<String, BTreeSet<String>>, members: &BTreeSet<&'a str>) -> Vec<&'a str> {
    let start = *members.first().expect("a component has members");
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(node).into_iter().flatten().map(String::as_str) {
            if !members.contains(next) {
                continue;
            }
            if next == start {
                let mut path = vec![node];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    path.push(at);
                }
                path.reverse();
                path.push(start);
                return path;
            }
            if next != start && !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    unreachable!("a strongly connected component of several modules has a cycle through each")
}

#[test]
fn no_module_imports_one_that_imports_it() {
    // Within each crate: between crates, cargo refuses a cycle.
    for (krate, _) in CRATES {
        let loaded = load_crate(krate, false);
        let raw: BTreeMap<String, String> = loaded.iter().map(|(m, raw)| (m.path.clone(), raw.clone())).collect();
        let modules: Vec<Module> = loaded.into_iter().map(|(module, _)| module).collect();
        let report = check_imports(&modules, &raw);
        assert!(
            report.unresolved.is_empty(),
            "imports the check cannot resolve in {krate:?} (it would not see a cycle through them):\n{}",
            report.unresolved.join("\n")
        );
        assert!(report.cycles.is_empty(), "modules importing each other:\n{}", report.cycles.join("\n"));
    }
}

fn top(path: &str) -> &str {
    path.split("::").next().unwrap_or(path)
}

/// Where `from` and `to` part ways: `from`'s branch, if neither contains the other (`decision::locks` against
/// `decision::party::x` gives `decision::locks`).
fn sibling_under(from: &str, to: &str) -> Option<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (from.split("::").collect(), to.split("::").collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    (common < a.len() && common < b.len()).then(|| a[..=common].join("::"))
}

#[test]
fn the_lock_name_rule_is_written_once() {
    assert_eq!(
        files_containing("__lock__"),
        ["crates/proto/src/layout.rs"],
        "kazoo's `__lock__` rule outside layout.rs"
    );
}

/// The library files of every crate (test-only modules and test code aside) whose code contains `needle`, relative to
/// the repository.
fn files_containing(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, _) in CRATES {
        let loaded = load_crate(krate, false);
        let raw: BTreeMap<String, String> = loaded.iter().map(|(m, raw)| (m.path.clone(), raw.clone())).collect();
        let modules: Vec<Module> = loaded.into_iter().map(|(module, _)| module).collect();
        let test_only = test_only_modules(&modules, &raw);
        found.extend(
            modules
                .into_iter()
                .filter(|m| !test_only.iter().any(|t| m.path == *t || m.path.starts_with(&format!("{t}::"))))
                .filter(|module| module.code.contains(needle))
                .map(|module| module.file.strip_prefix(repo()).expect("in the repository").display().to_string()),
        );
    }
    found
}

#[test]
fn each_rule_with_one_home_is_written_there_alone() {
    for (needle, home, rule) in [
        ("fn session_event", "src/driver/publish.rs", "the core's view of a session state"),
        (
            "release_acks.insert(",
            "src/driver/step.rs",
            "a command becomes the core's event and an ack in waiting (the loop body)",
        ),
        ("Arc::make_mut(&mut self.lock_dirs)", "src/driver/step.rs", "the lock directories grow (the loop body)"),
        ("const MAX_ATTEMPTS", "src/shared_set/attempts.rs", "the optimistic update loop's attempts"),
        ("MAX_BACKOFF", "src/shared_set/attempts.rs", "the optimistic update loop's back-off"),
        ("const MAX_CHUNKS", "crates/proto/src/chunked.rs", "the chunked record's limit"),
        ("fn chunk_name(", "crates/proto/src/chunked.rs", "the chunked record's names"),
        ("fn cuts_before", "crates/proto/src/chunked.rs", "the chunked record's content-defined cuts"),
        ("struct Prefix", "crates/proto/src/partition_fn/prefix.rs", "the rendezvous rankings' remembered list"),
        ("time_boundary /", "crates/proto/src/decision/timers.rs", "a delay derived from time_boundary"),
        ("time_boundary *", "crates/proto/src/decision/timers.rs", "a delay derived from time_boundary"),
        ("Rebalance::Incremental =>", "crates/proto/src/decision/rebalance.rs", "what tells the modes apart"),
        ("== Rebalance::", "crates/proto/src/decision/rebalance.rs", "what tells the modes apart"),
    ] {
        assert_eq!(files_containing(needle), [home], "{rule} ({needle:?}) is written outside {home}");
    }
}

#[test]
fn no_two_files_of_a_crate_have_the_same_name() {
    for (krate, _) in CRATES {
        let mut files = Vec::new();
        self::files(&src_dir(krate), &mut files);
        let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for file in &files {
            let rel = file.strip_prefix(src_dir(krate)).expect("under src");
            let name = rel.file_name().expect("a file").to_string_lossy().into_owned();
            let in_tests = rel.parent().is_some_and(|dir| dir.ends_with("tests"));
            if !["mod.rs", "lib.rs", "tests.rs"].contains(&name.as_str()) && !in_tests {
                by_name.entry(name).or_default().push(rel.display().to_string());
            }
        }
        let repeated: Vec<&Vec<String>> = by_name.values().filter(|files| files.len() > 1).collect();
        assert!(files.len() > 5, "read {} files under {krate:?}'s src/", files.len());
        assert!(repeated.is_empty(), "file names used twice (a name should say which concern it holds): {repeated:?}");
    }
}

/// The decision core's state is a few parts, one per concern (ARCHITECTURE.md): at most 12 fields, none of them
/// public.
#[test]
fn the_core_is_a_few_private_parts() {
    let code = std::fs::read_to_string(repo().join("crates/proto/src/decision/mod.rs")).expect("read the core");
    let body = code.split("\npub struct Core {\n").nth(1).expect("`pub struct Core {` in decision/mod.rs");
    let body = &body[..body.find("\n}\n").expect("the struct's end")];
    let fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("//") && !line.is_empty())
        .filter(|line| line.contains(':'))
        .collect();
    assert!(fields.len() >= 5, "read the core's fields: {fields:?}");
    assert!(fields.len() <= 12, "the core has {} fields (at most 12): {fields:?}", fields.len());
    let public: Vec<&&str> =
        fields.iter().filter(|field| field.starts_with("pub ") || field.starts_with("pub(")).collect();
    assert!(public.is_empty(), "public fields of the core: {public:?}");
}

/// The structs of the decision core whose fields are visible: the messages that cross its boundary and the
/// configuration it is built from. Every other struct under `decision/` (the parts, and what they hold) keeps its
/// state private behind methods.
const MESSAGES: &[&str] = &["CoreConfig", "Batch", "JitterParties"];

/// Each struct with named fields in `code`: its name and the fields declared visible (`pub`, `pub(...)`).
fn visible_fields(code: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let rest = line.trim_start();
        let rest = ["pub ", "pub(super) ", "pub(crate) "].iter().find_map(|p| rest.strip_prefix(p)).unwrap_or(rest);
        let Some(decl) = rest.strip_prefix("struct ") else { continue };
        if !decl.trim_end().ends_with('{') {
            continue;
        }
        let name: String = decl.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let indent = line.len() - line.trim_start().len();
        let mut visible = Vec::new();
        for field in lines.by_ref() {
            if field.len() - field.trim_start().len() == indent && field.trim() == "}" {
                break;
            }
            let field = field.trim();
            if (field.starts_with("pub ") || field.starts_with("pub(")) && field.contains(':') {
                visible.push(field.to_owned());
            }
        }
        found.push((name, visible));
    }
    found
}

/// The core's parts own their state (issue 45, R3): under `decision/`, only the protocol's messages and the
/// configuration have visible fields.
#[test]
fn the_core_parts_keep_their_state_private() {
    let dir = repo().join("crates/proto/src/decision");
    let mut files = Vec::new();
    self::files(&dir, &mut files);
    let mut structs = 0;
    let mut seen_messages = BTreeSet::new();
    let mut leaks = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&dir).expect("under decision/").to_string_lossy().into_owned();
        if rel == "tests.rs" || rel.starts_with("tests/") || rel == "inspect.rs" {
            continue;
        }
        let code = std::fs::read_to_string(file).expect("read a source file");
        for (name, visible) in visible_fields(&code) {
            structs += 1;
            if rel == "protocol.rs" || MESSAGES.contains(&name.as_str()) {
                if !visible.is_empty() {
                    seen_messages.insert(name);
                }
            } else if !visible.is_empty() {
                leaks.push(format!("{rel}: {name} {visible:?}"));
            }
        }
    }
    // The reader works: it finds the parts, and the messages' visible fields.
    assert!(structs >= 15, "read {structs} structs under decision/");
    assert!(MESSAGES.iter().all(|name| seen_messages.contains(*name)), "read the messages: {seen_messages:?}");
    assert!(leaks.is_empty(), "state visible outside its part (give the part a method): {leaks:#?}");
}

/// The `[dependencies]` section of a manifest: the names it lists.
fn dependencies(manifest: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(repo().join(manifest)).expect("read the manifest");
    let section = manifest.split("\n[dependencies]\n").nth(1).expect("a [dependencies] section");
    let section = section.split("\n[").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| !line.trim_start().starts_with('#') && line.contains('='))
        .filter_map(|line| line.split('=').next().map(|name| name.trim().to_owned()))
        .collect()
}

/// The test kit and the tool are leaves: no crate of the workspace depends on them but for its tests (CI also asks
/// cargo, with `cargo tree -i zk-partitioner-testing -e normal` and the same for `zk-partitioner-cli`).
#[test]
fn nothing_depends_on_the_test_kit_or_the_tool_but_tests() {
    for manifest in ["Cargo.toml", "crates/proto/Cargo.toml", "crates/testing/Cargo.toml", "crates/cli/Cargo.toml"] {
        let names = dependencies(manifest);
        assert!(names.len() >= 2, "read {manifest}'s dependencies: {names:?}");
        assert!(!names.iter().any(|name| name.contains("testing")), "{manifest} depends on the test kit: {names:?}");
        assert!(!names.iter().any(|name| name == "zk-partitioner-cli"), "{manifest} depends on the tool: {names:?}");
    }
}

/// The protocol's `[dependencies]`: what it may depend on is fixed (no runtime, client or futures). CI also checks the
/// whole normal dependency tree (`cargo tree -p zk-partitioner-proto -e normal`).
#[test]
fn the_protocol_depends_on_nothing_async() {
    assert_eq!(dependencies("crates/proto/Cargo.toml"), ["thiserror", "tracing"], "the protocol's dependencies");
}

#[test]
fn the_checks_see_what_they_should() {
    // A check that reads nothing passes for nothing: make sure the parser finds known facts.
    let mut found =
        named_paths("decision::locks", "use super::{Core, congestion::Window};\nuse crate::layout::{self, position};");
    found.sort();
    assert_eq!(found, ["decision::Core", "decision::congestion::Window", "layout::position", "layout::self"]);
    let code = library_code("fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\nfn b() {}\n");
    assert!(!code.contains("crate::x") && code.contains("fn b"), "{code}");
    let loaded = load();
    assert!(loaded.iter().any(|(m, _)| m.path == "proto::decision::locks"), "the module paths are read");
    assert!(loaded.iter().any(|(m, _)| m.path == "driver::step"), "the module paths are read");
}

/// Modules made of text, as [`load`] makes them of files: `(module path, source)`, the crate root's path being ``.
fn fixture(sources: &[(&str, &str)]) -> (Vec<Module>, BTreeMap<String, String>) {
    let modules = sources
        .iter()
        .map(|(path, text)| Module {
            file: PathBuf::from(format!("{}.rs", if path.is_empty() { "lib" } else { path })),
            path: (*path).to_owned(),
            lines: text.lines().count(),
            code: library_code(text),
        })
        .collect();
    let raw = sources.iter().map(|(path, text)| ((*path).to_owned(), (*text).to_owned())).collect();
    (modules, raw)
}

#[test]
fn the_import_check_reports_cycles_of_any_length_and_what_it_cannot_resolve() {
    // given: a -> b -> c -> a through a re-export of the root, a two-module cycle e <-> f, a cycle between two
    // siblings inside x, an import of nothing, and a cycle through test-only code (which does not count)
    let (modules, raw) = fixture(&[
        (
            "",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\nmod x;\n#[cfg(test)]\nmod t;\npub use a::Thing;\npub fn helper() {}\n",
        ),
        ("a", "use crate::b::Bee;\npub struct Thing;\n#[cfg(test)]\nuse crate::t::Probe;\n"),
        ("b", "use super::c::{self, Cee};\npub struct Bee;\n"),
        ("c", "use crate::Thing;\npub struct Cee;\n"),
        ("d", "use crate::{helper, nowhere::Gone};\n"),
        ("e", "use crate::f::F;\npub struct E;\n"),
        ("f", "use crate::e::E;\npub struct F;\n"),
        ("x", "mod p;\nmod q;\n"),
        ("x::p", "use super::q::Q;\npub struct P;\n"),
        ("x::q", "use crate::x::p::P;\npub struct Q;\n"),
        ("t", "use crate::a::Thing;\npub struct Probe;\n"),
    ]);

    // when
    let report = check_imports(&modules, &raw);

    // then
    assert_eq!(report.cycles, ["a -> b -> c -> a", "e -> f -> e", "x::p -> x::q -> x::p"], "{report:?}");
    assert_eq!(report.unresolved, ["d.rs names `nowhere::Gone`"], "{report:?}");
}

/// The modules ARCHITECTURE.md lists: every line of its "## The modules" section that starts with a module in
/// backquotes (`- \`decision::locks\`: …`).
fn modules_in_the_map() -> BTreeSet<String> {
    let map = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
        .expect("read ARCHITECTURE.md");
    let section = map.split("\n## The modules\n").nth(1).expect("ARCHITECTURE.md has a section '## The modules'");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("- `")?.split_once('`').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn the_architecture_map_names_every_module_and_no_other() {
    let modules: BTreeSet<String> = load()
        .into_iter()
        .map(|(module, _)| if module.path.is_empty() { "lib".to_owned() } else { module.path })
        .filter(|path| !path.split("::").any(|part| part == "tests"))
        .collect();
    let listed = modules_in_the_map();
    let missing: Vec<&String> = modules.difference(&listed).collect();
    let stale: Vec<&String> = listed.difference(&modules).collect();
    assert!(missing.is_empty(), "modules ARCHITECTURE.md does not list (add a line each): {missing:?}");
    assert!(stale.is_empty(), "ARCHITECTURE.md lists modules that do not exist: {stale:?}");
}
