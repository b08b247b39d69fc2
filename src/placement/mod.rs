//! The placement record: the assignment in force, kept in ZooKeeper, so that every member can compute the next
//! *sticky* placement ([`WeightedRendezvous::assign_sticky`](crate::weighted::WeightedRendezvous::assign_sticky)) from the
//! same previous one. Its protocol, and why a weighted placement needs it, are in `docs/sticky-placement.md`.
//!
//! ```text
//! <path>/placement              persistent, data = the record's index (below); absent: no record
//! <path>/placement/<tag>-<k>    persistent, data = a chunk, first written by the record of tag <tag>
//! ```
//!
//! The index is a few lines:
//!
//! ```text
//! zk-partitioner placement v2
//! inputs <16 hex>        what the assignment was computed from (the set, its weights, the party, the capacities)
//! digest <16 hex>        the assignment's digest: every item with its owner (`record::digest`)
//! items <n>              how many items it places
//! names <chunk>...       member names, `<name>\n` each: the record numbers owners by their place in this list
//! base <chunk>...        `<item>\t<owner>\n` for every item, in item order: the assignment when last folded
//! log <chunk>...         one chunk per change since, oldest first: `<item>\t<owner>\n` for each item that moved
//!                        or joined the set, `<item>\t-\n` for each that left it, in item order
//! ```
//!
//! A change moves a few hundred to a few thousand items of 100,000 (BENCHMARKS.md, "The sticky placement in Rust"),
//! scattered over every part of the item order, so rewriting the assignment would rewrite nearly every chunk of it
//! (about 1 MB) at every change. Only the change is appended instead (10-20 KB), and the log is folded into a new
//! base once it passes a tenth of it ([`plan`]). A member that computed the assignment the record names (its own
//! assignment has the record's digest) reads the index only; a joiner reads the whole record once.
//!
//! kazoo never reads `<path>/placement`: its `SetPartitioner` reads `party` and `locks` only.
//!
//! `proto::placement::record`: the format; `proto::placement::plan`: what a writer creates; [`store`]: reading and
//! writing it in ZooKeeper. The decision core's side (when to read, what to compute from, when to write) is
//! `proto::decision::placement`.

pub(crate) mod store;
