//! Divide a set of items (queues, shards, partitions) among the live members of a group, with ZooKeeper, so that no
//! two members ever own the same item and every item has an owner once the group is stable.
//!
//! `zk-partitioner` is kazoo's [`SetPartitioner`] recipe for async Rust: the same states, the same znode layout (so
//! Rust and Python workers can share one party), without kazoo's known bugs, and with requests pipelined on the
//! session instead of sent one after another.
//!
//! The [`guide`] explains each feature in depth, a chapter per topic: [states and sessions](guide::states),
//! [beyond kazoo](guide::beyond_kazoo), [static membership](guide::static_membership), [the shared
//! set](guide::shared_set), [lineage](guide::lineage), [weights](guide::weights), [who owns
//! what](guide::who_owns_what), [checkpoints](guide::checkpoints), [moving and restoring a
//! party](guide::progress), [security](guide::security),
//! [metrics](guide::metrics), [testing your workers](guide::testing), [troubleshooting](guide::troubleshooting) and
//! [performance](guide::performance).
//!
//! # Install
//!
//! ```toml
//! [dependencies]
//! zk-partitioner = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal", "time"] }
//! ```
//!
//! The ZooKeeper client is [`zookeeper_client`], re-exported: use `zk_partitioner::zookeeper_client` rather than a
//! dependency of your own, so the versions match. [`connect`] opens a session with a bounded wait and a readable
//! error ([`ConnectOptions`](connection::ConnectOptions)); nothing in this crate opens a port or runs a service in your process. A crate of
//! its own, [`zk-partitioner-testing`](https://docs.rs/zk-partitioner-testing), is a kit for integration tests of your
//! workers against ZooKeeper in Docker (real connection cuts and session expiry, a safety checker). The `tls` feature adds sessions over TLS: `tls_options` and
//! `tls_options_with_identity` read PEM files into the client's `TlsOptions`.
//!
//! # The worker loop
//!
//! Work on each item while it is listed ([`Snapshot::items`]: the items whose locks this member holds), stop an item
//! as soon as it is no longer listed, answer `Release` with `release_set()`, and leave at once when told to stop. One
//! work task per listed item, kept from one snapshot to the next, is right in every mode: a snapshot may come again
//! with the same items (something beside them changed), and under incremental rebalancing the items a member keeps
//! stay listed through a rebalance. The loop is a function that takes the client, the items and a shutdown future, so
//! that a test can run the very function `main` runs against a throwaway ZooKeeper (the README shows such a test,
//! with the test kit); `main` stays thin: it connects, says what stops the worker, and joins again on a new
//! session when one is lost.
//!
//! ```no_run
//! use std::collections::HashMap;
//! use std::future::Future;
//! use std::time::Duration;
//! use tokio::task::JoinHandle;
//! use zk_partitioner::zookeeper_client::Client;
//! use zk_partitioner::{Error, Item, PartitionState, SetPartitioner};
//!
//! /// Works on this member's share of `items` until `shutdown` resolves, or until the partitioner fails.
//! pub async fn run_worker(client: Client, items: Vec<Item>, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
//!     let partitioner = SetPartitioner::builder(client, "/work_queues", items)
//!         .time_boundary(Duration::from_secs(5))
//!         .build()
//!         .await?;
//!     let mut changes = partitioner.subscribe();
//!     let mut work: HashMap<Item, JoinHandle<()>> = HashMap::new();
//!     tokio::pin!(shutdown);
//!     let result = loop {
//!         let snapshot = changes.borrow_and_update().clone();
//!         // Stop what is no longer ours (and wait until it has stopped), start what is newly ours.
//!         let gone: Vec<Item> =
//!             work.keys().filter(|item| snapshot.items.binary_search(item).is_err()).cloned().collect();
//!         for item in gone {
//!             if let Some(task) = work.remove(&item) {
//!                 task.abort();
//!                 let _ = task.await;
//!             }
//!         }
//!         for item in snapshot.items.iter() {
//!             work.entry(item.clone()).or_insert_with(|| tokio::spawn(process(item.clone())));
//!         }
//!         match snapshot.state {
//!             PartitionState::Release => partitioner.release_set().await?,
//!             PartitionState::Acquired | PartitionState::Allocating => {}
//!             // Session lost, or an error that cannot be retried.
//!             PartitionState::Failure => break Err(snapshot.cause.unwrap_or(Error::Stopped)),
//!         }
//!         tokio::select! {
//!             changed = changes.changed() => { // sleeps until the next change
//!                 if changed.is_err() {
//!                     break Err(partitioner.snapshot().cause.unwrap_or(Error::Stopped));
//!                 }
//!             }
//!             () = &mut shutdown => break Ok(()),
//!         }
//!     };
//!     for (_, task) in work {
//!         task.abort(); // never keep working on items that may no longer be ours
//!         let _ = task.await;
//!     }
//!     partitioner.finish().await; // releases the locks and leaves the party now
//!     result
//! }
//!
//! async fn process(item: Item) {
//!     println!("working on {item}");
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let items: Vec<Item> = ["queue-1", "queue-2", "queue-3"].into_iter().map(Item::from).collect();
//!     loop {
//!         // One ZooKeeper session per member: a member's locks live and die with its session.
//!         let client = zk_partitioner::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
//!         let ctrl_c = async {
//!             let _ = tokio::signal::ctrl_c().await;
//!         };
//!         match run_worker(client, items.clone(), ctrl_c).await {
//!             Err(Error::SessionLost { .. }) => continue, // e.g. expired during a long stall: join again
//!             result => return Ok(result?),
//!         }
//!     }
//! }
//! ```
//!
//! # A map of the source
//!
//! This crate runs a protocol that has a crate of its own, [`zk-partitioner-proto`](https://docs.rs/zk-partitioner-proto):
//! the sans-IO decision core, the znode formats and the partition functions, with no runtime or client. The types of
//! it you name (`Item`, `Weight`, `PartitionFn`, `PartitionState`...) are re-exported here. `ARCHITECTURE.md`, in the
//! repository, is the one map: where each concern lives (one concept per module: the decision core, the loop body
//! both the task and the simulation run in `driver::step`, the wire, the shared set, the partition functions, the
//! test kit), what may depend on what, and how the rules are checked (`tests/architecture.rs`).
//!
//! # States
//!
//! See [`PartitionState`]: `Allocating` → `Acquired` → `Release` → (`release_set()`) → `Allocating`, and the terminal
//! `Failure`. Allocation starts once the party has had no membership change for
//! [`time_boundary`](Builder::time_boundary) (each change restarts the wait), then takes the lock of every item the
//! [`PartitionFn`](partition::PartitionFn) assigns. A party change or a connection suspension while `Acquired` moves to `Release`: the worker
//! must stop processing and call [`release_set`](SetPartitioner::release_set). A party change during allocation
//! releases what was taken and starts over. A lost session, [`finish`](SetPartitioner::finish), or an error this
//! crate cannot retry moves to `Failure`, with the cause in [`Snapshot::cause`]; nothing stays silently stuck in
//! `Allocating`.
//!
//! # Znode layout (kazoo's)
//!
//! ```text
//! <path>                                   persistent, empty
//! <path>/party                             persistent, empty
//! <path>/party/<32 hex>-<identifier>-<seq> ephemeral sequential, data = identifier    (one per member)
//!                                          + "\n" + announcement (see below)
//! <path>/party/<32 hex>-<identifier>       ephemeral, same data                       (a static member, as kazoo)
//! <path>/locks                             persistent, empty
//! <path>/locks/<item>                      persistent, empty                          (one per item, kept)
//! <path>/locks/<item>/<32 hex>__lock__<seq> ephemeral sequential, data = member name  (contenders; lowest holds)
//! <path>/checkpoints                       persistent, data = empty, or the generation (after an import)
//! <path>/checkpoints/<item>                persistent, data = writer + token + bytes  (fenced checkpoints, if used)
//! <path>/checkpoint-generations/<tag>/<item> persistent, as above                   (an imported generation)
//! <path>/items                             persistent, data = header: kind, version,  (the shared set, if used)
//!                                          state, log of recent update tokens
//! <path>/items/<item>                      persistent, empty                          (one per item of it)
//! <path>/item-changes/<tag>/{add,remove}/… persistent, empty                          (a large update, staged)
//! <path>/item-writers/<tag>                ephemeral                                  (its writer's lease)
//! <path>/item-outcomes/<token>             ephemeral                                  (an update's outcome marker)
//! ```
//!
//! A member's name is its party node's name after the first `-` (kazoo's rule): `<identifier>-<seq>` for this crate's
//! members, the identifier for kazoo's and for this crate's [static members](Builder::static_membership) (whose
//! restarts, with the same identifier, are then no party change). Children of `<path>/party` that do not start with 32
//! lowercase hex digits and a dash are not member nodes and are ignored (kazoo would count them and leave their share
//! unowned). The crate never deletes `<path>`, `party`, `locks` or the lock directories of a fixed set: kazoo peers
//! rely on them (with a shared set, the directories of removed items are deleted once free).
//!
//! After the identifier, a member's party node data carries a line announcing its configuration: `zkp/1 set=<digest>
//! fn=<fingerprint>` (`set=shared@<version>` with the shared set: the version the member follows). Members compare the
//! others' lines with their own and report a difference at once in [`Snapshot::disagreements`] (a rolling deploy that
//! changed the item list would otherwise stall silently; a member on another version of the shared set is reported
//! until it catches up). kazoo reads party node names only; its members announce nothing and are not checked.
//!
//! # Guarantees
//!
//! - **Safety**: an item's lock is the lowest contender node in its directory, an ephemeral node of one session, so two
//!   live sessions never hold the same item; a member lists an item as processable only while it holds the item's lock,
//!   and stops listing everything as soon as its connection is suspended. Before deleting a lock it stops listing the
//!   item. Each held lock node is watched: if someone else deletes it (an operator, a tool), the member stops listing
//!   the item as soon as ZooKeeper tells it (one watch notification; for a lock just taken, when its watch is
//!   registered: once the lock work has been quiet for `time_boundary`, and at the latest 2 × `time_boundary` after the
//!   lock was taken), then takes it again by the normal rules. Between the deletion and that notification another
//!   process may already take the item: the [`FencingToken`] is what protects the data in that window.
//! - **Liveness**: once the party is stable for `time_boundary` and every member has released what it no longer owns,
//!   every member reaches `Acquired` and every item has an owner (if every member uses the same items and partition
//!   function).
//! - **Hygiene**: `finish()`, or dropping the last handle, deletes the member's lock nodes and party node and stops
//!   its task. Lock requests whose replies were lost are found again by their random prefix and cleaned up. A panic
//!   inside the task publishes `Failure` ([`Error::Internal`]) and deletes the member's nodes; a task gone without
//!   publishing `Failure` (its runtime shut down) reads as `Failure` ([`Error::Stopped`]).
//!
//! `RELIABILITY.md`, in the repository, says how each guarantee is tested: the decision table row by row, a
//! deterministic simulation of every mode combination under seeded faults, and real faults on a real ZooKeeper. How
//! the crate is built (one background task per partitioner around a sans-IO decision core) is in the guide,
//! [Performance, reliability and how it is built](guide::performance).
//!
//! # A set that changes
//!
//! With [`Builder::shared_set`] the items live in ZooKeeper (`<path>/items`) instead of being fixed at build
//! time: any process changes them with [`SharedSet`] (add, remove, replace, compare-and-set; atomic and versioned), and
//! every member follows, through the same machinery as a party change. [`Snapshot::added`] and [`Snapshot::removed`]
//! say what the latest change did.
//!
//! # Who owns what, checkpoints, metrics
//!
//! - [`describe()`] reads a partition path with any client (no membership needed) and returns a [`Description`](describe::Description): the
//!   members, every item's owner with its fencing token and the contenders queued behind it, the unowned items,
//!   orphaned lock nodes, counts per owner and, given the partition function, the items held outside their holder's
//!   share. It works on kazoo parties too. `zkp inspect` (crates/cli) prints it as a table or as JSON, once or on every
//!   change.
//! - Fenced checkpoints: a [`CheckpointWriter`](checkpoint::CheckpointWriter) ([`SetPartitioner::checkpoint_writer`]) stores a small blob (at most
//!   [`MAX_CHECKPOINT_SIZE`](checkpoint::MAX_CHECKPOINT_SIZE)) at `<path>/checkpoints/<item>` in one `multi` that ZooKeeper applies only while the
//!   member's lock node for the item exists, so an old owner, paused or late, can never overwrite the new owner's
//!   checkpoint. [`SetPartitioner::load_checkpoint`] reads it back with its writer's name and token.
//!   Its docs explain why that one check is enough.
//! - [`metrics`]: rebalances by cause, allocation time, items held and revoked, lock waits, session suspensions and
//!   expiries, recorded through the [`metrics`](https://docs.rs/metrics) facade for whatever exporter the application
//!   installs. The module documents every name.
//!
//! [`SetPartitioner`]: https://kazoo.readthedocs.io/en/latest/api/recipe/partitioner.html
#![deny(missing_docs, missing_debug_implementations)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acl;
mod builder;
pub mod checkpoint;
mod checkpoint_store;
pub mod checks;
pub mod connection;
pub mod describe;
mod driver;
mod error;
pub mod guide;
mod handle;
mod lock_requests;
mod membership;
pub mod metrics;
pub mod partition;
mod partitioner;
mod paths;
mod placement;
mod retry;
mod session;
pub mod shared_set;
#[cfg(test)]
mod sim;
pub mod snapshot;
mod startup;
#[cfg(feature = "tls")]
mod tls;
pub mod weighted;
mod zookeeper;

// The crate root: the partitioner, its builder, its state and snapshot, the error, the item, connecting, the shared
// set and who owns what. Everything else is in the module of its concern (weights under `weighted`, lineage under
// `shared_set`, the input checks under `checks`...).
pub use builder::Builder;
pub use connection::connect;
pub use describe::describe;
pub use error::Error;
pub use partitioner::SetPartitioner;
pub use proto::{FencingToken, Item, PartitionState, Rebalance, SessionPolicy};
pub use shared_set::SharedSet;
pub use snapshot::Snapshot;

/// The ZooKeeper client this crate is built on, re-exported so users get the matching version.
pub use zookeeper_client;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}

    #[test]
    fn handle_is_send_sync_clone() {
        assert_send_sync::<SetPartitioner>();
        assert_send_sync::<Snapshot>();
        assert_send_sync::<Error>();
        assert_send_sync::<checkpoint::CheckpointWriter>();
        assert_send_sync::<describe::Description>();
    }
}
