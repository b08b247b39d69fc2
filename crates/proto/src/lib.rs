//! The sans-IO protocol of [zk-partitioner](https://docs.rs/zk-partitioner): every decision a partitioner makes,
//! the znode formats it reads and writes, and the partition functions, with no runtime, client, clock or socket.
//!
//! Most users depend on `zk-partitioner`, which runs this protocol on a ZooKeeper session and re-exports the types a
//! user needs (`Item`, `Weight`, `PartitionFn`, `PartitionState`...). This crate is what that one is built on, and
//! what its deterministic simulation runs:
//!
//! - [`decision`]: `Core`, the state machine fed what happened (the session's state, party and set changes, request
//!   replies, commands, the time) that answers with what to do (requests, publications, acknowledgements);
//! - the formats: [`layout`] (kazoo's znode layout: paths, lock names, member names), [`set_layout`] (the shared
//!   set's nodes), [`placement`] (the placement record), [`chunked`] (the index-plus-chunks record they share),
//!   [`announcement`] (what a member announces in its party node);
//! - the assignment: [`partition_fn`] (the functions), [`weight`] (weights, capacities, loads);
//! - the inputs' rules: [`item`], [`names`], [`policy`], and the published [`state`].
//!
//! The map of every crate of the workspace, and what may depend on what, is ARCHITECTURE.md in the repository.
#![deny(missing_debug_implementations)]
// `decision`'s docs are the behaviour table: each row names the private module that implements it. docs.rs documents
// the private items too (Cargo.toml), where those links resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod announcement;
pub mod chunked;
pub mod decision;
pub mod error;
pub mod hash;
pub mod item;
pub mod layout;
pub mod names;
pub mod partition_fn;
pub mod placement;
pub mod policy;
pub mod rng;
// The simulation's switch for breaking a rule on purpose: public for zk-partitioner's tests, not part of the API.
#[doc(hidden)]
pub mod sabotage;
pub mod set_layout;
pub mod state;
pub mod weight;

pub use error::InputError;
pub use item::{Item, check_items};
pub use names::{check_identifier, check_path};
pub use partition_fn::{KazooStride, PartitionFn, Rendezvous, Weighted, WeightedRendezvous};
pub use policy::{Rebalance, SessionPolicy};
pub use state::{Disagreement, DisagreementKind, FencingToken, PartitionState};
pub use weight::{
    DEFAULT_DIMENSION, DimensionLoad, Load, MAX_CAPACITY, MAX_DIMENSIONS, MAX_WEIGHT, Weight, Weights, capacity_limit,
};
