//! `zkp inspect` on a real ZooKeeper, as an operator runs it: the table, the JSON document and `--watch` over a party
//! with an orphaned lock node, and the shares of a sticky weighted party read from its placement record.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::members::{AbortOnDrop, Member, auto_release, build_member, ints};
use common::{Ctx, timing, wait_until, zkp};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zk_partitioner::{
    Item, PartitionState, SharedSet,
    describe::{DescribeOptions, describe_with},
    weighted::WeightedRendezvous,
};

const PATH: &str = "/partitioner";

/// Runs `zkp inspect` with `args` to completion: (exit code, stdout, stderr).
async fn inspect(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(zkp()).arg("inspect").args(args).output().await.expect("run zkp inspect");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("UTF-8 output");
    (output.status.code().unwrap_or(-1), text(output.stdout), text(output.stderr))
}

#[tokio::test]
async fn the_inspect_command_prints_a_table_json_and_changes() {
    // given: one member holding four items, and an orphan queued behind it on item 2
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let items = ints(4);
    let member: Member = ctx.member("solo", items.clone()).await;
    member.wait_items(&items, timing(Duration::from_secs(10))).await;
    let name = member.partitioner.snapshot().member.to_string();
    let ghost = ctx.client().await;
    common::orphan_contender(&ghost, PATH, "2", "ghost").await;

    // when: an operator runs the table
    let (code, table, stderr) = inspect(&["--connect", &connect, "--path", PATH, "--items", "0,1,2,3,4"]).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    // then: the member with its count, the unowned item, the contended item and the orphan are there
    println!("{table}");
    assert!(table.starts_with(&format!(
        "partition {PATH}: 1 members, 5 items (4 owned, 1 unowned, 1 contended), 1 orphaned lock nodes\n"
    )));
    let session = member.session().to_string();
    let member_row = table.lines().find(|line| line.trim_start().starts_with(&name)).expect("a row for the member");
    let cells: Vec<&str> = member_row.split_whitespace().collect();
    assert_eq!((cells[1], cells[2], cells[cells.len() - 2], cells[cells.len() - 1]), ("solo", &*session, "4", "0"));
    assert!(table.contains("imbalance: 1.00 (most 4, mean 4.0 items per member)"), "{table}");
    assert!(table.contains("\nUNOWNED (1)\n  4\n"), "{table}");
    let ghost_session = ghost.session_id().0.to_string();
    assert!(table.contains(&format!("{name} ({session})")), "{table}");
    assert!(table.contains(&format!("ghost ({ghost_session}, orphan)")), "{table}");
    let orphan_row = table.lines().skip_while(|l| !l.starts_with("ORPHANS (1)")).nth(2).expect("an orphan row");
    assert_eq!(orphan_row.split_whitespace().take(4).collect::<Vec<_>>(), ["2", "ghost", &*ghost_session, "waits"]);

    // when: the same as JSON
    let (code, json, _) = inspect(&["--connect", &connect, "--path", PATH, "--json", "--partition", "stride"]).await;
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    // then: the same facts, as data
    assert_eq!(doc["path"], PATH);
    assert_eq!(doc["members"][0]["name"], name.as_str());
    assert_eq!(doc["members"][0]["session"], member.session(), "sessions are numbers, as in the worker's JSON");
    assert_eq!(doc["members"][0]["items"], 4);
    assert_eq!(doc["contended"], serde_json::json!(["2"]));
    assert_eq!(doc["orphans"][0]["member"], "ghost");
    assert_eq!(doc["orphans"][0]["holds"], false);
    assert_eq!(doc["outside_share"], serde_json::json!([]));
    assert_eq!(doc["owner_counts"][&name], 4);
    let token = member.partitioner.snapshot().token(&Item::from(1));
    let token = token.unwrap_or_else(|| panic!("no token: {:?}", member.partitioner.snapshot())).get();
    let one = doc["items"].as_array().unwrap().iter().find(|i| i["item"] == "1").expect("item 1");
    assert_eq!(one["owner"]["token"], token);

    // when: the ghost goes (it would hold item 2 once the member lets go of it), the command watches, and a second
    // member joins
    drop(ghost);
    let mut watcher = Command::new(zkp())
        .arg("inspect")
        .args(["--connect", &connect, "--path", PATH, "--json", "--watch"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn inspect --watch");
    let mut lines = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let deadline = timing(Duration::from_secs(20));
    let mut next_doc = async || -> serde_json::Value {
        let line = tokio::time::timeout(deadline, lines.next_line()).await.expect("a line in time").unwrap().unwrap();
        serde_json::from_str(&line).expect("one JSON document per line")
    };
    assert_eq!(next_doc().await["members"].as_array().unwrap().len(), 1);
    let _worker = auto_release(&member.partitioner);
    let second = ctx.member("second", items.clone()).await;
    let _second_worker = auto_release(&second.partitioner);
    // then: it prints again, until it shows both members sharing the items
    let started = Instant::now();
    loop {
        let doc = next_doc().await;
        let members = doc["members"].as_array().unwrap();
        if members.len() == 2 && members.iter().all(|m| m["items"] == 2) {
            break;
        }
        assert!(started.elapsed() < deadline, "no document with two members holding 2 items each: {doc}");
    }
    watcher.kill().await.unwrap();

    // and a missing path fails with a clear message and status 1
    let (code, _, stderr) = inspect(&["--connect", &connect, "--path", "/nowhere"]).await;
    assert_eq!((code, stderr.trim()), (1, "zkp inspect: partition path /nowhere does not exist"));
    // and --help shows every flag with its default
    let (code, help, _) = inspect(&["--help"]).await;
    assert_eq!(code, 0);
    let flags = ["--connect", "--path", "--json", "--watch", "--items", "--partition", "--limit", "--session-timeout"];
    for flag in flags.into_iter().chain(["--connect-timeout", "--shared-set", "--owner-of"]) {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    assert_eq!(help.matches("[default: ").count(), 10, "{help}");
}

/// A member of a sticky weighted party following the shared set.
async fn sticky_member(ctx: &Ctx, name: &str, capacity: u32) -> (Member, AbortOnDrop) {
    let member = build_member(ctx.client().await, name, &[], |b| {
        b.shared_set(true)
            .partition_func(WeightedRendezvous::default().sticky())
            .capacity(capacity)
            .time_boundary(Duration::from_millis(400))
    })
    .await;
    let worker_loop = auto_release(&member.partitioner);
    (member, worker_loop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inspect_reads_a_sticky_partys_shares_from_its_placement_record() {
    // given: a sticky weighted party of two members over 40 items, settled, its placement record written
    let ctx = Ctx::new().await;
    let admin = SharedSet::new(ctx.client().await, PATH).expect("handle");
    admin.create_if_missing((0..40).map(Item::from)).await.expect("create");
    let (a, _a_loop) = sticky_member(&ctx, "a", 1).await;
    let (b, _b_loop) = sticky_member(&ctx, "b", 2).await;
    let sticky = WeightedRendezvous::default().sticky();
    wait_until("both ACQUIRED and the record current", timing(Duration::from_secs(30)), || async {
        let acquired = [&a, &b].iter().all(|m| m.partitioner.snapshot().state == PartitionState::Acquired);
        let options = DescribeOptions::new().shared_set(true).partition_func(&sticky);
        let view = describe_with(&ctx.observer, PATH, options).await.expect("describe");
        acquired && view.placement.is_some_and(|p| p.current && p.items == 40)
    })
    .await;
    // when: an operator asks with the party's function
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let args = ["--connect", &connect, "--path", PATH, "--shared-set", "--partition", "sticky", "--json"];
    let (code, json, stderr) = inspect(&args).await;
    // then: the shares are the record's, and nothing is held outside its share
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    assert_eq!(doc["placement"], serde_json::json!({"items": 40, "current": true}), "{doc}");
    assert_eq!(doc["outside_share"], serde_json::json!([]), "{doc}");
    // and each item's successor, should its owner depart, is the other member (a party of two)
    let (a_name, b_name) = (a.partitioner.snapshot().member.to_string(), b.partitioner.snapshot().member.to_string());
    let items = doc["items"].as_array().expect("items");
    assert_eq!(items.len(), 40, "{doc}");
    for item in items {
        let (owner, successor) = (&item["owner"]["member"], &item["successor"]);
        let expected = if *owner == a_name.as_str() { &b_name } else { &a_name };
        assert_eq!(successor, expected.as_str(), "{item}");
    }
    let args = ["--connect", &connect, "--path", PATH, "--shared-set", "--partition", "sticky", "--owner-of", "0"];
    let (code, line, stderr) = inspect(&args).await;
    assert_eq!(code, 0, "{stderr}");
    let owner = items.iter().find(|item| item["item"] == "0").expect("item 0")["successor"].clone();
    assert!(line.trim_end().ends_with(&format!(", then {}", owner.as_str().unwrap())), "{line}");
    // and with the greedy function (what --partition weighted gives) the shares are not the party's
    let args = ["--connect", &connect, "--path", PATH, "--shared-set", "--partition", "weighted", "--json"];
    let (code, json, stderr) = inspect(&args).await;
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    assert_eq!(doc["placement"], serde_json::Value::Null, "{doc}");
}
