//! Small helpers shared by the harness modules: locating the repository, running commands with their
//! output captured, inter-process file locks, randomness, hashing and base64.
//!
//! Nothing here knows about Kafka.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, IoContext, Result};

/// How many lines of output or log an error carries.
pub(crate) const TAIL_LINES: usize = 60;

/// The repository root: the first ancestor holding `tests/kafka/pom.xml`, searched from `KMP_ROOT`,
/// then the runtime `CARGO_MANIFEST_DIR` (set by `cargo test`/`cargo run` for whichever package runs),
/// then the harness crate's own manifest directory, then the current directory.
///
/// # Errors
/// If none of those lies inside the repository.
pub fn repo_root() -> Result<PathBuf> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    let found = ROOT.get_or_init(|| {
        let mut starts: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("KMP_ROOT") {
            starts.push(dir.into());
        }
        if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
            starts.push(dir.into());
        }
        starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        if let Ok(dir) = std::env::current_dir() {
            starts.push(dir);
        }
        starts.iter().find_map(|start| start.ancestors().find(|dir| dir.join("tests/kafka/pom.xml").is_file()).map(Path::to_path_buf))
    });
    found.clone().ok_or_else(|| HarnessError::InvalidArgument("cannot find the repository root (a directory with tests/kafka/pom.xml); set KMP_ROOT".into()))
}

/// `<root>/target`, where everything the harness downloads, compiles or runs lives.
pub(crate) fn target_dir() -> Result<PathBuf> {
    Ok(repo_root()?.join("target"))
}

pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).io_context(|| format!("creating directory {}", dir.display()))
}

/// Removes the directories in `parent` that belong to a process that is gone: `pid_of` reads the
/// owning process id from a directory's name (`None`: not ours, kept). Does nothing where `/proc`
/// cannot tell which processes live.
pub(crate) fn remove_dirs_of_dead_processes(parent: &Path, pid_of: impl Fn(&str) -> Option<u32>) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = pid_of(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub(crate) fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    fs::write(path, contents).io_context(|| format!("writing {}", path.display()))
}

/// `$JAVA_HOME/bin/<tool>` when `JAVA_HOME` is set and has it, else `<tool>` from `PATH`.
pub(crate) fn java_tool(tool: &str) -> PathBuf {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let candidate = Path::new(&home).join("bin").join(tool);
        if candidate.is_file() {
            return candidate;
        }
    }
    PathBuf::from(tool)
}

/// The command line of `cmd`, quoted so it can be pasted into a shell.
pub(crate) fn describe_command(cmd: &Command) -> String {
    let mut parts = vec![shell_quote(&cmd.get_program().to_string_lossy())];
    parts.extend(cmd.get_args().map(|a| shell_quote(&a.to_string_lossy())));
    let line = parts.join(" ");
    match cmd.get_current_dir() {
        Some(dir) => format!("(cd {} && {line})", shell_quote(&dir.to_string_lossy())),
        None => line,
    }
}

fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The first `n` lines of `text`.
pub(crate) fn head(text: &str, n: usize) -> String {
    text.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// The last `n` lines of the file at `path`, or a note saying it could not be read.
pub(crate) fn file_tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => tail(&String::from_utf8_lossy(&bytes), n),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Runs `cmd` to completion with `stdin` fed to it, capturing stdout and stderr. A command still running
/// after `timeout` is killed (SIGKILL) and reported as failed, so a hung client cannot hang a test.
///
/// # Errors
/// If it cannot be spawned, times out, or exits unsuccessfully ([`HarnessError::Command`] with the
/// tail of stderr, and of stdout when `stdout_is_data` is false).
pub(crate) fn run_captured(mut cmd: Command, stdin: Option<Vec<u8>>, stdout_is_data: bool, timeout: Duration) -> Result<Output> {
    let described = describe_command(&cmd);
    let stdin_mode = if stdin.is_some() { Stdio::piped() } else { Stdio::null() };
    cmd.stdin(stdin_mode).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().io_context(|| format!("spawning {described}"))?;
    // Feed stdin and drain stdout/stderr on threads: any fixed order could deadlock on full pipes.
    let feeder = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => Some(std::thread::spawn(move || pipe.write_all(&bytes))),
        _ => None,
    };
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().io_context(|| format!("waiting for {described}"))? {
            break status;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().io_context(|| format!("waiting for {described}"))?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(feeder) = feeder {
        // A broken pipe here means the child exited early; its status tells the real story.
        let _ = feeder.join();
    }
    let output = Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() };
    if timed_out || !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let output_tail = if stdout_is_data {
            tail(&stderr, TAIL_LINES)
        } else {
            let stdout = String::from_utf8_lossy(&output.stdout);
            format!("{}\n{}", tail(&stdout, TAIL_LINES), tail(&stderr, TAIL_LINES))
        };
        let status = if timed_out { format!("killed after the {} s timeout", timeout.as_secs()) } else { output.status.to_string() };
        return Err(HarnessError::Command { command: described, status, output_tail });
    }
    Ok(output)
}

/// An exclusive advisory lock (`flock`) on a file, held until dropped. Used so that two test processes
/// provisioning the same thing at once take turns.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

impl FileLock {
    pub(crate) fn acquire(path: &Path) -> Result<FileLock> {
        if let Some(parent) = path.parent() {
            create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).io_context(|| format!("opening lock file {}", path.display()))?;
        file.lock().io_context(|| format!("locking {}", path.display()))?;
        Ok(FileLock { _file: file })
    }
}

/// Replaces `dest` (a directory) with `staged`, which is then removed. Callers hold a [`FileLock`], so
/// nobody reads `dest` half-written: readers check a marker file that is inside `staged` already.
pub(crate) fn replace_dir(staged: &Path, dest: &Path) -> Result<()> {
    if dest.exists() {
        fs::remove_dir_all(dest).io_context(|| format!("removing stale {}", dest.display()))?;
    }
    fs::rename(staged, dest).io_context(|| format!("renaming {} to {}", staged.display(), dest.display()))
}

/// 64 random bits from the kernel.
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    match File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)) {
        Ok(()) => u64::from_le_bytes(buf),
        // No /dev/urandom: mix the clock and pid, which is enough for names and ports.
        Err(_) => {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
            fnv1a(&[nanos.to_le_bytes(), u64::from(std::process::id()).to_le_bytes()].concat())
        }
    }
}

/// FNV-1a, 64 bit: a stable hash for cache keys (std's hasher may change between Rust releases).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Calls `probe` every `interval` until it returns `Ok(Some(_))`, it returns `Err` (fatal), or
/// `timeout` passes. `Ok(None)` carries no state; `probe` may record a description of the last state
/// in its `&mut String` for the timeout error.
pub(crate) fn poll<T>(what: &str, timeout: Duration, interval: Duration, mut probe: impl FnMut(&mut String) -> Result<Option<T>>) -> Result<T> {
    let start = Instant::now();
    let mut last = String::from("<not polled yet>");
    loop {
        if let Some(value) = probe(&mut last)? {
            return Ok(value);
        }
        if start.elapsed() >= timeout {
            return Err(HarnessError::Timeout { what: what.to_string(), waited_ms: start.elapsed().as_millis(), last });
        }
        std::thread::sleep(interval);
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as Java's `Base64.getEncoder()` and Python's `b64encode` write it.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16) | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8) | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional).
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text.trim_end_matches('=').bytes().collect();
    if digits.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut n: u32 = 0;
        for (i, d) in chunk.iter().enumerate() {
            let v = B64.iter().position(|c| c == d)? as u32;
            n |= v << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = base64_encode(&bytes);
            assert_eq!(base64_decode(&text).as_deref(), Some(&bytes[..]), "len {len}");
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("a*=="), None);
    }

    #[test]
    fn quoting() {
        let mut cmd = Command::new("java");
        cmd.args(["-cp", "libs/*", "it's"]);
        assert_eq!(describe_command(&cmd), r"java -cp 'libs/*' 'it'\''s'");
    }
}
