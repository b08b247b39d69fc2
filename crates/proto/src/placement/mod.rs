//! The placement record's format, and a writer's plan: the assignment in force, kept in ZooKeeper for partition
//! functions that keep the placement (`zk-partitioner` reads and writes it; its `placement` module has the layout).
//!
//! [`record`]: the format; [`plan`]: what a writer creates. The decision core's side (when to read, what to compute
//! from, when to write) is `decision::placement`.

pub mod plan;
pub mod record;

#[cfg(test)]
mod tests;
