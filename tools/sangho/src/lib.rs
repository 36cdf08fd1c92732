//! The `sangho` command's subcommands, as a library for their tests.
//!
//! - [`send`]: signed test events to a webhook endpoint (`sangho send --url …`).

#![forbid(unsafe_code)]

pub mod send;
