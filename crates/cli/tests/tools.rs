//! `zkp` and its three tools (`zkp worker`, `zkp inspect`, `zkp items`) as a new user meets them, run as built (or as
//! installed: `ZKP=<path>`), with one set of rules: `--connect` is required by each, bad arguments exit 2 with the
//! usage before any connection, a session that cannot be opened exits 1 with the library's per-server diagnosis, a
//! missing chroot is reported as such, sessions are printed the same way (decimal), and bad input changes nothing. And
//! weights end to end: set with `zkp items weigh`, divided by `zkp worker --partition weighted --capacity N`, shown by
//! `zkp inspect`.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Ctx, timing, wait_for, zkp};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const TOOLS: [&str; 3] = ["worker", "inspect", "items"];

/// What `tool` needs besides the session flags to get as far as connecting.
fn rest(tool: &str) -> &'static [&'static str] {
    match tool {
        "worker" => &["--path", "/p", "--items", "a,b"],
        "inspect" => &["--path", "/p"],
        _ => &["--path", "/p", "show"],
    }
}

/// `tool` with `args`, killed if dropped, and without the caller's `ZOOKEEPER_CONNECT` (the tools read it when
/// `--connect` is not given: a test says what it connects to).
fn command(tool: &str, args: &[&str]) -> Command {
    let mut command = Command::new(zkp());
    command.arg(tool).args(args).env_remove("ZOOKEEPER_CONNECT").kill_on_drop(true);
    command
}

/// Runs `tool` with `args` to completion: (exit code, stderr).
async fn run(tool: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = command(tool, args).output().await.expect("run the tool");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The error `tool` printed: its last line that starts with `tool: `. (The worker logs to stderr too, and the
/// client's session task may log its disconnection after the error is printed, so it need not be the last line.)
fn error_line<'a>(tool: &str, stderr: &'a str) -> &'a str {
    let prefix = format!("zkp {tool}: ");
    stderr.lines().rev().find(|line| line.starts_with(&prefix)).unwrap_or_default()
}

/// `127.0.0.1:<port>` where nothing listens (the port was just free): connections to it are refused.
fn refused_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").to_string()
}

#[tokio::test]
async fn every_tool_requires_connect() {
    for tool in TOOLS {
        let (code, stderr) = run(tool, rest(tool)).await;
        assert_eq!(code, Some(2), "{tool}: {stderr}");
        assert!(stderr.contains("required arguments were not provided"), "{tool}: {stderr}");
        assert!(stderr.contains("--connect <HOST:PORT[,...]>"), "{tool}: {stderr}");
    }
}

#[tokio::test]
async fn bad_arguments_are_refused_before_connecting() {
    // given: a server that refuses, and a connect timeout that would make any connection attempt last a minute
    let refused = refused_address();
    let session = ["--connect", &refused, "--connect-timeout", "60"];
    let cases: [(&str, &[&str], &str); 14] = [
        ("worker", &["--path", "relative", "--items", "a"], "invalid path: \"relative\" is not absolute"),
        (
            "worker",
            &["--path", "/p", "--items", "a", "--identifier", "rack/3"],
            "invalid identifier: \"rack/3\" contains '/'",
        ),
        ("worker", &["--path", "/p", "--items", "a,,b"], "invalid item \"\": renders to an empty node name"),
        ("worker", &["--path", "/p", "--items", "1,x", "--int-items"], "\"x\" is not an integer"),
        ("worker", &["--path", "/p", "--items", "a", "--time-boundary", "0"], "greater than 0 and at most 86400"),
        ("worker", &["--path", "/p", "--items", "a", "--session-timeout", "86401"], "greater than 0 and at most 86400"),
        ("worker", &["--path", "/p", "--items", "a", "--auth", "digest"], "must be SCHEME:CREDENTIALS"),
        ("inspect", &["--path", "/p/"], "invalid path: \"/p/\" ends with '/'"),
        ("items", &["--path", "/zookeeper/p", "show"], "inside ZooKeeper's reserved /zookeeper subtree"),
        ("items", &["--path", "/p", "add", "a/b"], "invalid item \"a/b\": contains '/'"),
        ("worker", &["--path", "/p", "--items", "a", "--capacity", "0"], "invalid capacity \"0\""),
        ("worker", &["--path", "/p", "--items", "a", "--capacity", "x"], "invalid capacity \"x\""),
        ("items", &["--path", "/p", "weigh", "a", "5", "b"], "\"b\" has no weight"),
        ("items", &["--path", "/p", "weigh", "a", "cpu=-1"], "invalid weight \"cpu=-1\""),
    ];
    for (tool, args, message) in cases {
        // when: a tool gets a bad argument
        let (code, stderr) = run(tool, &[&session[..], args].concat()).await;
        // then: it says what is wrong, as clap does, and exits 2 without trying to connect
        assert_eq!(code, Some(2), "{tool} {args:?}: {stderr}");
        assert!(stderr.contains(message), "{tool} {args:?}: {stderr}");
        assert!(stderr.contains("try '--help'"), "{tool} {args:?}: {stderr}");
        assert!(!stderr.contains("cannot connect"), "{tool} {args:?}: {stderr}");
    }
}

#[tokio::test]
async fn every_tool_reports_a_refused_server_alike() {
    let refused = refused_address();
    for tool in TOOLS {
        let (code, stderr) =
            run(tool, &[&["--connect", &refused, "--connect-timeout", "0.5"], rest(tool)].concat()).await;
        assert_eq!(code, Some(1), "{tool}: {stderr}");
        let error = error_line(tool, &stderr);
        assert!(
            error.starts_with(&format!("zkp {tool}: cannot connect to ZooKeeper at {refused}: ")),
            "{tool}: {stderr}"
        );
        assert!(error.contains(&format!("{refused} refused the connection")), "{tool}: {stderr}");
    }
}

/// Without `--connect`, every tool reads `ZOOKEEPER_CONNECT`, as ZooKeeper's own tools read their environment; a
/// `--connect` given wins.
#[tokio::test]
async fn every_tool_reads_zookeeper_connect_from_the_environment() {
    let refused = refused_address();
    for tool in TOOLS {
        let args = [&["--connect-timeout", "0.5"], rest(tool)].concat();
        let output = command(tool, &args).env("ZOOKEEPER_CONNECT", &refused).output().await.expect("run the tool");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{tool}: {stderr}");
        let error = error_line(tool, &stderr);
        assert!(
            error.starts_with(&format!("zkp {tool}: cannot connect to ZooKeeper at {refused}: ")),
            "{tool}: {stderr}"
        );
    }
    let other = refused_address();
    let args = ["--connect", &other, "--connect-timeout", "0.5", "--path", "/p"];
    let output = command("inspect", &args).env("ZOOKEEPER_CONNECT", &refused).output().await.expect("run inspect");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(error_line("inspect", &stderr).contains(&format!("at {other}: ")), "{stderr}");
}

#[tokio::test]
async fn fail_fast_gives_up_at_once_and_a_long_wait_says_how_long() {
    let refused = refused_address();
    for tool in TOOLS {
        // --fail-fast: a refused server ends the wait at once, whatever the connect timeout
        let started = std::time::Instant::now();
        let (code, stderr) =
            run(tool, &[&["--connect", &refused, "--connect-timeout", "60", "--fail-fast"], rest(tool)].concat()).await;
        assert_eq!(code, Some(1), "{tool}: {stderr}");
        assert!(started.elapsed() < timing(Duration::from_secs(10)), "{tool} took {:?}", started.elapsed());
        let error = error_line(tool, &stderr);
        assert!(error.contains("fail-fast: no server can be reached"), "{tool}: {stderr}");
        assert!(error.contains(&format!("{refused} refused the connection")), "{tool}: {stderr}");

        // without it, a wait past a second says what it waits for
        let (code, stderr) =
            run(tool, &[&["--connect", &refused, "--connect-timeout", "1.5"], rest(tool)].concat()).await;
        assert_eq!(code, Some(1), "{tool}: {stderr}");
        assert!(
            stderr.contains(&format!("connecting to {refused}: no session yet, waiting up to 1.5s in all")),
            "{tool}: {stderr}"
        );
    }
}

#[tokio::test]
async fn every_tool_reports_a_missing_chroot_as_such() {
    let ctx = Ctx::new().await;
    let connect = format!("{}{}/missing", ctx.endpoint, ctx.namespace);
    let expected = format!(
        "the chroot {}/missing of the connect string does not exist: create that node first (ZooKeeper does not \
         create chroots), or leave it out of the connect string",
        ctx.namespace
    );
    for tool in TOOLS {
        let (code, stderr) = run(tool, &[&["--connect", &connect], rest(tool)].concat()).await;
        let error = error_line(tool, &stderr);
        assert_eq!((code, error), (Some(1), &*format!("zkp {tool}: {expected}")), "{tool}: {stderr}");
    }
}

#[tokio::test]
async fn worker_shared_set_without_a_set_fails_and_leaves_nothing() {
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let (code, stderr) = run("worker", &["--connect", &connect, "--path", "/p", "--shared-set"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no shared set at /p/items"), "{stderr}");
    assert_eq!(ctx.observer.check_stat("/p").await.expect("stat"), None, "/p was created");
}

#[tokio::test]
async fn shared_set_names_the_new_item_of_the_other_kind() {
    // given: a set of strings
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let admin = |args: &'static [&'static str]| {
        let connect = connect.clone();
        async move { run("items", &[&["--connect", &connect, "--path", "/p"], args].concat()).await }
    };
    assert_eq!(admin(&["create", "a,b"]).await.0, Some(0));
    // when: an integer is added to it
    let (code, stderr) = admin(&["--int-items", "add", "5"]).await;
    // then: the error names the integer, not an item of the set, and what is wrong; the set is unchanged
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "zkp items: invalid item \"5\": is an integer but the shared set at /p/items holds strings (such as \
             the string \"a\")"
        ),
        "{stderr}"
    );
    let shown = Command::new(zkp())
        .arg("items")
        .args(["--connect", &connect, "--path", "/p", "show"])
        .output()
        .await
        .expect("run zkp items show");
    assert!(String::from_utf8_lossy(&shown.stdout).contains("version 1: 2 items: a,b"), "{shown:?}");
}

/// A worker process on `connect`, path `/p`, items `a,b`, printing JSON lines: the child and its stdout's lines.
fn spawn_worker(connect: &str) -> (tokio::process::Child, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    let mut worker = Command::new(zkp())
        .arg("worker")
        .args(["--connect", connect, "--path", "/p", "--items", "a,b", "--time-boundary", "0.2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the worker");
    let lines = BufReader::new(worker.stdout.take().expect("stdout")).lines();
    (worker, lines)
}

#[tokio::test]
async fn worker_and_inspect_print_a_session_alike() {
    // given: a worker that has joined
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let (mut worker, mut lines) = spawn_worker(&connect);
    let line = tokio::time::timeout(timing(Duration::from_secs(20)), lines.next_line()).await;
    let line: Value = serde_json::from_str(&line.expect("a line in time").expect("stdout").expect("a line")).unwrap();
    // when: inspect lists the party, as a table and as JSON
    let inspect = |json: bool| {
        let connect = connect.clone();
        async move {
            let mut command = Command::new(zkp());
            command.arg("inspect").args(["--connect", &connect, "--path", "/p"]);
            if json {
                command.arg("--json");
            }
            let output = command.output().await.expect("run inspect");
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
    };
    let doc: Value = serde_json::from_str(&inspect(true).await).expect("one JSON document");
    let table = inspect(false).await;
    // then: the same number, in decimal, everywhere
    let session = line["session"].as_i64().expect("the worker's session is a number");
    assert_eq!(doc["members"][0]["session"], session, "{doc}");
    let row = table.lines().find(|l| l.trim_start().starts_with(line["member"].as_str().unwrap())).expect("a row");
    assert_eq!(row.split_whitespace().nth(2), Some(&*session.to_string()), "{table}");
    worker.start_kill().expect("kill the worker");
}

/// `inspect --owner-of` answers "who owns item b?" without a script: a line per item asked for (the owner, or nobody),
/// and the same as JSON.
#[tokio::test]
async fn inspect_names_the_owner_of_an_item() {
    // given: a worker that holds both items
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let (mut worker, mut lines) = spawn_worker(&connect);
    let member = loop {
        let line = tokio::time::timeout(timing(Duration::from_secs(20)), lines.next_line()).await;
        let line: Value =
            serde_json::from_str(&line.expect("a line in time").expect("stdout").expect("a line")).unwrap();
        if line["state"] == "ACQUIRED" && line["items"].as_array().is_some_and(|items| items.len() == 2) {
            break line["member"].as_str().expect("the worker's member name").to_owned();
        }
    };
    // when: inspect is asked who owns b, and an item nobody contends
    let (code, stdout, stderr) =
        output("inspect", &["--connect", &connect, "--path", "/p", "--owner-of", "b,zz"]).await;
    // then: b's owner is the worker; zz has no owner
    assert_eq!(code, Some(0), "{stderr}");
    let mut answers = stdout.lines();
    let b = answers.next().expect("a line for b");
    assert!(b.starts_with(&format!("b: {member} (")) && b.ends_with(", 0 waiting"), "{stdout}");
    assert!(answers.next().is_some_and(|zz| zz.starts_with("zz: nobody")), "{stdout}");
    let (code, stdout, stderr) =
        output("inspect", &["--connect", &connect, "--path", "/p", "--owner-of", "a", "--json"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc[0]["item"], "a", "{doc}");
    assert_eq!(doc[0]["owner"]["member"], member.as_str(), "{doc}");
    worker.start_kill().expect("kill the worker");
}

/// Runs `tool` with `args` to completion: (exit code, stdout, stderr).
/// `zkp items --connect <connect> --path /p <args>` to completion: (exit code, stdout, stderr).
async fn items_on(connect: &str, args: &[&str]) -> (Option<i32>, String, String) {
    output("items", &[&["--connect", connect, "--path", "/p"], args].concat()).await
}

async fn output(tool: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = command(tool, args).output().await.expect("run the tool");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (output.status.code(), text(output.stdout), text(output.stderr))
}

/// zkp and every subcommand say which version they are, as users of clap tools expect, without connecting anywhere.
#[tokio::test]
async fn every_tool_answers_version() {
    let version = env!("CARGO_PKG_VERSION");
    let zkp_version = Command::new(zkp()).arg("--version").output().await.expect("run zkp --version");
    assert_eq!(String::from_utf8_lossy(&zkp_version.stdout).trim(), format!("zkp {version}"), "{zkp_version:?}");
    for tool in TOOLS {
        let (code, stdout, stderr) = output(tool, &["--version"]).await;
        assert_eq!(code, Some(0), "{tool}: {stderr}");
        assert_eq!(stdout.trim(), format!("zkp-{tool} {version}"), "{tool}");
    }
}

/// `zkp completions <shell>` prints a script the shell accepts, and `zkp man [subcommand]` a page with every flag,
/// as users of clap tools expect; an unknown page is a usage error.
#[tokio::test]
async fn completions_and_man_pages() {
    async fn run(args: &[&str]) -> (Option<i32>, String, String) {
        let output = Command::new(zkp()).args(args).output().await.expect("run zkp");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.code(), text, String::from_utf8_lossy(&output.stderr).into_owned())
    }
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = run(&["completions", shell]).await;
        assert_eq!(code, Some(0), "{shell}: {stderr}");
        for word in ["worker", "inspect", "items", "time-boundary", "owner-of"] {
            assert!(script.contains(word), "{shell}: {word} is not completed");
        }
    }
    // bash itself loads the script and registers it for zkp.
    let (_, script, _) = run(&["completions", "bash"]).await;
    let loaded =
        Command::new("bash").args(["-c", &format!("{script}\ncomplete -p zkp")]).output().await.expect("run bash");
    assert!(loaded.status.success(), "{loaded:?}");
    assert!(String::from_utf8_lossy(&loaded.stdout).contains("-F _zkp"), "{loaded:?}");

    let (code, page, stderr) = run(&["man"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH zkp 1") && page.contains("worker"), "{page}");
    let (code, page, stderr) = run(&["man", "worker"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH zkp-worker 1"), "{page}");
    // The subcommand's whole page (what it prints, its exit codes), in the man page as in --help.
    let (_, help, _) = run(&["worker", "--help"]).await;
    for text in [&help, &page] {
        assert!(text.contains("one JSON object per line") && text.contains("exits 2 with the usage"), "{text}");
    }
    for flag in ["time\\-boundary", "shared\\-set", "metrics\\-addr"] {
        assert!(page.contains(flag), "{flag} missing from the page");
    }
    let (code, _, stderr) = run(&["man", "nothing"]).await;
    assert_eq!(code, Some(2), "{stderr}");
}

#[tokio::test]
async fn weigh_divide_by_capacity_and_inspect_the_loads() {
    // given: a shared set of 8 items, a and b made heavy with zkp items weigh
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    assert_eq!(items_on(&connect, &["create", "a,b,c,d,e,f,g,h"]).await.0, Some(0));
    let (code, stdout, stderr) = items_on(&connect, &["weigh", "a", "5", "b", "3"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("version 2: 8 items: a,b,c,d,e,f,g,h\n"), "{stdout}");
    assert!(stdout.contains("weights of 2 items (the others weigh 1): a 5; b 3"), "{stdout}");
    let (_, json, _) = items_on(&connect, &["--json", "show"]).await;
    let shown: Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(shown["weights"], serde_json::json!({"a": {"weight": 5}, "b": {"weight": 3}}), "{shown}");
    // and an item outside the set is refused, changing nothing
    let (code, _, stderr) = items_on(&connect, &["weigh", "z", "2"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("invalid item \"z\""), "{stderr}");

    // when: two workers of capacities 3 and 1 divide it by weight
    let last_acquired: Vec<Arc<Mutex<Option<Value>>>> = vec![Arc::default(), Arc::default()];
    let mut workers = Vec::new();
    for ((identifier, capacity), last) in [("big", "3"), ("small", "1")].into_iter().zip(&last_acquired) {
        let mut worker = Command::new(zkp())
            .arg("worker")
            .args(["--connect", &connect, "--path", "/p", "--shared-set", "--partition", "weighted"])
            .args(["--capacity", capacity, "--identifier", identifier, "--time-boundary", "0.3", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a worker");
        let mut lines = BufReader::new(worker.stdout.take().expect("stdout")).lines();
        let last = last.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let line: Value = serde_json::from_str(&line).expect("a JSON line");
                if line["state"] == "ACQUIRED" {
                    assert!(line["load"].is_object(), "ACQUIRED without its load: {line}");
                    *last.lock().unwrap() = Some(line);
                }
            }
        });
        workers.push(worker);
    }

    // then: inspect shows each member's capacity, and its load as the worker printed it, nothing outside a share
    let inspect = |json: bool| {
        let connect = connect.clone();
        async move {
            let mut args = vec!["--connect", &connect, "--path", "/p", "--shared-set", "--partition", "weighted"];
            if json {
                args.push("--json");
            }
            let (code, stdout, stderr) = output("inspect", &args).await;
            assert_eq!(code, Some(0), "{stderr}");
            stdout
        }
    };
    let doc = wait_for("both workers settled, as inspect shows them", timing(Duration::from_secs(30)), || async {
        let doc: Value = serde_json::from_str(&inspect(true).await).map_err(|e| e.to_string())?;
        let members = doc["members"].as_array().cloned().unwrap_or_default();
        let printed: Vec<Option<Value>> = last_acquired.iter().map(|last| last.lock().unwrap().clone()).collect();
        let as_printed = members
            .iter()
            .all(|m| printed.iter().flatten().any(|line| line["member"] == m["name"] && line["load"] == m["load"]));
        let settled = members.len() == 2
            && doc["outside_share"] == serde_json::json!([])
            && doc["unowned"] == serde_json::json!([])
            && members.iter().all(|m| m["held"] == m["load"])
            && as_printed;
        if settled { Ok(doc) } else { Err(format!("{doc}\nthe workers printed {printed:?}")) }
    })
    .await;
    assert_eq!(doc["shared_set_version"], 2);
    let members = doc["members"].as_array().expect("members");
    let by_identifier = |id: &str| members.iter().find(|m| m["identifier"] == id).expect("a member").clone();
    let (big, small) = (by_identifier("big"), by_identifier("small"));
    assert_eq!((big["capacity"].as_u64(), small["capacity"].as_u64()), (Some(3), Some(1)));
    // 14 in all: the big worker's ideal share is 10.5, the small one's 3.5
    for (member, ideal) in [(&big, 10.5), (&small, 3.5)] {
        let load = &member["load"];
        assert_eq!(load["capacity"], member["capacity"], "{member}");
        assert_eq!(load["dimensions"][0]["dimension"], "weight", "{member}");
        assert_eq!(load["dimensions"][0]["ideal"].as_f64(), Some(ideal), "{member}");
    }
    let assigned = |m: &Value| m["load"]["dimensions"][0]["assigned"].as_u64().unwrap_or(0);
    assert_eq!(assigned(&big) + assigned(&small), 14, "{doc}");
    // and the table says the same
    let table = inspect(false).await;
    println!("{table}");
    assert!(table.contains("shared set: version 2\n"), "{table}");
    let load_rows: Vec<&str> = table.lines().skip_while(|l| !l.starts_with("LOAD (")).skip(2).take(2).collect();
    for (row, (member, ideal)) in load_rows.iter().zip([(&big, "10.5"), (&small, "3.5")]) {
        let name = member["name"].as_str().unwrap_or_default();
        let cells: Vec<&str> = row.split_whitespace().collect();
        let expected = format!("{}/{ideal}", assigned(member));
        assert_eq!(
            (cells[0], cells[1], cells[2], cells[3]),
            (name, &*member["capacity"].to_string(), "weight", &*expected)
        );
    }

    // when: one item outweighs what the bound lets any member carry (109 in all: the big worker may carry 90)
    assert_eq!(items_on(&connect, &["weigh", "a", "100"]).await.0, Some(0));
    // then: its holder says it is over capacity, and so does inspect, in the JSON and in the table
    wait_for("a worker over capacity, as inspect shows it", timing(Duration::from_secs(30)), || async {
        let doc: Value = serde_json::from_str(&inspect(true).await).map_err(|e| e.to_string())?;
        let members = doc["members"].as_array().cloned().unwrap_or_default();
        let printed: Vec<Option<Value>> = last_acquired.iter().map(|last| last.lock().unwrap().clone()).collect();
        let over = members.iter().find(|m| m["load"]["over_capacity"] == true && m["held"] == m["load"]);
        let reported = over.is_some_and(|m| {
            printed.iter().flatten().any(|line| line["member"] == m["name"] && line["load"]["over_capacity"] == true)
        });
        if doc["shared_set_version"] == 3 && reported { Ok(()) } else { Err(format!("{doc}\n{printed:?}")) }
    })
    .await;
    let table = inspect(false).await;
    println!("{table}");
    assert_eq!(table.matches("OVER CAPACITY").count(), 1, "{table}");

    // when: the weights are reset
    let (code, stdout, _) = items_on(&connect, &["reset-weights", "a,b"]).await;
    // then: the set has none
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("version 4: 8 items") && !stdout.contains("weights"), "{stdout}");
    for mut worker in workers {
        worker.start_kill().expect("kill a worker");
        let _ = worker.wait().await;
    }
}

/// Lineage end to end: `zkp items split` and `merge`, `zkp worker --drain-secs` finishing the closed items it holds so
/// that the children start, `zkp items lineage` and `zkp inspect --shared-set` showing the trees.
#[tokio::test]
async fn split_drain_finish_and_show_the_trees() {
    let ctx = Ctx::new().await;
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    assert_eq!(items_on(&connect, &["create", "s1,s2,other"]).await.0, Some(0));
    let (code, stdout, stderr) = items_on(&connect, &["split", "s1", "s3,s4"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("version 2: 3 items: other,s1,s2\n"), "the children wait: {stdout}");
    assert_eq!(items_on(&connect, &["merge", "s2,s4", "s5"]).await.0, Some(0));
    let (code, _, stderr) = items_on(&connect, &["split", "s1", "s2"]).await;
    assert_eq!(code, Some(1), "a child must be new: {stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    let (_, json, _) = items_on(&connect, &["--json", "lineage"]).await;
    let lineage: Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(lineage["items"]["s5"]["status"], "waiting", "{lineage}");
    assert_eq!(lineage["items"]["s5"]["waiting_on"], serde_json::json!(["s2", "s4"]), "{lineage}");
    assert_eq!(lineage["roots"], serde_json::json!(["s1", "s2"]), "{lineage}");

    // A worker drains each closed item for a second, then finishes it: s1, then s2 (closed by the merge) and s3, s4
    // (s4 closed by the merge too) once they start; s5 starts last, after both its parents.
    let mut worker = Command::new(zkp())
        .arg("worker")
        .args(["--connect", &connect, "--path", "/p", "--shared-set", "--rebalance", "incremental"])
        .args(["--time-boundary", "0.3", "--drain-secs", "1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker");
    let finished: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut lines = BufReader::new(worker.stdout.take().expect("stdout")).lines();
    let sink = finished.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let line: Value = serde_json::from_str(&line).expect("a JSON line");
            if let Some(item) = line["finished_item"].as_str() {
                sink.lock().unwrap().push(item.to_owned());
            }
        }
    });
    wait_for("s5 in the set and every closed item finished", timing(Duration::from_secs(40)), || async {
        let (_, json, _) = items_on(&connect, &["--json", "show"]).await;
        let shown: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
        let done = shown["items"] == serde_json::json!(["other", "s3", "s5"]);
        if done { Ok(()) } else { Err(format!("{shown}; finished {:?}", finished.lock().unwrap())) }
    })
    .await;
    let order = finished.lock().unwrap().clone();
    assert_eq!(order.len(), 3, "s1, s2 and s4 finished, each once: {order:?}");
    assert_eq!(order[0], "s1", "{order:?}");

    // inspect shows the trees; the table and the JSON agree
    let (code, table, stderr) = output("inspect", &["--connect", &connect, "--path", "/p", "--shared-set"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    println!("{table}");
    assert!(table.contains("LINEAGE (5 items"), "{table}");
    assert!(table.contains("s5  ready (merge of s2, s4)"), "{table}");
    let (_, json, _) = output("inspect", &["--connect", &connect, "--path", "/p", "--shared-set", "--json"]).await;
    let doc: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(doc["lineage"]["items"]["s1"]["status"], "finished", "{doc}");
    worker.start_kill().expect("kill the worker");
}

/// The TCP sockets of process `pid`, from outside it: `(state, local port, remote port)` of each socket that one of
/// its file descriptors holds, read from `/proc` (state `0A` is LISTEN, `01` ESTABLISHED).
fn tcp_sockets_of(pid: u32) -> Vec<(String, u16, u16)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the process's descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let port = |address: &str| u16::from_str_radix(address.rsplit(':').next().unwrap_or(""), 16).unwrap_or(0);
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && inodes.contains(fields[9]) {
                sockets.push((fields[3].to_string(), port(fields[1]), port(fields[2])));
            }
        }
    }
    sockets
}

#[tokio::test]
async fn a_worker_process_opens_no_port() {
    // given: a worker process that has joined and acquired its items, on a connect string of one server
    let ctx = Ctx::new().await;
    let server_port: u16 = ctx.endpoint.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the server's port");
    let connect = format!("{}{}", ctx.endpoint, ctx.namespace);
    let (mut worker, mut lines) = spawn_worker(&connect);
    let pid = worker.id().expect("the worker's pid");
    let acquired = async {
        while let Some(line) = lines.next_line().await.expect("stdout") {
            if line.contains("\"ACQUIRED\"") {
                return;
            }
        }
        panic!("the worker ended before ACQUIRED");
    };
    tokio::time::timeout(timing(Duration::from_secs(20)), acquired).await.expect("ACQUIRED in time");

    // when: its sockets are read from outside the process
    let sockets = tcp_sockets_of(pid);

    // then: it holds its connection to the server itself, and listens on no port
    assert!(
        sockets.iter().any(|(state, _, remote)| state == "01" && *remote == server_port),
        "the worker's own connection to the server on port {server_port} is among its sockets: {sockets:?}"
    );
    let listening: Vec<_> = sockets.iter().filter(|(state, _, _)| state == "0A").collect();
    assert!(listening.is_empty(), "the worker listens on {listening:?}");
    worker.start_kill().expect("kill the worker");
}
