//! `zkp`: run a worker, see who owns what, and change the shared set of a zk-partitioner or kazoo SetPartitioner
//! party, from the command line.
//!
//! ```text
//! cargo install --path crates/cli        # puts zkp on the PATH (zk-partitioner-cli once it is published)
//! zkp worker  --connect 127.0.0.1:2181 --path /work_queues --items a,b,c,d,e --json
//! zkp inspect --connect 127.0.0.1:2181 --path /work_queues --owner-of b
//! zkp items   --connect 127.0.0.1:2181 --path /work_queues add e,f
//! zkp completions bash > ~/.local/share/bash-completion/completions/zkp
//! zkp man > zkp.1; zkp man worker > zkp-worker.1
//! ```
//!
//! Every subcommand that opens a session takes `--connect` (or `$ZOOKEEPER_CONNECT`), `--connect-timeout`,
//! `--fail-fast`, `--auth` and the TLS flags. Exit status, for all of them: 0 on success, 1 on an error (with the
//! reason on stderr, prefixed by the subcommand), 2 on bad arguments (with the usage, before any connection). Each
//! subcommand's page (`<name>.md`, its module's docs) says what it prints; `zkp <subcommand> --help` and `zkp man
//! <subcommand>` show the same page.

// The doc comments of the arguments are clap's help text, written for a terminal (`<path>`, `[default: ..]`), not
// for rustdoc, which would read them as HTML tags and links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod connection;
mod inspect;
mod items;
mod lineage;
mod progress;
mod tls;
mod worker;

/// Run a worker, see who owns what, and change the shared set of a zk-partitioner or kazoo SetPartitioner party.
#[derive(Debug, Parser)]
#[command(name = "zkp", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Tool,
}

#[derive(Debug, Subcommand)]
enum Tool {
    /// Join a party under --path as one member and print every state change (kazoo's worker loop)
    #[command(long_about = include_str!("worker.md"))]
    Worker(worker::Args),
    /// Who owns what under --path: members, shares, contended, unowned and orphaned items (read-only)
    #[command(long_about = include_str!("inspect.md"))]
    Inspect(inspect::Args),
    /// Read or change the shared set of items under --path: add, remove, weigh, split, merge, close, retire
    #[command(long_about = include_str!("items.md"))]
    Items(items::Args),
    /// Print a completion script for a shell to stdout
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff) to stdout: zkp's, or a subcommand's
    Man {
        /// The subcommand whose page to print [default: zkp's own]
        #[arg(value_parser = ["worker", "inspect", "items", "completions"])]
        subcommand: Option<String>,
    },
}

fn main() -> ExitCode {
    // `--help` and `--version` print to stdout and exit 0; bad arguments print the usage to stderr and exit 2.
    let cli = Cli::parse();
    match cli.command {
        Tool::Completions { shell } => {
            // Into a buffer first: clap_complete panics on a failed write (a closed pipe, a full disk).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "zkp", &mut script);
            write_out("completions", &script)
        }
        Tool::Man { subcommand } => man(subcommand.as_deref()),
        Tool::Worker(args) => block_on(worker::main(args)),
        Tool::Inspect(args) => block_on(inspect::main(args)),
        Tool::Items(args) => block_on(items::main(args)),
    }
}

/// Runs a subcommand that talks to ZooKeeper on a runtime of its own: exit 1 if none can be started.
fn block_on(subcommand: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(subcommand),
        Err(err) => {
            eprintln!("zkp: cannot start the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the man page of zkp or of one of its subcommands (named `zkp-<subcommand>`, as git's are).
fn man(subcommand: Option<&str>) -> ExitCode {
    let mut command = Cli::command();
    // Gives each subcommand its full name ("zkp worker") in the usage lines.
    command.build();
    let page = match subcommand {
        None => command,
        Some(name) => match command.find_subcommand(name) {
            Some(sub) => sub.clone().name(format!("zkp-{name}")),
            None => usage_error("man", clap::error::ErrorKind::InvalidSubcommand, &format!("no subcommand {name}")),
        },
    };
    let mut out = Vec::new();
    if let Err(err) = clap_mangen::Man::new(page).render(&mut out) {
        eprintln!("zkp man: cannot render the page: {err}");
        return ExitCode::FAILURE;
    }
    write_out("man", &out)
}

/// Writes a generated text to stdout: exit 0, or 1 with the reason (a closed pipe, say).
fn write_out(subcommand: &str, text: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zkp {subcommand}: cannot write to stdout: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `message` with the usage of `zkp <subcommand>`, as clap does for a bad flag, and exits 2: for the checks
/// that need more than one flag (an item source) or a file (--items-file).
fn usage_error(subcommand: &str, kind: clap::error::ErrorKind, message: &str) -> ! {
    let mut command = Cli::command();
    command.build();
    match command.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(kind, message).exit(),
        None => command.error(kind, message).exit(),
    }
}
