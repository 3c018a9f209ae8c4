//! The reactors run without tokio's time driver (see `src/timer.rs`): a timer taken from
//! `tokio::time` on a reactor panics. So the crate's code (tests aside) takes its timers from
//! `crate::timer`, and this checks that no other timer is made anywhere in `src/`.

use std::path::Path;

/// Calls that make a timer of the current runtime's time driver.
const TOKIO_TIMERS: [&str; 5] = [
    "tokio::time::sleep",
    "tokio::time::sleep_until",
    "tokio::time::timeout",
    "tokio::time::interval",
    "tokio::time::interval_at",
];

/// The part of a source file outside its test module (which runs on test runtimes, with time).
fn non_test_code(source: &str) -> &str {
    match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    }
}

fn offenders(source: &str) -> Vec<String> {
    let code = non_test_code(source);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let imports_timers = line.starts_with("use tokio::time")
            && ["sleep", "timeout", "interval"]
                .iter()
                .any(|t| line.contains(t));
        if imports_timers || TOKIO_TIMERS.iter().any(|t| line.contains(t)) {
            found.push(format!("line {}: {line}", n + 1));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn timers_come_from_the_timer_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for file in files {
        if file.ends_with("timer.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap();
        for o in offenders(&source) {
            problems.push(format!("{}: {o}", file.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "timers made outside `crate::timer` (a reactor has no time driver):\n{}",
        problems.join("\n")
    );
}

/// The scanner itself: without it finding these, the check above would pass on anything.
#[test]
fn the_scanner_finds_timers_outside_tests() {
    let source = "fn a() { let _ = tokio::time::timeout(d, f); }
use tokio::time::{sleep, Instant};
// tokio::time::sleep in a comment
fn b() { crate::timer::sleep(d); let _ = tokio::time::Instant::now(); }
#[cfg(test)]
mod tests {
    fn c() { tokio::time::sleep(d); }
}
";
    let found = offenders(source);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("line 1:") && found[1].starts_with("line 2:"));
}
