//! What a member announces about its inputs, so that members that would never agree find out at once.
//!
//! Members agree on who owns what only because they compute the same partition function over the same items and the
//! same party. The party is read from ZooKeeper; the items and the function come from each member's configuration, and
//! a rolling deploy that changes either leaves old and new members computing overlapping shares: each waits forever
//! for a lock the other holds (kazoo issue #392), and nothing says why. So every member of this crate writes, in its
//! party node's data after the identifier (`<identifier>\n<agreement>`), a short line:
//!
//! ```text
//! zkp/1 set=<16 hex> fn=<16 hex>       (a fixed set: a digest of the set)
//! zkp/1 set=shared@<version> fn=<16 hex>  (the shared set in ZooKeeper, at the version the member follows)
//! zkp/1 set=... fn=... cap=<n>           (a member of capacity n ≠ 1, see `Builder::capacity`)
//! zkp/1 set=... fn=... plc=<16 hex>      (a sticky function: the digest of the assignment the member holds)
//! ```
//!
//! and compares its own line with every other member's. A member on the shared set writes its line again whenever it
//! follows a new version, so a member left on another version (one whose watch is lost, or an old build) is reported
//! like a member with another fixed set. kazoo's members (and older members of this crate) write only
//! their identifier: they are not checked. kazoo's `SetPartitioner` reads party node names only, never their data, so
//! the line changes nothing for kazoo peers.
//!
//! `set` is 64-bit FNV-1a over each item's kind (`i` or `s`), its lock node name and a `0x00` byte, in sorted order.
//! `fn` fingerprints the partition function by what it does: the function's answers for a fixed probe party of
//! three members over a fixed probe set of 48 items (integers or strings, the kind of the member's set), hashed the
//! same way (a weighted function, one with a [`load_bound`](crate::PartitionFn::load_bound), answers it with probe
//! capacities 1, 2, 3 and item weights 1 to 5, so that two load bounds tell apart). A function that [keeps the
//! placement](crate::PartitionFn::keeps_placement) is also asked for its whole placement from a probe previous
//! assignment (every item on two of the three members), so that two sticky rules that use a previous assignment
//! differently tell apart. Two deterministic functions that answer the probe differently certainly disagree; two that
//! answer it alike may still differ on other inputs (the check finds disagreements, it does not prove agreement).
//!
//! `cap` is not compared: members may differ in size. It is what weighted functions divide by, so every member
//! reads it (absent or unreadable: 1, as for a kazoo member).
//!
//! `plc`, from a function that [keeps the placement](crate::PartitionFn::keeps_placement), is the digest of the whole
//! assignment the member computed (`placement::record::digest`): members that compute from the same record by the same
//! rule announce the same. Like a version of the shared set, it differs for a while after every change (each member
//! decides in its own time), so a difference is a disagreement only once it has lasted past the time a member needs
//! to follow a change (`decision::party`); one that lasts is a party split for good, which nothing else reports.

use std::fmt;

use crate::hash::{FNV_OFFSET, fnv1a};
use crate::partition_fn::{PROBE_CAPACITIES, PROBE_MEMBERS, probe_weights};
use crate::{Item, PartitionFn};

/// The marker that starts an agreement line.
const MARKER: &str = "zkp/1";

/// Items in the probe set.
const PROBE_ITEMS: i64 = 48;

/// Where a member's items come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetSource {
    /// A set fixed at build time, with its digest.
    Fixed(u64),
    /// The shared set in ZooKeeper, at the version the member follows (`None` from members that do not say).
    Shared(Option<u64>),
}

/// One member's announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreement {
    pub set: SetSource,
    /// `None` when the function panicked on the probe (it is then not compared).
    pub function: Option<u64>,
    /// The member's capacity (1 unless it says otherwise).
    pub capacity: u32,
    /// The digest of the assignment the member computed, for a function that keeps the placement (`None` until its
    /// first assignment, and for other functions).
    pub placement: Option<u64>,
}

impl Agreement {
    /// This member's announcement for its set (`None`: the shared set, at `shared_version`) and function.
    pub fn new(
        fixed_set: Option<&[Item]>,
        shared_version: Option<u64>,
        function: &dyn PartitionFn,
        kind_hint: Option<&Item>,
    ) -> Self {
        let set = match fixed_set {
            Some(items) => SetSource::Fixed(set_digest(items)),
            None => SetSource::Shared(shared_version),
        };
        Agreement { set, function: function_fingerprint(function, kind_hint), capacity: 1, placement: None }
    }

    /// Parses the agreement line out of a party node's data (`None` for a kazoo member or anything unrecognized).
    pub fn from_node_data(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let line = text.split('\n').nth(1)?;
        let mut words = line.split(' ');
        if words.next()? != MARKER {
            return None;
        }
        let (mut set, mut function, mut capacity, mut placement) = (None, None, 1, None);
        for word in words {
            match word.split_once('=') {
                Some(("set", "shared")) => set = Some(SetSource::Shared(None)),
                Some(("set", shared)) if shared.starts_with("shared@") => {
                    set = Some(SetSource::Shared(Some(shared["shared@".len()..].parse().ok()?)));
                }
                Some(("set", hex)) => set = Some(SetSource::Fixed(u64::from_str_radix(hex, 16).ok()?)),
                Some(("fn", "?")) => function = Some(None),
                Some(("fn", hex)) => function = Some(Some(u64::from_str_radix(hex, 16).ok()?)),
                Some(("cap", n)) => {
                    capacity = n.parse().ok().filter(|c| (1..=crate::MAX_CAPACITY).contains(c)).unwrap_or(1)
                }
                Some(("plc", hex)) => placement = u64::from_str_radix(hex, 16).ok(),
                _ => {} // a later version's field
            }
        }
        Some(Agreement { set: set?, function: function?, capacity, placement })
    }

    /// The party node's data: the identifier (what kazoo writes), then this line.
    pub fn node_data(&self, identifier: &str) -> String {
        format!("{identifier}\n{self}")
    }

    /// How `theirs` differs from this member's announcement, if it does. A difference of the kinds a member has
    /// while it follows a change (`DisagreementKind::catching_up`) is only a candidate: the caller reports it once it
    /// lasts.
    pub fn compare(&self, theirs: &Agreement) -> Option<crate::DisagreementKind> {
        match (self.set, theirs.set) {
            (SetSource::Shared(Some(ours)), SetSource::Shared(Some(other))) if ours != other => {
                return Some(crate::DisagreementKind::SetVersion);
            }
            // A member that does not say which version it follows is not compared on it.
            (SetSource::Shared(_), SetSource::Shared(_)) => {}
            (ours, other) if ours != other => return Some(crate::DisagreementKind::Items),
            _ => {}
        }
        match (self.function, theirs.function) {
            (Some(ours), Some(other)) if ours != other => return Some(crate::DisagreementKind::PartitionFn),
            _ => {}
        }
        match (self.placement, theirs.placement) {
            (Some(ours), Some(other)) if ours != other => Some(crate::DisagreementKind::Placement),
            _ => None,
        }
    }
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MARKER)?;
        match self.set {
            SetSource::Fixed(digest) => write!(f, " set={digest:016x}")?,
            SetSource::Shared(None) => f.write_str(" set=shared")?,
            SetSource::Shared(Some(version)) => write!(f, " set=shared@{version}")?,
        }
        match self.function {
            Some(fingerprint) => write!(f, " fn={fingerprint:016x}")?,
            None => f.write_str(" fn=?")?,
        }
        if self.capacity != 1 {
            write!(f, " cap={}", self.capacity)?;
        }
        if let Some(placement) = self.placement {
            write!(f, " plc={placement:016x}")?;
        }
        Ok(())
    }
}

/// 64-bit FNV-1a, fed piece by piece.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(FNV_OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = fnv1a(self.0, bytes);
    }

    fn item(&mut self, item: &Item) {
        self.write(match item {
            Item::Int(_) => b"i",
            Item::Str(_) => b"s",
        });
        self.write(item.node_name().as_bytes());
        self.write(&[0]);
    }
}

/// The digest of a set (sorted, as the builder keeps it).
pub fn set_digest(items: &[Item]) -> u64 {
    let mut hash = Fnv::new();
    for item in items {
        hash.item(item);
    }
    hash.0
}

/// The partition function's answers for the probe party over a probe set of the kind of `kind_hint`.
fn function_fingerprint(function: &dyn PartitionFn, kind_hint: Option<&Item>) -> Option<u64> {
    let items: Vec<Item> = match kind_hint {
        Some(Item::Str(_)) => (0..PROBE_ITEMS).map(|i| Item::Str(format!("probe-{i:02}"))).collect(),
        _ => (0..PROBE_ITEMS).map(Item::Int).collect(),
    };
    let members: Vec<String> = PROBE_MEMBERS.iter().map(|m| m.to_string()).collect();
    let weighted = function.load_bound().is_some();
    let capacities: Vec<u32> = if weighted { PROBE_CAPACITIES.to_vec() } else { vec![1; members.len()] };
    let weights = if weighted { probe_weights(&items) } else { crate::Weights::uniform(items.len()) };
    let probe = || {
        let mut hash = Fnv::new();
        for me in &members {
            let input = crate::Weighted::new(me, &members, &capacities, &items, &weights);
            let mut share = function.partition_weighted(&input);
            share.sort();
            hash.write(me.as_bytes());
            hash.write(&[1]);
            for item in &share {
                hash.item(item);
            }
        }
        // A sticky function answers the probe above (which has no previous assignment) as the same function that is
        // not; and two sticky rules may answer it alike while using a previous assignment differently (a rolling
        // deploy of a changed rule). So it is also asked for its placement from a previous assignment that piles
        // every item on two members and leaves the third empty: each rule then says which items it moves, and how.
        if function.keeps_placement() && !crate::sabotage::breaks(crate::sabotage::Sabotage::FingerprintWithoutPrevious)
        {
            hash.write(b"keeps placement\0");
            let previous: Vec<Option<usize>> =
                (0..items.len()).map(|i| if i % 8 == 7 { None } else { Some(i % 2) }).collect();
            let input = crate::Weighted::new(&members[0], &members, &capacities, &items, &weights);
            match function.placement(&input.with_previous(&previous)) {
                Some(owners) => {
                    for owner in owners {
                        hash.write(&(owner as u64).to_le_bytes());
                    }
                }
                None => hash.write(b"says no placement\0"),
            }
        } else if function.keeps_placement() {
            hash.write(b"keeps placement 2\0");
        }
        hash.0
    };
    // User code: a function that panics on the probe is simply not compared (a panic on the real set is reported
    // when the share is computed). A payload whose drop panics must not unwind out of `build()` either.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::partition_fn::guarded(probe).ok())).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KazooStride, Rendezvous};

    fn items(names: &[&str]) -> Vec<Item> {
        names.iter().map(|n| Item::from(*n)).collect()
    }

    #[test]
    fn round_trips_through_node_data() {
        let ours = Agreement::new(Some(&items(&["a", "b"])), None, &KazooStride, None);
        let data = ours.node_data("host-1");
        assert!(data.starts_with("host-1\nzkp/1 set="), "{data}");
        assert_eq!(Agreement::from_node_data(data.as_bytes()), Some(ours));
        let shared = Agreement::new(None, Some(7), &Rendezvous::default(), Some(&Item::from("x")));
        assert!(shared.node_data("h").contains(" set=shared@7 "), "{}", shared.node_data("h"));
        assert_eq!(Agreement::from_node_data(shared.node_data("h").as_bytes()), Some(shared));
        let unversioned = Agreement { set: SetSource::Shared(None), ..shared };
        assert_eq!(Agreement::from_node_data(unversioned.node_data("h").as_bytes()), Some(unversioned));
    }

    #[test]
    fn kazoo_and_garbage_data_carry_no_agreement() {
        for data in [&b"host-1"[..], b"", b"host\nsomething else", b"h\nzkp/1 set=xyz fn=00", b"\xff\xfe", b"h\nzkp/1"]
        {
            assert_eq!(Agreement::from_node_data(data), None, "{data:?}");
        }
    }

    #[test]
    fn finds_a_different_set_or_function() {
        let abc = Agreement::new(Some(&items(&["a", "b", "c"])), None, &KazooStride, None);
        let bc = Agreement::new(Some(&items(&["b", "c"])), None, &KazooStride, None);
        let rendezvous = Agreement::new(Some(&items(&["a", "b", "c"])), None, &Rendezvous::default(), None);
        let shared = Agreement::new(None, Some(3), &KazooStride, None);
        let (shared_4, shared_unsaid) =
            (Agreement::new(None, Some(4), &KazooStride, None), Agreement::new(None, None, &KazooStride, None));
        assert_eq!(shared.compare(&shared_4), Some(crate::DisagreementKind::SetVersion));
        assert_eq!(shared.compare(&shared_unsaid), None);
        assert_eq!(abc.compare(&abc), None);
        assert_eq!(abc.compare(&bc), Some(crate::DisagreementKind::Items));
        assert_eq!(abc.compare(&shared), Some(crate::DisagreementKind::Items));
        assert_eq!(abc.compare(&rendezvous), Some(crate::DisagreementKind::PartitionFn));
        // Integers and strings render alike but are different sets.
        let ints = Agreement::new(Some(&[Item::from(1)]), None, &KazooStride, None);
        let strs = Agreement::new(Some(&items(&["1"])), None, &KazooStride, None);
        assert_eq!(ints.compare(&strs), Some(crate::DisagreementKind::Items));
    }

    #[test]
    fn a_sticky_function_disagrees_with_the_same_function_that_is_not() {
        let set = items(&["a", "b", "c"]);
        let plain = Agreement::new(Some(&set), None, &crate::WeightedRendezvous::default(), None);
        let sticky = Agreement::new(Some(&set), None, &crate::WeightedRendezvous::default().sticky(), None);
        assert!(plain.function.is_some() && sticky.function.is_some());
        assert_eq!(plain.compare(&sticky), Some(crate::DisagreementKind::PartitionFn));
        let again = Agreement::new(Some(&set), None, &crate::WeightedRendezvous::default().sticky(), None);
        assert_eq!(sticky.compare(&again), None);
    }

    #[test]
    fn a_panicking_function_is_not_compared() {
        let panics = |_: &str, _: &[String], _: &[Item]| -> Vec<Item> { panic!("no") };
        let ours = Agreement::new(Some(&items(&["a"])), None, &panics, None);
        assert_eq!(ours.function, None);
        assert_eq!(ours.compare(&Agreement::new(Some(&items(&["a"])), None, &KazooStride, None)), None);
    }
}
