//! The shared set's rows: following its versions and announcing them, recovering an update whose writer is gone,
//! the quiet period of a stream of versions, and reading which of our items are closed.

use super::*;

/// A core on the shared set, as member `a` of `party`, following `items` at `version`.
fn on_shared_set(items: &[Item], version: u64, party: &[&str]) -> Script {
    let mut cfg = config(0, Rebalance::Incremental, SessionPolicy::Standard, None);
    cfg.items = items.to_vec();
    cfg.shared_set = Some(version);
    cfg.agreement = Agreement::new(None, Some(version), &KazooStride, items.first());
    let mut s = Script::new(cfg);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    s.send(Event::Reply(id, Reply::Set(Ok(set_read(items, version)))));
    s.party(party);
    s
}

/// [`on_shared_set`] as the only member, then `Acquired` over every item.
fn acquired_on_shared_set(items: &[Item], version: u64) -> Script {
    let mut s = on_shared_set(items, version, &["a-0000000000"]);
    s.wait(SETTLED);
    s.grant_locks();
    assert_eq!(s.last_state(), PartitionState::Acquired);
    s
}

impl Script {
    /// The shared set's watch fires, and the read that follows finds `read`.
    fn set_read_finds(&mut self, read: crate::set_layout::RawRead) {
        self.send(Event::SetChanged);
        let (id, _) = self.request("set read", |op| *op == Op::ReadSet);
        self.send(Event::Reply(id, Reply::Set(Ok(read))));
    }
}

/// Another member's party node data, announcing the shared set at `version`, and the zxid of its write (one write
/// per version).
fn announcing(member: &str, version: u64, items: &[Item]) -> (Vec<u8>, i64) {
    let data = Agreement::new(None, Some(version), &KazooStride, items.first()).node_data(member).into_bytes();
    (data, 1000 + version as i64)
}

/// How long a member on another version is taken to be catching up (`Core::catch_up`: 2 × `time_boundary` + 2 s).
const CATCH_UP: Duration = Duration::from_millis(2 * 100 + 2000);

/// Members announce the shared set's version they follow (`set=shared@<version>`). One seen on another version is
/// catching up, not disagreeing: nothing is published then (before, every member that followed a routine change first
/// published, and logged, a disagreement with every member that had not yet). Read again once that has lasted
/// `CATCH_UP`, a member still on another version is a reported disagreement, read again every `time_boundary` while
/// it lasts, and cleared once it catches up.
#[test]
fn a_member_on_another_version_of_the_shared_set_is_a_reported_disagreement_once_it_lasts() {
    let items: Vec<Item> = (0..4).map(Item::from).collect();
    let mut s = on_shared_set(&items, 3, &["a-0000000000", "b-0000000001"]);
    let (id, Op::ReadAnnouncements(nodes)) = s.request("announcements", |op| matches!(op, Op::ReadAnnouncements(_)))
    else {
        unreachable!()
    };
    assert_eq!(nodes, [node_of("b-0000000001")]);
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 2, &items))]))));
    assert!(
        s.published().iter().all(|p| p.disagreements.is_empty()),
        "a member behind by a version for a moment is not reported: {:?}",
        s.published()
    );
    s.wait(CATCH_UP - Duration::from_millis(1));
    assert!(
        !s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::ReadAnnouncements(_)))),
        "read again only once the difference has lasted: {:?}",
        s.seen
    );

    // Still on version 2 when read again, CATCH_UP later: reported.
    s.wait(Duration::from_millis(1));
    let (id, _) = s.request("announcements again", |op| matches!(op, Op::ReadAnnouncements(_)));
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 2, &items))]))));
    let report = s.published().pop().expect("the disagreement is published");
    assert_eq!(report.reason, Reason::Disagreement);
    assert!(!report.transition, "a disagreement is news beside the state, not a new episode");
    assert_eq!(report.disagreements.len(), 1);
    assert_eq!(report.disagreements[0].kind, crate::DisagreementKind::SetVersion);
    assert_eq!(report.disagreements[0].member, "b-0000000001");
    assert!(report.disagreements[0].theirs.contains("set=shared@2"), "{:?}", report.disagreements[0]);

    // Read again a time_boundary later; b has caught up: the report ends.
    s.wait(TB);
    let (id, _) = s.request("announcements again", |op| matches!(op, Op::ReadAnnouncements(_)));
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 3, &items))]))));
    let cleared = s.published().pop().expect("the end of the disagreement is published");
    assert!(cleared.disagreements.is_empty());
}

/// A member that catches up within `CATCH_UP` is never reported.
#[test]
fn a_member_that_catches_up_in_time_is_never_reported() {
    let items: Vec<Item> = (0..4).map(Item::from).collect();
    let mut s = on_shared_set(&items, 3, &["a-0000000000", "b-0000000001"]);
    let (id, _) = s.request("announcements", |op| matches!(op, Op::ReadAnnouncements(_)));
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 2, &items))]))));
    s.wait(CATCH_UP);
    let (id, _) = s.request("announcements again", |op| matches!(op, Op::ReadAnnouncements(_)));
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 3, &items))]))));
    assert!(s.published().iter().all(|p| p.disagreements.is_empty()), "{:?}", s.published());
    s.wait(CATCH_UP * 3);
    assert!(
        !s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::ReadAnnouncements(_)))),
        "nothing more to read: {:?}",
        s.seen
    );
}

/// The re-read of the announcements is due once a difference has lasted `CATCH_UP`; an event handled at that very
/// instant (not a timeout) must fire it too. Before, only timeouts fired it, and `poll_timeout` no longer reported a
/// timer the clock had reached: the report stood for good (a 10⁸-step run, base 2611261401, found it).
#[test]
fn the_announcements_are_read_again_when_an_event_comes_at_the_instant_they_are_due() {
    let items: Vec<Item> = (0..4).map(Item::from).collect();
    let mut s = on_shared_set(&items, 3, &["a-0000000000", "b-0000000001"]);
    let (id, _) = s.request("announcements", |op| matches!(op, Op::ReadAnnouncements(_)));
    s.send(Event::Reply(id, Reply::Announcements(Ok(vec![Some(announcing("b", 2, &items))]))));
    // Exactly then, an event (a set change notification) comes before any timeout.
    s.now += CATCH_UP;
    s.send(Event::SetChanged);
    assert!(
        s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::ReadAnnouncements(_)))),
        "the re-read was not sent: {:?} (next timeout {:?})",
        s.seen,
        s.core.poll_timeout()
    );
}

/// A version that changes no item and no weight (a close, a split whose children wait) is followed as it is: the
/// assignment in force is the new version's, announced as such, and shown at the new version as an update of the
/// same `Acquired`, never as a new episode (before, it was `Acquired` again, generation and all, and a worker that
/// starts its work at every `Acquired` ran its items twice).
#[test]
fn a_version_that_moves_nothing_is_followed_without_a_new_episode() {
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = acquired_on_shared_set(&items, 1);
    s.seen.retain(|a| !matches!(a, Action::Request(_, Op::Announce(_))));
    s.set_read_finds(set_read(&items, 2));
    s.wait(SETTLED);
    let published = s.published();
    assert!(published.iter().all(|p| !p.transition), "{published:?}");
    assert_eq!(published.last().map(|p| (p.state, p.set.version)), Some((PartitionState::Acquired, Some(2))));
    let (_, Op::Announce(data)) = s.request("announcement", |op| matches!(op, Op::Announce(_))) else { unreachable!() };
    assert!(data.contains("set=shared@2"), "{data}");
}

/// Once a member follows a new version, it says so in its party node.
#[test]
fn a_member_announces_each_version_of_the_shared_set_it_follows() {
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = acquired_on_shared_set(&items, 1);
    s.seen.retain(|a| !matches!(a, Action::Request(_, Op::Announce(_))));

    let bigger: Vec<Item> = (0..4).map(Item::from).collect();
    s.set_read_finds(set_read(&bigger, 2));
    s.wait(SETTLED);
    let (_, Op::Announce(data)) = s.request("announcement", |op| matches!(op, Op::Announce(_))) else { unreachable!() };
    assert_eq!(
        Agreement::from_node_data(data.as_bytes()).map(|a| a.set),
        Some(crate::announcement::SetSource::Shared(Some(2)))
    );
    assert!(data.starts_with("a\n"), "the identifier first, as kazoo writes it: {data:?}");
}

/// An update's tag (random hex, as a writer draws it).
const TAG: &str = "00000000000000a1";

/// A read of the shared set with an update under way, with or without its writer's lease.
fn unfinished_read(items: &[Item], version: u64, tag: &str, lease: bool) -> crate::set_layout::RawRead {
    use crate::set_layout::{Header, Kind, State};
    let mut read = set_read(items, version);
    let header = Header {
        kind: Kind::of(items),
        version,
        state: State::Staging(tag.into()),
        log: Vec::new(),
        weights: None,
        lineage: false,
        deltas: Vec::new(),
    };
    read.header = Some((header.render().into_bytes(), version as i32 + 1));
    read.lease = Some(lease);
    read
}

/// The party's first member takes care of an update whose writer may be gone: it watches the writer's lease while
/// it lives, and undoes (or finishes) the update once it is gone. Another member leaves it to the first.
#[test]
fn the_first_member_recovers_an_update_whose_writer_is_gone() {
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = on_shared_set(&items, 1, &["a-0000000000", "b-0000000001"]);
    s.send(Event::SetChanged);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    s.send(Event::Reply(id, Reply::Set(Ok(unfinished_read(&items, 1, TAG, true)))));
    let (id, Op::WatchLease(tag)) = s.request("lease watch", |op| matches!(op, Op::WatchLease(_))) else {
        unreachable!()
    };
    assert_eq!(tag, TAG);
    // The writer's session ends: its lease goes; the member reads the set again and undoes the update.
    s.send(Event::Reply(id, Reply::LeaseGone(Ok(()))));
    s.send(Event::SetChanged);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    s.send(Event::Reply(id, Reply::Set(Ok(unfinished_read(&items, 1, TAG, false)))));
    let (_, Op::RecoverSet(unfinished)) = s.request("recovery", |op| matches!(op, Op::RecoverSet(_))) else {
        unreachable!()
    };
    assert!(unfinished.abandoned());
    assert_eq!(unfinished.state.change(), Some(TAG));

    // The second member of the party does nothing of the kind.
    let mut s = on_shared_set(&items, 1, &["b-0000000000", "a-0000000001"]);
    s.send(Event::SetChanged);
    let (id, _) = s.request("set read", |op| *op == Op::ReadSet);
    s.send(Event::Reply(id, Reply::Set(Ok(unfinished_read(&items, 1, TAG, false)))));
    assert!(
        !s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::RecoverSet(_) | Op::WatchLease(_)))),
        "only the first member recovers: {:?}",
        s.seen
    );
}

/// Every finish or split is a version of the shared set. A stream of them must not postpone the allocation until
/// it ends: under Incremental a set change waits a quarter of `time_boundary` after the first change not yet
/// followed, at most. (Before, every version restarted the quiet period, and a burst of 980 finishes kept the children
/// waiting 21 s on average; then a full `time_boundary` after the first, which members deciding on versions a few
/// apart made two for 1 % of the children.) A party change still restarts a full wait, and is not cut short by a set
/// change.
#[test]
fn a_stream_of_set_changes_waits_a_quarter_of_time_boundary_after_the_first_at_most() {
    let versions_announced = |s: &mut Script| -> Vec<u64> {
        let mut versions = Vec::new();
        while let Some(at) = s.seen.iter().position(|a| matches!(a, Action::Request(_, Op::Announce(_)))) {
            let Action::Request(_, Op::Announce(data)) = s.seen.remove(at) else { unreachable!() };
            if let Some(Agreement { set: crate::announcement::SetSource::Shared(Some(version)), .. }) =
                Agreement::from_node_data(data.as_bytes())
            {
                versions.push(version);
            }
        }
        versions
    };
    let change_to = |s: &mut Script, version: u64| {
        let items: Vec<Item> = (0..2 + version as i64).map(Item::from).collect();
        s.set_read_finds(set_read(&items, version));
    };
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = acquired_on_shared_set(&items, 1);
    versions_announced(&mut s);

    // Version 2 starts a wait of TB/4: followed at 25 ms, not before.
    change_to(&mut s, 2);
    s.wait(TB / 5);
    assert_eq!(versions_announced(&mut s), Vec::<u64>::new(), "followed before time_boundary / 4");
    s.wait(TB / 10);
    assert_eq!(versions_announced(&mut s), [2]);
    s.grant_locks();

    // Versions 3 and 4, 10 ms apart: the assignment follows version 4 at 25 ms after version 3, not after version 4.
    change_to(&mut s, 3);
    s.wait(TB / 10);
    change_to(&mut s, 4);
    s.wait(TB / 10);
    assert_eq!(versions_announced(&mut s), Vec::<u64>::new(), "followed before time_boundary / 4");
    s.wait(TB / 10);
    assert_eq!(versions_announced(&mut s), [4], "a stream of set changes postponed the allocation");
    s.grant_locks();

    // A party change within a set change's wait restarts a full one, as in kazoo; a set change then does not
    // shorten it.
    change_to(&mut s, 5);
    s.wait(TB / 10);
    s.send(Event::PartyChanged);
    s.party(&["a-0000000000"]);
    s.wait(TB / 2);
    change_to(&mut s, 6);
    s.wait(TB * 3 / 10);
    assert_eq!(versions_announced(&mut s), Vec::<u64>::new(), "a party change's wait was cut short");
    s.wait(TB * 3 / 10);
    assert_eq!(versions_announced(&mut s), [6]);
}

/// Incremental: a set change while gains are being taken does not give them up. The target stays in force (less
/// the items that left the set) until the quiet period ends, so a stream of versions closer together than a lock's
/// round trip still lets each gain complete, and the member reaches `Acquired` in between.
#[test]
fn incremental_gains_under_way_survive_a_set_change() {
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = acquired_on_shared_set(&items, 1);
    // New items' lock directories are made first (a used path has them for the items it started with).
    let grant = |s: &mut Script| {
        while let Some(at) = s.seen.iter().position(|a| matches!(a, Action::Request(_, Op::MakeDirs(_)))) {
            let Action::Request(id, Op::MakeDirs(_)) = s.seen.remove(at) else { unreachable!() };
            s.send(Event::Reply(id, Reply::DirsMade(Ok(()))));
        }
        s.grant_locks();
    };
    let read = |s: &mut Script, items: &[Item], version: u64| {
        s.set_read_finds(set_read(items, version));
    };

    // Version 2 adds item 3; once the quiet period ends, its lock is asked for.
    let v2: Vec<Item> = (0..4).map(Item::from).collect();
    read(&mut s, &v2, 2);
    s.wait(SETTLED);
    assert!(
        s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::MakeDirs(items)) if items == &[3])),
        "{:?}",
        s.seen
    );
    // Version 3 (item 0 finished, item 4 added) arrives before the create's reply.
    let v3: Vec<Item> = (1..5).map(Item::from).collect();
    read(&mut s, &v3, 3);
    let published = s.published();
    let revoked = published.last().expect("item 0 left the set: revoked at once");
    assert_eq!(revoked.state, PartitionState::Release);
    assert_eq!(revoked.revoked.to_vec(), [0]);
    s.send(Event::ReleaseSet(1));
    let (id, _) = s.request("release of item 0", |op| matches!(op, Op::Release { .. }));
    s.send(Event::Reply(id, Reply::Released(Ok(()))));
    // Item 3 is still wanted: once its directory is made, its lock is taken, and the member is ACQUIRED at version
    // 2's assignment (less item 0) before version 3's quiet period ends.
    grant(&mut s);
    let acquired = s.published().pop().expect("ACQUIRED with the gain");
    assert_eq!(acquired.state, PartitionState::Acquired);
    assert_eq!(listed(&acquired), BTreeSet::from([1, 2, 3]));
    // Then version 3's assignment adds item 4.
    s.wait(SETTLED);
    grant(&mut s);
    let last = s.published().pop().expect("ACQUIRED at version 3");
    assert_eq!((last.state, listed(&last)), (PartitionState::Acquired, BTreeSet::from([1, 2, 3, 4])));
}

/// A member of a set with lineage reads its listed items' lineage nodes after a version (a close changes no item),
/// at most once per `time_boundary`, the known-closed ones too, and publishes the closed ones. Without lineage,
/// nothing is read.
#[test]
fn closed_items_are_read_after_lineage_changes_and_published() {
    let items: Vec<Item> = (0..3).map(Item::from).collect();
    let mut s = acquired_on_shared_set(&items, 1);
    let reads_closed = |s: &Script| s.seen.iter().any(|a| matches!(a, Action::Request(_, Op::ReadClosed(_))));
    assert!(!reads_closed(&s), "a set without lineage reads no lineage");
    let version = |s: &mut Script, version: u64| {
        s.set_read_finds(set_read_with(&items, version, true));
    };

    // Version 2 closes item 1 (the same items): the listed items' lineage is read.
    version(&mut s, 2);
    let (id, Op::ReadClosed(asked)) = s.request("lineage read", |op| matches!(op, Op::ReadClosed(_))) else {
        unreachable!()
    };
    assert_eq!(asked, [0, 1, 2]);
    s.send(Event::Reply(id, Reply::Closed(Ok(vec![false, true, false]))));
    let published = s.published().pop().expect("the closed item is published");
    assert_eq!((published.state, published.closed.clone()), (PartitionState::Acquired, vec![1]));
    assert_eq!(published.reason, Reason::ItemsClosed);

    // Version 3 soon after: read again only a time_boundary after the last read, item 1 too.
    version(&mut s, 3);
    assert!(!reads_closed(&s), "read again within time_boundary");
    s.wait(TB);
    let (id, Op::ReadClosed(asked)) = s.request("lineage read", |op| matches!(op, Op::ReadClosed(_))) else {
        unreachable!()
    };
    assert_eq!(asked, [0, 1, 2]);
    // A read lost with the connection is tried again, a time_boundary later.
    s.send(Event::Reply(id, Reply::Closed(Err(lost_connection()))));
    s.wait(TB);
    let (id, _) = s.request("lineage read again", |op| matches!(op, Op::ReadClosed(_)));
    s.send(Event::Reply(id, Reply::Closed(Ok(vec![true, true, false]))));
    assert_eq!(s.published().pop().map(|p| p.closed), Some(vec![0, 1]));
}

/// An item known closed that a later read finds not closed is another item of the same name (the closed one was
/// finished, retired and added again between two versions this member read): it is no longer shown closed. Broken
/// (`ClosedOutlivesOwnership`), it stays closed and the worker would finish a new item as the old one.
#[test]
fn an_item_found_not_closed_again_is_no_longer_shown_closed() {
    for broken in [false, true] {
        crate::sabotage::set(if broken { Sabotage::ClosedOutlivesOwnership } else { Sabotage::None });
        let items: Vec<Item> = (0..3).map(Item::from).collect();
        let mut s = acquired_on_shared_set(&items, 1);
        s.set_read_finds(set_read_with(&items, 2, true));
        let (id, _) = s.request("lineage read", |op| matches!(op, Op::ReadClosed(_)));
        s.send(Event::Reply(id, Reply::Closed(Ok(vec![false, true, false]))));
        assert_eq!(s.published().pop().map(|p| p.closed), Some(vec![1]));

        // Version 4, the same names: item 1 was finished, retired and added again in versions 3 and 4.
        s.wait(TB);
        s.set_read_finds(set_read_with(&items, 4, true));
        let asked = match s.request("lineage read", |op| matches!(op, Op::ReadClosed(_))) {
            (id, Op::ReadClosed(asked)) => {
                let closed = vec![false; asked.len()];
                s.send(Event::Reply(id, Reply::Closed(Ok(closed))));
                asked
            }
            _ => unreachable!(),
        };
        let shown = s.published().pop().map(|p| p.closed);
        crate::sabotage::set(Sabotage::None);
        if broken {
            assert_eq!(asked, [0, 2], "broken: the known-closed item is not read again");
            assert_eq!(shown, Some(vec![1]), "broken: the new version's publication shows item 1 closed");
        } else {
            assert_eq!(asked, [0, 1, 2]);
            assert_eq!(shown, Some(vec![]), "the new item 1 is not closed");
        }
    }
}
