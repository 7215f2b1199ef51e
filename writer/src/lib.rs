//! qim-writer: the commit service (HTTP API → RESERVED → RECORDED → OUTBOXED → COMMITTED).

pub mod config;
