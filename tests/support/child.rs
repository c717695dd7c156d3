//! Test children: this test binary re-executed to run one child mode
//! (`tests/child/holder.rs`), driven line by line over stdin/stdout.

use std::process::{Child, Command, Stdio};

/// The environment variable that carries a test child's arguments.
pub const CHILD_ENV: &str = "LEASEHOLD_TEST_CHILD";

/// A command that runs this test binary as a test child (`tests/child/holder.rs`,
/// mounted as `mod child` in the test files that use it) with `args`.
pub fn child_command(args: &[&str]) -> Command {
    let exe = std::env::current_exe().expect("the path of this test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "child::child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_ENV, args.join("\u{1f}"));
    cmd
}

/// Whether a line is the test harness's own (a child prints below it).
pub fn harness_line(line: &str) -> bool {
    let line = line.trim();
    line.is_empty() || line.starts_with("running ")
}

/// The `<n>` of the `done <n>` line a finished checker child printed.
pub fn child_done(out: &std::process::Output) -> u64 {
    assert!(out.status.success(), "a child process failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("done ")?.parse().ok())
        .unwrap_or_else(|| panic!("no `done <n>` line: {out:?}"))
}

/// Runs the checker children `commands` at once and returns the sections
/// they finished, in all (see [`child_done`]).
pub fn children_done(commands: impl IntoIterator<Item = Command>) -> u64 {
    let children: Vec<Child> = commands
        .into_iter()
        .map(|mut cmd| cmd.stdout(Stdio::piped()).spawn().unwrap())
        .collect();
    children
        .into_iter()
        .map(|c| child_done(&c.wait_with_output().unwrap()))
        .sum()
}

/// A test child process driven line by line over stdin/stdout; killed and
/// reaped on drop.
pub struct ChildProcess {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl ChildProcess {
    /// Starts a test child with `args` (see [`child_command`]).
    pub fn start(args: &[&str]) -> ChildProcess {
        let mut child = child_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start a test child {args:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        ChildProcess {
            child,
            stdin,
            stdout,
        }
    }

    /// The next line it prints, trimmed (the harness's lines skipped).
    pub fn line(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = std::io::BufRead::read_line(&mut self.stdout, &mut line).unwrap();
            if n == 0 || !harness_line(&line) {
                return line.trim().to_owned();
            }
        }
    }

    /// Sends one command line and returns the answer line.
    pub fn ask(&mut self, command: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Kills it now and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
