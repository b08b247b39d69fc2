//! kazoo 2.11 workers in separate processes (`tests/kazoo/kazoo_worker.py`), seen through the JSON line each prints
//! at every state change: the other side of the interop tests.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zk_partitioner::Item;

use super::{Ctx, timing};

/// The latest line a kazoo worker printed.
#[derive(Clone, Debug, Default)]
pub struct KazooView {
    pub state: String,
    pub items: Vec<String>,
    pub session: i64,
}

/// A kazoo worker process, killed when dropped.
pub struct KazooWorker {
    pub identifier: String,
    child: Child,
    view: Arc<Mutex<KazooView>>,
}

/// Fails the test at once, with the install command, when python3 has no kazoo.
pub fn require_kazoo() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kazoo is not installed for python3: run `python3 -m pip install kazoo==2.11.0` (CI does)");
}

impl KazooWorker {
    /// Starts a kazoo worker at `path` in the test's namespace, over integer `items`.
    pub async fn start(ctx: &Ctx, path: &str, identifier: &str, items: &[Item], time_boundary: Duration) -> Self {
        Self::start_with(ctx, path, identifier, items, time_boundary, &[]).await
    }

    /// [`start`](KazooWorker::start) with more arguments for the script (e.g. `--auth USER:PASSWORD`).
    pub async fn start_with(
        ctx: &Ctx,
        path: &str,
        identifier: &str,
        items: &[Item],
        time_boundary: Duration,
        extra: &[&str],
    ) -> Self {
        require_kazoo();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kazoo/kazoo_worker.py");
        let items: Vec<String> = items.iter().map(Item::to_string).collect();
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--connect", &format!("{}{}", ctx.endpoint, ctx.namespace), "--path", path])
            .args(["--items", &items.join(","), "--int-items", "--identifier", identifier])
            .args(["--time-boundary", &format!("{}", time_boundary.as_secs_f64()), "--session-timeout", "6"])
            .args(extra)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start python3 tests/kazoo/kazoo_worker.py");
        let view = Arc::new(Mutex::new(KazooView::default()));
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let sink = view.clone();
        let name = identifier.to_string();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(worker = %name, %line, "kazoo");
                if let Some(parsed) = parse_line(&line) {
                    *sink.lock().unwrap() = parsed;
                }
            }
        });
        KazooWorker { identifier: identifier.to_string(), child, view }
    }

    pub fn view(&self) -> KazooView {
        self.view.lock().unwrap().clone()
    }

    /// SIGTERM: the script calls `finish()` and exits 0.
    pub async fn stop(mut self) {
        let pid = self.child.id().expect("running");
        std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
        let status = tokio::time::timeout(timing(Duration::from_secs(15)), self.child.wait()).await;
        assert!(matches!(status, Ok(Ok(s)) if s.success()), "kazoo worker {} did not exit cleanly", self.identifier);
    }
}

/// Picks the fields we need out of the script's flat JSON line (written by json.dumps); `None` for other lines.
fn parse_line(line: &str) -> Option<KazooView> {
    let field = |name: &str| -> Option<&str> {
        let key = format!("\"{name}\": ");
        let at = line.find(&key)?;
        let rest = &line[at + key.len()..];
        let end = if rest.starts_with('[') {
            rest.find(']').map_or(rest.len(), |e| e + 1)
        } else {
            rest.find([',', '}']).unwrap_or(rest.len())
        };
        Some(&rest[..end])
    };
    let items = field("items")?.trim_matches(['[', ']']);
    Some(KazooView {
        state: field("state")?.trim_matches('"').to_string(),
        items: items.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect(),
        session: field("session")?.parse().unwrap_or(0),
    })
}
