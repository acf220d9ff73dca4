//! punctual: Punctual's admin API from the command line. Every error is one line on
//! standard error and a non-zero exit.

mod args;
mod client;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("punctual: {e}");
            ExitCode::FAILURE
        }
    }
}
