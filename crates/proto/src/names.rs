//! Validation of the names this crate writes into ZooKeeper: the base path, node names, the identifier.

use crate::InputError;
use crate::error::shown;

/// The longest node name (item rendering or identifier) accepted, in bytes. ZooKeeper has no fixed limit, but every
/// request carries the path, and names this long are a mistake rather than a design.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks one path segment against ZooKeeper's rules (`PathUtils.validatePath`) and this crate's limits.
pub fn check_node_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("renders to an empty node name".into());
    }
    if name == "." || name == ".." {
        return Err(format!("renders to {name:?}, which ZooKeeper does not allow as a node name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("is {} bytes long; at most {MAX_NAME_LEN} are allowed", name.len()));
    }
    if name.contains('/') {
        return Err("contains '/', which would make it a path rather than one node".into());
    }
    if let Some(c) = name.chars().find(|&c| !is_allowed_char(c)) {
        return Err(format!("contains {c:?} (U+{:04X}), which ZooKeeper does not allow in a path", u32::from(c)));
    }
    Ok(())
}

/// Characters ZooKeeper rejects in paths: controls, U+007F..U+009F, U+E000..U+F8FF (private use, next to the
/// surrogates ZooKeeper also rejects) and U+FFF0..U+FFFF.
fn is_allowed_char(c: char) -> bool {
    !matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// Checks the partitioner's base path: absolute, not the root, no trailing slash, no empty or relative segments, and
/// outside ZooKeeper's reserved `/zookeeper` subtree.
pub fn check_base_path(path: &str) -> Result<(), InputError> {
    let fail = |reason: &str| Err(InputError::config("path", format!("{} {reason}", shown(path))));
    if !path.starts_with('/') {
        return fail("is not absolute (it must start with '/')");
    }
    if path == "/" {
        return fail("is the root; give the partitioner a node of its own, e.g. \"/workers\"");
    }
    if path.ends_with('/') {
        return fail("ends with '/'");
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() {
            return fail("has an empty segment (\"//\")");
        }
        if let Err(reason) = check_node_name(segment) {
            return fail(&format!("has a segment {} that {reason}", shown(segment)));
        }
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return fail("is inside ZooKeeper's reserved /zookeeper subtree");
    }
    Ok(())
}

/// Checks a partition path as [`Builder::build`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.build) does, without a session: absolute, not the
/// root, no trailing slash, no empty, `.` or `..` segment, only characters ZooKeeper accepts, and outside ZooKeeper's
/// reserved `/zookeeper` subtree. For programs that check their configuration before they connect.
///
/// # Errors
/// [`InputError::InvalidConfig`] (field `path`) saying what is wrong.
///
/// # Examples
/// ```
/// assert!(zk_partitioner::checks::check_path("/work_queues").is_ok());
/// let err = zk_partitioner::checks::check_path("work_queues").unwrap_err();
/// assert_eq!(err.to_string(), "invalid path: \"work_queues\" is not absolute (it must start with '/')");
/// ```
pub fn check_path(path: &str) -> Result<(), InputError> {
    check_base_path(path)
}

/// Checks a member identifier as [`Builder::build`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.build) does, without a session: it becomes part
/// of the member's party node name, so it must be a valid node name (not empty, no `/`, only characters ZooKeeper
/// accepts, at most 1,024 bytes). For programs that check their configuration before they connect.
///
/// # Errors
/// [`InputError::InvalidConfig`] (field `identifier`) saying what is wrong.
///
/// # Examples
/// ```
/// assert!(zk_partitioner::checks::check_identifier("worker-3").is_ok());
/// assert!(zk_partitioner::checks::check_identifier("rack/worker-3").is_err());
/// ```
pub fn check_identifier(identifier: &str) -> Result<(), InputError> {
    check_node_name(identifier).map_err(|reason| {
        InputError::config("identifier", format!("{} {}", shown(identifier), reason.replace("renders to", "is")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths() {
        for good in ["/a", "/a/b", "/work-queues/partitioner", "/é"] {
            assert!(check_base_path(good).is_ok(), "{good}");
        }
        for bad in ["", "a", "/", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/zookeeper", "/zookeeper/x", "/a\n"] {
            assert!(matches!(check_base_path(bad), Err(InputError::InvalidConfig { field: "path", .. })), "{bad:?}");
        }
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("host-1234").is_ok());
        for bad in ["", "a/b", "a\u{0}"] {
            assert!(check_identifier(bad).is_err(), "{bad:?}");
        }
        assert!(check_identifier(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }
}
