//! `sangho`: tools for a Sangho webhook endpoint.
//!
//! ```sh
//! cargo run -p sangho-tools -- --help
//! cargo run -p sangho-tools -- send --url http://127.0.0.1:3000/webhooks/sangho
//! SANGHO_STORE_URL=sqlite://webhooks.db cargo run -p sangho-tools -- inbox stats
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sangho_tools::{inbox, send};

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "sangho", about = "Tools for a Sangho webhook endpoint")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sends signed Sangho test events to a webhook endpoint and reports each answer
    Send(send::Args),
    /// An inbox's events: stats, list, show, replay and discard
    Inbox(inbox::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Send(args) => send::command(args).await,
        Command::Inbox(args) => inbox::command(args).await,
    }
}
