//! sandbox::explain — turns a sandboxed tool's refusal into words the model and the user can
//! act on: which rule refused what, and how to allow it.
//!
//! A tool that fails and says "Permission denied", "Operation not permitted", "Read-only file
//! system" (on a path, or on a socket), or cannot resolve or reach a host, gets notes
//! appended to its observation: the path it could not write and where writes go, the path
//! `deny_read` hides, or that the network is off — each with the key that changes it.
//! Owns: recognising the refusals in a tool's output and the wording of the notes.
//! Must not: claim a refusal the sandbox did not cause (a path the tool may write, a network
//! that is on) or run for a tool that succeeded.

use std::path::{Component, Path, PathBuf};

use super::policy::NetworkAccess;
use super::resolve::{HiddenBecause, RunSandbox};

/// What a refusal looks like in a tool's output.
const DENIED: [&str; 8] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "EACCES",
    "EPERM",
    "EROFS",
    "[Errno 13]",
    "[Errno 1]",
];
/// What a tool says about a path inside a hidden folder (it looks empty).
const MISSING: [&str; 4] = [
    "No such file or directory",
    "ENOENT",
    "[Errno 2]",
    "does not exist",
];
/// What a tool without network says.
const NETWORK_FAILURES: [&str; 12] = [
    "Could not resolve host",
    "Couldn't resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "getaddrinfo",
    "Couldn't connect to server",
    "Failed to connect",
    "Network is unreachable",
    "socket:",
    "socket(",
    "connect:",
    "/dev/tcp/",
];
/// The most notes one observation gets.
const MAX_NOTES: usize = 3;

/// Notes for the observation of a failed tool, `None` when nothing in its output points at
/// the sandbox. `cwd` resolves relative paths; `output` is its stderr then its stdout.
pub fn explain(sandbox: &RunSandbox, cwd: &Path, output: &str) -> Option<String> {
    let mut notes: Vec<String> = Vec::new();
    let mut network_noted = false;
    for line in output.lines() {
        if notes.len() >= MAX_NOTES {
            break;
        }
        let denied = DENIED.iter().any(|phrase| line.contains(phrase));
        let network = NETWORK_FAILURES.iter().any(|phrase| line.contains(phrase));
        if sandbox.network_off() && !network_noted && (network || (denied && mentions_socket(line)))
        {
            network_noted = true;
            notes.push(network_note(sandbox));
            continue;
        }
        let missing = MISSING.iter().any(|phrase| line.contains(phrase));
        if !denied && !missing {
            continue;
        }
        for candidate in paths_in(line) {
            let path = normalise(&cwd.join(&candidate));
            // A missing path is the sandbox's doing only inside a hidden folder.
            let note = if denied {
                path_note(sandbox, &candidate, &path)
            } else {
                hidden_note(sandbox, &candidate, &path)
            };
            if let Some(note) = note {
                if !notes.contains(&note) {
                    notes.push(note);
                }
                break;
            }
        }
    }
    notes.truncate(MAX_NOTES);
    (!notes.is_empty()).then(|| notes.join("\n"))
}

fn mentions_socket(line: &str) -> bool {
    let lowered = line.to_ascii_lowercase();
    ["socket", "connect", "network", "resolve", "dns"]
        .iter()
        .any(|word| lowered.contains(word))
}

fn network_note(sandbox: &RunSandbox) -> String {
    format!(
        "[sandbox] The network is off for this agent's tools: they cannot open sockets (no \
         connection, not even to 127.0.0.1, and no name resolution). If the tool needs the \
         network, set {} (docs/sandbox.md).",
        sandbox
            .policy
            .source
            .where_to_set(&format!("network: {}", NetworkAccess::On.as_str()))
    )
}

/// The note for `path` (as written: `shown`), if the sandbox refuses it.
fn path_note(sandbox: &RunSandbox, shown: &str, path: &Path) -> Option<String> {
    if let Some(note) = hidden_note(sandbox, shown, path) {
        return Some(note);
    }
    write_note(sandbox, shown, path)
}

/// The note for `path` if `deny_read` or delta's own rules hide it.
fn hidden_note(sandbox: &RunSandbox, shown: &str, path: &Path) -> Option<String> {
    let hidden = sandbox
        .hidden
        .iter()
        .find(|hidden| path.starts_with(&hidden.path))?;
    {
        let rule = match &hidden.because {
            HiddenBecause::DeltaState(what) => {
                return Some(format!(
                    "[sandbox] `{shown}` is hidden from every sandboxed tool: {} holds {what}, \
                     which delta never lets a tool read.",
                    hidden.path.display()
                ))
            }
            HiddenBecause::Default => {
                "the `default` entry of deny_read (credential stores)".to_owned()
            }
            HiddenBecause::Listed(entry) => format!("the deny_read entry `{entry}`"),
        };
        Some(format!(
            "[sandbox] `{shown}` is hidden from this agent's tools by {rule}. To let tools read \
             it, change {}.",
            sandbox.policy.source.where_to_set("deny_read")
        ))
    }
}

/// The note for `path` if writes are confined and it is outside every writable root.
fn write_note(sandbox: &RunSandbox, shown: &str, path: &Path) -> Option<String> {
    if !sandbox.confines_writes() || sandbox.writable.iter().any(|root| path.starts_with(root)) {
        return None;
    }
    let roots: Vec<String> = sandbox
        .writable
        .iter()
        .map(|root| {
            if *root == sandbox.temp_dir {
                format!("{} ($TMPDIR)", root.display())
            } else {
                root.display().to_string()
            }
        })
        .collect();
    Some(format!(
        "[sandbox] `{shown}` is outside where this agent's tools may write (filesystem: {}): \
         only {}. Write inside the workspace or $TMPDIR; to allow this place, add its folder to {}.",
        sandbox.policy.filesystem.as_str(),
        roots.join(", "),
        sandbox.policy.source.where_to_set("allow_write")
    ))
}

/// Path-like words of a line: quoted text, and words starting with `/`, `./`, `../` or `~/`
/// (with the punctuation around them trimmed).
fn paths_in(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for quote in ['\'', '"', '`', '‘', '’'] {
        let mut parts = line.split(quote);
        parts.next();
        while let Some(inside) = parts.next() {
            if looks_like_path(inside) {
                found.push(inside.to_owned());
            }
            parts.next();
        }
    }
    for word in line.split_whitespace() {
        let trimmed = word.trim_matches(|c: char| {
            matches!(
                c,
                ':' | ',' | ';' | '(' | ')' | '[' | ']' | '\'' | '"' | '`' | '‘' | '’'
            )
        });
        if trimmed.starts_with('/') || trimmed.starts_with("./") || trimmed.starts_with("../") {
            found.push(trimmed.to_owned());
        }
    }
    found
}

fn looks_like_path(text: &str) -> bool {
    !text.is_empty()
        && !text.contains(char::is_whitespace)
        && (text.contains('/') || text.starts_with('.'))
}

/// `a/./b/../c` → `a/c`, without touching the disk (the tool's view may differ from ours).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{PolicySource, SandboxPolicy};
    use crate::sandbox::resolve::HiddenPath;
    use crate::sandbox::support::Layers;

    fn sandbox(network: NetworkAccess) -> RunSandbox {
        let mut policy = SandboxPolicy::defaults(PolicySource::Agent("/a/agent.yaml".into()));
        policy.network = network;
        RunSandbox {
            policy,
            writable: vec!["/ws".into(), "/tmp/delta-sandbox-0/ab".into()],
            hidden: vec![
                HiddenPath {
                    path: "/ws/.delta".into(),
                    because: HiddenBecause::DeltaState("the workspace's run folders"),
                },
                HiddenPath {
                    path: "/home/u/.ssh".into(),
                    because: HiddenBecause::Default,
                },
            ],
            temp_dir: "/tmp/delta-sandbox-0/ab".into(),
            hidden_found: Vec::new(),
            layers: Layers {
                landlock_abi: 7,
                seccomp: true,
                mounts: true,
            },
            missing: Vec::new(),
        }
    }

    #[test]
    fn a_write_outside_says_where_writes_go_and_how_to_allow_it() {
        let note = explain(
            &sandbox(NetworkAccess::Off),
            Path::new("/ws"),
            "touch: cannot touch '/etc/passwd.new': Permission denied\n",
        )
        .unwrap();
        assert!(
            note.contains("`/etc/passwd.new` is outside where"),
            "{note}"
        );
        assert!(note.contains("/tmp/delta-sandbox-0/ab ($TMPDIR)"), "{note}");
        assert!(
            note.contains("`sandbox.allow_write` in /a/agent.yaml"),
            "{note}"
        );
        // Relative paths are the workspace's; inside it, nothing to explain.
        assert!(explain(
            &sandbox(NetworkAccess::Off),
            Path::new("/ws"),
            "tee: ../outside: Permission denied"
        )
        .unwrap()
        .contains("`../outside`"));
        assert_eq!(
            explain(
                &sandbox(NetworkAccess::Off),
                Path::new("/ws"),
                "tee: out.txt: Permission denied"
            ),
            None
        );
    }

    #[test]
    fn hidden_paths_name_their_rule() {
        let sandbox = sandbox(NetworkAccess::Off);
        let note = explain(
            &sandbox,
            Path::new("/ws"),
            "cat: /home/u/.ssh/id_ed25519: No such file or directory\ncat: /home/u/.ssh/id_ed25519: Permission denied",
        )
        .unwrap();
        assert!(
            note.contains("hidden from this agent's tools by the `default` entry"),
            "{note}"
        );
        let note = explain(
            &sandbox,
            Path::new("/ws"),
            "ls: cannot open directory '.delta/x': Permission denied",
        )
        .unwrap();
        assert!(note.contains("delta never lets a tool read"), "{note}");
    }

    #[test]
    fn a_network_failure_is_explained_only_with_the_network_off() {
        let output = "curl: (6) Could not resolve host: example.com\n";
        let note = explain(&sandbox(NetworkAccess::Off), Path::new("/ws"), output).unwrap();
        assert!(note.contains("The network is off"), "{note}");
        assert!(
            note.contains("`sandbox.network: on` in /a/agent.yaml"),
            "{note}"
        );
        assert_eq!(
            explain(&sandbox(NetworkAccess::On), Path::new("/ws"), output),
            None
        );
        let python = "PermissionError: [Errno 1] Operation not permitted (socket)";
        assert!(explain(&sandbox(NetworkAccess::Off), Path::new("/ws"), python).is_some());
        assert_eq!(
            explain(&sandbox(NetworkAccess::Off), Path::new("/ws"), "all good\n"),
            None
        );
    }
}
