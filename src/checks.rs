//! The checks [`Builder::build`](crate::Builder::build) runs on its inputs, for a tool or a configuration loader to
//! run first: a partition path, the items (valid znode names that do not collide once rendered) and a member
//! identifier. Each returns the [`InputError`] that `build()` would return as an [`Error`](crate::Error)
//! (`InvalidConfig` or `InvalidItem`, with the same text).

pub use proto::{InputError, check_identifier, check_items, check_path};
