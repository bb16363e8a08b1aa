//! sandbox::landlock — Landlock through its three system calls (no crate: the ABI is a few
//! structs and bit masks): the ABI probe, the two rulesets a sandboxed tool is restricted by,
//! and `landlock_restrict_self` for the child.
//!
//! A tool gets two layers, both enforced (Landlock allows an access only if every layer
//! does): the *read layer* (execute, read files, list folders) allows everything under `/`
//! but `/dev`, plus the harmless devices — the same for every tool, so it is built once per
//! process and shared; the *write layer* allows writing only to the tool's writable roots
//! (its workspace, its temporary folder, `allow_write`) and a few devices, and with the
//! network off handles TCP bind/connect with no rule (denied). Any domain also stops the
//! tool from `ptrace`-ing, or reading `/proc/<pid>/environ` and `/mem` of, a process outside
//! it — root included — and from mounting or unmounting anything.
//! Owns: the access masks per ABI version and the rules.
//! Must not: allocate or lock in [`restrict_self`] (it runs between fork and exec).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: moving or linking a file to another folder.
const REFER: u64 = 1 << 13;
/// ABI 3: truncating.
const TRUNCATE: u64 = 1 << 14;
/// ABI 5: `ioctl` on a device.
const IOCTL_DEV: u64 = 1 << 15;
/// The rights that may be given on a file that is not a folder.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;

/// ABI 4: TCP.
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

/// The read layer's rights.
const READ_RIGHTS: u64 = EXECUTE | READ_FILE | READ_DIR;

/// Devices every tool may open for reading (and the read layer's only part of `/dev`).
const READABLE_DEVICES: [&CStr; 9] = [
    c"/dev/null",
    c"/dev/zero",
    c"/dev/full",
    c"/dev/random",
    c"/dev/urandom",
    c"/dev/tty",
    c"/dev/ptmx",
    c"/dev/pts",
    c"/dev/shm",
];
/// Devices every tool may write to (`/dev/shm` is a private tmpfs in the tool's mount
/// namespace, `/dev/pts` its terminals).
const WRITABLE_DEVICES: [&CStr; 7] = [
    c"/dev/null",
    c"/dev/zero",
    c"/dev/full",
    c"/dev/tty",
    c"/dev/ptmx",
    c"/dev/pts",
    c"/dev/shm",
];

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// This kernel's Landlock ABI version; 0 without Landlock (not built, or not enabled).
pub fn abi_version() -> u32 {
    // SAFETY: with the VERSION flag the call reads no attribute (null, size 0).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(rc).unwrap_or(0)
}

/// Every write right ABI `abi` knows (device nodes excepted: nobody may make them).
fn write_rights(abi: u32) -> u64 {
    let mut rights = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_SYM;
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

fn create_ruleset(handled_fs: u64, handled_net: u64) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: handled_fs,
        handled_access_net: handled_net,
        scoped: 0,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed; the kernel copies it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor to us (close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Allows `rights` beneath `path` (a file gets the file rights among them). A path that
/// cannot be opened is skipped (`Ok(false)`): nothing there to allow.
fn allow_beneath(ruleset: &OwnedFd, path: &CStr, rights: u64) -> io::Result<bool> {
    // SAFETY: a valid NUL-terminated path; O_PATH opens without reading anything.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(false);
    }
    // SAFETY: `fd` was just opened by us and is closed here only.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat writes into a valid stat buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Ok(false);
    }
    let is_dir = stat.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let allowed = if is_dir { rights } else { rights & FILE_RIGHTS };
    if allowed == 0 {
        return Ok(false);
    }
    let attr = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: a valid rule of the path-beneath type; both descriptors are open.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// The read layer for ABI `abi`, built on first use and kept for the process (every
/// sandboxed tool shares it; `landlock_restrict_self` only reads it).
pub fn read_layer(abi: u32) -> io::Result<RawFd> {
    static LAYERS: [OnceLock<Result<OwnedFd, i32>>; 8] = [const { OnceLock::new() }; 8];
    let slot = LAYERS
        .get(abi.min(7) as usize)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    match slot.get_or_init(|| build_read_layer().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)))
    {
        Ok(fd) => Ok(fd.as_raw_fd()),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

/// Reading and executing under every entry of `/` but `/dev`; listing folders everywhere;
/// reading the harmless devices. A top-level entry made after this is built is not readable.
fn build_read_layer() -> io::Result<OwnedFd> {
    let ruleset = create_ruleset(READ_RIGHTS, 0)?;
    allow_beneath(&ruleset, c"/", READ_DIR)?;
    for entry in std::fs::read_dir("/")? {
        let name = entry?.file_name();
        if name.as_bytes() == b"dev" {
            continue;
        }
        let mut path = b"/".to_vec();
        path.extend_from_slice(name.as_bytes());
        path.push(0);
        if let Ok(path) = CStr::from_bytes_with_nul(&path) {
            allow_beneath(&ruleset, path, READ_RIGHTS)?;
        }
    }
    for device in READABLE_DEVICES {
        allow_beneath(&ruleset, device, READ_FILE | READ_DIR)?;
    }
    Ok(ruleset)
}

/// The write layer of one tool: writing only beneath `writable` (when `confine_writes`; else
/// anything but device nodes) and the devices (`/dev/shm` only when `private_shm`: the tool
/// has its own tmpfs there), and no TCP when `network_off` (ABI 4+).
pub fn write_layer<'a>(
    abi: u32,
    confine_writes: bool,
    writable: impl IntoIterator<Item = &'a CStr>,
    network_off: bool,
    private_shm: bool,
) -> io::Result<OwnedFd> {
    let handled_net = if network_off && abi >= 4 {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    };
    if !confine_writes {
        // A domain all the same (for the wall around other processes and mounts): nobody
        // may make device nodes, which no tool needs.
        return create_ruleset(MAKE_CHAR | MAKE_BLOCK, handled_net);
    }
    let rights = write_rights(abi);
    let ruleset = create_ruleset(rights | MAKE_CHAR | MAKE_BLOCK, handled_net)?;
    for root in writable {
        allow_beneath(&ruleset, root, rights)?;
    }
    for device in WRITABLE_DEVICES {
        let rights = if device == c"/dev/shm" {
            if !private_shm {
                continue;
            }
            rights
        } else {
            rights & (WRITE_FILE | TRUNCATE | IOCTL_DEV)
        };
        allow_beneath(&ruleset, device, rights)?;
    }
    Ok(ruleset)
}

/// Restricts the calling thread (and everything it starts) by `ruleset`. Async-signal-safe:
/// one system call. Needs `no_new_privs` (or `CAP_SYS_ADMIN`).
///
/// # Safety
/// `ruleset` must be an open Landlock ruleset descriptor.
pub unsafe fn restrict_self(ruleset: RawFd) -> libc::c_long {
    libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn write_rights_grow_with_the_abi() {
        assert_eq!(write_rights(1) & (REFER | TRUNCATE | IOCTL_DEV), 0);
        assert_ne!(write_rights(2) & REFER, 0);
        assert_ne!(write_rights(3) & TRUNCATE, 0);
        assert_ne!(write_rights(5) & IOCTL_DEV, 0);
        assert_eq!(write_rights(7) & (MAKE_CHAR | MAKE_BLOCK), 0);
    }

    /// Building layers touches no process state: only where Landlock exists.
    #[test]
    fn layers_build_on_this_kernel() {
        let abi = abi_version();
        if abi == 0 {
            return;
        }
        assert!(read_layer(abi).unwrap() >= 0);
        assert_eq!(
            read_layer(abi).unwrap(),
            read_layer(abi).unwrap(),
            "built once"
        );
        let layer = write_layer(abi, true, [c"/tmp", c"/nonexistent/path"], true, true).unwrap();
        assert!(layer.as_raw_fd() >= 0);
        write_layer(abi, false, [], true, false).unwrap();
    }
}
