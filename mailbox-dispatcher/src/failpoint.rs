//! Crash points for the fault-injection suite (`fail` crate; live only with this crate's `failpoints`
//! feature, which test builds turn on).
//!
//! `FAILPOINTS=<name>=return(abort)` in the process's environment aborts the process at that
//! point, like `kill -9` (nothing after it runs, no destructor, no flush); the fail crate's
//! other actions (`sleep(ms)`, `pause`, `panic`, `off`) behave as it documents; a plain `return`
//! does nothing. Without the feature a crash point compiles to nothing.

/// Evaluates the crash point `name`; see the module docs for the actions it takes.
#[inline]
pub fn crash_point(name: &str) {
    let _ = name; // unused when the feature is off
    fail::fail_point!(name, |action: Option<String>| {
        if action.as_deref() == Some("abort") {
            std::process::abort();
        }
    });
}
