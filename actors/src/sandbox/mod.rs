//! sandbox — confines what a model runs (tools and MCP servers) with the kernel: Landlock for
//! the filesystem (and the wall around other processes), a private mount namespace that hides
//! `deny_read` paths and delta's own secrets, seccomp for the network, `no_new_privs`, and
//! for root the loss of the capabilities that reach the kernel. The tool spawner (or the
//! in-process start) applies it to each tool between fork and exec, so the tool and
//! everything it starts inherit it. docs/sandbox.md is the user's page.
//!
//! # Layout
//! - `policy`: the `sandbox:` setting (agent.yaml, a plan's default, `DELTA_SANDBOX`).
//! - `resolve`: a policy made concrete for one run ([`RunSandbox`]), or the refusal.
//! - `support`: what this kernel enforces ([`KernelSupport`], probed once).
//! - `landlock`, `seccomp`: the two kernel interfaces, by raw system calls.
//! - `child`: the sequence a child runs before `exec` ([`Prepared`]).
//! - `shared_mounts`: mount namespaces made once and entered by the tools with the same
//!   covers.
//! - `explain`: the notes a refused tool's observation gets.
//!
//! Must not: import actix, print, or confine the calling process itself (only a child
//! about to exec).

mod child;
mod explain;
mod landlock;
mod policy;
mod resolve;
mod seccomp;
mod shared_mounts;
mod support;

pub use child::{ChildPlan, OwnedPaths, Prepared, Step};
pub use explain::explain;
pub(crate) use policy::parse_sandbox;
pub use policy::{
    effective_policy, env_default, DenyEntry, FilesystemAccess, NetworkAccess, PolicyPath,
    PolicySource, RelativeTo, SandboxEnvError, SandboxPolicy, DEFAULT_DENY_ENTRY, MAX_LISTED_PATHS,
    SANDBOX_KEYS, SANDBOX_VAR,
};
pub use resolve::{
    confine, for_run, Confinement, HiddenBecause, HiddenPath, RunPlace, RunSandbox, SandboxError,
    DEFAULT_DENIED_IN_HOME,
};
pub use support::{KernelSupport, Layers, MountNamespace};
