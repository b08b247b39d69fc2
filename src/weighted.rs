//! Items of different weights, members of different sizes.
//!
//! A [`WeightedRendezvous`] party divides the items' [`Weight`]s (kept with the shared set,
//! [`SharedSet::set_weights`](crate::SharedSet::set_weights)) in proportion to each member's announced capacity
//! ([`Builder::capacity`](crate::Builder::capacity), at most [`MAX_CAPACITY`]), within a load bound. A weight is one
//! number or values in up to [`MAX_DIMENSIONS`] named dimensions. Each member's [`Load`] is in
//! [`Snapshot::load`](crate::Snapshot::load); a [`PartitionFn`](crate::partition::PartitionFn) of your own reads the
//! weights and capacities through [`Weighted`].

pub use proto::{
    DEFAULT_DIMENSION, DimensionLoad, Load, MAX_CAPACITY, MAX_DIMENSIONS, MAX_WEIGHT, Weight, Weighted,
    WeightedRendezvous, Weights, capacity_limit,
};
