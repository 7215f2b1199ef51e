//! qim-tests
pub mod compose;
pub mod services;
pub mod stack;
pub mod workload;
