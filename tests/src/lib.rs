//! qim-tests
pub mod checker;
pub mod compose;
pub mod faults;
pub mod generated;
pub mod latency;
pub mod services;
pub use qim_testkit::stack;
pub mod workload;
