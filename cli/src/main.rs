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
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            e.exit()
        }
        // clap's usage errors span lines; this one is one, like every other error.
        Err(e) => {
            let text = e.render().to_string();
            let text = text.split("\n\nFor more information").next().unwrap_or_default();
            eprintln!("punctual: {}", text.split_whitespace().collect::<Vec<_>>().join(" "));
            return ExitCode::from(2);
        }
    };
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("punctual: {e}");
            ExitCode::FAILURE
        }
    }
}
