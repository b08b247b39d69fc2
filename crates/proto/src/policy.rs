//! The two mode switches a partitioner is built with. How each combination reacts is decided in one place, the
//! decision core's table (`decision` module).

/// How a partitioner treats a suspended connection (Curator's `ConnectionStateErrorPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionPolicy {
    /// kazoo's behaviour, the default: a suspended connection moves an `Acquired` member to `Release`, and
    /// `release_set()` then gives up every lock, as if the session were lost.
    #[default]
    Standard,
    /// A suspended connection moves an `Acquired` member to `Release` with
    /// [`Snapshot::suspended`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.suspended) set, so the worker pauses; but a `release_set()` made
    /// while suspended waits for the outcome instead of deleting the locks. If the client reconnects with the same
    /// session, the member syncs, checks that each of its lock nodes still exists and is owned by its session, and
    /// returns to `Acquired` with the same locks (and fencing tokens): a stall shorter than the session timeout moves
    /// no item. If the session expires, the member fails as usual; if a lock node is gone, it releases everything.
    ///
    /// Safe because ownership is the lock node, which lives exactly as long as the session: while the session lives,
    /// nobody else can hold those items.
    SessionAware,
}

/// What a member does when the party changes while it holds items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebalance {
    /// kazoo's behaviour, the default: every member stops everything (`Release`), gives up every lock, waits for the
    /// party to be stable and allocates again from nothing.
    #[default]
    Eager,
    /// Only what moves stops. The member keeps holding (and its worker keeps processing) the items that stay its own
    /// while the party settles; then it publishes `Release` listing only the items it must give up
    /// ([`Snapshot::revoked`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.revoked)), still listing the others in
    /// [`Snapshot::items`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.items). `release_set()` releases only the revoked items, the member takes
    /// the items it gained, and returns to `Acquired`. Unmoved items keep their lock nodes (and fencing tokens).
    ///
    /// Worker loop: process `items()` in every state but `Failure`; in `Release`, stop `revoked()` and call
    /// `release_set()`. A suspended connection still stops everything, as in `Eager`.
    ///
    /// Pairs best with [`Rendezvous`](crate::Rendezvous), which moves few items; with [`KazooStride`](crate::KazooStride)
    /// most items move anyway. Mixing with kazoo peers (or `Eager` members) is safe: exclusion comes from the locks,
    /// never from agreement, and every member computes the same assignment; the kazoo peers still stop everything on
    /// each change.
    Incremental,
}
