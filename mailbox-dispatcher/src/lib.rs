//! qim-mailbox-dispatcher: turns committed messages into per-user mailbox entries over 64 lanes.

pub mod config;
