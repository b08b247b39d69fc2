//! The layout's parsing and interpretation of reads, on hand-made reads.

use super::*;
use crate::chunked::{MAX_CHUNKS, chunk_name, tag_of};

fn header(state: State) -> Header {
    Header {
        kind: Kind::Int,
        version: 3,
        state,
        log: vec!["00000000000000aa".into()],
        weights: None,
        lineage: false,
        deltas: Vec::new(),
    }
}

fn read(header: &Header, children: &[&str]) -> RawRead {
    RawRead {
        header: Some((header.render().into_bytes(), 5)),
        children: children.iter().map(|c| c.to_string()).collect(),
        listed: None,
        change: None,
        lease: None,
        weights: None,
    }
}

#[test]
fn headers_round_trip_and_garbage_is_refused() {
    let tag = "0123456789abcdef".to_string();
    for state in
        [State::Ready, State::Staging(tag.clone()), State::Applying(tag.clone()), State::Creating(tag), State::Absent]
    {
        let h = header(state);
        assert_eq!(Header::parse(h.render().as_bytes()), Ok(h));
    }
    for garbage in [
        &b""[..],
        b"{}",
        b"zk-partitioner item set v2",
        b"zk-partitioner item set v2 kind=int version=1 state=staging",
        b"zk-partitioner item set v2 kind=int version=1 state=ready change=0123456789abcdef",
        b"zk-partitioner item set v2 kind=int version=x state=ready",
        b"zk-partitioner item set v2 kind=int version=1 state=ready log=xyz",
        b"zk-partitioner item set v1 kind=int state=ready",
        b"\xff",
    ] {
        assert!(Header::parse(garbage).is_err(), "{garbage:?}");
    }
    let next = header(State::Ready).next(Kind::Str, State::Ready, "00000000000000bb");
    assert_eq!((next.version, next.kind, next.log.len()), (4, Kind::Str, 2));
    assert!(next.landed("00000000000000aa") && next.landed("00000000000000bb") && !next.landed("x"));
    let mut long = header(State::Ready);
    for i in 0..40u64 {
        long = long.next(Kind::Int, State::Ready, &token(i));
    }
    assert_eq!(long.log.len(), LOG);
    assert!(long.landed(&token(39)) && !long.landed(&token(39 - LOG as u64)));
}

#[test]
fn every_reader_sees_a_committed_set() {
    let tag = "0123456789abcdef".to_string();
    // ready, and staging: the base set
    for state in [State::Ready, State::Staging(tag.clone())] {
        let h = header(state.clone());
        let mut r = read(&h, &["1", "2", "07"]);
        if state != State::Ready {
            r.lease = Some(true);
        }
        let SetView::Committed(c) = interpret(r) else { panic!("{state:?}") };
        assert_eq!(c.items, [Item::Int(1), Item::Int(2)]);
        assert_eq!((c.version, c.header_version, c.skipped), (3, 5, vec!["07".to_string()]));
    }
    // applying: the base set with the change, however much of it was applied
    let h = header(State::Applying(tag.clone()));
    let mut r = read(&h, &["1", "2", "3"]);
    assert_eq!(interpret(r.clone()), SetView::Torn, "the change's lists must be read along");
    r.change = Some((vec!["4".into(), "3".into()], vec!["1".into()]));
    r.lease = Some(false);
    let SetView::Committed(c) = interpret(r) else { panic!() };
    assert_eq!(c.items, [2, 3, 4].map(Item::from));
    assert!(c.unfinished.as_ref().is_some_and(Unfinished::abandoned));
    // creating and deleting: no set yet
    let mut r = read(&header(State::Creating(tag)), &["1"]);
    r.lease = Some(true);
    assert!(matches!(interpret(r), SetView::Missing { unfinished: Some(u) } if !u.abandoned()));
    // missing, unreadable
    assert_eq!(interpret(RawRead { header: None, ..read(&h, &[]) }), SetView::Missing { unfinished: None });
    assert!(matches!(
        interpret(RawRead { header: Some((b"junk".to_vec(), 0)), ..read(&h, &[]) }),
        SetView::Unreadable(_)
    ));
}

#[test]
fn weight_tables_round_trip_and_a_missing_table_is_a_torn_read() {
    let mut h = header(State::Ready);
    h.weights = Some(TableRef { tag: "00000000000000cc".into() });
    assert_eq!(Header::parse(h.render().as_bytes()), Ok(h.clone()));
    assert!(h.render().ends_with(" weights=00000000000000cc"), "{}", h.render());
    assert_eq!(h.next(Kind::Int, State::Ready, "00000000000000dd").weights, h.weights, "carried to the next version");
    let mut marked = h.clone();
    marked.lineage = true;
    assert!(marked.render().ends_with(" lineage=on"), "{}", marked.render());
    assert_eq!(Header::parse(marked.render().as_bytes()), Ok(marked.clone()));
    assert!(marked.next(Kind::Int, State::Ready, "00000000000000dd").lineage, "carried to the next version");
    for garbage in ["weights=xyz", "weights=00000000000000cc.2", "weights=", "lineage=yes"] {
        let text = format!("{MAGIC} kind=int version=1 state=ready {garbage}");
        assert!(Header::parse(text.as_bytes()).is_err(), "{garbage}");
    }
    let old = format!("{MAGIC} kind=int version=1 state=ready weights=00000000000000cc.2");
    assert!(Header::parse(old.as_bytes()).is_err_and(|e| e.contains("earlier development version")));

    // The index: chunk names, in order.
    let names = ["00000000000000cc-0", "00000000000000aa-3"];
    let index = render_index(names);
    assert_eq!(parse_index(index.as_bytes()), Ok(names.map(str::to_owned).to_vec()));
    assert_eq!(names.map(tag_of), ["00000000000000cc", "00000000000000aa"]);
    assert_eq!(tag_of("00000000000000cc"), "00000000000000cc");
    for garbage in [
        String::new(),
        INDEX_MAGIC.to_owned(),
        render_index(["00000000000000cc-0", "00000000000000cc-0"]),
        render_index(["00000000000000cc"]),
        render_index(["00000000000000cc-01"]),
        render_index(["xyz-1"]),
        format!("weights\n{}", names[0]),
    ] {
        assert!(parse_index(garbage.as_bytes()).is_err(), "{garbage:?}");
    }
    assert!(
        parse_index(
            render_index(
                (0..=MAX_CHUNKS)
                    .map(|k| chunk_name("00000000000000cc", k))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
            )
            .as_bytes()
        )
        .is_err()
    );

    let chunk = |name: &str, data: &[u8]| Chunk::new(name.into(), data.into());
    let table = Table { chunks: vec![chunk(names[0], b"1\t5\n2\tbytes=9,cpu=2\n"), chunk(names[1], b"3\t0\n")] };
    let weights = BTreeMap::from([
        (Item::from(1), Weight::new(5)),
        (Item::from(2), Weight::named([("cpu", 2), ("bytes", 9)]).unwrap()),
        (Item::from(3), Weight::new(0)),
    ]);
    let items: Vec<Item> = (1..=3).map(Item::from).collect();
    assert_eq!(parse_table(&table, Kind::Int, &items), Ok((weights.clone(), false)));
    // Weights of items not in the set are not the set's.
    assert_eq!(parse_table(&table, Kind::Int, &items[..1]).map(|(w, stale)| (w.len(), stale)), Ok((1, true)));
    assert!(parse_table(&Table { chunks: vec![chunk(names[0], b"1 5\n")] }, Kind::Int, &items).is_err());
    assert!(parse_table(&Table { chunks: vec![chunk(names[0], b"1\tlots\n")] }, Kind::Int, &items).is_err());
    // Read along: the set with its weights; the table missing: torn; its index not one: unreadable.
    let mut r = read(&h, &["1", "2", "3"]);
    assert_eq!(interpret(r.clone()), SetView::Torn);
    r.weights = Some(Ok(table.clone()));
    let SetView::Committed(c) = interpret(r.clone()) else { panic!() };
    assert_eq!((c.weights, c.table), (weights, Some(table)));
    r.weights = Some(Err("its index is not UTF-8".into()));
    assert!(matches!(interpret(r), SetView::Unreadable(_)));
}

#[test]
fn names_parse_by_kind() {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (items, skipped) = parse_names(Kind::Int, names(&["10", "9", "07", "x", "-3"]));
    assert_eq!(items, [-3, 9, 10].map(Item::from));
    assert_eq!(skipped, ["07", "x"]);
    let (items, skipped) = parse_names(Kind::Str, names(&["b", "a"]));
    assert_eq!(items, ["a", "b"].map(Item::from));
    assert!(skipped.is_empty());
}

#[test]
fn only_canonical_integers_name_an_item() {
    // What `parse_name` decides without rendering each number, against rendering it.
    let rendered = |name: &str| name.parse::<i64>().ok().filter(|v| v.to_string() == name).map(Item::Int);
    let names = [
        "0",
        "-0",
        "00",
        "007",
        "+7",
        "7",
        "-7",
        "-07",
        "10",
        "-",
        "",
        "1a",
        " 1",
        "1 ",
        "--1",
        "0x10",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999",
    ];
    for name in names {
        assert_eq!(parse_name(Kind::Int, name), rendered(name), "{name:?}");
        assert_eq!(parse_name(Kind::Str, name), Some(Item::from(name)));
    }
}

#[test]
fn a_listing_changed_in_place_is_the_listing_parsed_afresh() {
    for kind in [Kind::Int, Kind::Str] {
        let mut rng = crate::rng::SplitMix64::new(kind as u64);
        // Names from a small pool, some of them not integers of the canonical form.
        let pool: Vec<String> =
            (0..60).map(|i| if i % 7 == 0 { format!("0{i}") } else { (i * 37 % 101 - 50).to_string() }).collect();
        let mut children: BTreeSet<String> = pool.iter().filter(|_| rng.below(2) == 0).cloned().collect();
        let mut listed = Listed::parse(kind, children.iter().cloned());
        for _ in 0..300 {
            let mut pick = || {
                let n = rng.below(4);
                (0..n).map(|_| pool[rng.below(pool.len())].clone()).collect::<Vec<String>>()
            };
            let (mut removed, mut added) = (pick(), pick());
            for names in [&mut removed, &mut added] {
                names.sort();
                names.dedup();
            }
            // As a `multi` would: it removes what is there, then creates what is then absent.
            let valid = removed.iter().all(|n| children.contains(n))
                && added.iter().all(|n| !children.contains(n) || removed.contains(n));
            let before = listed.clone();
            assert_eq!(listed.apply(&removed, &added), valid, "{removed:?} {added:?}");
            if valid {
                for name in &removed {
                    children.remove(name);
                }
                children.extend(added);
                assert_eq!(listed, Listed::parse(kind, children.iter().cloned()));
            } else {
                assert_eq!(listed, before, "a change that does not apply changes nothing");
            }
        }
        // A change naming a child twice does not apply either.
        let twice = [pool[1].clone(), pool[1].clone()];
        assert!(!Listed::parse(kind, []).apply(&[], &twice));
    }
}

#[test]
fn a_table_out_of_order_or_naming_an_item_twice_reads_as_inserted_line_by_line() {
    let items: Vec<Item> = [1, 3, 5].map(Item::from).to_vec();
    let chunk = Chunk::new("00000000000000aa-0".into(), b"5\t2\n1\t5\n9\t4\n1\t7\n"[..].into());
    let (weights, others) = parse_table(&Table { chunks: vec![chunk] }, Kind::Int, &items).unwrap();
    assert_eq!(weights, BTreeMap::from([(Item::from(1), Weight::new(7)), (Item::from(5), Weight::new(2))]));
    assert!(others, "9 is not in the set");
    // A chunk's lines are parsed once, whichever table shares it, and again as another kind.
    let shared = Chunk::new("00000000000000aa-1".into(), b"a\t2\n"[..].into());
    let strings: Vec<Item> = vec![Item::from("a")];
    for _ in 0..2 {
        let table = Table { chunks: vec![shared.clone()] };
        assert_eq!(parse_table(&table, Kind::Str, &strings).unwrap().0.len(), 1);
        assert_eq!(parse_table(&table, Kind::Int, &items).unwrap(), (BTreeMap::new(), true));
    }
}

/// Which updates under way a writer waits for and which it recovers, and how each is recovered: only the change
/// found, and not once the header moved on.
#[test]
fn recovering_an_update_under_way_is_decided_by_its_state() {
    let tag = |t: &str| t.to_owned();
    let staging = Unfinished { state: State::Staging(tag("a")), lease: Some(true) };
    assert_eq!(staging.settle(&[]), Settle::WaitForWriter);
    assert_eq!(staging.settle(&[tag("b")]), Settle::WaitForWriter);
    assert_eq!(staging.settle(&[tag("a")]), Settle::Recover, "our own change, its reply lost");
    let gone = Unfinished { lease: Some(false), ..staging.clone() };
    assert_eq!(gone.settle(&[]), Settle::Recover);
    let deleting = Unfinished { state: State::Deleting(tag("d")), lease: Some(true) };
    assert_eq!(deleting.settle(&[]), Settle::Recover, "a deletion is finished by anyone");

    assert_eq!(gone.recovery(&State::Staging(tag("a"))), Recovery::Undo(tag("a")));
    assert_eq!(gone.recovery(&State::Ready), Recovery::Nothing, "the header moved on");
    assert_eq!(gone.recovery(&State::Staging(tag("b"))), Recovery::Nothing, "another change: not ours to undo");
    let applying = Unfinished { state: State::Applying(tag("a")), lease: Some(false) };
    assert_eq!(applying.recovery(&State::Applying(tag("a"))), Recovery::Finish(tag("a")));
    let creating = Unfinished { state: State::Creating(tag("c")), lease: Some(false) };
    assert_eq!(
        creating.recovery(&State::Creating(tag("c"))),
        Recovery::UndoCreation { tag: tag("c"), say_deleting: true }
    );
    assert_eq!(
        deleting.recovery(&State::Deleting(tag("d"))),
        Recovery::UndoCreation { tag: tag("d"), say_deleting: false }
    );
    let absent = Unfinished { state: State::Absent, lease: None };
    assert_eq!(absent.recovery(&State::Absent), Recovery::Nothing);
}
