//! Whole-number variables and their legal range, stated once: [`whole`] builds the value parser
//! that enforces the range, and the parsed [`Whole`] carries it, so `--help`, `check-config` and
//! the README read the range back from the parser ([`super::describe`]) instead of repeating it.

use std::ffi::OsStr;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Arg, Command};

/// A whole number inside the range its parser was built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Whole {
    value: u64,
    lo: u64,
    hi: u64,
}

impl Whole {
    /// The number.
    pub const fn get(self) -> u64 {
        self.value
    }

    /// The legal range `(lo, hi)`, both ends included.
    pub const fn bounds(self) -> (u64, u64) {
        (self.lo, self.hi)
    }

    /// The number as seconds.
    pub const fn secs(self) -> Duration {
        Duration::from_secs(self.value)
    }

    /// The number as milliseconds.
    pub const fn millis(self) -> Duration {
        Duration::from_millis(self.value)
    }
}

/// The sentence `--help`, `check-config` and the README show for a range.
pub fn range_sentence(lo: u64, hi: u64) -> String {
    format!("A whole number in {lo}..={hi}.")
}

/// The value parser of a whole number in `lo..=hi` (surrounding whitespace ignored).
pub const fn whole(lo: u64, hi: u64) -> WholeParser {
    WholeParser { lo, hi }
}

/// See [`whole`].
#[derive(Clone, Copy, Debug)]
pub struct WholeParser {
    lo: u64,
    hi: u64,
}

impl TypedValueParser for WholeParser {
    type Value = Whole;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<Whole, clap::Error> {
        let (lo, hi) = (self.lo, self.hi);
        let n = value.to_str().and_then(|s| s.trim().parse::<u64>().ok()).filter(|n| (lo..=hi).contains(n));
        n.map(|value| Whole { value, lo, hi }).ok_or_else(|| {
            let name = arg.and_then(Arg::get_long).map_or_else(String::new, |l| format!(" for '--{l}'"));
            let shown = value.to_string_lossy();
            let message = format!("invalid value '{shown}'{name}: must be a whole number in {lo}..={hi}\n");
            clap::Error::raw(ErrorKind::ValueValidation, message).with_cmd(cmd)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Result<Whole, clap::Error> {
        whole(2, 9).parse_ref(&Command::new("t"), None, OsStr::new(value))
    }

    #[test]
    fn only_whole_numbers_inside_the_range_parse_and_keep_it() {
        assert_eq!(parse(" 9 ").unwrap().get(), 9);
        assert_eq!(parse("2").unwrap().bounds(), (2, 9));
        for bad in ["1", "10", "-3", "x", ""] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("must be a whole number in 2..=9"), "{bad}: {e}");
        }
    }
}
