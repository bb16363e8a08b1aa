//! sandbox::support — what this kernel lets the sandbox enforce, probed once per process:
//! Landlock (and its ABI version), seccomp filters on this architecture, and a private mount
//! namespace (directly as root, else through an unprivileged user namespace).
//!
//! Owns: [`KernelSupport`], the probe, and the decision of which layers a policy gets
//! ([`Layers`]) and what is missing. Tests and embedders simulate another kernel by passing
//! their own [`KernelSupport`] (`SupervisorConfig::sandbox_support`).
//! Must not: decide what to do about a missing layer (refuse or warn: `resolve.rs`).

use std::sync::OnceLock;

use super::landlock;
use super::seccomp;

/// How a tool gets a private mount namespace (where `deny_read` paths are hidden).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MountNamespace {
    /// The engine runs as root: `unshare(CLONE_NEWNS)` directly.
    Direct,
    /// Through a user namespace of its own (an unprivileged user).
    UserNamespace,
    /// Neither works here.
    Unavailable,
}

/// The sandbox features of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelSupport {
    /// Landlock's ABI version; 0 when the kernel has no Landlock (or it is disabled).
    pub landlock_abi: u32,
    /// seccomp filters can be installed (and delta knows this architecture's numbers).
    pub seccomp: bool,
    /// How a private mount namespace is made.
    pub mount_namespace: MountNamespace,
}

impl KernelSupport {
    /// This kernel's, probed on first use and kept for the life of the process.
    pub fn probed() -> KernelSupport {
        static PROBED: OnceLock<KernelSupport> = OnceLock::new();
        *PROBED.get_or_init(probe)
    }

    /// A kernel without any of it (for tests of the refusal).
    pub fn none() -> KernelSupport {
        KernelSupport {
            landlock_abi: 0,
            seccomp: false,
            mount_namespace: MountNamespace::Unavailable,
        }
    }

    /// The layers a sandbox gets here, and the names of those it cannot get.
    pub fn layers(&self) -> (Layers, Vec<&'static str>) {
        let layers = Layers {
            landlock_abi: self.landlock_abi,
            seccomp: self.seccomp,
            mounts: self.mount_namespace != MountNamespace::Unavailable,
        };
        let mut missing = Vec::new();
        if layers.landlock_abi == 0 {
            missing.push(
                "Landlock (the filesystem rules, and the wall around other processes' \
                 /proc/<pid>/environ and memory)",
            );
        }
        if !layers.seccomp {
            missing.push("seccomp (the network switch)");
        }
        if !layers.mounts {
            missing.push(
                "a private mount namespace (hiding the deny_read paths: needs root or \
                 unprivileged user namespaces)",
            );
        }
        (layers, missing)
    }
}

/// What is applied to each sandboxed tool (a subset of the whole when the kernel lacks a
/// feature and the policy says `required: false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Layers {
    /// Landlock ABI used; 0 = no Landlock domain.
    pub landlock_abi: u32,
    /// The seccomp filter.
    pub seccomp: bool,
    /// A private mount namespace with the hidden paths covered.
    pub mounts: bool,
}

fn probe() -> KernelSupport {
    KernelSupport {
        landlock_abi: landlock::abi_version(),
        seccomp: seccomp::available(),
        mount_namespace: probe_mount_namespace(),
    }
}

/// Tries, in a throwaway child process, what a sandboxed start does first: a new mount
/// namespace (through a user namespace unless root) where a tmpfs can be mounted. Sysctls
/// alone do not tell (AppArmor may let the namespace be made and then refuse the mount).
fn probe_mount_namespace() -> MountNamespace {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let flags = if root {
        libc::CLONE_NEWNS
    } else {
        libc::CLONE_NEWNS | libc::CLONE_NEWUSER
    };
    // SAFETY: the child only makes system calls (no allocation, no lock) and leaves with
    // _exit; the parent waits for it. unshare(CLONE_NEWUSER) needs a single-threaded caller,
    // which a forked child is.
    let ok = unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let code = if libc::unshare(flags) != 0 {
                1
            } else if libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                2
            } else if libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=4k".as_ptr().cast(),
            ) != 0
            {
                3
            } else {
                0
            };
            libc::_exit(code);
        }
        if pid < 0 {
            false
        } else {
            let mut status = 0;
            let waited = loop {
                let rc = libc::waitpid(pid, &mut status, 0);
                if rc >= 0 || *libc::__errno_location() != libc::EINTR {
                    break rc;
                }
            };
            waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
    };
    match (ok, root) {
        (false, _) => MountNamespace::Unavailable,
        (true, true) => MountNamespace::Direct,
        (true, false) => MountNamespace::UserNamespace,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_features_misses_every_layer() {
        let (layers, missing) = KernelSupport::none().layers();
        assert_eq!(
            layers,
            Layers {
                landlock_abi: 0,
                seccomp: false,
                mounts: false
            }
        );
        assert_eq!(missing.len(), 3);
        assert!(missing[0].starts_with("Landlock"));
    }

    #[test]
    fn the_probe_answers_the_same_twice() {
        assert_eq!(KernelSupport::probed(), KernelSupport::probed());
    }
}
