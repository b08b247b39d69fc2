//! The ZooKeeper an example runs against: `--connect HOST:PORT`, or else a throwaway server in Docker started with
//! the test kit (`zk_partitioner_testing`), removed when the returned guard drops. Each example includes this file
//! with `#[path]`.

use std::process::ExitCode;

use zk_partitioner_testing::{self as testing, OwnedServer};

/// A ZooKeeper for the example named `example`: its connect string (a fresh chroot of its own), and the server to
/// keep alive until the end (`None` with `--connect`). `Ok(None)` after printing the usage for `--help`.
pub async fn zookeeper(example: &str) -> Result<Option<(String, Option<OwnedServer>)>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        format!("usage: {example} [--connect HOST:PORT]   (without --connect: a throwaway ZooKeeper in Docker)");
    let (connect, server) = match args.as_slice() {
        [] => {
            println!("starting ZooKeeper in Docker (zk_partitioner_testing) ...");
            // Finds, pulls or builds the image first, so that a machine without one gets a message, not a panic.
            let image = testing::ensure_image().await.map_err(|err| format!("cannot start ZooKeeper: {err}"))?;
            println!("image {image}");
            let server = OwnedServer::launch().await;
            (server.endpoint(), Some(server))
        }
        [flag, endpoint] if flag == "--connect" => (endpoint.clone(), None),
        [flag] if flag == "--help" || flag == "-h" => {
            println!("{usage}");
            return Ok(None);
        }
        _ => return Err(usage),
    };
    let namespace = testing::namespace(&connect).await;
    Ok(Some((testing::with_chroot(&connect, &namespace), server)))
}

/// An example's exit: 0, or 1 with the error on stderr, prefixed by the example's name (its `Display`, not the
/// `Debug` that returning the error from `main` would print).
pub fn exit(example: &str, outcome: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{example}: {err}");
            ExitCode::FAILURE
        }
    }
}
