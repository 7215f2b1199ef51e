//! The mailbox dispatcher's integration tests, one binary (one link): each module is one former
//! test file; `support` is the fixture they share (its `both_backends!` runs a test on Redis and on
//! Scylla).

#[macro_use]
mod support;

mod api;
mod auth_matrix;
mod crash;
mod duplicates;
mod end_to_end;
mod fanout;
mod handover;
mod pipeline;
mod rebalance;
mod startup;
