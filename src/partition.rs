//! Partition functions: who gets which items.
//!
//! Every member of a party must use the same function over the same items ([`Builder::partition_func`]): the members
//! never talk to each other, they agree because they compute the same answer from the same inputs.
//!
//! - [`KazooStride`], the default: kazoo's sorted round-robin, so a party can mix Rust and kazoo members. Any change
//!   of the party moves most items.
//! - [`Rendezvous`]: rendezvous hashing with a load cap; a join or leave moves few items. With
//!   [`Rebalance::Incremental`](crate::Rebalance::Incremental) it is the function for a set that changes.
//! - [`WeightedRendezvous`](crate::weighted::WeightedRendezvous): by weight and capacity (see [`weighted`](crate::weighted)).
//! - Your own: any [`PartitionFn`], closures included. To add behaviour around a function (timing its calls, say),
//!   wrap it in [`Observed`] with an [`Observer`]: it stays the wrapped function in every respect. `build()` refuses a
//!   function whose declarations disagree with its answers ([`check_declarations`]).
//!
//! [`Builder::partition_func`]: crate::Builder::partition_func

pub use proto::partition_fn::{Call, Observed, Observer, check_declarations};
pub use proto::{KazooStride, PartitionFn, Rendezvous};
