//! The token's format: what `from_json` refuses, and what an import would write.

use super::*;

fn token() -> Progress {
    let mut lineage = BTreeMap::new();
    lineage.insert(
        "1".to_owned(),
        LineageRecord {
            children: vec!["5".into(), "6".into()],
            closed: true,
            finished: Some(FinishedRecord { member: "w1".into(), token: 9 }),
            ..LineageRecord::default()
        },
    );
    lineage.insert("5".to_owned(), LineageRecord { parents: vec!["1".into()], ..LineageRecord::default() });
    lineage.insert("6".to_owned(), LineageRecord { parents: vec!["1".into()], ..LineageRecord::default() });
    let mut checkpoints = BTreeMap::new();
    let data = base64::engine::general_purpose::STANDARD.encode(b"offset=41");
    checkpoints.insert("1".to_owned(), CheckpointRecord { data, writer: "w1".into(), token: 9, saved_ms: 5 });
    Progress {
        format: FORMAT.to_owned(),
        exported: Exported { path: "/p".into(), set_version: 4, at_ms: 7 },
        kind: "int".into(),
        items: vec!["0".into(), "5".into(), "6".into()],
        weights: BTreeMap::from([("5".to_owned(), "cpu=2".to_owned())]),
        lineage,
        checkpoints,
    }
}

fn reason(err: Error) -> String {
    match err {
        Error::InvalidProgress { reason } => reason,
        other => panic!("not InvalidProgress: {other:?}"),
    }
}

#[test]
fn a_token_reads_back_as_written_and_into_what_an_import_writes() {
    let progress = token();
    let text = progress.to_json();
    assert_eq!(Progress::from_json(&text).unwrap(), progress);
    let contents = progress.contents().unwrap();
    assert_eq!(contents.items, vec![Item::from(0), Item::from(5), Item::from(6)]);
    assert_eq!(contents.weights[&Item::from(5)].get("cpu"), 2);
    assert_eq!(contents.lineage["1"].finished, Some(Finished { token: 9, member: "w1".into() }));
    assert_eq!(contents.checkpoints["1"], crate::checkpoint_store::blob(9, "w1", b"offset=41"));
    assert_eq!(
        crate::checkpoint_store::parse_blob(&contents.checkpoints["1"]).unwrap(),
        (9, "w1".into(), &b"offset=41"[..])
    );
}

#[test]
fn malformed_truncated_and_future_tokens_are_refused_with_their_reason() {
    let text = token().to_json();
    assert!(reason(Progress::from_json("not json").unwrap_err()).contains("not JSON"));
    assert!(reason(Progress::from_json(&text[..text.len() / 2]).unwrap_err()).contains("cut short"));
    let future = text.replace(FORMAT, "zk-partitioner progress 2");
    assert!(reason(Progress::from_json(&future).unwrap_err()).contains("newer version"));
    let foreign = text.replace(FORMAT, "something else");
    assert!(reason(Progress::from_json(&foreign).unwrap_err()).contains("not a zk-partitioner progress token"));
    assert!(reason(Progress::from_json("{}").unwrap_err()).contains("no \"format\""));
    let unknown = text.replacen("\"kind\"", "\"colour\":1,\"kind\"", 1);
    assert!(reason(Progress::from_json(&unknown).unwrap_err()).contains("unknown field"));
    let missing = text.replacen("\"kind\":\"int\",", "", 1);
    assert!(reason(Progress::from_json(&missing).unwrap_err()).contains("missing field"));
}

#[test]
fn contents_that_are_not_one_partys_progress_are_refused() {
    // Each case: what it breaks, and how.
    type Case = (&'static str, fn(&mut Progress));
    let cases: [Case; 8] = [
        ("neither", |p| p.kind = "float".into()),
        ("not an item of kind", |p| p.items.push("x".into())),
        ("twice", |p| p.items.push("0".into())),
        ("no item", |p| p.items.clear()),
        ("finished, yet in the set", |p| p.items.push("1".into())),
        ("weight", |p| {
            p.weights.insert("0".into(), "heavy".into());
        }),
        ("not base64", |p| p.checkpoints.get_mut("1").unwrap().data = "%%".into()),
        ("not a member name", |p| p.checkpoints.get_mut("1").unwrap().writer = "a b".into()),
    ];
    for (expected, change) in cases {
        let mut progress = token();
        change(&mut progress);
        let reason = reason(progress.contents().unwrap_err());
        assert!(reason.contains(expected), "{expected:?} not in {reason:?}");
    }
    let mut large = token();
    let data = base64::engine::general_purpose::STANDARD.encode(vec![0; MAX_CHECKPOINT_SIZE + 1]);
    large.checkpoints.get_mut("1").unwrap().data = data;
    assert!(reason(large.contents().unwrap_err()).contains("at most"));
}

#[test]
fn pruning_keeps_the_sets_items_and_the_tokens_progress_of_those_it_has() {
    let contents = token().contents().unwrap();
    let set = vec![Item::from(0), Item::from(5), Item::from(9)];
    let own = BTreeMap::from([(Item::from(9), Weight::new(4)), (Item::from(5), Weight::new(7))]);
    let (pruned, dropped) = contents.pruned(&set, &own);
    assert_eq!(pruned.items, set);
    // 6 is not in the set; 1 (finished) is not either: dropped, with its checkpoint.
    assert_eq!(dropped, vec!["1".to_owned(), "6".to_owned()]);
    assert!(pruned.checkpoints.is_empty());
    // 5 keeps no link to the dropped 1: a plain item, with no lineage node.
    assert!(pruned.lineage.is_empty());
    // The token's weight for 5, the set's own for 9, which the token does not know.
    assert_eq!(pruned.weights[&Item::from(5)].get("cpu"), 2);
    assert_eq!(pruned.weights[&Item::from(9)], Weight::new(4));
}

#[test]
fn pruning_over_a_set_that_holds_a_finished_parent_and_its_child_keeps_both_live() {
    // The set here holds 1 (finished in the token) and its child 5: both are live here, so 1 keeps only its closed
    // mark and its final checkpoint, and 5 waits for nothing.
    let contents = token().contents().unwrap();
    let set = vec![Item::from(1), Item::from(5)];
    let (pruned, dropped) = contents.pruned(&set, &BTreeMap::new());
    assert_eq!(dropped, vec!["0".to_owned(), "6".to_owned()]);
    assert_eq!(pruned.lineage.keys().collect::<Vec<_>>(), ["1"]);
    let one = &pruned.lineage["1"];
    assert!(one.closed && one.finished.is_none() && one.children.is_empty() && one.parents.is_empty());
    assert_eq!(pruned.checkpoints.keys().collect::<Vec<_>>(), ["1"]);
}
