//! `zkp items export`, `import` and `reset-checkpoints`: a party's progress as one token, for operators moving a
//! party, backing it up, or starting over (the library's `SharedSet::export` and `SharedSet::import`).

use std::path::{Path, PathBuf};

use serde_json::json;
use zk_partitioner::SharedSet;
use zk_partitioner::shared_set::{ImportMode, Imported, Progress};

/// How `import` uses the token (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The token's set, lineage, weights and checkpoints replace the path's (or fill an empty path)
    Restore,
    /// As restore, without the checkpoints: every item starts from nothing
    ResetCheckpoints,
    /// The path keeps its set; the token's progress is imported for the items it has, the rest dropped
    Prune,
}

impl From<Mode> for ImportMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Restore => ImportMode::Restore,
            Mode::ResetCheckpoints => ImportMode::ResetCheckpoints,
            Mode::Prune => ImportMode::Prune,
        }
    }
}

/// Reads a token from `file` (`-`: standard input), before connecting: a file that cannot be read, or is not a token
/// this version reads (malformed, cut short, a newer format), is a bad argument.
pub fn read_token(file: &Path) -> Result<Progress, String> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).map_err(|err| format!("cannot read the token from stdin: {err}"))?
    } else {
        std::fs::read_to_string(file).map_err(|err| format!("cannot read {}: {err}", file.display()))?
    };
    let progress = Progress::from_json(&text).map_err(|err| format!("{}: {err}", file.display()))?;
    // Everything an import checks of the token alone, now: nothing is written for a token that would be refused.
    progress.set_items().map_err(|err| format!("{}: {err}", file.display()))?;
    Ok(progress)
}

/// `export`: the token to `out` (or stdout); with `--json` and `--out`, a summary on stdout.
pub async fn export(set: &SharedSet, out: Option<&PathBuf>, json: bool) -> Result<(), String> {
    let progress = set.export().await.map_err(|e| e.to_string())?;
    let token = progress.to_json();
    let Some(out) = out else {
        println!("{token}");
        return Ok(());
    };
    // Written whole, then renamed: a reader never finds half a token under the name asked for.
    let partial = out.with_extension("partial");
    std::fs::write(&partial, format!("{token}\n"))
        .and_then(|()| std::fs::rename(&partial, out))
        .map_err(|err| format!("cannot write {}: {err}", out.display()))?;
    let summary = json!({
        "file": out.display().to_string(),
        "bytes": token.len() + 1,
        "set_version": progress.exported.set_version,
        "items": progress.items.len(),
        "lineage": progress.lineage.len(),
        "weights": progress.weights.len(),
        "checkpoints": progress.checkpoints.len(),
    });
    match json {
        true => println!("{summary}"),
        false => println!(
            "exported version {} of {}: {} items, {} with lineage, {} weighted, {} checkpoints ({} bytes) to {}",
            progress.exported.set_version,
            progress.exported.path,
            progress.items.len(),
            progress.lineage.len(),
            progress.weights.len(),
            progress.checkpoints.len(),
            token.len() + 1,
            out.display()
        ),
    }
    Ok(())
}

/// `import` and `reset-checkpoints`: what the import did.
pub fn print_imported(imported: &Imported, what: &str, json: bool) {
    match json {
        true => println!(
            "{}",
            json!({
                "version": imported.version,
                "items": imported.items,
                "checkpoints": imported.checkpoints,
                "lineage": imported.lineage,
                "dropped": imported.dropped,
            })
        ),
        false => {
            println!(
                "{what}: version {}, {} items, {} checkpoints, {} with lineage",
                imported.version, imported.items, imported.checkpoints, imported.lineage
            );
            if !imported.dropped.is_empty() {
                println!("dropped (not in the set here): {}", imported.dropped.join(","));
            }
        }
    }
}
