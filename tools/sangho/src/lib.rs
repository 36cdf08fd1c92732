//! The `sangho` command's subcommands, as a library for their tests.
//!
//! - [`send`]: signed test events to a webhook endpoint (`sangho send --url …`).
//! - [`inbox`]: an inbox's events: stats, list, show, replay, discard (`sangho inbox …`).

#![forbid(unsafe_code)]

pub mod inbox;
pub mod send;
