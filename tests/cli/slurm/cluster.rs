//! The gate of the tests that need a Slurm cluster, and what they share: is one reachable
//! (`sinfo` answers and a node accepts jobs)? If not, say so loudly and fail, unless
//! DELTA_SKIP_SLURM=1 (then print SKIPPED and pass).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// True when the test may go on; false when it was skipped knowingly. Panics when no
/// cluster answers and skipping was not asked for.
pub fn cluster_or_skip(test: &str) -> bool {
    // A busy node may answer late or be flagged for a moment (`mix*`): look for 20 s.
    let answers = || {
        Command::new("sinfo")
            .args(["-h", "-o", "%t"])
            .stdin(Stdio::null())
            .output()
            .map(|o| {
                let states = String::from_utf8_lossy(&o.stdout);
                o.status.success()
                    && states.lines().any(|s| {
                        let state = s
                            .trim()
                            .trim_end_matches(|c: char| !c.is_ascii_alphabetic());
                        matches!(state, "idle" | "mix" | "alloc" | "comp" | "plnd")
                    })
            })
            .unwrap_or(false)
    };
    let installed = Command::new("sinfo").arg("--version").output().is_ok();
    let up = installed && wait_until(Duration::from_secs(20), answers);
    if up {
        return true;
    }
    eprintln!(
        "\n!!!!!!!!!! SKIPPED {test}: no Slurm cluster answers (start one: sudo scripts/slurm-local.sh up) !!!!!!!!!!\n"
    );
    assert_eq!(
        std::env::var("DELTA_SKIP_SLURM").as_deref(),
        Ok("1"),
        "the Slurm tests need a cluster: run scripts/slurm-local.sh up, or set DELTA_SKIP_SLURM=1 to skip them knowingly"
    );
    false
}

/// Polls `check` every 100 ms for at most `limit`; true once it holds.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    check()
}

/// `squeue --me -h -r -o '%i %j %k'` lines naming this orchestration's comment tag.
pub fn queued_tasks(orchestration_id: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["--me", "-h", "-r", "-o", "%i|%j|%k|%T"])
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let tag = format!("orchestration={orchestration_id} ");
    out.lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_owned)
        .collect()
}

/// Cancels every job whose comment names `orchestration_id` (cleanup after a failed test).
pub fn cancel_orchestration_jobs(orchestration_id: &str) {
    let ids: Vec<String> = queued_tasks(orchestration_id)
        .iter()
        .filter_map(|l| l.split('|').next().map(str::to_owned))
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("scancel").args(&ids).status();
    }
}

/// Every file under `dir` (bounded walk).
pub fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() > 200_000 {
            return;
        }
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => files_under(&path, out),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
}

#[test]
fn slurm_check_probes_the_shared_workspace() {
    if !cluster_or_skip("slurm_check_probes_the_shared_workspace") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce");
    let out = Command::new(assert_cmd::cargo::cargo_bin("delta"))
        .current_dir(&example)
        .args([
            "orchestrate",
            "plan.yaml",
            "--executor",
            "slurm",
            "--check",
            "-w",
        ])
        .arg(ws.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("wrote into the workspace"), "{stderr}");
}

/// A `delta orchestrate` running in the background: its stderr collected line by line.
pub struct Orchestration {
    pub child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Orchestration {
    pub fn spawn(mut command: Command) -> Orchestration {
        use std::io::{BufRead, BufReader, Read};
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut stdout = child.stdout.take().unwrap();
        let stdout = Some(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        }));
        Orchestration {
            child,
            lines,
            stdout,
        }
    }

    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The id printed as `orchestration <id>` (waits up to 30 s).
    pub fn id(&mut self) -> String {
        let mut id = None;
        let seen = wait_until(Duration::from_secs(30), || {
            id = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.strip_prefix("orchestration ").map(str::to_owned));
            id.is_some()
        });
        assert!(seen, "no orchestration id on stderr: {}", self.stderr());
        id.unwrap()
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits up to `limit` for the exit; (code, stdout, stderr). Killed past the limit.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let ended = wait_until(limit, || !self.running());
        if !ended {
            let _ = self.child.kill();
        }
        let status = self.child.wait().unwrap();
        let stdout = self.stdout.take().unwrap().join().unwrap_or_default();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            ended,
            "delta orchestrate did not finish within {limit:?}: {}",
            self.stderr()
        );
        (status.code(), stdout, self.stderr())
    }

    pub fn sigkill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `delta` in `dir`, without inherited logging or model settings.
pub fn delta_in(dir: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("delta"));
    cmd.current_dir(dir)
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .env_remove("DELTA_API_KEY")
        .env_remove("DELTA_BASE_URL");
    cmd
}

/// `ENGINE_END` events of a run's journal, as (status) strings.
pub fn engine_ends(work_dir: &Path, run_id: &str) -> Vec<String> {
    let journal = work_dir.join(".delta").join(run_id).join("journal.jsonl");
    std::fs::read_to_string(&journal)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "ENGINE_END")
        .map(|e| e["status"].as_str().unwrap_or("?").to_owned())
        .collect()
}
