//! qim-tests
pub mod compose;
pub mod stack;
pub mod workload;
