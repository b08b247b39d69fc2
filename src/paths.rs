//! The znode paths of one partitioner (the layout's rules are `proto::layout`), with the ACL its nodes get.

use crate::acl::NodeAcls;

/// The znode paths of one partitioner, relative to the client's chroot.
#[derive(Clone, Debug)]
pub(crate) struct Paths {
    pub party: String,
    pub locks: String,
    /// The placement record's index node (see [`crate::placement`]).
    pub placement: String,
    /// The ACL of every node created under the path.
    pub acls: NodeAcls,
}

impl Paths {
    pub fn new(base: &str) -> Self {
        Paths {
            party: format!("{base}/party"),
            locks: format!("{base}/locks"),
            placement: format!("{base}/placement"),
            acls: NodeAcls::default(),
        }
    }

    /// The paths of the partitioner whose party node is `party`.
    pub fn from_party(party: &str) -> Self {
        Paths::new(party.strip_suffix("/party").unwrap_or(party))
    }

    /// `<path>/locks/<item>`: the directory holding one item's lock contenders.
    pub fn lock_dir(&self, item_name: &str) -> String {
        format!("{}/{item_name}", self.locks)
    }
}
