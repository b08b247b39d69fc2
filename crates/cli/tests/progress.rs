//! `zkp items export`, `import` and `reset-checkpoints` as an operator runs them, on a real ZooKeeper: the round trip
//! with `--json` results; malformed, truncated and future-format tokens refused as bad arguments with nothing
//! written; and an import killed (SIGKILL) part-way, which leaves the old progress in force.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{Ctx, timing, wait_for, zkp};
use serde_json::Value;
use tokio::process::Command;
use zk_partitioner::shared_set::Progress;
use zk_partitioner::{Error, SharedSet};

const PATH: &str = "/moved";

/// `zkp items` on `ctx`'s namespace with `args`, killed if dropped.
fn items(ctx: &Ctx, args: &[&str]) -> Command {
    let mut command = Command::new(zkp());
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    command
        .args(["items", "--connect", &connect, "--session-timeout", "2", "--path", PATH])
        .args(args)
        .env_remove("ZOOKEEPER_CONNECT")
        .kill_on_drop(true);
    command
}

/// Runs `zkp items` to completion: (exit code, stdout, stderr).
async fn run(ctx: &Ctx, args: &[&str]) -> (Option<i32>, String, String) {
    let output = items(ctx, args).output().await.expect("run zkp items");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (output.status.code(), text(output.stdout), text(output.stderr))
}

/// A token of `items` integers, each with the same checkpoint (`"progress"`), written by `writer`.
fn token_text(items: std::ops::Range<i64>, writer: &str) -> String {
    let names: Vec<String> = items.clone().map(|i| format!("\"{i}\"")).collect();
    let checkpoints: Vec<String> = items
        .map(|i| format!("\"{i}\":{{\"data\":\"cHJvZ3Jlc3M=\",\"writer\":\"{writer}\",\"token\":{i},\"saved_ms\":0}}"))
        .collect();
    format!(
        "{{\"format\":\"{}\",\"exported\":{{\"path\":\"/elsewhere\",\"set_version\":3,\"at_ms\":0}},\"kind\":\"int\",\
         \"items\":[{}],\"checkpoints\":{{{}}}}}",
        Progress::FORMAT,
        names.join(","),
        checkpoints.join(",")
    )
}

#[tokio::test]
async fn export_and_import_round_trip_with_json_results() {
    let ctx = Ctx::new().await;
    let dir = tempdir();
    let file = format!("{dir}/token.json");
    // given: a path with a token imported (nobody ran there)
    std::fs::write(&file, token_text(0..50, "w1")).unwrap();
    let (code, stdout, stderr) = run(&ctx, &["--json", "import", &file]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let imported: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((imported["version"].as_u64(), imported["items"].as_u64()), (Some(1), Some(50)), "{imported}");
    assert_eq!((imported["checkpoints"].as_u64(), imported["dropped"].as_array().map(Vec::len)), (Some(50), Some(0)));
    // when: it is exported to a file, with a summary
    let out = format!("{dir}/exported.json");
    let (code, stdout, stderr) = run(&ctx, &["--json", "export", "--out", &out]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let summary: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((summary["items"].as_u64(), summary["checkpoints"].as_u64()), (Some(50), Some(50)), "{summary}");
    assert_eq!(summary["bytes"].as_u64(), std::fs::metadata(&out).ok().map(|m| m.len()));
    // then: the file is the progress, and the token on stdout is the same
    let written = Progress::from_json(&std::fs::read_to_string(&out).unwrap()).expect("a token");
    let (code, stdout, _) = run(&ctx, &["export"]).await;
    assert_eq!(code, Some(0));
    let printed = Progress::from_json(&stdout).expect("a token on stdout");
    assert_eq!((printed.items.len(), printed.checkpoints.len()), (50, 50));
    assert_eq!(written.checkpoints, printed.checkpoints);
    assert_eq!(printed.checkpoints["7"].bytes().unwrap(), b"progress");
    // and prune of a token of 40..90 keeps the set and drops 50..90; reset empties every checkpoint
    std::fs::write(&file, token_text(40..90, "w2")).unwrap();
    let (code, stdout, stderr) = run(&ctx, &["--json", "import", &file, "--mode", "prune"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let pruned: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!((pruned["items"].as_u64(), pruned["checkpoints"].as_u64()), (Some(50), Some(10)), "{pruned}");
    assert_eq!(pruned["dropped"].as_array().map(Vec::len), Some(40));
    let (code, stdout, stderr) = run(&ctx, &["reset-checkpoints"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("checkpoints reset: version 3, 50 items, 0 checkpoints"), "{stdout}");
}

#[tokio::test]
async fn a_token_that_cannot_be_read_is_a_bad_argument_and_nothing_is_written() {
    let ctx = Ctx::new().await;
    let dir = tempdir();
    let good = token_text(0..5, "w1");
    let cases: [(&str, String, &str); 4] = [
        ("malformed", "{not json".to_owned(), "it is not JSON"),
        ("truncated", good[..good.len() - 20].to_owned(), "it is cut short"),
        ("future", good.replace(Progress::FORMAT, "zk-partitioner progress 2"), "written by a newer version"),
        ("not an item", good.replacen("\"items\":[\"0\"", "\"items\":[\"07\"", 1), "is not an item of kind"),
    ];
    for (case, text, expected) in cases {
        let file = format!("{dir}/{case}.json");
        std::fs::write(&file, text).unwrap();
        let (code, _, stderr) = run(&ctx, &["import", &file]).await;
        assert_eq!(code, Some(2), "{case}: {stderr}");
        assert!(stderr.contains(expected), "{case}: {expected:?} not in {stderr}");
    }
    let (code, _, stderr) = run(&ctx, &["import", &format!("{dir}/missing.json")]).await;
    assert_eq!(code, Some(2), "{stderr}");
    // nothing was written: no set, not even the partition path
    assert!(ctx.observer.check_stat(PATH).await.unwrap().is_none(), "something was written under {PATH}");
}

#[tokio::test]
async fn an_import_killed_part_way_leaves_the_old_progress_in_force() {
    // given: a path whose set (0..10) has checkpoints, and a large token (0..20,000) to import over it
    let ctx = Ctx::new().await;
    let dir = tempdir();
    let admin = ctx.client().await;
    let set = SharedSet::new(admin.clone(), PATH).expect("set");
    let old = format!("{dir}/old.json");
    std::fs::write(&old, token_text(0..10, "w0")).unwrap();
    assert_eq!(run(&ctx, &["import", &old]).await.0, Some(0));
    let before = set.export().await.expect("export");
    let large = format!("{dir}/large.json");
    std::fs::write(&large, token_text(0..20_000, "w9")).unwrap();

    // when: `zkp items import` is killed (SIGKILL) once it is staging: its intent is in force and it has written
    // some of the new checkpoints
    let mut importer = items(&ctx, &["import", &large]).spawn().expect("start the import");
    let observer = ctx.observer.clone();
    let generations = format!("{PATH}/checkpoint-generations");
    wait_for("the import to be staging its checkpoints", timing(Duration::from_secs(30)), || {
        let (observer, generations) = (observer.clone(), generations.clone());
        async move {
            let (header, _) = observer.get_data(&format!("{PATH}/items")).await.map_err(|e| e.to_string())?;
            if !String::from_utf8_lossy(&header).contains("state=staging") {
                return Err("not staging".into());
            }
            for tag in observer.list_children(&generations).await.map_err(|e| e.to_string())? {
                let staged = observer.list_children(&format!("{generations}/{tag}")).await.unwrap_or_default();
                if !staged.is_empty() {
                    return Ok(());
                }
            }
            Err("no checkpoint staged yet".into())
        }
    })
    .await;
    let pid = importer.id().expect("running").to_string();
    assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    let _ = importer.wait().await;

    // then: once its session is gone (2 s), the next reader finds the old progress, whole (its intent undone)
    let after = set.export().await.expect("export after the cut");
    assert_eq!((after.items.clone(), after.exported.set_version), (before.items.clone(), before.exported.set_version));
    assert_eq!(after.checkpoints, before.checkpoints);
    // and what the cut import staged was collected by the recovery that undid it: only the generation in force is
    // left
    let in_force = generations_in_force(&admin).await;
    let left = admin.list_children(&generations).await.expect("list");
    assert!(left.len() <= 1, "{left:?} left, in force: {in_force:?}");
    // and an import now goes through
    match set.import(&Progress::from_json(&token_text(0..20, "w3")).unwrap(), Default::default()).await {
        Ok(imported) => assert_eq!(imported.items, 20),
        Err(Error::ImportRefused { reason, .. }) => panic!("refused: {reason}"),
        Err(err) => panic!("{err}"),
    }
}

/// The generation `<PATH>/checkpoints` names (for a message).
async fn generations_in_force(client: &zk_partitioner::zookeeper_client::Client) -> String {
    client
        .get_data(&format!("{PATH}/checkpoints"))
        .await
        .map(|(data, _)| String::from_utf8_lossy(&data).into_owned())
        .unwrap_or_default()
}

/// A fresh directory for a test's files.
fn tempdir() -> String {
    let dir = std::env::temp_dir().join(format!("zkp-progress-{:016x}", common::random_u64()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir.display().to_string()
}
