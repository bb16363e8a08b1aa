//! sandbox::shared_mounts — private mount namespaces made once and entered by every tool
//! whose covers are the same, instead of one made and torn down per tool.
//!
//! Making a mount namespace (`unshare`) and tearing it down (the tool's exit) both take the
//! kernel's global mount lock, and the teardown waits for an RCU grace period: at hundreds
//! of starts a second the tools queue behind each other (measured: a start's wall time
//! doubled with 4 at once). A tool that enters a namespace made before (`setns`) takes no
//! such lock. The namespace is keyed by its hidden paths and the identity (device, inode)
//! of what each one is when the tool starts, so a path created, replaced or renamed since
//! gets a new namespace with a fresh cover: a tool never runs with less hidden than a
//! namespace of its own would give it. Tools of one namespace share its `/dev/shm`.
//!
//! Owns: the table of namespaces (at most [`MAX_NAMESPACES`]; those idle for [`IDLE_LIMIT`]
//! are dropped when the next one is made) and the child that makes one.
//! Must not: run anything in that child but system calls, or keep a namespace without a
//! bound.

use std::collections::HashMap;
use std::ffi::{c_void, CString, OsStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Namespaces kept at once: more than the runs a process drives at once in the benchmarks
/// (each run's workspace hides its own `.delta`, so each has its own namespace).
const MAX_NAMESPACES: usize = 2048;
/// A namespace no tool entered for this long is dropped (its `/dev/shm` with it).
const IDLE_LIMIT: Duration = Duration::from_secs(30);
/// The maker child's stack: it only runs system-call wrappers.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Each hidden path and what is there now: `(device, inode)`, or nothing.
type Key = Vec<(CString, Option<(u64, u64)>)>;

struct Entry {
    namespace: Arc<OwnedFd>,
    used: Instant,
}

fn table() -> &'static Mutex<HashMap<Key, Entry>> {
    static TABLE: OnceLock<Mutex<HashMap<Key, Entry>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Makes the private mounts in the calling process (system calls only), from its argument;
/// false when it cannot.
pub(super) type MakeMounts = unsafe fn(*const c_void) -> bool;

/// The shared namespace covering `hidden`, made now if there is none (by `make_mounts` with
/// `argument`, in a child); `None` when one cannot be made (the tool then makes its own, as
/// without sharing).
pub(super) fn namespace_for(
    hidden: &[CString],
    make_mounts: MakeMounts,
    argument: *const c_void,
) -> Option<Arc<OwnedFd>> {
    let key: Key = hidden
        .iter()
        .map(|path| {
            let identity = std::fs::metadata(OsStr::from_bytes(path.as_bytes()))
                .ok()
                .map(|meta| (meta.dev(), meta.ino()));
            (path.clone(), identity)
        })
        .collect();
    let now = Instant::now();
    if let Ok(mut table) = table().lock() {
        if let Some(entry) = table.get_mut(&key) {
            entry.used = now;
            return Some(entry.namespace.clone());
        }
    }
    let namespace = Arc::new(make(make_mounts, argument)?);
    // Dropped outside the lock: dropping the last reference tears a namespace down.
    let mut dropped = Vec::new();
    if let Ok(mut table) = table().lock() {
        let before = table.len();
        let mut kept = HashMap::with_capacity(before + 1);
        for (old_key, entry) in table.drain() {
            if now.duration_since(entry.used) > IDLE_LIMIT {
                dropped.push(entry);
            } else {
                kept.insert(old_key, entry);
            }
        }
        *table = kept;
        if table.len() >= MAX_NAMESPACES {
            if let Some(oldest) = table
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
            {
                dropped.extend(table.remove(&oldest));
            }
        }
        table.insert(
            key,
            Entry {
                namespace: namespace.clone(),
                used: now,
            },
        );
    }
    drop(dropped);
    Some(namespace)
}

/// Shared between the calling thread and the maker child (same memory and descriptors).
#[repr(C)]
struct Maker {
    make_mounts: MakeMounts,
    argument: *const c_void,
    /// The namespace's descriptor, or -1.
    namespace: libc::c_int,
}

/// Makes a namespace in a child that shares this process's memory and descriptor table
/// (`CLONE_VM | CLONE_FILES | CLONE_VFORK`): it unshares, covers, opens its own namespace
/// (the descriptor lands in the shared table and keeps the namespace alive) and exits.
fn make(make_mounts: MakeMounts, argument: *const c_void) -> Option<OwnedFd> {
    let mut maker = Maker {
        make_mounts,
        argument,
        namespace: -1,
    };
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK_BYTES);
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;
    let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: every signal is blocked on this thread while the child shares its memory, so
    // no handler runs on the child's stack; `maker` and the stack outlive the child
    // (CLONE_VFORK: clone returns once it has exited); the child only makes system calls.
    let pid = unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        let mut previous = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), previous.as_mut_ptr());
        let pid = libc::clone(
            maker_main,
            top as *mut c_void,
            flags,
            ptr::addr_of_mut!(maker).cast(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), ptr::null_mut());
        pid
    };
    drop(stack);
    if pid < 0 {
        return None;
    }
    // Reaped here (a spawner's reaper may take it first: then ECHILD, nothing lost).
    let mut status = 0;
    // SAFETY: waitpid writes the status into a valid int.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    // SAFETY: volatile: the child wrote it; once it has exited nobody else does.
    let fd = unsafe { ptr::read_volatile(ptr::addr_of!(maker.namespace)) };
    // SAFETY: a descriptor the child opened in the shared table, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

extern "C" fn maker_main(argument: *mut c_void) -> libc::c_int {
    // SAFETY: `argument` is the calling thread's `Maker`, untouched by it until this child
    // has exited (CLONE_VFORK). Only system calls follow.
    unsafe {
        let maker = &mut *argument.cast::<Maker>();
        if (maker.make_mounts)(maker.argument) {
            let fd = libc::open(
                c"/proc/self/ns/mnt".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            ptr::write_volatile(ptr::addr_of_mut!(maker.namespace), fd);
        }
        libc::_exit(0)
    }
}
