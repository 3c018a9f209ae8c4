//! The modules of fabrik-target form layers that point one way: each top-level module of `src/`
//! uses only modules of lower layers, as listed in lib.rs's doc under "# Layers".
//!
//! A `crate::x` path, or a `super::` path that climbs to the crate root, is a use of module `x`;
//! a path to an item of lib.rs itself (`crate::Target`) is a use of the layer `crate`. Doc links
//! count too: they are paths rustdoc resolves. Paths within one top-level module are free.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let layers = layers(&lib_rs);
    assert!(!layers.is_empty(), "no `# Layers` list in src/lib.rs's doc");
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.as_str(), i + 1)))
        .collect();
    let modules: Vec<String> = layer_of
        .keys()
        .filter(|&&m| m != "crate")
        .map(|m| m.to_string())
        .collect();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        let mut path: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if path.last().is_some_and(|p| p == "mod") {
            path.pop();
        }
        // lib.rs is the root that declares every module; main.rs is the binary on top of all.
        if path == ["lib"] || path == ["main"] {
            continue;
        }
        let module = path[0].as_str();
        seen.insert(module.to_string());
        let Some(&layer) = layer_of.get(module) else {
            problems.push(format!(
                "src/{}: module `{module}` has no place in the layer list of src/lib.rs",
                rel.display()
            ));
            continue;
        };
        let source = std::fs::read_to_string(&file).unwrap();
        for u in uses(&source, path.len(), &modules) {
            // Without a `crate` line, lib.rs's items count as the top layer.
            let used = layer_of
                .get(u.module.as_str())
                .copied()
                .unwrap_or(usize::MAX);
            if u.module != module && used >= layer {
                problems.push(format!(
                    "src/{}:{}: `{}` is a use of `{}` (layer {}) in `{module}` (layer {layer}): \
                     a module may use only modules of lower layers",
                    rel.display(),
                    u.line,
                    u.path,
                    u.module,
                    if used == usize::MAX {
                        "top".to_string()
                    } else {
                        used.to_string()
                    },
                ));
            }
        }
    }
    for m in &modules {
        if !seen.contains(m) {
            problems.push(format!(
                "src/lib.rs: the layer list names `{m}`, which is no module of src/"
            ));
        }
    }
    let listed: Vec<String> = layers
        .iter()
        .enumerate()
        .map(|(i, names)| format!("  {}. {}", i + 1, names.join(", ")))
        .collect();
    assert!(
        problems.is_empty(),
        "the module layers are broken:\n{}\n\nThe layers, bottom first (src/lib.rs):\n{}",
        problems.join("\n"),
        listed.join("\n")
    );
}

/// The scanner itself: without it finding paths, the check above would pass on anything.
#[test]
fn uses_resolve_crate_and_super_paths() {
    let modules = ["config", "controller", "metrics", "model", "state"].map(String::from);
    // As if in src/transport/tcp.rs: module path depth 2.
    let source = "use crate::controller::Queue;
use crate::{
    metrics::X,
    Target,
};
use super::super::state::State;
use super::admission::Limits;
/// See [`Port`](crate::model::Port).
mod tests {
    use super::super::Listener;
    use super::super::super::config;
    fn f() -> u32 { other_crate::x() }
}
";
    let found: Vec<(usize, String, String)> = uses(source, 2, &modules)
        .into_iter()
        .map(|u| (u.line, u.path, u.module))
        .collect();
    let expected = [
        (1, "crate::controller", "controller"),
        (2, "crate::metrics", "metrics"),
        (2, "crate::Target", "crate"),
        (6, "super::super::state", "state"),
        (8, "crate::model", "model"),
        (11, "super::super::super::config", "config"),
    ]
    .map(|(l, p, m)| (l, p.to_string(), m.to_string()));
    assert_eq!(found, expected);
}

/// The layers, bottom first: each "- `a`, `b`: why" line after lib.rs's "# Layers" heading.
fn layers(lib_rs: &str) -> Vec<Vec<String>> {
    lib_rs
        .lines()
        .skip_while(|l| l.trim() != "//! # Layers")
        .skip(1)
        .take_while(|l| l.starts_with("//!") && !l.starts_with("//! #"))
        .filter_map(|l| l.strip_prefix("//! - "))
        .map(|l| {
            let names = l.split(':').next().unwrap_or_default();
            names
                .split(',')
                .map(|n| n.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

/// A path out of a file's top-level module: to `module`, or to "crate" for an item of lib.rs.
#[derive(Debug)]
struct Use {
    line: usize,
    /// As written up to the name, e.g. `crate::metrics` or `super::super::state`.
    path: String,
    module: String,
}

/// The uses in `source`, a file whose module path has `depth` segments (src/a.rs and
/// src/a/mod.rs: 1, src/a/b.rs: 2). `modules`: the top-level modules' names.
fn uses(source: &str, depth: usize, modules: &[String]) -> Vec<Use> {
    let line_depths = line_depths(source, depth);
    let line_of = |at: usize| source[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (at, start) in source
        .match_indices("crate::")
        .chain(source.match_indices("super::"))
    {
        // Only where a path starts (not `other_crate::`, nor the second `super::` of a chain).
        let before = source[..at].bytes().next_back();
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
            continue;
        }
        let line = line_of(at);
        let mut prefix = start.len();
        if start == "super::" {
            let mut climbed = 1;
            while source[at + prefix..].starts_with("super::") {
                prefix += "super::".len();
                climbed += 1;
            }
            if line_depths[line - 1] != climbed {
                continue; // within this top-level module
            }
        }
        for name in first_segments(&source[at + prefix..]) {
            let module = if modules.contains(&name) {
                name.clone()
            } else {
                "crate".to_string()
            };
            let path = format!("{}{name}", &source[at..at + prefix]);
            found.push(Use { line, path, module });
        }
    }
    found.sort_by_key(|u| u.line);
    found
}

/// The module depth of each line: an inline module (`mod tests {`) adds one until its closing
/// brace, which rustfmt indents as the line that opened it.
fn line_depths(source: &str, depth: usize) -> Vec<usize> {
    let mut open: Vec<usize> = Vec::new();
    let mut depths = Vec::new();
    for line in source.lines() {
        let indent = line.len() - line.trim_start().len();
        if open.last() == Some(&indent) && line.trim() == "}" {
            open.pop();
        }
        depths.push(depth + open.len());
        let item = line.trim();
        let item = ["pub ", "pub(crate) ", "pub(super) "]
            .iter()
            .find_map(|vis| item.strip_prefix(vis))
            .unwrap_or(item);
        if item.starts_with("mod ") && item.ends_with('{') {
            open.push(indent);
        }
    }
    depths
}

/// The first segment of a path's rest (`metrics::X` → `metrics`), or of each item of a group
/// (`{metrics::X, Target}` → `metrics`, `Target`).
fn first_segments(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '*')
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return Some(ident(rest))
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect();
    };
    let (mut items, mut item, mut nested) = (Vec::new(), String::new(), 0);
    for c in group.chars() {
        match c {
            '}' if nested == 0 => break,
            ',' if nested == 0 => items.push(std::mem::take(&mut item)),
            _ => {
                nested += (c == '{') as i32 - (c == '}') as i32;
                item.push(c);
            }
        }
    }
    items.push(item);
    items
        .iter()
        .map(|i| ident(i))
        .filter(|n| !n.is_empty() && n != "self")
        .collect()
}

/// Every `.rs` file under `dir`, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let mut files = Vec::new();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
