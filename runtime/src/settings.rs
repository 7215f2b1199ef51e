//! Typed reads of a service's `QIM_*` environment, validated as a whole before anything
//! connects (see [`crate::admin::check_environment`]).

use std::collections::HashMap;
use std::str::FromStr;

use crate::admin::check_environment;
use crate::env::EnvVar;

/// The resolved environment of one service: every documented variable's value or default.
#[derive(Clone, Debug)]
pub struct Settings {
    values: HashMap<&'static str, String>,
    ranges: HashMap<&'static str, (u64, u64)>,
}

impl Settings {
    /// Validates `tables` against `lookup` (unknown `QIM_*` names in `present` are errors too).
    /// Every problem is reported at once, each naming its variable.
    pub fn resolve(
        tables: &[&[EnvVar]],
        lookup: &dyn Fn(&str) -> Option<String>,
        present: impl IntoIterator<Item = String>,
    ) -> Result<Self, String> {
        check_environment(tables, lookup, present).map_err(|problems| problems.join("; "))?;
        let mut values = HashMap::new();
        let mut ranges = HashMap::new();
        for var in tables.iter().flat_map(|t| t.iter()) {
            if let Some(v) = lookup(var.name).or_else(|| var.default.map(str::to_owned)) {
                values.insert(var.name, v);
            }
            if let Some(range) = var.range {
                ranges.insert(var.name, range);
            }
        }
        Ok(Self { values, ranges })
    }

    /// Reads the process environment.
    pub fn from_process(tables: &[&[EnvVar]]) -> Result<Self, String> {
        Self::resolve(tables, &|name| std::env::var(name).ok(), std::env::vars().map(|(k, _)| k))
    }

    /// The raw value (or default) of `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `name`, which must be documented with a default or set.
    pub fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name).ok_or_else(|| format!("{name} must be set"))
    }

    /// Parses `name`'s value.
    pub fn parse<T: FromStr>(&self, name: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let raw = self.required(name)?;
        raw.trim().parse().map_err(|e| format!("{name}={raw:?}: {e}"))
    }

    /// The whole number `name` holds, within its documented range ([`EnvVar::range`]; checked
    /// when the settings were resolved, so an error here means `name` has no range or was
    /// never resolved).
    pub fn whole(&self, name: &str) -> Result<u64, String> {
        let n: u64 = self.parse(name)?;
        match self.ranges.get(name) {
            Some((lo, hi)) if (lo..=hi).contains(&&n) => Ok(n),
            Some((lo, hi)) => Err(format!("{name}={n} must be a whole number in {lo}..={hi}")),
            None => Err(format!("{name} is not documented as a whole number with a range")),
        }
    }

    /// [`whole`](Self::whole) seconds.
    pub fn seconds(&self, name: &str) -> Result<std::time::Duration, String> {
        self.whole(name).map(std::time::Duration::from_secs)
    }

    /// `QIM_STARTUP_TIMEOUT_SECS`: how long a service's start-up steps may keep retrying.
    pub fn startup_timeout(&self) -> Result<std::time::Duration, String> {
        self.seconds("QIM_STARTUP_TIMEOUT_SECS")
    }

    /// A lookup over the resolved values, for constructors that take one.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |name| self.get(name).map(str::to_owned)
    }
}
