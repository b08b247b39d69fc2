//! What the benchmarks share: the server's own counters (`mntr`), a thread's CPU clock and `main` itself. Each
//! benchmark uses a part of it.
#![allow(dead_code)]

pub mod party;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

/// The server's `mntr` counters, over a 4-letter-word connection of its own (no session, no request counted but the
/// command's own packet).
pub fn mntr(endpoint: &str) -> Result<HashMap<String, String>, String> {
    let mut stream = std::net::TcpStream::connect(endpoint).map_err(|e| format!("mntr: cannot connect: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream.write_all(b"mntr").map_err(|e| format!("mntr: {e}"))?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(|e| format!("mntr: {e}"))?;
    let counters: HashMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    if !counters.contains_key("zk_packets_received") {
        return Err(format!("mntr: unexpected answer (is `mntr` whitelisted?): {text:?}"));
    }
    Ok(counters)
}

pub fn counter_delta(before: &HashMap<String, String>, after: &HashMap<String, String>, key: &str) -> i64 {
    let value = |counters: &HashMap<String, String>| counters.get(key).and_then(|v| v.parse::<i64>().ok());
    match (value(before), value(after)) {
        (Some(before), Some(after)) => after - before,
        _ => -1,
    }
}

/// The calling thread's CPU time (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, Linux), in nanoseconds.
pub fn thread_cpu_nanos() -> u64 {
    cpu_nanos(3)
}

/// The whole process's CPU time, every thread (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`, Linux), in nanoseconds.
#[allow(dead_code)] // Not every bench that includes this module uses it.
pub fn process_cpu_nanos() -> u64 {
    cpu_nanos(2)
}

/// `clock_gettime(clock)` in nanoseconds (0 if it fails).
fn cpu_nanos(clock: i32) -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    let mut time = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid, writable timespec (two 64-bit fields on 64-bit Linux) for the call's duration.
    if unsafe { clock_gettime(clock, &mut time) } != 0 {
        return 0;
    }
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// A benchmark's `main`: its arguments parsed (`Ok(None)`: a bare `cargo bench`, nothing to do; `Err`: exit code 2),
/// then `run` on a multi-threaded runtime; its error printed after `name`.
pub fn main_of<A, F>(name: &str, parsed: Result<Option<A>, String>, run: impl FnOnce(A) -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<(), String>>,
{
    use std::process::ExitCode;
    let args = match parsed {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{name}: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("{name}: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{name}: {err}");
            ExitCode::FAILURE
        }
    }
}
