//! The guide: how to use zk-partitioner, chapter by chapter. The crate root has the install, the worker loop and the
//! map of the API; each chapter here is a topic in depth, with its examples (compiled as doctests) and, for every
//! claim, the test or benchmark behind it and the command that reruns it.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`states`] | the four states, what a worker does in each, how they differ from kazoo's; sessions and reconnection |
//! | [`beyond_kazoo`] | what this crate adds, all opt-in: fencing tokens, rendezvous hashing, incremental rebalancing, session-aware suspends... |
//! | [`static_membership`] | deploys that move nothing: a member's name is its identifier |
//! | [`departures`] | a crashed or leaving member's items taken at once: the departure fast path, and what it changes for a stalled member |
//! | [`shared_set`] | a set of items kept in ZooKeeper that anyone may change while the party runs; members that disagree |
//! | [`lineage`] | shards that split and merge: children start once their parents are finished |
//! | [`weights`] | items of different weights, members of different capacities; the sticky placement |
//! | [`who_owns_what`] | `describe` and `zkp inspect`: members, owners, contenders, orphans |
//! | [`checkpoints`] | a per-item blob only the current owner can write |
//! | [`progress`] | a party's progress as one token: back up, restore, move a party, reset its checkpoints |
//! | [`security`] | ACLs, authentication and TLS |
//! | [`metrics`] | the metrics, the Prometheus endpoint of `zkp worker`, and example alerts |
//! | [`testing`] | testing your workers against a real ZooKeeper with the test kit; ZooKeeper with Docker Compose |
//! | [`troubleshooting`] | slow failover, logs, and every cause of `FAILURE` |
//! | [`performance`] | the measured figures against kazoo, the guarantees, and how the crate is built |
//!
//! Each chapter is a Markdown file beside this module (`src/guide/<chapter>.md`), readable in the repository too.

#[doc = include_str!("states.md")]
pub mod states {}

#[doc = include_str!("beyond_kazoo.md")]
pub mod beyond_kazoo {}

#[doc = include_str!("static_membership.md")]
pub mod static_membership {}

#[doc = include_str!("departures.md")]
pub mod departures {}

#[doc = include_str!("shared_set.md")]
pub mod shared_set {}

#[doc = include_str!("lineage.md")]
pub mod lineage {}

#[doc = include_str!("weights.md")]
pub mod weights {}

#[doc = include_str!("who_owns_what.md")]
pub mod who_owns_what {}

#[doc = include_str!("checkpoints.md")]
pub mod checkpoints {}

#[doc = include_str!("progress.md")]
pub mod progress {}

#[doc = include_str!("security.md")]
pub mod security {}

#[doc = include_str!("metrics.md")]
pub mod metrics {}

#[doc = include_str!("testing.md")]
pub mod testing {}

#[doc = include_str!("troubleshooting.md")]
pub mod troubleshooting {}

#[doc = include_str!("performance.md")]
pub mod performance {}
