//! A report, not a test: a member's CPU for one version of the shared set that changes one weight of 100,000, from
//! the header its watch read to the catalogue the partition function reads (the bridged listing, the weight table's
//! chunks, the interpretation, the catalogue's replacement). BENCHMARKS.md, "A member's CPU per version of the set".
//!
//! `cargo test --release -p zk-partitioner-proto --lib decision::tests::read_cost -- --ignored --nocapture`

use std::sync::Arc;
use std::time::Instant;

use crate::decision::catalogue::Catalogue;
use crate::set_layout::cache::{SetCache, Stat};
use crate::set_layout::{self as layout, Chunk, Header, Kind, RawRead, SetView, State, Table, TableRef};

const ITEMS: i64 = 100_000;
const PER_CHUNK: i64 = 1_000;

/// The weight table of `ITEMS` items with `bumped`'s weight changed, sharing every other chunk with `before`.
fn table(bumped: i64, before: Option<&Table>) -> Table {
    let mut chunks = Vec::new();
    for k in 0..ITEMS / PER_CHUNK {
        let lines: String = (k * PER_CHUNK..(k + 1) * PER_CHUNK)
            .map(|i| format!("{i}\t{}\n", if i == bumped { 7 } else { 1_000_000 / (1 + i as u64 % 1000) }))
            .collect();
        let data: Arc<[u8]> = Arc::from(lines.into_bytes());
        let shared = before.and_then(|t| t.chunks.get(k as usize)).filter(|c| c.data == data);
        chunks.push(shared.cloned().unwrap_or_else(|| Chunk::new(format!("{bumped:016x}-{k}"), data)));
    }
    Table { chunks }
}

#[test]
#[ignore = "a report of CPU time, run by hand"]
fn read_cost() {
    let children: Vec<String> = (0..ITEMS).map(|i| i.to_string()).collect();
    let tag = |v: u64| Some(TableRef { tag: format!("{v:016x}") });
    let mut header = Header {
        kind: Kind::Int,
        version: 1,
        state: State::Ready,
        log: Vec::new(),
        weights: tag(1),
        lineage: false,
        deltas: Vec::new(),
    };
    let stat = Stat { cversion: 1, num_children: ITEMS as i32 };
    let read = |header: &Header, children: Vec<String>, listed, table| RawRead {
        header: Some((header.render().into_bytes(), 1)),
        children,
        listed,
        change: None,
        lease: None,
        weights: Some(Ok(table)),
    };
    // The member's first read: a listing.
    let mut cache = SetCache::default();
    let listed = cache.remember(&header, &stat, &children);
    let mut in_force = table(-1, None);
    let started = Instant::now();
    let SetView::Committed(first) = layout::interpret(read(&header, children, listed, in_force.clone())) else {
        panic!("the first read is whole")
    };
    let mut catalogue = Catalogue::new(first.items, Some(first.version), first.weights);
    eprintln!("first read: {:.2?} to interpret and catalogue", started.elapsed());
    let mut spent = Vec::new();
    for round in 0..20 {
        // An admin's set_weights: a new version recording no item change, a new table sharing all chunks but one.
        header = header.next(Kind::Int, State::Ready, "00000000000000aa").recording(&[], &[]);
        header.weights = tag(header.version);
        let next = table(round * 4_999, Some(&in_force));
        let raw = |listed| read(&header, Vec::new(), Some(listed), next.clone());
        let started = Instant::now();
        let listed = cache.bridge(&header, &stat).expect("a version recording no change bridges");
        let bridged = Instant::now();
        let SetView::Committed(committed) = layout::interpret(raw(listed)) else { panic!("a bridged read is whole") };
        let interpreted = Instant::now();
        let (change, reweighed) = catalogue.replace(committed.items, committed.version, committed.weights);
        let replaced = Instant::now();
        let ms = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e3;
        spent.push([ms(started, replaced), ms(started, bridged), ms(bridged, interpreted), ms(interpreted, replaced)]);
        assert!(change.is_empty() && reweighed);
        in_force = next;
    }
    spent.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let [total, bridge, interpret, replace] = spent[spent.len() / 2];
    eprintln!(
        "one weight changed of {ITEMS}: median {total:.2} ms per version (bridge {bridge:.2}, interpret {interpret:.2}, \
         catalogue {replace:.2}), max {:.2} ms (20 versions; wall clock, one thread)",
        spent[spent.len() - 1][0]
    );
}
