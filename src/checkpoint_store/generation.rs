//! Which checkpoints are in force: a generation of them, named by `<path>/checkpoints`.
//!
//! ```text
//! <path>/checkpoints                        persistent; data: empty, or `zkp-checkpoints 1 generation=<tag>`
//! <path>/checkpoints/<item>                 the first generation's checkpoints (no generation named)
//! <path>/checkpoint-generations/<tag>/<item>  a later generation's, written by an import
//! ```
//!
//! An import ([`SharedSet::import`](crate::SharedSet::import)) writes the checkpoints it brings as a new generation,
//! out of sight, and puts it in force with one conditional write of `<path>/checkpoints`, in the same `multi` as the
//! shared set's commit. So every reader sees the old checkpoints or the new ones, never a mix, and a cut import leaves
//! the old ones. That write also moves the node's data version, which every save checks along with its lock node
//! (a member reads the version once it has joined the party): a save of a member that joined before the import can
//! never land after it.

use crate::Error;
use crate::acl::NodeAcls;
use crate::retry::retry_transient;
use crate::zookeeper::{ZkError, ZooKeeper};
use proto::chunked::is_tag;

/// The first words of `<path>/checkpoints`'s data when it names a generation.
const MAGIC: &str = "zkp-checkpoints 1";

/// The checkpoints in force, as `<path>/checkpoints` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Generation {
    /// Where their nodes are: `<path>/checkpoints` (the first generation) or `<path>/checkpoint-generations/<tag>`.
    pub dir: String,
    /// The generation's tag (`None`: the first).
    pub tag: Option<String>,
    /// The data version of `<path>/checkpoints` that named it: every save checks it.
    pub version: i32,
}

/// `<path>/checkpoints`: the first generation's directory, whose data names the generation in force.
pub(crate) fn pointer(base: &str) -> String {
    format!("{base}/checkpoints")
}

/// `<path>/checkpoint-generations`: the later generations' parent.
pub(crate) fn generations(base: &str) -> String {
    format!("{base}/checkpoint-generations")
}

/// The directory of generation `tag`.
pub(crate) fn generation_dir(base: &str, tag: &str) -> String {
    format!("{}/{tag}", generations(base))
}

/// `<path>/checkpoints`'s data naming generation `tag`.
pub(crate) fn render(tag: &str) -> String {
    format!("{MAGIC} generation={tag}")
}

/// The generation `<path>/checkpoints`'s `data` (at data version `version`) names.
pub(crate) fn parse(base: &str, data: &[u8], version: i32) -> Result<Generation, String> {
    let text = std::str::from_utf8(data).map_err(|_| "its data is not UTF-8".to_owned())?.trim();
    if text.is_empty() {
        return Ok(Generation { dir: pointer(base), tag: None, version });
    }
    match text.strip_prefix(MAGIC).map(str::trim).and_then(|rest| rest.strip_prefix("generation=")) {
        Some(tag) if is_tag(tag) => {
            Ok(Generation { dir: generation_dir(base, tag), tag: Some(tag.to_owned()), version })
        }
        _ => Err(format!(
            "its data {} is not {MAGIC:?} and a generation (written by a newer version of this crate?)",
            proto::error::shown(text)
        )),
    }
}

/// Reads the generation in force, creating `<path>/checkpoints` (the first generation, empty) if it is missing.
pub(crate) async fn read<Z: ZooKeeper>(zk: &Z, base: &str, acls: &NodeAcls) -> Result<Generation, Error> {
    let node = pointer(base);
    let read = match retry_transient(zk, || zk.get_data(&node)).await {
        Err(ZkError::NoNode) => {
            retry_transient(zk, || zk.mkdir(&node, acls)).await.map_err(|e| Error::zk("mkdir", node.as_str(), e))?;
            retry_transient(zk, || zk.get_data(&node)).await
        }
        read => read,
    };
    let (data, stat) = read.map_err(|e| Error::zk("get_data", node.as_str(), e))?;
    parse(base, &data, stat.version).map_err(|reason| Error::CheckpointCorrupt {
        item: String::new(),
        path: node,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pointer_names_the_first_generation_or_a_later_one() {
        let first = parse("/p", b"", 0).unwrap();
        assert_eq!(first, Generation { dir: "/p/checkpoints".into(), tag: None, version: 0 });
        let later = parse("/p", render("0123456789abcdef").as_bytes(), 3).unwrap();
        assert_eq!(later.dir, "/p/checkpoint-generations/0123456789abcdef");
        assert_eq!((later.tag.as_deref(), later.version), (Some("0123456789abcdef"), 3));
        assert!(parse("/p", b"zkp-checkpoints 2 generation=0123456789abcdef", 1).is_err());
        assert!(parse("/p", b"zkp-checkpoints 1 generation=../../x", 1).is_err());
    }
}
