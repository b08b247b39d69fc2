//! What can be wrong with an input the protocol is given, and the opaque detail of a refused request.

use std::fmt;
use std::sync::Arc;

/// An input the protocol cannot use: an option, an item, a weight, a capacity, or a partition function's answer.
///
/// `zk-partitioner` turns each into the [`Error`](https://docs.rs/zk-partitioner/latest/zk_partitioner/enum.Error.html)
/// variant of the same name (`InvalidConfig`, `InvalidItem`, ...), with the same message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// An option is out of range or malformed.
    #[error("invalid {field}: {reason}")]
    InvalidConfig {
        /// The option, e.g. `path` or `time_boundary`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// An item cannot be used as a lock node name, or collides with another item.
    #[error("invalid item {}: {reason}", shown(item))]
    InvalidItem {
        /// The item's rendering (its lock node name).
        item: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A weight is malformed or out of range ([`Weight`](crate::Weight)).
    #[error("invalid weight {weight}: {reason}")]
    InvalidWeight {
        /// The weight as given (quoted, and cut if long).
        weight: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A member capacity is out of range.
    #[error("invalid capacity {capacity}: a capacity is 1 to {max}")]
    InvalidCapacity {
        /// The capacity as given.
        capacity: u32,
        /// The largest capacity.
        max: u32,
    },
}

impl InputError {
    /// An option's error.
    pub fn config(field: &'static str, reason: impl Into<String>) -> Self {
        InputError::InvalidConfig { field, reason: reason.into() }
    }
}

/// The wire's own account of a refused request, carried through the core unread: the core decides by the request's
/// [`Code`](crate::decision::Code), and the driver publishes the detail as the failure's cause.
#[derive(Clone)]
pub struct Detail(Arc<dyn std::error::Error + Send + Sync>);

impl Detail {
    /// Wraps the wire's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Detail(Arc::new(error))
    }

    /// The wire's error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

/// Two details are equal when they say the same (the core's replies compare in tests).
impl PartialEq for Detail {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for Detail {}

/// How many characters of a name (item, identifier) an error message shows.
const SHOWN_NAME: usize = 64;
/// How many characters of a path or connect string an error message shows.
const SHOWN_PATH: usize = 128;

/// `text` for an error message: quoted and escaped as Rust writes strings, and cut after 64 characters with its
/// length in bytes (`"aaaa…" (2000 bytes)`), so a mistaken 2,000-byte item does not flood the log.
pub fn shown(text: &str) -> String {
    match cut(text, SHOWN_NAME) {
        None => format!("{text:?}"),
        Some(head) => format!("{head:?}… ({} bytes)", text.len()),
    }
}

/// A path or connect string for an error message: as is, cut after 128 characters with its length in bytes.
pub fn shown_path(text: &str) -> String {
    match cut(text, SHOWN_PATH) {
        None => text.to_string(),
        Some(head) => format!("{head}… ({} bytes)", text.len()),
    }
}

/// The first `max` characters of `text`, if it has more.
fn cut(text: &str, max: usize) -> Option<&str> {
    text.char_indices().nth(max).map(|(end, _)| &text[..end])
}

/// The text of a panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_messages() {
        let long = "x".repeat(2000);
        let err = InputError::InvalidItem { item: long.clone(), reason: "is 2000 bytes long".into() };
        let message = err.to_string();
        assert_eq!(message, format!("invalid item \"{}\"… (2000 bytes): is 2000 bytes long", "x".repeat(64)));
        assert_eq!(shown("queue-1"), "\"queue-1\"");
        assert_eq!(shown(&"é".repeat(65)), format!("\"{}\"… (130 bytes)", "é".repeat(64)));
        assert!(shown_path(&format!("/p/locks/{long}")).ends_with("… (2009 bytes)"));
    }
}
