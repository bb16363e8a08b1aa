//! sandbox::child — confining the process that is about to become a tool, between its fork
//! (or `clone`) and its `exec`, so the tool and everything it starts inherit the sandbox.
//!
//! Everything is prepared in the parent ([`Prepared::new`]: the Landlock rulesets, the
//! seccomp program, the id maps, every path as a C string); the child ([`Prepared::apply`])
//! only makes system calls, in this order: a private mount namespace (through a user
//! namespace of its own unless root) where each hidden path is covered (a folder by an empty
//! read-only tmpfs, a file by `/dev/null` on a `nodev` mount, so opening it is refused) and
//! `/dev/shm` is a private tmpfs; the working directory; root drops the capabilities a tool
//! of the workspace has no use for (loading kernel modules, raw I/O, BPF, tracing...);
//! `no_new_privs` (setuid bits and file capabilities no longer raise anything); the Landlock
//! layers; the seccomp filter.
//! Owns: [`ChildPlan`] (what one start asks for), [`Step`] (what failed), and the sequence.
//! Must not: allocate, lock, or call anything but system calls in [`Prepared::apply`].

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use libc::sock_filter;

use super::landlock;
use super::seccomp;
use super::support::Layers;

/// What one sandboxed start asks for, borrowed from the run's sandbox or from a spawner
/// request.
#[derive(Debug, Clone)]
pub struct ChildPlan<'a> {
    /// The tool's working directory (entered after the mounts).
    pub cwd: &'a CStr,
    /// Where it may write (used when `confine_writes`).
    pub writable: Vec<&'a CStr>,
    /// What it must not see; paths that do not exist are skipped.
    pub hidden: Vec<&'a CStr>,
    /// Writes are confined (`filesystem` is not `off`).
    pub confine_writes: bool,
    /// No sockets.
    pub network_off: bool,
    /// What the kernel lets us apply.
    pub layers: Layers,
}

/// The step of the sandbox that failed in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    /// `unshare` of the mount (and user) namespace.
    Namespace = 1,
    /// Writing the user namespace's id maps.
    IdMap = 2,
    /// Making the mounts private to the tool.
    Propagation = 3,
    /// Covering a hidden path.
    Hide = 4,
    /// The private `/dev/shm`.
    DevShm = 5,
    /// Entering the working directory.
    Chdir = 6,
    /// Dropping root's capabilities.
    Capabilities = 7,
    /// `no_new_privs`.
    NoNewPrivs = 8,
    /// `landlock_restrict_self`.
    Landlock = 9,
    /// Installing the seccomp filter.
    Seccomp = 10,
}

impl Step {
    /// From its number (as a spawner reply carries it).
    pub fn from_code(code: u8) -> Option<Step> {
        Some(match code {
            1 => Step::Namespace,
            2 => Step::IdMap,
            3 => Step::Propagation,
            4 => Step::Hide,
            5 => Step::DevShm,
            6 => Step::Chdir,
            7 => Step::Capabilities,
            8 => Step::NoNewPrivs,
            9 => Step::Landlock,
            10 => Step::Seccomp,
            _ => return None,
        })
    }

    /// What was being done, for the FAILED TO START text.
    pub fn describe(self) -> &'static str {
        match self {
            Step::Namespace => "cannot make the tool's private mount namespace",
            Step::IdMap => "cannot map the tool's user in its user namespace",
            Step::Propagation => "cannot make the tool's mounts private",
            Step::Hide => "cannot hide a deny_read path",
            Step::DevShm => "cannot give the tool a private /dev/shm",
            Step::Chdir => "cannot enter the working directory",
            Step::Capabilities => "cannot drop root's capabilities",
            Step::NoNewPrivs => "cannot set no_new_privs",
            Step::Landlock => "cannot apply the Landlock rules",
            Step::Seccomp => "cannot install the seccomp filter",
        }
    }
}

/// Capabilities a sandboxed root tool keeps: what a root process in a container has
/// (without `MKNOD` and `NET_RAW`) — enough to own and change files, not the kernel.
const KEPT_CAPABILITIES: [u32; 12] = [
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    8,  // SETPCAP
    10, // NET_BIND_SERVICE
    18, // SYS_CHROOT
    29, // AUDIT_WRITE
    31, // SETFCAP
];
/// Higher capability numbers than any kernel has today are dropped too (EINVAL is ignored).
const CAPABILITY_CEILING: u32 = 63;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// A tmpfs covering a hidden folder: empty, read-only, tiny.
const HIDING_TMPFS_OPTIONS: &CStr = c"size=4k,nr_inodes=2,mode=555";
const SHM_TMPFS_OPTIONS: &CStr = c"mode=1777";

/// A user namespace's id maps, formatted in the parent.
struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// A [`ChildPlan`] made ready for the child (owning all it needs: it may be moved into a
/// `pre_exec` hook).
pub struct Prepared {
    cwd: CString,
    hidden: Vec<CString>,
    /// `unshare` flags (`None`: no namespace).
    unshare: Option<libc::c_int>,
    id_maps: Option<IdMaps>,
    /// The child has its own copy of memory that may be shown (see
    /// [`Prepared::own_memory_may_be_shown`]).
    memory_may_be_shown: bool,
    drop_capabilities: bool,
    /// A namespace made once with the same covers, entered instead of making one
    /// ([`Prepared::share_mounts`]).
    shared_mounts: Option<Arc<OwnedFd>>,
    read_layer: Option<RawFd>,
    write_layer: Option<OwnedFd>,
    seccomp: Option<&'static [sock_filter]>,
}

impl Prepared {
    /// Builds what the child needs (its Landlock rulesets among it): the parent's work.
    pub fn new(plan: &ChildPlan<'_>) -> io::Result<Prepared> {
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let root = uid == 0;
        let layers = plan.layers;
        let (unshare, id_maps) = match (layers.mounts, root) {
            (false, _) => (None, None),
            (true, true) => (Some(libc::CLONE_NEWNS), None),
            (true, false) => (
                Some(libc::CLONE_NEWNS | libc::CLONE_NEWUSER),
                Some(IdMaps {
                    uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                    gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                }),
            ),
        };
        let abi = layers.landlock_abi;
        let (read_layer, write_layer) = if abi == 0 {
            (None, None)
        } else {
            let read = if plan.confine_writes {
                Some(landlock::read_layer(abi)?)
            } else {
                None
            };
            // /dev/shm is writable only where it is the tool's own tmpfs.
            let devices_shm = layers.mounts;
            let write = landlock::write_layer(
                abi,
                plan.confine_writes,
                plan.writable.iter().copied(),
                plan.network_off,
                devices_shm,
            )?;
            (read, Some(write))
        };
        let seccomp = layers.seccomp.then(|| seccomp::program(plan.network_off));
        Ok(Prepared {
            memory_may_be_shown: false,
            cwd: plan.cwd.to_owned(),
            hidden: plan.hidden.iter().map(|path| (*path).to_owned()).collect(),
            unshare,
            id_maps,
            drop_capabilities: root,
            shared_mounts: None,
            read_layer,
            write_layer,
            seccomp,
        })
    }

    /// Whether the child needs a user namespace (an unprivileged user hides paths through
    /// one): its start must then give it its own memory, see
    /// [`Prepared::own_memory_may_be_shown`].
    pub fn needs_user_namespace(&self) -> bool {
        self.id_maps.is_some()
    }

    /// Enters a mount namespace shared by the tools whose covers are the same (made on first
    /// use, see `shared_mounts`) instead of making one per tool: making and tearing down a
    /// namespace takes the kernel's global mount lock, which serialises concurrent starts.
    /// Only where the namespace needs no user namespace (root); elsewhere, and when one
    /// cannot be made, each tool keeps making its own.
    pub fn share_mounts(&mut self) {
        if self.unshare != Some(libc::CLONE_NEWNS) || self.id_maps.is_some() {
            return;
        }
        let argument: *const Prepared = self;
        self.shared_mounts =
            super::shared_mounts::namespace_for(&self.hidden, make_mounts_of, argument.cast());
    }

    /// Tells the child that its memory is its own copy and holds nothing secret (the
    /// spawner's, not the engine's): it may then be dumpable for the three system calls that
    /// write its user namespace's id maps, which the kernel refuses to a non-dumpable process
    /// (the engine and the spawner are, see `tool::isolation`). Without it the maps stay
    /// unwritten and the tool sees itself as `nobody` (its files are still its own).
    pub fn own_memory_may_be_shown(&mut self) {
        self.memory_may_be_shown = true;
    }

    /// Confines the calling process. Between fork and exec only: system calls, no
    /// allocation, no lock. The error is the step and its errno.
    ///
    /// # Safety
    /// Must run in a child about to `exec` (it changes the whole process irreversibly), or
    /// in a process that means to be confined for good.
    pub unsafe fn apply(&self) -> Result<(), (Step, i32)> {
        match &self.shared_mounts {
            Some(namespace) => check(
                Step::Namespace,
                libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNS),
            )?,
            None => self.make_private_mounts()?,
        }
        self.confine_the_rest()
    }

    /// Makes the private mount namespace (when the plan has one): unshared, its mounts made
    /// private, the hidden paths covered, a private `/dev/shm`. System calls only.
    ///
    /// # Safety
    /// As [`Prepared::apply`]; also run by the child that makes a shared namespace.
    unsafe fn make_private_mounts(&self) -> Result<(), (Step, i32)> {
        if let Some(flags) = self.unshare {
            check(Step::Namespace, libc::unshare(flags))?;
            if let Some(maps) = &self.id_maps {
                if self.memory_may_be_shown {
                    libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                }
                let written = write_id_maps(maps);
                if self.memory_may_be_shown {
                    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                }
                match written {
                    // A non-dumpable process may not write its maps: unmapped, it works on.
                    Err((_, libc::EACCES)) => {}
                    other => other?,
                }
            }
            check(
                Step::Propagation,
                libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ),
            )?;
            for path in &self.hidden {
                hide(path)?;
            }
            let shm = libc::mount(
                c"tmpfs".as_ptr(),
                c"/dev/shm".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                SHM_TMPFS_OPTIONS.as_ptr().cast(),
            );
            if shm != 0 && errno() != libc::ENOENT {
                return Err((Step::DevShm, errno()));
            }
        }
        Ok(())
    }

    /// Every step after the mount namespace: the working directory, capabilities,
    /// `no_new_privs`, Landlock, seccomp.
    unsafe fn confine_the_rest(&self) -> Result<(), (Step, i32)> {
        check(Step::Chdir, libc::chdir(self.cwd.as_ptr()))?;
        if self.drop_capabilities {
            drop_capabilities()?;
        }
        check(
            Step::NoNewPrivs,
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        )?;
        for layer in self
            .read_layer
            .iter()
            .copied()
            .chain(self.write_layer.as_ref().map(AsRawFd::as_raw_fd))
        {
            if landlock::restrict_self(layer) != 0 {
                return Err((Step::Landlock, errno()));
            }
        }
        if let Some(program) = self.seccomp {
            if seccomp::install(program) != 0 {
                return Err((Step::Seccomp, errno()));
            }
        }
        Ok(())
    }
}

/// [`Prepared::make_private_mounts`] of the `Prepared` behind `prepared`, for the child that
/// makes a shared namespace.
///
/// # Safety
/// `prepared` points to a live [`Prepared`]; as [`Prepared::make_private_mounts`].
unsafe fn make_mounts_of(prepared: *const std::ffi::c_void) -> bool {
    (*prepared.cast::<Prepared>()).make_private_mounts().is_ok()
}

fn errno() -> i32 {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn check(step: Step, rc: libc::c_int) -> Result<(), (Step, i32)> {
    if rc == 0 {
        Ok(())
    } else {
        Err((step, errno()))
    }
}

/// Writes the user namespace's maps (setgroups first, as unprivileged gid maps require).
unsafe fn write_id_maps(maps: &IdMaps) -> Result<(), (Step, i32)> {
    // An old kernel without the setgroups file needs no "deny".
    let _ = write_file(c"/proc/self/setgroups", b"deny");
    write_file(c"/proc/self/uid_map", &maps.uid_map).map_err(|e| (Step::IdMap, e))?;
    write_file(c"/proc/self/gid_map", &maps.gid_map).map_err(|e| (Step::IdMap, e))
}

unsafe fn write_file(path: &CStr, bytes: &[u8]) -> Result<(), i32> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(errno());
    }
    let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let failure = errno();
    libc::close(fd);
    if written == bytes.len() as isize {
        Ok(())
    } else {
        Err(failure)
    }
}

/// Covers `path`: a folder with an empty read-only tmpfs, a file with `/dev/null` on a
/// `nodev` mount (opening it gives EACCES). A path that does not exist, or that this process
/// cannot reach, has nothing to hide from it.
unsafe fn hide(path: &CStr) -> Result<(), (Step, i32)> {
    let sealed = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let folder = libc::mount(
        c"tmpfs".as_ptr(),
        path.as_ptr(),
        c"tmpfs".as_ptr(),
        sealed,
        HIDING_TMPFS_OPTIONS.as_ptr().cast(),
    );
    if folder == 0 {
        return Ok(());
    }
    match errno() {
        libc::ENOENT | libc::EACCES | libc::ELOOP | libc::ENAMETOOLONG => return Ok(()),
        libc::ENOTDIR => {}
        other => return Err((Step::Hide, other)),
    }
    // ENOTDIR: `path` is a file (or a path component is one: then the bind fails alike).
    if libc::mount(
        c"/dev/null".as_ptr(),
        path.as_ptr(),
        std::ptr::null(),
        libc::MS_BIND,
        std::ptr::null(),
    ) != 0
    {
        return match errno() {
            libc::ENOENT | libc::ENOTDIR | libc::EACCES => Ok(()),
            other => Err((Step::Hide, other)),
        };
    }
    check(
        Step::Hide,
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | sealed,
            std::ptr::null(),
        ),
    )
}

/// Root keeps only [`KEPT_CAPABILITIES`]: the bounding set loses the others (so no `exec`
/// regains them), and the process's own sets are cut to the kept ones.
unsafe fn drop_capabilities() -> Result<(), (Step, i32)> {
    let mut keep: u64 = 0;
    for capability in KEPT_CAPABILITIES {
        keep |= 1 << capability;
    }
    for capability in 0..=CAPABILITY_CEILING {
        if keep & (1 << capability) != 0 {
            continue;
        }
        if libc::prctl(libc::PR_CAPBSET_DROP, capability as libc::c_ulong, 0, 0, 0) != 0
            && errno() != libc::EINVAL
        {
            return Err((Step::Capabilities, errno()));
        }
    }
    // Ambient capabilities (a kernel without them answers EINVAL).
    let _ = libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
        0,
        0,
    );
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let low = keep as u32;
    let high = (keep >> 32) as u32;
    let data = [
        CapData {
            effective: low,
            permitted: low,
            inheritable: low,
        },
        CapData {
            effective: high,
            permitted: high,
            inheritable: high,
        },
    ];
    if libc::syscall(
        libc::SYS_capset,
        &mut header as *mut CapHeader,
        data.as_ptr(),
    ) != 0
    {
        return Err((Step::Capabilities, errno()));
    }
    Ok(())
}

/// The C strings of a plan, owned: for a parent that builds a [`ChildPlan`] from paths.
pub struct OwnedPaths {
    /// The working directory.
    pub cwd: CString,
    /// Writable roots.
    pub writable: Vec<CString>,
    /// Hidden paths.
    pub hidden: Vec<CString>,
}

impl OwnedPaths {
    /// The plan these strings make, with the run's settings.
    pub fn plan(&self, confine_writes: bool, network_off: bool, layers: Layers) -> ChildPlan<'_> {
        ChildPlan {
            cwd: &self.cwd,
            writable: self.writable.iter().map(CString::as_c_str).collect(),
            hidden: self.hidden.iter().map(CString::as_c_str).collect(),
            confine_writes,
            network_off,
            layers,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_step_round_trips_its_code() {
        for code in 1..=10u8 {
            let step = Step::from_code(code).unwrap();
            assert_eq!(step as u8, code);
            assert!(!step.describe().is_empty());
        }
        assert_eq!(Step::from_code(0), None);
        assert_eq!(Step::from_code(11), None);
    }

    #[test]
    fn kept_capabilities_fit_the_two_words() {
        assert!(KEPT_CAPABILITIES.iter().all(|c| *c <= CAPABILITY_CEILING));
    }
}
