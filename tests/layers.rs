//! The crate's shape, checked: modules import only the layers below them
//! (the module map at the top of `src/lib.rs`), no file in `src/` grows past
//! 800 lines, and every file opens with a comment saying what it owns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module's layer; a module may use its own layer's peers
/// only where named in `PEERS`, and any lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("options", 0),
    ("names", 0),
    ("stats", 0),
    ("tls", 0),
    ("protocol", 1),
    ("conn", 2),
    ("notify", 3),
    ("renewal", 3),
    ("local", 3),
    ("orphans", 3),
    ("shared", 4),
    ("wait", 5),
    ("acquire", 6),
    ("guard", 6),
    ("client", 6),
    ("builder", 6),
    ("redlock", 6),
    ("fenced", 6),
    ("inspect", 6),
    // The operators' binary: above the library, through its public API.
    ("bin", 7),
];

/// Same-layer uses that are allowed (user → used).
const PEERS: &[(&str, &str)] = &[
    ("options", "error"),
    ("tls", "error"),
    ("local", "notify"),
    ("local", "renewal"),
    ("acquire", "guard"),
    ("client", "acquire"),
    ("client", "guard"),
    ("client", "inspect"),
    ("builder", "client"),
    ("redlock", "client"),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../src")
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`None` for lib.rs).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(name) => Some(name.to_owned()),
        None => Some(first),
    }
}

/// `crate::X` paths in code (comments and strings left out).
fn uses(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if code.contains('"') {
            continue; // a string may mention a path; the checked uses have none
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
        if let Some(group) = code.trim().strip_prefix("use crate::{") {
            for part in group.split(',') {
                if let Some((name, _)) = part.trim().split_once("::") {
                    found.push(name.trim_start_matches('{').to_owned());
                }
            }
        }
    }
    found
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut wrong = Vec::new();
    for path in &all {
        let Some(module) = module_of(path) else {
            continue;
        };
        let own = *layer
            .get(module.as_str())
            .unwrap_or_else(|| panic!("module {module} is missing from LAYERS (and lib.rs's map)"));
        let text = std::fs::read_to_string(path).unwrap();
        for used in uses(&text) {
            if used == module || !layer.contains_key(used.as_str()) {
                continue;
            }
            let theirs = layer[used.as_str()];
            let peer = PEERS.contains(&(module.as_str(), used.as_str()));
            if theirs > own || (theirs == own && !peer) {
                wrong.push(format!("{} uses crate::{used}", path.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    let text = "use crate::shared::Shared;\nfn f() { crate::wait::wait_for(); }\n// crate::client in a comment\nuse crate::{guard::LockGuard, options::Kind};\n";
    assert_eq!(uses(text), ["shared", "wait", "guard", "options"]);
}

#[test]
fn files_are_small_and_say_what_they_own() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    for path in all {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines = text.lines().count();
        assert!(
            lines <= 800,
            "{} has {lines} lines: split it",
            path.display()
        );
        assert!(
            text.starts_with("//!"),
            "{} does not open with a //! comment saying what it owns",
            path.display()
        );
    }
}
