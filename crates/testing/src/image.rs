//! The ZooKeeper image: which one, and getting it when the local Docker engine does not have it (a pull bounded in
//! time, else a build from Debian packages, once per machine under a lock file).

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use testcontainers::bollard::Docker;
use testcontainers::bollard::errors::Error as DockerError;
use testcontainers::bollard::query_parameters::CreateImageOptions;

use super::progress;

/// A Docker image reference split the way testcontainers wants it: `name` (with any registry host and port) and `tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Repository, with any registry host and port: `zookeeper`, `host:5000/team/zookeeper`.
    pub name: String,
    /// Tag: `3.9`, `latest`.
    pub tag: String,
}

impl ImageRef {
    /// The environment variable naming the image; when set, the kit uses that image and no other.
    pub const ENV: &'static str = "ZOOKEEPER_IMAGE";
    /// The official image, used first when [`Self::ENV`] is unset.
    pub const DEFAULT: &'static str = "zookeeper:3.9";
    /// The image `docker/zookeeper/build.sh` builds from Debian packages where no registry answers; used when
    /// [`Self::ENV`] is unset and the official image is neither present nor pullable.
    pub const LOCAL_BUILD: &'static str = "zk-partitioner/zookeeper:3.8";
    /// Images with this name (any tag) can be built by `docker/zookeeper/build.sh`.
    const BUILDABLE_NAME: &'static str = "zk-partitioner/zookeeper";

    /// Parses `[registry[:port]/]path[:tag]`; the tag defaults to `latest`. A colon before the last `/` belongs to
    /// the registry (`host:5000/x` has no tag).
    pub fn parse(reference: &str) -> ImageRef {
        let reference = reference.trim();
        let last_segment = reference.rfind('/').map_or(0, |slash| slash + 1);
        match reference[last_segment..].rfind(':') {
            Some(colon) => {
                let colon = last_segment + colon;
                ImageRef { name: reference[..colon].to_string(), tag: reference[colon + 1..].to_string() }
            }
            None => ImageRef { name: reference.to_string(), tag: "latest".to_string() },
        }
    }

    /// The image named by `ZOOKEEPER_IMAGE`, if it is set and not blank.
    pub fn from_env() -> Option<ImageRef> {
        match std::env::var(Self::ENV) {
            Ok(value) if !value.trim().is_empty() => Some(Self::parse(&value)),
            _ => None,
        }
    }

    /// Whether `docker/zookeeper/build.sh` can build this image (`zk-partitioner/zookeeper:<any tag>`).
    pub fn is_buildable(&self) -> bool {
        self.name == Self::BUILDABLE_NAME
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)
    }
}

/// The Docker host the kit talks to: `DOCKER_HOST`, else the default local socket (as bollard does).
pub(crate) fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

fn unreachable(docker_host: &str, cause: impl fmt::Display) -> String {
    format!("no Docker engine answers at {docker_host} ({cause}); start dockerd, or point DOCKER_HOST at one")
}

/// Whether `image` exists in the engine; `Err` when the engine cannot be asked.
async fn present(docker: &Docker, docker_host: &str, image: &ImageRef) -> Result<bool, String> {
    let inspect = tokio::time::timeout(Duration::from_secs(10), docker.inspect_image(&image.to_string()))
        .await
        .map_err(|_| unreachable(docker_host, "no answer within 10 s"))?;
    match inspect {
        Ok(_) => Ok(true),
        Err(DockerError::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
        Err(err) => Err(unreachable(docker_host, err)),
    }
}

fn engine(docker_host: &str) -> Result<Docker, String> {
    Docker::connect_with_host(docker_host).map_err(|err| unreachable(docker_host, err))
}

/// Checks, without pulling or building anything, that `image` exists in the local Docker engine.
///
/// # Errors
/// One line naming the cause: no engine answers, or the image is missing (and how to get it).
pub async fn check_image(image: &ImageRef) -> Result<(), String> {
    check_image_on(&docker_host(), image).await
}

/// [`check_image`] against the engine at `docker_host` (e.g. `unix:///var/run/docker.sock`).
///
/// # Errors
/// As [`check_image`].
pub async fn check_image_on(docker_host: &str, image: &ImageRef) -> Result<(), String> {
    let docker = engine(docker_host)?;
    if present(&docker, docker_host, image).await? {
        Ok(())
    } else {
        Err(format!(
            "ZooKeeper image {image} is not in the local Docker engine; `provide_image` pulls it{}",
            if image.is_buildable() { " or builds it with docker/zookeeper/build.sh" } else { "" }
        ))
    }
}

/// The image every container of this process uses: [`provide_image`] for `ZOOKEEPER_IMAGE` (or the defaults),
/// done once per process; later calls return the first call's answer.
///
/// # Errors
/// When the image is missing and can be neither pulled nor built: one message naming every attempt and the fix.
pub async fn ensure_image() -> Result<ImageRef, String> {
    static CHOSEN: tokio::sync::OnceCell<Result<ImageRef, String>> = tokio::sync::OnceCell::const_new();
    CHOSEN.get_or_init(|| provide_image(ImageRef::from_env())).await.clone()
}

/// Makes sure a ZooKeeper image is in the local Docker engine and returns it.
///
/// `wanted` is the image to use (from `ZOOKEEPER_IMAGE`), or `None` for the defaults: the official
/// [`ImageRef::DEFAULT`] if present, else [`ImageRef::LOCAL_BUILD`] if present. When the image is missing:
///
/// 1. pull it (the official image when `wanted` is `None`), giving up after 30 s without progress, and at once
///    when no registry answers;
/// 2. else, if it is `zk-partitioner/zookeeper:<tag>` (the default's fallback is), build it with
///    `docker/zookeeper/build.sh` from this crate's repository (Debian packages through `debootstrap`: root and a
///    Debian mirror; about a minute).
///
/// Both steps run under an exclusive lock on `<temp dir>/zk-partitioner-image.lock` (the build script takes the same
/// lock), so when several test processes start at once one of them gets the image and the others wait for it and
/// then find it present. Progress goes to stderr, past the test harness' capture.
///
/// # Errors
/// When no Docker engine answers, or the image can be neither pulled nor built: one message naming each attempt's
/// failure and what to do.
pub async fn provide_image(wanted: Option<ImageRef>) -> Result<ImageRef, String> {
    provide_image_on(&docker_host(), wanted).await
}

async fn provide_image_on(docker_host: &str, wanted: Option<ImageRef>) -> Result<ImageRef, String> {
    let docker = engine(docker_host)?;
    let candidates = match &wanted {
        Some(image) => vec![image.clone()],
        None => vec![ImageRef::parse(ImageRef::DEFAULT), ImageRef::parse(ImageRef::LOCAL_BUILD)],
    };
    if let Some(image) = first_present(&docker, docker_host, &candidates).await? {
        return Ok(image);
    }
    let (pull, build) = match wanted {
        Some(image) => (image.clone(), image.is_buildable().then_some(image)),
        None => (ImageRef::parse(ImageRef::DEFAULT), Some(ImageRef::parse(ImageRef::LOCAL_BUILD))),
    };
    let lock = lock_images().await;
    // Another process may have got an image while this one waited for the lock.
    if let Some(image) = first_present(&docker, docker_host, &candidates).await? {
        return Ok(image);
    }
    let pulled = pull_image(&docker, &pull).await;
    let pull_error = match pulled {
        Ok(()) => return Ok(pull),
        Err(err) => err,
    };
    let Some(build) = build else {
        return Err(format!(
            "ZooKeeper image {pull} (from {}) is not in the local Docker engine and cannot be pulled ({pull_error}); \
             pull or build it yourself, or unset {} to let the kit build {} from Debian packages",
            ImageRef::ENV,
            ImageRef::ENV,
            ImageRef::LOCAL_BUILD
        ));
    };
    progress(&format!("cannot pull {pull} ({pull_error}); building {build} from Debian packages instead"));
    let built = build_image(&build, lock.is_some()).await;
    drop(lock);
    match built {
        Ok(()) if first_present(&docker, docker_host, std::slice::from_ref(&build)).await?.is_some() => Ok(build),
        Ok(()) => Err(format!("docker/zookeeper/build.sh finished but {build} is not in the engine")),
        Err(build_error) => Err(format!(
            "no ZooKeeper image: {pull} is not present and cannot be pulled ({pull_error}), and building {build} \
             failed: {build_error}. Fix one of the two (a registry mirror, or `sudo bash docker/zookeeper/build.sh \
             {build}` from a clone of the repository), or set {} to an image that is present",
            ImageRef::ENV
        )),
    }
}

async fn first_present(docker: &Docker, docker_host: &str, images: &[ImageRef]) -> Result<Option<ImageRef>, String> {
    for image in images {
        if present(docker, docker_host, image).await? {
            return Ok(Some(image.clone()));
        }
    }
    Ok(None)
}

/// Giving up on a pull that reports nothing for this long.
const PULL_SILENCE: Duration = Duration::from_secs(30);
/// Giving up on a pull after this long in all, progress or not.
const PULL_LIMIT: Duration = Duration::from_secs(15 * 60);

/// Pulls `image`, printing a progress line at most every 5 s. Fails at once when no registry answers (the engine
/// reports the lookup or connection error as the first message), after [`PULL_SILENCE`] without a message, or after
/// [`PULL_LIMIT`].
async fn pull_image(docker: &Docker, image: &ImageRef) -> Result<(), String> {
    progress(&format!("pulling {image} (giving up after {}s without progress)", PULL_SILENCE.as_secs()));
    let options = CreateImageOptions {
        from_image: Some(image.name.clone()),
        tag: Some(image.tag.clone()),
        ..CreateImageOptions::default()
    };
    let started = Instant::now();
    let mut stream = docker.create_image(Some(options), None, None);
    let mut last_report = Instant::now();
    loop {
        let left = PULL_LIMIT.saturating_sub(started.elapsed());
        let next = match tokio::time::timeout(PULL_SILENCE.min(left), stream.next()).await {
            Err(_) if left <= PULL_SILENCE => return Err(format!("still pulling after {}s", PULL_LIMIT.as_secs())),
            Err(_) => return Err(format!("no progress for {}s (no registry answers?)", PULL_SILENCE.as_secs())),
            Ok(next) => next,
        };
        match next {
            None => {
                progress(&format!("pulled {image} in {:.0?}", started.elapsed()));
                return Ok(());
            }
            Some(Err(err)) => return Err(one_line(&err.to_string())),
            Some(Ok(info)) => {
                if last_report.elapsed() >= Duration::from_secs(5) {
                    last_report = Instant::now();
                    let status = [info.id, info.status].into_iter().flatten().collect::<Vec<_>>();
                    progress(&format!("pulling {image}: {}", status.join(" ")));
                }
            }
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The build script, in the repository this crate was compiled from. A crates.io download does not ship it.
fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/zookeeper/build.sh")
}

/// Runs the build script for `image`, its output on our stderr (it prints a line per step), on a blocking thread.
async fn build_image(image: &ImageRef, lock_held: bool) -> Result<(), String> {
    let script = build_script();
    if !script.is_file() {
        return Err(format!(
            "{} is missing (a crates.io download of zk-partitioner does not ship it; it is in the repository)",
            script.display()
        ));
    }
    progress(&format!("building {image} with {} (about a minute, once per machine)", script.display()));
    let image = image.to_string();
    let started = Instant::now();
    let run = tokio::task::spawn_blocking(move || {
        let mut command = Command::new("bash");
        command.arg(&script).arg(&image).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
        if lock_held {
            // This process holds the lock the script would take: tell it not to wait for itself.
            command.env(LOCK_HELD_ENV, "1");
        }
        command.status()
    });
    match run.await {
        Ok(Ok(status)) if status.success() => {
            progress(&format!("built the image in {:.0?}", started.elapsed()));
            Ok(())
        }
        Ok(Ok(status)) => Err(format!("docker/zookeeper/build.sh exited with {status} (its messages are above)")),
        Ok(Err(err)) => Err(format!("cannot run bash docker/zookeeper/build.sh: {err}")),
        Err(err) => Err(format!("the build thread failed: {err}")),
    }
}

/// Set for the build script when the caller already holds the image lock.
const LOCK_HELD_ENV: &str = "ZK_PARTITIONER_IMAGE_LOCK_HELD";
/// Waiting longer than this for another process' pull or build means it is stuck.
const LOCK_WAIT: Duration = Duration::from_secs(20 * 60);

/// The lock file shared by every process getting an image on this machine (and by `docker/zookeeper/build.sh`).
pub(crate) fn lock_path() -> PathBuf {
    std::env::temp_dir().join("zk-partitioner-image.lock")
}

/// Takes the machine-wide image lock, waiting (and saying so) while another process holds it. `None` if the lock file
/// cannot be opened or the wait exceeds [`LOCK_WAIT`]: the caller goes on without it (the worst case is two builds).
async fn lock_images() -> Option<File> {
    let path = lock_path();
    let result = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .or_else(|_| File::open(&path))
            .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
        let started = Instant::now();
        let mut said = false;
        loop {
            // fs4's, not std's `File::try_lock` (Rust 1.89, newer than this crate's MSRV).
            match fs4::FileExt::try_lock(&file) {
                Ok(()) => return Ok(file),
                Err(fs4::TryLockError::WouldBlock) => {}
                Err(fs4::TryLockError::Error(err)) => return Err(format!("cannot lock {}: {err}", path.display())),
            }
            if !said {
                said = true;
                progress(&format!(
                    "another process is getting the ZooKeeper image (it holds {}); waiting for it",
                    path.display()
                ));
            }
            if started.elapsed() > LOCK_WAIT {
                return Err(format!("{} still locked after {:?}", path.display(), LOCK_WAIT));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    })
    .await;
    match result {
        Ok(Ok(file)) => Some(file),
        Ok(Err(err)) => {
            progress(&format!("going on without the image lock: {err}"));
            None
        }
        Err(err) => {
            progress(&format!("going on without the image lock: {err}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse() {
        let parsed = |reference: &str| {
            let image = ImageRef::parse(reference);
            (image.name, image.tag)
        };
        let pair = |name: &str, tag: &str| (name.to_string(), tag.to_string());
        assert_eq!(parsed("zookeeper:3.9"), pair("zookeeper", "3.9"));
        assert_eq!(parsed("zookeeper"), pair("zookeeper", "latest"));
        assert_eq!(parsed("zk-partitioner/zookeeper:3.8"), pair("zk-partitioner/zookeeper", "3.8"));
        assert_eq!(parsed("host:5000/x:tag"), pair("host:5000/x", "tag"));
        assert_eq!(parsed("host:5000/team/x"), pair("host:5000/team/x", "latest"));
        assert_eq!(ImageRef::parse("host:5000/x:tag").to_string(), "host:5000/x:tag");
        assert!(ImageRef::parse("zk-partitioner/zookeeper:anything").is_buildable());
        assert!(!ImageRef::parse("zookeeper:3.9").is_buildable());
    }
}
