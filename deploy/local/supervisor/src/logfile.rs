//! Reading server logs: whether a line appeared since a server's start (readiness), and the
//! last lines of a file (failure reports).
//!
//! A start records a [`Mark`]: the log's line count and inode at that moment. A line "since the
//! start" is one after the mark; if the log has rolled over meanwhile (another inode, or fewer
//! lines than the mark), the whole new file was written since the start, and so were the rolled
//! file's (`<log>.1`) lines after the mark.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where a log stood when a server was started: its line count and inode (0 0 when absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    pub lines: u64,
    pub inode: u64,
}

impl Mark {
    /// The mark of `path` now.
    pub fn of(path: &Path) -> Mark {
        match std::fs::metadata(path) {
            Ok(m) => Mark { lines: line_count(path), inode: m.ino() },
            Err(_) => Mark::default(),
        }
    }

    /// `"<lines> <inode>"`, the format of the `log.offset` file.
    pub fn render(self) -> String {
        format!("{} {}\n", self.lines, self.inode)
    }

    /// Reads what [`Mark::render`] wrote; anything unreadable is the zero mark (the whole log counts).
    pub fn parse(text: &str) -> Mark {
        let mut it = text.split_whitespace().map(|w| w.parse::<u64>().unwrap_or(0));
        Mark { lines: it.next().unwrap_or(0), inode: it.next().unwrap_or(0) }
    }

    /// Reads a mark file (zero mark if missing).
    pub fn load(file: &Path) -> Mark {
        std::fs::read_to_string(file).map(|t| Mark::parse(&t)).unwrap_or_default()
    }
}

/// The number of newline characters in `path` (as `wc -l`); 0 when unreadable.
pub fn line_count(path: &Path) -> u64 {
    let Ok(mut f) = File::open(path) else { return 0 };
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64,
        }
    }
}

/// Whether a line after the first `skip` lines of `path` contains `needle`.
pub fn has_after(path: &Path, skip: u64, needle: &str) -> bool {
    let Ok(f) = File::open(path) else { return false };
    let mut reader = BufReader::new(f);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {
                number += 1;
                if number > skip && String::from_utf8_lossy(&line).contains(needle) {
                    return true;
                }
            }
        }
    }
}

/// Whether `log` gained a line containing `needle` since `mark` was taken (see the module doc).
pub fn since_mark_has(log: &Path, mark: Mark, needle: &str) -> bool {
    let Ok(meta) = std::fs::metadata(log) else { return false };
    if meta.ino() != mark.inode || line_count(log) < mark.lines {
        if has_after(log, 0, needle) {
            return true;
        }
        let mut rolled = PathBuf::from(log).into_os_string();
        rolled.push(".1");
        let rolled = PathBuf::from(rolled);
        return rolled.is_file() && has_after(&rolled, mark.lines, needle);
    }
    has_after(log, mark.lines, needle)
}

/// The last `n` lines of `path` (at most its last MiB), each ending in a newline; empty when
/// unreadable.
pub fn last_lines(path: &Path, n: usize) -> String {
    const WINDOW: u64 = 1 << 20;
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(WINDOW);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err() || f.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    tail_of(&String::from_utf8_lossy(&bytes), n)
}

/// The last `n` lines of `text`, each ending in a newline.
fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for l in &lines[lines.len().saturating_sub(n)..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    struct Dir(PathBuf);
    impl Dir {
        fn new(name: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("qim-stack-logfile-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn append(path: &Path, text: &str) {
        std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap().write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_mark_round_trips_and_garbage_is_zero() {
        let m = Mark { lines: 12, inode: 345 };
        assert_eq!(Mark::parse(&m.render()), m);
        assert_eq!(Mark::parse(""), Mark::default());
        assert_eq!(Mark::parse("x y"), Mark::default());
    }

    #[test]
    fn only_lines_after_the_mark_count() {
        let d = Dir::new("after");
        let log = d.0.join("server.log");
        append(&log, "a\n[x] Kafka Server started\nb\n");
        let mark = Mark::of(&log);
        assert_eq!(mark.lines, 3);
        assert!(!since_mark_has(&log, mark, "Kafka Server started"));
        append(&log, "c\n");
        assert!(!since_mark_has(&log, mark, "Kafka Server started"));
        append(&log, "[y] Kafka Server started (kafka.server.KafkaRaftServer)");
        assert!(since_mark_has(&log, mark, "Kafka Server started"));
    }

    #[test]
    fn a_log_that_rolled_over_counts_from_its_start_and_the_rolled_file_after_the_mark() {
        let d = Dir::new("rolled");
        let log = d.0.join("server.log");
        append(&log, "old started\nx\n");
        let mark = Mark::of(&log);
        // roll: the old file becomes server.log.1 and gains a line first
        append(&log, "new started\n");
        std::fs::rename(&log, d.0.join("server.log.1")).unwrap();
        append(&log, "fresh\n");
        assert!(!since_mark_has(&log, mark, "old started"));
        assert!(since_mark_has(&log, mark, "new started"));
        assert!(since_mark_has(&log, mark, "fresh"));
    }

    #[test]
    fn a_missing_log_has_nothing_and_marks_zero() {
        let d = Dir::new("missing");
        let log = d.0.join("nope.log");
        assert_eq!(Mark::of(&log), Mark::default());
        assert!(!since_mark_has(&log, Mark::default(), ""));
        assert_eq!(last_lines(&log, 5), "");
    }

    #[test]
    fn last_lines_are_the_tail() {
        assert_eq!(tail_of("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail_of("a\nb", 5), "a\nb\n");
        assert_eq!(tail_of("", 3), "");
        let d = Dir::new("tail");
        let f = d.0.join("f");
        append(&f, &(1..=100).map(|i| format!("{i}\n")).collect::<String>());
        assert_eq!(last_lines(&f, 3), "98\n99\n100\n");
        assert_eq!(line_count(&f), 100);
    }
}
