//! The crate's shape, checked: modules import only the layers below them
//! (the module map that opens `src/lib.rs`); lock kinds are known only in
//! `protocol/` and the raw layer, and only the raw layer calls the protocol
//! for a lock operation; cluster redirects are followed only in `conn/`;
//! `shared.rs` only assembles (≤ 250 lines), `acquire.rs` stays a face
//! (≤ 300), no file in `src/` grows past 700 lines, and every file opens
//! with a comment saying what it owns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module's layer; a module may use its own layer's peers
/// only where named in `PEERS`, and any lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("sync", 0),
    ("error", 0),
    ("options", 0),
    ("names", 0),
    ("stats", 0),
    ("meter", 0),
    ("tls", 0),
    // The throwaway server of a test (feature `testing`): std and redis only.
    ("testing", 0),
    ("park", 0),
    ("protocol", 1),
    ("conn", 2),
    ("notify", 3),
    ("renewal", 3),
    ("ledger", 3),
    ("raw", 4),
    ("wait", 5),
    ("shared", 6),
    ("acquire", 7),
    ("guard", 7),
    ("client", 7),
    ("builder", 7),
    ("redlock", 7),
    ("fenced", 7),
    ("inspect", 7),
    ("ladder", 7),
    ("task", 7),
    ("multi", 7),
    ("semaphore", 7),
    ("job", 7),
    ("election", 7),
    // The operators' binary: above the library, through its public API.
    ("bin", 8),
];

/// Same-layer uses that are allowed (user → used).
const PEERS: &[(&str, &str)] = &[
    ("options", "error"),
    ("tls", "error"),
    ("park", "error"),
    // A wait parks until its deadline or its `Cancel`.
    ("park", "options"),
    // The machinery's primitives, loom's under `cfg(loom)`.
    ("options", "sync"),
    ("park", "sync"),
    ("ledger", "notify"),
    ("ledger", "renewal"),
    ("acquire", "guard"),
    ("client", "acquire"),
    ("client", "guard"),
    ("client", "inspect"),
    // The kind rungs of both faces, over each face's own.
    ("ladder", "client"),
    ("ladder", "guard"),
    ("ladder", "task"),
    ("builder", "client"),
    ("builder", "task"),
    ("job", "client"),
    ("election", "client"),
    ("election", "guard"),
    ("election", "inspect"),
    ("election", "task"),
    ("job", "guard"),
    ("job", "task"),
    ("redlock", "client"),
    ("task", "acquire"),
    ("task", "multi"),
    ("multi", "client"),
    ("multi", "guard"),
    ("task", "client"),
    ("task", "guard"),
    ("task", "inspect"),
    ("semaphore", "acquire"),
    ("semaphore", "client"),
    // The permit guards keep their hold in the lock guards' core (`Held`).
    ("semaphore", "guard"),
    ("task", "semaphore"),
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
        let most = match rel(&path).as_str() {
            "shared.rs" => 250,
            "acquire.rs" => 300,
            _ => 700,
        };
        assert!(
            lines <= most,
            "{} has {lines} lines (at most {most}): split it",
            path.display()
        );
        let opening = if rel(&path) == "lib.rs" {
            "// Module map"
        } else {
            "//!"
        };
        assert!(
            text.starts_with(opening),
            "{} does not open with {opening:?} (what it owns, or lib.rs's module map)",
            path.display()
        );
    }
}

/// `path` relative to `src/`, with `/` separators.
fn rel(path: &Path) -> String {
    let rel = path.strip_prefix(src()).unwrap();
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The code of `text`: comments and string literals left out (a doc
/// comment or a message may name anything).
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut in_string = false;
        for c in line.chars() {
            match c {
                '"' => in_string = !in_string,
                _ if !in_string => out.push(c),
                _ => {}
            }
        }
        out.push('\n');
    }
    out
}

/// Whether `word` stands in `text` as a word of its own (a path segment or
/// an identifier, not part of a longer one).
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !ident(c));
        let after = text[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !ident(c));
        before && after
    })
}

/// The files of `src/` outside the given folders and files, with their code.
fn code_outside(skip: &[&str]) -> Vec<(String, String)> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    all.iter()
        .map(|p| (rel(p), code(&std::fs::read_to_string(p).unwrap())))
        .filter(|(r, _)| {
            !skip
                .iter()
                .any(|s| r == s || r.starts_with(&format!("{s}/")))
        })
        .collect()
}

#[test]
fn lock_kinds_are_known_only_in_the_protocol_and_the_raw_layer() {
    // `options/` defines the kinds (what a caller asks for).
    let wrong: Vec<String> = code_outside(&["protocol", "raw", "options"])
        .into_iter()
        .filter(|(_, code)| code.contains("Kind::") && has_word(code, "Kind"))
        .map(|(file, _)| file)
        .collect();
    assert!(
        wrong.is_empty(),
        "a lock kind matched outside protocol/ and raw/: {wrong:?}"
    );
}

#[test]
fn only_the_raw_layer_calls_the_protocol_for_a_lock_operation() {
    // What a lock operation is made of: the scripts' dispatch and calls,
    // their replies, and the kinds' modules. (The ledger's handover names
    // the thread a release hands over to as the protocol's `Successor`:
    // one type for it, not a ledger copy converted field by field.)
    const LOCK_OPERATIONS: &[&str] = &[
        "Scripts", "Request", "Release", "Released", "Attempt", "Fence", "plain", "fair", "rwlock",
        "admin",
    ];
    let mut wrong = Vec::new();
    for (file, code) in code_outside(&["protocol", "raw"]) {
        for line in code.lines().filter(|l| l.contains("protocol")) {
            for item in LOCK_OPERATIONS {
                if has_word(line, item) {
                    wrong.push(format!("{file}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a lock operation's protocol outside raw/:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn cluster_redirects_are_followed_only_in_conn() {
    let wrong: Vec<String> = code_outside(&["conn", "error"])
        .into_iter()
        .filter(|(_, code)| {
            ["redirect_node", "ASKING", "Redirect"]
                .iter()
                .any(|w| has_word(code, w))
        })
        .map(|(file, _)| file)
        .collect();
    assert!(
        wrong.is_empty(),
        "a cluster redirect followed outside conn/: {wrong:?}"
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert!(has_word("match k { Kind::Plain => 1 }", "Kind"));
    assert!(!has_word("LockKind::Free", "Kind"));
    assert!(!code("let a = \"Kind::Plain\"; // Kind::Fair\n").contains("Kind"));
    assert!(has_word("use crate::protocol::{self, Release};", "Release"));
    assert!(!has_word("Ordering::Release", "Released"));
}
