//! tool::spawner::confined — starts a sandboxed tool from the spawner.
//!
//! `posix_spawn` runs no code of ours in the child, and the sandbox must be applied there
//! (it is inherited from the process that `exec`s). So, as glibc's `posix_spawn` does inside,
//! the launching thread `clone`s with `CLONE_VM | CLONE_VFORK`: the child borrows the
//! spawner's memory (no page table is copied), makes the `posix_spawn` steps (its own process
//! group, default signals, its three descriptors), applies the sandbox
//! ([`Prepared::apply`]: system calls only), and `execve`s; the thread sleeps until then. A
//! failure before `exec` is written into the launch record (a shared page), which the thread
//! reads when it wakes; the child then exits (127) and is reaped like any tool.
//!
//! An unprivileged spawner's child goes through a user namespace, whose id maps the kernel
//! lets a process write only while it is dumpable; dumpability belongs to the memory, so that
//! child gets a copy of the spawner's memory instead (`CLONE_VFORK` without `CLONE_VM`: a
//! fork that still waits for the exec) and is dumpable for those three system calls only.
//! Owns: every `unsafe` block of the sandboxed launch, each with its reason.
//! Must not: run anything in the child but system calls (no allocation, no lock, nothing
//! that can panic), or give it descriptors other than its three.

use std::ffi::{c_char, c_void};
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr;

use nix::sys::signal::SigSet;

use super::exec::{pointer_array, RESET_FOR_TOOLS};
use super::protocol::{Spec, WireSandbox};
use crate::sandbox::{ChildPlan, Layers, Prepared, Step};

/// The child's stack: it only runs system-call wrappers.
const CHILD_STACK_BYTES: usize = 64 * 1024;
/// The exit status of a child that failed before `exec` (as a shell says for "cannot run").
const FAILED_BEFORE_EXEC: libc::c_int = 127;

/// Shared between the launching thread and its child (same memory until `exec`).
#[repr(C)]
struct Record<'a> {
    prepared: &'a Prepared,
    streams: [RawFd; 3],
    program: *const c_char,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    /// Signals set back to their default action.
    reset: [libc::c_int; RESET_FOR_TOOLS.len()],
    reset_count: usize,
    default_action: libc::sigaction,
    empty_mask: libc::sigset_t,
    /// Written by the child only when it fails: 1, the step (0: the start itself), errno.
    failed: u8,
    failed_step: u8,
    failed_errno: i32,
}

/// Starts `spec` confined by `sandbox`, with `streams` as its stdin, stdout and stderr.
/// Returns its pid, or the errno and the sandbox step that failed (0: the start itself).
pub(super) fn launch(
    spec: &Spec<'_>,
    sandbox: &WireSandbox<'_>,
    defaults: &SigSet,
    streams: [RawFd; 3],
) -> Result<u32, (i32, u8)> {
    let plan = ChildPlan {
        cwd: spec.cwd,
        writable: sandbox.writable.clone(),
        hidden: sandbox.hidden.clone(),
        confine_writes: sandbox.confine_writes,
        network_off: sandbox.network_off,
        layers: Layers {
            landlock_abi: sandbox.landlock_abi,
            seccomp: sandbox.seccomp,
            mounts: sandbox.mounts,
        },
    };
    let mut prepared = Prepared::new(&plan)
        .map_err(|e| (e.raw_os_error().unwrap_or(libc::EIO), Step::Landlock as u8))?;
    prepared.share_mounts();
    let flags = if prepared.needs_user_namespace() {
        // The copy holds the spawner's memory: tool specs in flight, no engine secret.
        prepared.own_memory_may_be_shown();
        libc::CLONE_VFORK | libc::SIGCHLD
    } else {
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD
    };
    let argv = pointer_array(&spec.argv);
    let envp = pointer_array(&spec.env);
    let mut reset = [0; RESET_FOR_TOOLS.len()];
    let mut reset_count = 0;
    for signal in RESET_FOR_TOOLS {
        if defaults.contains(signal) {
            reset[reset_count] = signal as libc::c_int;
            reset_count += 1;
        }
    }
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask; sigemptyset
    // initialises the set it is given.
    let (default_action, empty_mask) = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        let mut mask = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(mask.as_mut_ptr());
        (action, mask.assume_init())
    };
    let record = Record {
        prepared: &prepared,
        streams,
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        reset,
        reset_count,
        default_action,
        empty_mask,
        failed: 0,
        failed_step: 0,
        failed_errno: 0,
    };
    let shared = SharedRecord::new(record).map_err(|errno| (errno, 0))?;
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK_BYTES);
    // Stacks grow down on every architecture delta builds for; the top, 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;
    // SAFETY: every signal is blocked on this thread while the child shares its memory, so
    // no handler of ours runs on the child's stack before it resets them; the record and the
    // stack outlive the child's use of them (CLONE_VFORK: clone returns once the child has
    // exec'd or exited); the child function only makes system calls.
    let (pid, clone_errno) = unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), previous.as_mut_ptr());
        let pid = libc::clone(child_main, top as *mut c_void, flags, shared.as_argument());
        let clone_errno = *libc::__errno_location();
        libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), ptr::null_mut());
        (pid, clone_errno)
    };
    drop(stack);
    if pid < 0 {
        return Err((clone_errno, 0));
    }
    let (failed, step, errno) = shared.failure();
    if failed != 0 {
        return Err((errno, step));
    }
    u32::try_from(pid).map_err(|_| (libc::EINVAL, 0))
}

/// A [`Record`] in a page shared with the child whatever its memory (`MAP_SHARED`), so a
/// child with its own copy of memory still reports into it.
struct SharedRecord<'a> {
    page: *mut Record<'a>,
}

impl<'a> SharedRecord<'a> {
    fn new(record: Record<'a>) -> Result<SharedRecord<'a>, i32> {
        // SAFETY: an anonymous shared mapping of the record's size; written once before use.
        unsafe {
            let page = libc::mmap(
                ptr::null_mut(),
                std::mem::size_of::<Record<'_>>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if page == libc::MAP_FAILED {
                return Err(*libc::__errno_location());
            }
            let page = page.cast::<Record<'a>>();
            ptr::write(page, record);
            Ok(SharedRecord { page })
        }
    }

    fn as_argument(&self) -> *mut c_void {
        self.page.cast()
    }

    /// Whether the child failed, at which step, with which errno. Called once the child
    /// has exec'd or exited (`CLONE_VFORK`).
    fn failure(&self) -> (u8, u8, i32) {
        // SAFETY: the page is mapped until drop; volatile: another task wrote it.
        unsafe {
            (
                ptr::read_volatile(ptr::addr_of!((*self.page).failed)),
                ptr::read_volatile(ptr::addr_of!((*self.page).failed_step)),
                ptr::read_volatile(ptr::addr_of!((*self.page).failed_errno)),
            )
        }
    }
}

impl Drop for SharedRecord<'_> {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this size; the record needs no drop of its own.
        unsafe {
            libc::munmap(self.page.cast(), std::mem::size_of::<Record<'_>>());
        }
    }
}

/// The child: on its own stack, in the spawner's memory (or a copy of it), until `execve`.
extern "C" fn child_main(argument: *mut c_void) -> libc::c_int {
    // SAFETY: `argument` is the launching thread's record, alive and not touched by it until
    // this child has exec'd or exited (CLONE_VFORK). Only system calls follow.
    unsafe {
        let record = &mut *argument.cast::<Record<'_>>();
        if libc::setpgid(0, 0) != 0 {
            fail(record, 0);
        }
        for signal in record.reset.iter().take(record.reset_count) {
            libc::sigaction(*signal, &record.default_action, ptr::null_mut());
        }
        for (target, stream) in (0..).zip(record.streams) {
            if libc::dup2(stream, target) < 0 {
                fail(record, 0);
            }
        }
        if let Err((step, errno)) = record.prepared.apply() {
            *libc::__errno_location() = errno;
            fail(record, step as u8);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &record.empty_mask, ptr::null_mut());
        libc::execve(record.program, record.argv.cast(), record.envp.cast());
        fail(record, 0)
    }
}

/// Records the current errno and `step` for the launching thread, and exits.
unsafe fn fail(record: &mut Record<'_>, step: u8) -> ! {
    let errno = *libc::__errno_location();
    ptr::write_volatile(ptr::addr_of_mut!(record.failed_errno), errno);
    ptr::write_volatile(ptr::addr_of_mut!(record.failed_step), step);
    ptr::write_volatile(ptr::addr_of_mut!(record.failed), 1);
    libc::_exit(FAILED_BEFORE_EXEC)
}
