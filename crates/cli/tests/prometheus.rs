//! `zkp worker`'s Prometheus endpoint (`--metrics-addr`), scraped over HTTP as Prometheus does: the metrics'
//! help and type lines, and their values after a rebalance (items held, rebalances by cause, allocation time, the
//! state gauges, the set's size, and the two members' items held adding up to it, as the example alerts in
//! docs/prometheus expect); and a clear error when the address cannot be served.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Ctx, timing, wait_for, zkp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

const PATH: &str = "/partitioner";

/// A loopback address with a port nobody listens on now.
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").to_string()
}

fn worker(ctx: &Ctx, identifier: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(zkp());
    command
        .arg("worker")
        .args(["--connect", &format!("{}{}", ctx.endpoint, ctx.namespace), "--path", PATH])
        .args(["--identifier", identifier, "--items", "0,1,2,3,4,5,6,7,8,9", "--int-items"])
        .args(["--time-boundary", "0.3", "--session-timeout", "6", "--json"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// One scrape: `GET /metrics` over HTTP/1.0, the body of a 200 answer.
async fn scrape(addr: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .map_err(|e| format!("send the request: {e}"))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.map_err(|e| format!("read the answer: {e}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("not an HTTP answer: {answer:?}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("answered {head:?}"));
    }
    Ok(body.to_owned())
}

/// The value of the sample `name{labels}` (labels exactly as the exporter prints them), if present.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The state whose `zk_partitioner_state` series reads 1, if exactly one does and the other three read 0.
fn state(body: &str) -> Result<String, String> {
    let series = |state: &str| sample(body, &format!("zk_partitioner_state{{path=\"{PATH}\",state=\"{state}\"}}"));
    let values: Vec<(&str, Option<f64>)> = zk_partitioner::metrics::STATES.iter().map(|&s| (s, series(s))).collect();
    match values.iter().filter(|(_, v)| *v == Some(1.0)).collect::<Vec<_>>()[..] {
        [(state, _)] if values.iter().filter(|(_, v)| *v == Some(0.0)).count() == 3 => Ok(state.to_string()),
        _ => Err(format!("state series: {values:?}")),
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970").as_secs_f64()
}

async fn stop(mut child: Child) {
    let pid = child.id().expect("running");
    std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    let status = tokio::time::timeout(timing(Duration::from_secs(15)), child.wait()).await;
    assert!(matches!(status, Ok(Ok(s)) if s.success()), "the worker did not exit cleanly: {status:?}");
}

#[tokio::test]
async fn a_worker_serves_its_metrics_to_prometheus() {
    let ctx = Ctx::new().await;
    let addr = free_addr();
    let spawned = unix_now();
    let w0 = worker(&ctx, "w0", &["--metrics-addr", &addr]).spawn().expect("spawn zkp worker");
    let items = format!("zk_partitioner_items{{path=\"{PATH}\"}}");
    let held = |value: f64| {
        let addr = addr.clone();
        move || {
            let addr = addr.clone();
            async move {
                let body = scrape(&addr).await?;
                match sample(&body, &format!("zk_partitioner_items_held{{path=\"{PATH}\"}}")) {
                    Some(held) if held == value => Ok(body),
                    other => Err(format!("items held: {other:?}")),
                }
            }
        }
    };
    // Alone: all ten items, one allocation.
    let body = wait_for("w0 to hold all 10 items", timing(Duration::from_secs(30)), held(10.0)).await;
    for line in [
        "# TYPE zk_partitioner_items_held gauge",
        "# TYPE zk_partitioner_allocation_seconds summary",
        "# HELP zk_partitioner_allocation_seconds",
        "# HELP zk_partitioner_items_held",
        "# TYPE zk_partitioner_state gauge",
        "# TYPE zk_partitioner_state_entered_timestamp_seconds gauge",
        "# TYPE zk_partitioner_items gauge",
    ] {
        assert!(body.lines().any(|l| l.starts_with(line)), "no {line:?} in:\n{body}");
    }
    let allocations = |body: &str| sample(body, &format!("zk_partitioner_allocation_seconds_count{{path=\"{PATH}\"}}"));
    assert_eq!(allocations(&body), Some(1.0), "one allocation so far:\n{body}");
    assert_eq!(state(&body), Ok("ACQUIRED".into()), "{body}");
    let entered = sample(&body, &format!("zk_partitioner_state_entered_timestamp_seconds{{path=\"{PATH}\"}}"))
        .expect("the time w0 entered ACQUIRED");
    assert!((spawned..=unix_now()).contains(&entered), "entered at {entered}, spawned at {spawned}:\n{body}");
    assert_eq!(sample(&body, &items), Some(10.0), "{body}");
    // Registered at 0 when the member started, so that a rate sees the first suspension.
    let suspensions = format!("zk_partitioner_session_suspensions_total{{path=\"{PATH}\"}}");
    assert_eq!(sample(&body, &suspensions), Some(0.0), "{body}");

    // A second member joins: w0 releases (eager), a rebalance caused by the party, and allocates its half again.
    let addr1 = free_addr();
    let w1 = worker(&ctx, "w1", &["--metrics-addr", &addr1]).spawn().expect("spawn zkp worker");
    let body = wait_for("w0 to hold 5 items", timing(Duration::from_secs(30)), held(5.0)).await;
    let rebalances = format!("zk_partitioner_rebalances_total{{path=\"{PATH}\",cause=\"party_changed\"}}");
    assert_eq!(sample(&body, &rebalances), Some(1.0), "one rebalance caused by the party:\n{body}");
    assert!(body.lines().any(|l| l.starts_with("# TYPE zk_partitioner_rebalances_total counter")), "{body}");
    assert_eq!(allocations(&body), Some(2.0), "two allocations:\n{body}");
    let seconds = sample(&body, &format!("zk_partitioner_allocation_seconds_sum{{path=\"{PATH}\"}}"))
        .expect("the allocation time's sum");
    // Each allocation waits at least the 0.3 s time_boundary.
    assert!(seconds >= 0.6, "two allocations took {seconds} s in all:\n{body}");
    // w1 ACQUIRED too: each member says it, and the items held over the two add up to the set (w0's 5 and w1's 5).
    let body1 = wait_for("w1 to be ACQUIRED", timing(Duration::from_secs(30)), || {
        let addr1 = addr1.clone();
        async move {
            let body = scrape(&addr1).await?;
            if state(&body)? == "ACQUIRED" { Ok(body) } else { Err(format!("w1 is {:?}", state(&body))) }
        }
    })
    .await;
    let body = scrape(&addr).await.expect("scrape w0");
    assert_eq!(state(&body), Ok("ACQUIRED".into()), "{body}");
    let held_by = |body: &str| sample(body, &format!("zk_partitioner_items_held{{path=\"{PATH}\"}}"));
    assert_eq!((sample(&body, &items), sample(&body1, &items)), (Some(10.0), Some(10.0)));
    assert_eq!((held_by(&body), held_by(&body1)), (Some(5.0), Some(5.0)), "w0:\n{body}\nw1:\n{body1}");

    // The address is taken now: another worker asked to serve on it says so and exits without joining.
    let taken = worker(&ctx, "w2", &["--metrics-addr", &addr]).output().await.expect("run zkp worker");
    let stderr = String::from_utf8_lossy(&taken.stderr);
    assert!(!taken.status.success(), "a worker on a taken metrics address ran: {stderr}");
    assert!(stderr.contains(&format!("cannot serve metrics on {addr}")), "unclear error: {stderr}");
    let party = ctx.observer.list_children(&format!("{PATH}/party")).await.expect("list the party");
    assert_eq!(party.len(), 2, "the refused worker must not have joined: {party:?}");

    stop(w1).await;
    stop(w0).await;
}
