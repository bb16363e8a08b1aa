//! sandbox::resolve — a policy made concrete for one run: the folders its tools may write,
//! the paths hidden from them, its private temporary folder, and the layers this kernel
//! enforces — or the refusal, when the kernel cannot and the policy is `required`.
//!
//! Hidden always, whatever `deny_read` says: the workspace's `.delta` (every run's journal,
//! `secrets/` and records), the `.env` files of the workspace, the agent folder and the
//! folders above them, and `delta serve`'s state. Hidden by `default`: the credential stores
//! of the run's `HOME` ([`DEFAULT_DENIED_IN_HOME`]) and the PTY sessions' socket folder.
//! Owns: [`RunSandbox`], [`confine`], the built-in lists, the private temporary folder.
//! Must not: apply anything to a process (`child.rs` does), or read the process
//! environment (the run's resolved environment is passed in).

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use serde_json::{json, Value as Json};

use super::child::{ChildPlan, OwnedPaths};
use super::policy::{DenyEntry, FilesystemAccess, NetworkAccess, PolicySource, SandboxPolicy};
use super::support::{KernelSupport, Layers};

/// Credential stores under `HOME` that `deny_read: [default]` hides.
pub const DEFAULT_DENIED_IN_HOME: [&str; 22] = [
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".password-store",
    ".local/share/keyrings",
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
];
/// The most paths one run hides (the lists above, the user's, the `.env` of every folder up
/// to `/` from the workspace and the agent folder).
const MAX_HIDDEN: usize = 256;

/// Why a path is hidden, for the explanation a denied tool gets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HiddenBecause {
    /// An entry of `deny_read` (as written).
    Listed(String),
    /// The `default` entry of `deny_read`.
    Default,
    /// delta's own secrets and state: never readable by a sandboxed tool.
    DeltaState(&'static str),
}

/// A path hidden from the run's tools.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HiddenPath {
    /// Absolute, as resolved (not following links: a link is hidden where it points).
    pub path: PathBuf,
    /// Which rule hides it.
    pub because: HiddenBecause,
}

/// One run's sandbox, shared by its tools (and by the MCP servers started with the same).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunSandbox {
    /// The policy it resolves.
    pub policy: SandboxPolicy,
    /// Where tools may write (empty with `filesystem: off`, which confines no write).
    pub writable: Vec<PathBuf>,
    /// What tools cannot see.
    pub hidden: Vec<HiddenPath>,
    /// The private temporary folder (tools get it as `TMPDIR`).
    pub temp_dir: PathBuf,
    /// The hidden paths that existed when the run started (`deny_read`'s, not delta's own),
    /// for the audit record.
    pub hidden_found: Vec<PathBuf>,
    /// What this kernel enforces of it.
    pub layers: Layers,
    /// What the kernel could not enforce (only with `required: false`).
    pub missing: Vec<String>,
}

impl RunSandbox {
    /// Writes are confined to [`RunSandbox::writable`].
    pub fn confines_writes(&self) -> bool {
        self.policy.filesystem != FilesystemAccess::Off
    }

    /// No sockets.
    pub fn network_off(&self) -> bool {
        self.policy.network == NetworkAccess::Off
    }

    /// The paths a child started in `cwd` needs, as C strings (an error for a NUL byte).
    pub fn child_paths(&self, cwd: &Path) -> std::io::Result<OwnedPaths> {
        let c = |path: &Path| {
            CString::new(path.as_os_str().as_bytes()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                )
            })
        };
        Ok(OwnedPaths {
            cwd: c(cwd)?,
            writable: self
                .writable
                .iter()
                .map(|p| c(p))
                .collect::<Result<_, _>>()?,
            hidden: self
                .hidden
                .iter()
                .map(|h| c(&h.path))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The plan of one start, over `paths` (from [`RunSandbox::child_paths`]).
    pub fn child_plan<'a>(&self, paths: &'a OwnedPaths) -> ChildPlan<'a> {
        paths.plan(self.confines_writes(), self.network_off(), self.layers)
    }

    /// What the audit record of a tool says about the sandbox it ran in.
    pub fn audit_json(&self) -> Json {
        let listed: Vec<String> = self
            .hidden_found
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        json!({
            "filesystem": self.policy.filesystem.as_str(),
            "network": self.policy.network.as_str(),
            "required": self.policy.required,
            "writable": self.writable.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "hidden": listed,
            "temp_dir": self.temp_dir.display().to_string(),
            "source": self.policy.source.describe(),
            "enforced": {
                "landlock_abi": self.layers.landlock_abi,
                "seccomp": self.layers.seccomp,
                "mount_namespace": self.layers.mounts,
            },
            "missing": self.missing,
        })
    }
}

/// Where a run works, and its resolved environment (for `HOME`, `TMPDIR`, `XDG_*`).
#[derive(Debug, Clone, Copy)]
pub struct RunPlace<'a> {
    /// The workspace (the tools' working directory).
    pub work_dir: &'a Path,
    /// The agent folder.
    pub agent_home: &'a Path,
    /// The run's environment.
    pub env: &'a BTreeMap<String, String>,
}

/// A run's sandbox and the journal WARNINGs it brings (a layer the kernel lacks under
/// `required: false`, an `allow_write` path that does not exist).
#[derive(Debug)]
pub struct Confinement {
    /// The sandbox of the run's tools.
    pub sandbox: Arc<RunSandbox>,
    /// For the journal.
    pub warnings: Vec<String>,
}

/// Why a run cannot start sandboxed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel lacks a layer and the policy is `required`.
    #[error(
        "the tools of this agent must run sandboxed ({}), but this kernel cannot enforce: {}\n  \
         hint: run on Linux 5.13 or later with Landlock enabled (`lsm=landlock,...` on the \
         kernel command line), seccomp, and root or unprivileged user namespaces; or set {} to \
         run with what this kernel offers (a journal WARNING says what is missing)",
        origin.describe(), missing.join("; "), origin.where_to_set("required: false")
    )]
    Unenforceable {
        /// Where the policy was written.
        origin: PolicySource,
        /// What is missing.
        missing: Vec<String>,
    },
    /// A `deny_read` entry contains a folder the tools must reach.
    #[error(
        "deny_read entry `{entry}` of the {} would hide {what} {} from the tools\n  hint: hide \
         something inside it instead, or remove the entry",
        origin.describe(), path.display()
    )]
    HidesNeededFolder {
        /// Where the policy was written.
        origin: PolicySource,
        /// The entry as written.
        entry: String,
        /// What it would hide ("the workspace"...).
        what: &'static str,
        /// That folder.
        path: PathBuf,
    },
    /// The private temporary folder could not be made.
    #[error(
        "cannot make the sandbox's temporary folder {}: {problem}\n  hint: check that TMPDIR \
         (or /tmp) is writable; delta keeps a private folder per workspace there",
        path.display()
    )]
    TempDir {
        /// The folder.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
}

/// Makes `policy` concrete for one run on a kernel with `support`.
pub fn confine(
    policy: &SandboxPolicy,
    place: &RunPlace<'_>,
    support: &KernelSupport,
) -> Result<Confinement, SandboxError> {
    let mut warnings = Vec::new();
    let (layers, missing) = support.layers();
    let missing: Vec<String> = missing.into_iter().map(str::to_owned).collect();
    if !missing.is_empty() {
        if policy.required {
            return Err(SandboxError::Unenforceable {
                origin: policy.source.clone(),
                missing,
            });
        }
        warnings.push(format!(
            "the tools of this run are NOT fully sandboxed: this kernel cannot enforce {} \
             (`required: false` in the {} lets them run anyway)",
            missing.join("; "),
            policy.source.describe()
        ));
    }
    let home = place
        .env
        .get("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute());
    let work_dir = std::fs::canonicalize(place.work_dir).unwrap_or_else(|_| place.work_dir.into());
    let temp_dir = private_temp_dir(place.env, &work_dir)?;
    let mut writable = Vec::new();
    let mut explicit = Vec::new();
    if policy.filesystem == FilesystemAccess::WorkspaceWrite {
        writable.push(work_dir.clone());
    }
    if policy.filesystem != FilesystemAccess::Off {
        writable.push(temp_dir.clone());
        for entry in &policy.allow_write {
            let Some(path) = entry.resolve(home.as_deref(), place.agent_home, &work_dir) else {
                warnings.push(format!(
                    "sandbox.allow_write entry `{}` is skipped: the run has no HOME",
                    entry.display()
                ));
                continue;
            };
            match std::fs::canonicalize(&path) {
                Ok(real) => {
                    explicit.push(real.clone());
                    writable.push(real);
                }
                Err(e) => warnings.push(format!(
                    "sandbox.allow_write entry `{}` is skipped: {} ({e}); create it before the \
                     run to let tools write there",
                    entry.display(),
                    path.display()
                )),
            }
        }
    }
    let hidden = hidden_paths(policy, place, home.as_deref(), &work_dir, &explicit)?;
    for needed in [
        ("the workspace", &work_dir),
        ("the temporary folder", &temp_dir),
    ] {
        check_not_hidden(policy, &hidden, needed.0, needed.1)?;
    }
    let hidden_found = hidden
        .iter()
        .filter(|hidden| !matches!(hidden.because, HiddenBecause::DeltaState(_)))
        .filter(|hidden| hidden.path.exists())
        .map(|hidden| hidden.path.clone())
        .collect();
    Ok(Confinement {
        sandbox: Arc::new(RunSandbox {
            policy: policy.clone(),
            writable,
            hidden,
            hidden_found,
            temp_dir,
            layers,
            missing,
        }),
        warnings,
    })
}

/// The sandbox of a run: the agent's policy (a plan's default is applied to its agents when
/// the plan is loaded), else `DELTA_SANDBOX` from the run's environment, made concrete with
/// `support` (`None`: this kernel, probed once). `Ok(None)`: the run is not sandboxed. The
/// error is the run's failure message.
pub fn for_run(
    agent_policy: Option<&SandboxPolicy>,
    place: &RunPlace<'_>,
    support: Option<KernelSupport>,
) -> Result<Option<Confinement>, String> {
    let policy = super::policy::effective_policy(agent_policy, None, place.env)
        .map_err(|e| e.to_string())?;
    let Some(policy) = policy else {
        return Ok(None);
    };
    let support = support.unwrap_or_else(KernelSupport::probed);
    confine(&policy, place, &support)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Refuses a `deny_read` entry of the user's that contains `folder`.
fn check_not_hidden(
    policy: &SandboxPolicy,
    hidden: &[HiddenPath],
    what: &'static str,
    folder: &Path,
) -> Result<(), SandboxError> {
    for entry in hidden {
        let HiddenBecause::Listed(written) = &entry.because else {
            continue;
        };
        let real = std::fs::canonicalize(&entry.path).unwrap_or_else(|_| entry.path.clone());
        if folder.starts_with(&real) {
            return Err(SandboxError::HidesNeededFolder {
                origin: policy.source.clone(),
                entry: written.clone(),
                what,
                path: folder.to_path_buf(),
            });
        }
    }
    Ok(())
}

fn hidden_paths(
    policy: &SandboxPolicy,
    place: &RunPlace<'_>,
    home: Option<&Path>,
    work_dir: &Path,
    allowed: &[PathBuf],
) -> Result<Vec<HiddenPath>, SandboxError> {
    let mut hidden: Vec<HiddenPath> = Vec::new();
    let mut add = |path: PathBuf, because: HiddenBecause| {
        if hidden.len() < MAX_HIDDEN && !hidden.iter().any(|h| h.path == path) {
            hidden.push(HiddenPath { path, because });
        }
    };
    // delta's own: always.
    add(
        work_dir.join(crate::workspace::CONTROL_DIR),
        HiddenBecause::DeltaState("the workspace's run folders (journals, secrets/, records)"),
    );
    for start in [work_dir, place.agent_home] {
        for dir in start.ancestors() {
            add(dir.join(".env"), HiddenBecause::DeltaState("a .env file"));
        }
    }
    let state_home = place
        .env
        .get("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".local/state")));
    if let Some(state) = state_home {
        add(
            state.join("delta"),
            HiddenBecause::DeltaState("delta serve's state"),
        );
    }
    // The user's, and the defaults; an explicit allow_write wins over them.
    let mut listed = Vec::new();
    for entry in &policy.deny_read {
        match entry {
            DenyEntry::Defaults => {
                if let Some(home) = home {
                    for rest in DEFAULT_DENIED_IN_HOME {
                        listed.push((home.join(rest), HiddenBecause::Default));
                    }
                }
                if let Some(runtime) = place.env.get("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
                    listed.push((Path::new(runtime).join("delta"), HiddenBecause::Default));
                }
                // SAFETY: geteuid has no preconditions.
                let uid = unsafe { libc::geteuid() };
                listed.push((
                    PathBuf::from(format!("/tmp/delta-{uid}")),
                    HiddenBecause::Default,
                ));
            }
            DenyEntry::Path(path) => {
                if let Some(resolved) = path.resolve(home, place.agent_home, work_dir) {
                    listed.push((resolved, HiddenBecause::Listed(path.display())));
                }
            }
        }
    }
    for (path, because) in listed {
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if allowed.iter().any(|root| real.starts_with(root)) {
            continue;
        }
        add(path, because);
    }
    Ok(hidden)
}

/// `<TMPDIR or /tmp>/delta-sandbox-<uid>/<workspace key>`, private (0700), made if missing.
/// One per workspace: runs sharing a workspace share it (they share the workspace anyway),
/// and MCP servers started for them can be shared too.
fn private_temp_dir(
    env: &BTreeMap<String, String>,
    work_dir: &Path,
) -> Result<PathBuf, SandboxError> {
    let base = env
        .get("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let parent = base.join(format!("delta-sandbox-{uid}"));
    let dir = parent.join(format!(
        "{:016x}",
        fnv1a(work_dir.as_os_str().as_encoded_bytes())
    ));
    for folder in [&parent, &dir] {
        let problem = |problem: String| SandboxError::TempDir {
            path: folder.to_path_buf(),
            problem,
        };
        match DirBuilder::new().mode(0o700).create(folder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                crate::session::files::check_private_dir(folder).map_err(|found| match found {
                    Ok(found) => problem(found.to_string()),
                    Err(e) => problem(e.to_string()),
                })?;
            }
            Err(e) => return Err(problem(e.to_string())),
        }
    }
    Ok(dir)
}

/// FNV-1a, 64 bits: a stable name for a workspace's temporary folder.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::sandbox::policy::PolicyPath;
    use crate::sandbox::support::MountNamespace;

    fn full_support() -> KernelSupport {
        KernelSupport {
            landlock_abi: 7,
            seccomp: true,
            mount_namespace: MountNamespace::Direct,
        }
    }

    struct Places {
        root: tempfile::TempDir,
    }

    impl Places {
        fn new() -> Places {
            let root = tempfile::tempdir().unwrap();
            for dir in ["home/.ssh", "agent", "ws/.delta", "tmp"] {
                std::fs::create_dir_all(root.path().join(dir)).unwrap();
            }
            Places { root }
        }
        fn path(&self, rest: &str) -> PathBuf {
            std::fs::canonicalize(self.root.path()).unwrap().join(rest)
        }
        fn env(&self) -> BTreeMap<String, String> {
            [("HOME", self.path("home")), ("TMPDIR", self.path("tmp"))]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.display().to_string()))
                .collect()
        }
    }

    fn policy() -> SandboxPolicy {
        SandboxPolicy::defaults(PolicySource::Agent("/a/agent.yaml".into()))
    }

    #[test]
    fn workspace_write_allows_the_workspace_and_a_private_temp_folder() {
        let places = Places::new();
        let env = places.env();
        let (ws, agent) = (places.path("ws"), places.path("agent"));
        let place = RunPlace {
            work_dir: &ws,
            agent_home: &agent,
            env: &env,
        };
        let confined = confine(&policy(), &place, &full_support()).unwrap();
        let sandbox = &confined.sandbox;
        assert!(confined.warnings.is_empty(), "{:?}", confined.warnings);
        assert_eq!(sandbox.writable[0], ws);
        assert!(sandbox.temp_dir.starts_with(places.path("tmp")));
        assert_eq!(sandbox.writable[1], sandbox.temp_dir);
        let mode = std::fs::metadata(&sandbox.temp_dir).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o700
        );
        let hidden: Vec<&Path> = sandbox.hidden.iter().map(|h| h.path.as_path()).collect();
        for expected in [
            ws.join(".delta"),
            ws.join(".env"),
            agent.join(".env"),
            places.path("home/.ssh"),
        ] {
            assert!(
                hidden.contains(&expected.as_path()),
                "{expected:?} in {hidden:?}"
            );
        }
        // The same workspace gets the same folder again.
        let again = confine(&policy(), &place, &full_support()).unwrap();
        assert_eq!(again.sandbox.temp_dir, sandbox.temp_dir);
    }

    #[test]
    fn read_only_writes_only_the_temp_folder_and_allow_write() {
        let places = Places::new();
        let env = places.env();
        let (ws, agent) = (places.path("ws"), places.path("agent"));
        std::fs::create_dir(places.path("home/cache")).unwrap();
        let mut policy = policy();
        policy.filesystem = FilesystemAccess::ReadOnly;
        policy.allow_write = vec![
            PolicyPath::Home("cache".into()),
            PolicyPath::Home("missing".into()),
            PolicyPath::Home(".ssh".into()),
        ];
        let place = RunPlace {
            work_dir: &ws,
            agent_home: &agent,
            env: &env,
        };
        let confined = confine(&policy, &place, &full_support()).unwrap();
        let sandbox = &confined.sandbox;
        assert!(!sandbox.writable.contains(&ws));
        assert!(sandbox.writable.contains(&places.path("home/cache")));
        assert!(
            confined.warnings[0].contains("`~/missing` is skipped"),
            "{:?}",
            confined.warnings
        );
        // An explicit allow_write wins over the default deny_read.
        assert!(!sandbox
            .hidden
            .iter()
            .any(|h| h.path == places.path("home/.ssh")));
    }

    #[test]
    fn a_missing_layer_refuses_unless_not_required() {
        let places = Places::new();
        let env = places.env();
        let (ws, agent) = (places.path("ws"), places.path("agent"));
        let place = RunPlace {
            work_dir: &ws,
            agent_home: &agent,
            env: &env,
        };
        let no_landlock = KernelSupport {
            landlock_abi: 0,
            ..full_support()
        };
        let error = confine(&policy(), &place, &no_landlock)
            .unwrap_err()
            .to_string();
        assert!(error.contains("cannot enforce: Landlock"), "{error}");
        assert!(
            error.contains("`sandbox.required: false` in /a/agent.yaml"),
            "{error}"
        );
        let mut lenient = policy();
        lenient.required = false;
        let confined = confine(&lenient, &place, &no_landlock).unwrap();
        assert_eq!(confined.sandbox.layers.landlock_abi, 0);
        assert!(
            confined.warnings[0].contains("NOT fully sandboxed"),
            "{:?}",
            confined.warnings
        );
    }

    #[test]
    fn a_deny_read_entry_holding_the_workspace_is_refused() {
        let places = Places::new();
        let env = places.env();
        let (ws, agent) = (places.path("ws"), places.path("agent"));
        let mut policy = policy();
        policy.deny_read = vec![DenyEntry::Path(PolicyPath::Absolute(places.path("")))];
        let place = RunPlace {
            work_dir: &ws,
            agent_home: &agent,
            env: &env,
        };
        let error = confine(&policy, &place, &full_support())
            .unwrap_err()
            .to_string();
        assert!(error.contains("would hide the workspace"), "{error}");
    }
}
