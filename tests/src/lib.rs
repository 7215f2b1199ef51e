//! qim-tests
pub mod checker;
pub mod compose;
pub mod faults;
pub mod services;
pub mod stack;
pub mod workload;
