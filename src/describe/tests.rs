//! The unit tests of [`describe`](super): a description assembled from reads made up here.

use super::*;

fn stat(session: i64, czxid: i64) -> Stat {
    Stat {
        czxid,
        mzxid: czxid,
        pzxid: czxid,
        ctime: 1_700_000_000_000,
        mtime: 1_700_000_000_000,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: session,
        data_length: 0,
        num_children: 0,
    }
}

fn member(name: &str, session: i64) -> RawMember {
    let node = format!("{}-{name}", "a".repeat(32));
    RawMember { node, name: name.into(), identifier: name.into(), capacity: 1, stat: stat(session, 1) }
}

fn contender(seq: u32, member: &str, session: i64) -> RawContender {
    let node = format!("{}__lock__{seq:010}", "c".repeat(32));
    RawContender { node, data: member.as_bytes().to_vec(), stat: stat(session, 100 + i64::from(seq)) }
}

#[test]
fn owners_queues_orphans_and_counts() {
    let members = vec![member("w2", 2), member("w1", 1)];
    let dirs = vec![
        ("10".to_string(), vec![contender(3, "w2", 2), contender(1, "w1", 1)]),
        ("9".to_string(), vec![contender(0, "ghost", 9)]),
        // A kazoo member writes nothing into its lock node: its name comes from its party node.
        ("11".to_string(), vec![contender(2, "", 2), contender(4, "", 8)]),
        ("2".to_string(), vec![]),
        ("1".to_string(), vec![contender(5, "w1", 1), contender(7, "ghost", 9)]),
    ];
    let expected: Vec<Item> = (0..3).map(Item::from).chain([9, 10].map(Item::from)).collect();
    let options = DescribeOptions::new().items(&expected);
    let d = assemble("/p", members, vec!["junk".into()], dirs, &options, None, None).unwrap();
    let names: Vec<&str> = d.items.iter().map(|i| i.item.as_str()).collect();
    assert_eq!(names, ["0", "1", "2", "9", "10", "11"], "integers sort numerically");
    let eleven = d.item("11").unwrap();
    assert_eq!(eleven.owner.as_ref().unwrap().member, "w2");
    assert_eq!((eleven.waiting[0].member.as_str(), eleven.waiting[0].orphan), ("", true));
    assert_eq!(d.unowned, ["0", "2"]);
    assert!(!d.item("0").unwrap().has_lock_dir);
    let ten = d.item("10").unwrap();
    assert_eq!(ten.owner.as_ref().unwrap().member, "w1", "lowest sequence holds");
    assert_eq!(ten.owner.as_ref().unwrap().token, FencingToken::new(101));
    assert_eq!(ten.waiting.len(), 1);
    assert_eq!(d.contended().map(|i| i.item.as_str()).collect::<Vec<_>>(), ["1", "10", "11"]);
    assert_eq!(d.orphans.len(), 3);
    assert_eq!((d.orphans[0].item.as_str(), d.orphans[0].holds), ("1", false));
    assert_eq!((d.orphans[1].item.as_str(), d.orphans[1].holds), ("9", true));
    assert_eq!(d.owner_counts, BTreeMap::from([("ghost".into(), 1), ("w1".into(), 2), ("w2".into(), 1)]));
    assert_eq!(
        d.members.iter().map(|m| (m.name.as_str(), m.items, m.waiting)).collect::<Vec<_>>(),
        [("w1", 2, 0), ("w2", 1, 1)]
    );
    assert_eq!(d.foreign_party_nodes, ["junk"]);
    assert_eq!(d.outside_share, None);
    assert_eq!(d.imbalance(), Some(4.0 / 3.0));
}

#[test]
fn share_check_names_items_held_by_the_wrong_member() {
    let members = vec![member("a", 1), member("b", 2)];
    // Stride over 0..4 with members a, b: a gets 0 and 2, b gets 1 and 3. b holds 1, 2 and 3.
    let dirs = (0..4)
        .map(|i| {
            let (name, session) = if i == 0 { ("a", 1) } else { ("b", 2) };
            (i.to_string(), vec![contender(0, name, session)])
        })
        .collect();
    let stride = crate::partition::KazooStride;
    let d = assemble("/p", members, vec![], dirs, &DescribeOptions::new().partition_func(&stride), None, None).unwrap();
    let outside = d.outside_share.unwrap();
    assert_eq!(outside, [OutsideShare { item: "2".into(), holder: "b".into(), share_of: Some("a".into()) }]);
}

#[test]
fn a_panicking_partition_fn_is_an_error() {
    let members = vec![member("a", 1)];
    let dirs = vec![("x".to_string(), vec![contender(0, "a", 1)])];
    let boom = |_: &str, _: &[String], _: &[Item]| -> Vec<Item> { panic!("boom") };
    let result = assemble("/p", members, vec![], dirs, &DescribeOptions::new().partition_func(&boom), None, None);
    assert!(matches!(result, Err(Error::PartitionFn { .. })), "{result:?}");
}

#[test]
fn a_weighted_function_is_called_with_the_weights_and_the_announced_capacities() {
    use crate::weighted::{Load, Weight, Weighted, WeightedRendezvous, Weights};
    // a (capacity 1) and b (capacity 3) over 0..12, item 0 weighing 6: each holds its weighted share.
    let items: Vec<Item> = (0..12).map(Item::from).collect();
    let named = BTreeMap::from([(Item::from(0), Weight::new(6))]);
    let (names, capacities) = (["a".to_string(), "b".to_string()], [1, 3]);
    let weights = Weights::of(&items, &named);
    let function = WeightedRendezvous::default();
    let share = |me: &str| function.partition_weighted(&Weighted::new(me, &names, &capacities, &items, &weights));
    // (The unweighted call gives other shares: a share check that ignored the weights would be wrong.)
    assert_ne!(share("a"), function.partition("a", &names, &items));
    let dirs: Vec<(String, Vec<RawContender>)> = items
        .iter()
        .map(|item| {
            let (name, session) = if share("a").contains(item) { ("a", 1) } else { ("b", 2) };
            (item.node_name(), vec![contender(0, name, session)])
        })
        .collect();
    let members = vec![RawMember { capacity: 1, ..member("a", 1) }, RawMember { capacity: 3, ..member("b", 2) }];
    let options = DescribeOptions::new().items(&items).weights(&named).partition_func(&function);
    let d = assemble("/p", members, vec![], dirs, &options, None, None).unwrap();
    assert_eq!(d.outside_share, Some(Vec::new()));
    for (m, (name, capacity)) in d.members.iter().zip([("a", 1), ("b", 3)]) {
        let positions = share(name).iter().filter_map(|item| items.binary_search(item).ok()).collect::<Vec<_>>();
        let expected = Load::of(positions, &weights, capacity, 4, Some(1.10));
        assert_eq!((m.capacity, m.load.as_ref(), m.held.as_ref()), (capacity, Some(&expected), Some(&expected)));
    }
    let total: u64 = d.members.iter().map(|m| m.load.as_ref().unwrap().dimensions[0].assigned).sum();
    assert_eq!(total, 17);

    // An unweighted function ignores capacities: the members report capacity 1, and so does the load here.
    let dirs = vec![("0".to_string(), vec![contender(0, "b", 2)])];
    let members = vec![RawMember { capacity: 3, ..member("b", 2) }];
    let options = DescribeOptions::new().items(&items[..2]).partition_func(&crate::partition::KazooStride);
    let d = assemble("/p", members, vec![], dirs, &options, None, None).unwrap();
    let (load, held) = (d.members[0].load.as_ref().unwrap(), d.members[0].held.as_ref().unwrap());
    assert_eq!((d.members[0].capacity, load.capacity, load.dimensions[0].assigned), (3, 1, 2));
    assert_eq!((held.dimensions[0].assigned, held.over_capacity, load.over_capacity), (1, false, false));
    // Without the expected items, no load (the lock directories may not name the whole set).
    let dirs = vec![("0".to_string(), vec![contender(0, "b", 2)])];
    let options = DescribeOptions::new().partition_func(&crate::partition::KazooStride);
    let d = assemble("/p", vec![member("b", 2)], vec![], dirs, &options, None, None).unwrap();
    assert_eq!((d.members[0].load.as_ref(), d.members[0].held.as_ref()), (None, None));
}

#[test]
fn capacities_are_read_as_the_members_read_them() {
    assert_eq!(announced_capacity(b"host-1\nzkp/1 set=shared@3 fn=0123456789abcdef cap=3"), 3);
    assert_eq!(announced_capacity(b"host-1\nzkp/1 set=shared@3 fn=0123456789abcdef"), 1);
    for unreadable in ["cap=0", "cap=three", "cap=-2", "cap=1000001", "cap="] {
        let data = format!("host-1\nzkp/1 set=shared@3 fn=0123456789abcdef {unreadable}");
        assert_eq!(announced_capacity(data.as_bytes()), 1, "{unreadable}");
    }
    for kazoo_or_garbage in [&b"host-1"[..], b"", b"\xff\nzkp/1 cap=4", b"h\nzkp/1 cap=4"] {
        assert_eq!(announced_capacity(kazoo_or_garbage), 1, "{kazoo_or_garbage:?}");
    }
}

#[test]
fn item_names_that_are_not_canonical_integers_are_strings() {
    assert_eq!(item_of_name("42"), Item::Int(42));
    assert_eq!(item_of_name("-7"), Item::Int(-7));
    assert_eq!(item_of_name("007"), Item::Str("007".into()));
    assert_eq!(item_of_name("+1"), Item::Str("+1".into()));
    assert_eq!(item_of_name("q1"), Item::Str("q1".into()));
}

/// A sticky party's shares come from its placement record: the record itself when it was written for the inputs as
/// read (members hand it out as it is), else computed from it. The record here is one computing again from would
/// change (27 items, capacities 3, 1, 2, 3: the rule is not a fixed point at every size; it moves 8, 17 and 18 to
/// `s4`), so the two differ.
#[test]
fn a_sticky_partys_shares_come_from_its_placement_record() {
    use crate::weighted::WeightedRendezvous;
    use proto::placement::record::Record;

    const RECORDED: [usize; 27] = [0, 0, 3, 1, 0, 0, 3, 2, 1, 0, 0, 3, 0, 1, 0, 2, 1, 0, 3, 0, 3, 3, 3, 3, 2, 3, 3];
    let items: Vec<Item> = (0..27).map(Item::from).collect();
    let names: Vec<String> = ["s2", "s3", "s4", "s5"].map(String::from).to_vec();
    let members = || {
        names
            .iter()
            .zip([3, 1, 2, 3])
            .zip(1..)
            .map(|((name, capacity), session)| RawMember { capacity, ..member(name, session) })
    };
    let dirs = || -> Vec<(String, Vec<RawContender>)> {
        items
            .iter()
            .zip(RECORDED)
            .map(|(item, owner)| (item.node_name(), vec![contender(0, &names[owner], owner as i64 + 1)]))
            .collect()
    };
    let sticky = WeightedRendezvous::default().sticky();
    let options = DescribeOptions::new().items(&items).partition_func(&sticky);
    // The members' inputs: the fixed set as they were given it, the function, the party and its capacities.
    let function = proto::announcement::Agreement::new(Some(&items), None, &sticky, items.first()).function;
    let content = proto::placement::record::content_digest(&items, &crate::weighted::Weights::uniform(items.len()));
    let digest = proto::placement::record::inputs_digest(content, function, &names, &[3, 1, 2, 3]);
    let record = |inputs: u64| Record::computed(inputs, &names, items.clone().into(), &RECORDED).expect("a record");

    let d = assemble("/p", members().collect(), vec![], dirs(), &options, None, Some(record(digest))).unwrap();
    assert_eq!(d.outside_share, Some(Vec::new()), "the record, as it is");
    assert_eq!(d.placement, Some(PlacementInfo { items: 27, current: true }));

    // Written for other inputs (an earlier party, say): computed from, as the members will.
    let d = assemble("/p", members().collect(), vec![], dirs(), &options, None, Some(record(digest ^ 1))).unwrap();
    let moved: Vec<(&str, Option<&str>)> =
        d.outside_share.iter().flatten().map(|o| (o.item.as_str(), o.share_of.as_deref())).collect();
    assert_eq!(moved, [("8", Some("s4")), ("17", Some("s4")), ("18", Some("s4"))]);
    assert_eq!(d.placement, Some(PlacementInfo { items: 27, current: false }));

    // No record: the members place as if they started afresh.
    let d = assemble("/p", members().collect(), vec![], dirs(), &options, None, None).unwrap();
    assert_eq!(d.placement, None);
}
