//! Text generated from a definition and kept in a file: the check that the file holds it, and
//! `QIM_BLESS=1` to write it there instead.

/// `text` with its lines for which `is_generated` holds (one contiguous block) replaced by
/// `lines`; `text` unchanged when it has no such line.
pub fn splice_lines(text: &str, is_generated: impl Fn(&str) -> bool, lines: &[String]) -> String {
    let all: Vec<&str> = text.lines().collect();
    let Some(first) = all.iter().position(|l| is_generated(l)) else {
        return text.to_owned();
    };
    let last = all.iter().rposition(|l| is_generated(l)).unwrap_or(first);
    let mut out: Vec<String> = all[..first].iter().map(|l| (*l).to_owned()).collect();
    out.extend(lines.iter().cloned());
    out.extend(all[last + 1..].iter().map(|l| (*l).to_owned()));
    let mut joined = out.join("\n");
    if text.ends_with('\n') {
        joined.push('\n');
    }
    joined
}

/// Passes when `current` (the contents of `path`) equals `wanted`; with `QIM_BLESS=1` writes
/// `wanted` to `path` instead.
///
/// # Panics
///
/// When they differ (printing `wanted`), or when writing fails.
#[track_caller]
pub fn bless_or_compare(path: &str, current: &str, wanted: &str, what: &str) {
    if current == wanted {
        return;
    }
    if std::env::var("QIM_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(path, wanted).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        return;
    }
    panic!("{what} is out of date (QIM_BLESS=1 rewrites {path}); it should read:\n{wanted}");
}
